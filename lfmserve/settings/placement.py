"""Where the work runs: the CPU threads that compute (:class:`ThreadSettings`) and the devices that hold the
weights and caches (:class:`DeviceSettings`), with llama-server's flags.

They are groups of :class:`~lfmserve.settings.Settings` like those of :mod:`.groups`, kept apart because they
describe the machine rather than the model or the server.
"""

from __future__ import annotations

import argparse
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..c_numbers import leading_int, unsigned_64
from .fields import OnOffAction, flag, parse_count, physical_cores, switch

#: ``--fit-ctx`` once ``-c 0`` is given: llama.cpp's ``UINT32_MAX``, a minimum no context is above, so the full
#: context asked for is never shrunk.
FULL_CONTEXT = 2**32 - 1
#: The most ``--fit-target`` values: llama.cpp's ``llama_max_devices()``.
_MAX_DEVICES = 16


def fit_mode(text: str) -> bool:
    """``--fit``'s value, read as llama.cpp's ``is_truthy`` / ``is_falsey`` read it (no other spelling)."""
    if text in ("on", "enabled", "true", "1"):
        return True
    if text in ("off", "disabled", "false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"unknown value for --fit: {text!r}")


def fit_targets(text: str) -> tuple[int, ...]:
    """``--fit-target``: MiB to leave free on each device, separated by ``,`` or ``/`` (one value: every device)."""
    parts = re.split(r"[,/]+", text)
    if len(parts) >= _MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"got {len(parts)} input configs, but system only has {_MAX_DEVICES} devices")
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"not a list of MiB: {text!r}")
    return tuple(int(part) for part in parts)


class ContextSizeAction(argparse.Action):
    """``-c``: ``-c 0`` also asks ``--fit`` for the full context (``--fit-ctx`` :data:`FULL_CONTEXT`), as in
    llama.cpp, where a later ``--fit-ctx`` still wins."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        if values == 0:
            namespace.fit_ctx = FULL_CONTEXT


#: ggml's ``GGML_MAX_N_THREADS``: the CPUs a threadpool's mask can name; llama.cpp reads that many bits of a mask.
MAX_CPUS = 512
_MASK_DIGITS = MAX_CPUS // 4
#: ``--numa``'s strategies.
NUMA_STRATEGIES = ("distribute", "isolate", "numactl")
#: ``--prio``'s priorities, low(-1) to realtime(3); the batch and draft forms take 0 to 3, as in llama-server.
PRIORITIES = (-1, 0, 1, 2, 3)
_POOL_PRIORITIES = PRIORITIES[1:]


def parse_cpu_mask(text: str) -> tuple[int, ...]:
    """``-C M`` and its batch and draft forms: the CPUs of an arbitrarily long hex mask, ``0x`` optional (``0x5``:
    CPUs 0 and 2), read as llama.cpp's ``parse_cpu_mask`` reads it: its first 128 digits, the 512 CPUs it names."""
    digits = text[2:] if text.startswith("0x") else text
    skipped = len(text) - len(digits)
    digits = digits[:_MASK_DIGITS]
    for position, char in enumerate(digits, start=skipped):
        if char not in string.hexdigits:
            raise argparse.ArgumentTypeError(
                f"invalid cpumask {text!r}: invalid hex character {char!r} at position {position}"
            )
    bits = int(digits, 16) if digits else 0
    return tuple(cpu for cpu in range(bits.bit_length()) if bits >> cpu & 1)


def parse_cpu_range(text: str) -> tuple[int, ...]:
    """``-Cr lo-hi`` and its batch and draft forms: CPUs ``lo`` to ``hi``, a missing end being the first or the last
    (``2-``: 2 to 511), read as llama.cpp's ``parse_cpu_range`` reads it."""
    dash = text.find("-")
    if dash < 0:
        raise argparse.ArgumentTypeError(f"invalid range {text!r}: expected [<start>]-[<end>]")
    start = _cpu_index(text[:dash], text) if dash else 0
    if start >= MAX_CPUS:
        raise argparse.ArgumentTypeError(
            f"invalid range {text!r}: start index out of bounds (CPUs 0 to {MAX_CPUS - 1})"
        )
    end = _cpu_index(text[dash + 1 :], text) if dash < len(text) - 1 else MAX_CPUS - 1
    if end >= MAX_CPUS:
        raise argparse.ArgumentTypeError(f"invalid range {text!r}: end index out of bounds (CPUs 0 to {MAX_CPUS - 1})")
    return tuple(range(start, end + 1))


def _cpu_index(part: str, text: str) -> int:
    """One end of a range as C's ``stoull`` reads it: blanks, a sign, decimal digits, the rest ignored (a negative
    number wraps around, far out of bounds)."""
    value = leading_int(part)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid range {text!r}: {part!r} is not a number")
    return unsigned_64(value)


def cpu_mask_argv(cpus: Iterable[int]) -> list[str]:
    return [hex(sum(1 << cpu for cpu in cpus))]


def strict_cpu(text: str) -> bool:
    """``--cpu-strict <0|1>`` and its forms: llama-server reads a whole number, any but 0 turning it on."""
    try:
        return int(text) != 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def strict_argv(strict: bool) -> list[str]:
    return ["1" if strict else "0"]


def numa_strategy(text: str) -> str:
    """``--numa``'s value; an empty one is ``distribute``, as in llama-server."""
    return text or "distribute"


class AddCpus(argparse.Action):
    """``-C`` and ``-Cr`` (or a batch or draft pair): each one given adds its CPUs to the pool's, as llama-server
    ORs them all into one mask."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        given = getattr(namespace, self.dest, None) or ()
        setattr(namespace, self.dest, tuple(sorted({*given, *values})))


def _cpus(*names: str, ranges: tuple[str, ...], default: str) -> Any:
    """A pool's CPUs: a mask flag, and its range flag (``also``); None: ``default``'s."""
    return field(
        default=None,
        metadata=flag(
            *names,
            help=f"CPU affinity mask: arbitrarily long hex, adding to {ranges[-1]}'s CPUs (default: {default})",
            type=parse_cpu_mask,
            action=AddCpus,
            write=cpu_mask_argv,
            metavar="M",
            also=(
                flag(
                    *ranges,
                    help=f"range of CPUs for affinity, adding to {names[-1]}'s CPUs",
                    type=parse_cpu_range,
                    action=AddCpus,
                    metavar="lo-hi",
                ),
            ),
        ),
    )


def _strict(*names: str, default: str) -> Any:
    return field(
        default=None,
        metadata=flag(
            *names,
            help=f"strict CPU placement: thread i on the i-th CPU of the mask (default: {default})",
            type=strict_cpu,
            write=strict_argv,
            metavar="<0|1>",
        ),
    )


def _prio(*names: str, default: str) -> Any:
    return field(
        default=None,
        metadata=flag(
            *names,
            help=f"thread priority: 0 normal, 1 medium, 2 high, 3 realtime (default: {default})",
            type=int,
            choices=_POOL_PRIORITIES,
            metavar="N",
        ),
    )


def _poll(*names: str, default: str) -> Any:
    return field(
        default=None,
        metadata=flag(*names, help=f"polling level while waiting for work (default: {default})", type=int, metavar="N"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadSettings:
    """The threads llama.cpp computes with, for generation and for prompt processing, and where they run: llama.cpp's
    threadpools, made only when a placement flag is given (else ggml's own, as before), and ``--numa``. A batch flag
    not given takes its generation flag's value, and a draft model's flag its target's (a draft batch flag: the
    draft's), as llama-server's help says."""

    TITLE: ClassVar[str] = "threads and CPU placement"

    threads: int = field(
        default_factory=physical_cores,
        metadata=flag("-t", "--threads", help="threads for generation (default: physical cores)", type=int),
    )
    threads_batch: int | None = field(
        default=None,
        metadata=flag("-tb", "--threads-batch", help="threads for prompt processing (default: --threads)", type=int),
    )
    adaptive_threads: bool = switch(
        "--adaptive-threads",
        help="decode on fewer threads while that is faster, as when another process keeps a core busy (lfmserve's; "
        "llama-server always uses -t)",
        default=True,
    )
    numa: str | None = field(
        default=None,
        metadata=flag(
            "--numa",
            help="NUMA optimizations: distribute (spread execution over all nodes), isolate (only the CPUs of the "
            "node execution started on), numactl (numactl's CPU map)",
            type=numa_strategy,
            choices=NUMA_STRATEGIES,
            metavar="TYPE",
        ),
    )
    cpu_mask: tuple[int, ...] | None = _cpus("-C", "--cpu-mask", ranges=("-Cr", "--cpu-range"), default="any CPU")
    cpu_strict: bool = field(
        default=False,
        metadata=flag(
            "--cpu-strict",
            help="strict CPU placement: thread i on the i-th CPU of the mask",
            type=strict_cpu,
            write=strict_argv,
            metavar="<0|1>",
        ),
    )
    prio: int = field(
        default=0,
        metadata=flag(
            "--prio",
            help="process and thread priority: -1 low, 0 normal, 1 medium, 2 high, 3 realtime (a raise the system "
            "refuses is a warning)",
            type=int,
            choices=PRIORITIES,
            metavar="N",
        ),
    )
    poll: int = field(
        default=50,
        metadata=flag("--poll", help="polling level while waiting for work: 0 none ... 100", type=int, metavar="N"),
    )
    cpu_mask_batch: tuple[int, ...] | None = _cpus(
        "-Cb", "--cpu-mask-batch", ranges=("-Crb", "--cpu-range-batch"), default="--cpu-mask"
    )
    cpu_strict_batch: bool | None = _strict("--cpu-strict-batch", default="--cpu-strict")
    prio_batch: int | None = _prio("--prio-batch", default="--prio")
    poll_batch: int | None = _poll("--poll-batch", default="--poll")
    spec_draft_cpu_mask: tuple[int, ...] | None = _cpus(
        "--spec-draft-cpu-mask",
        "-Cd",
        "--cpu-mask-draft",
        ranges=("--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"),
        default="--cpu-mask",
    )
    spec_draft_cpu_strict: bool | None = _strict(
        "--spec-draft-cpu-strict", "--cpu-strict-draft", default="--cpu-strict"
    )
    spec_draft_prio: int | None = _prio("--spec-draft-prio", "--prio-draft", default="--prio")
    spec_draft_poll: int | None = _poll("--spec-draft-poll", "--poll-draft", default="--poll")
    spec_draft_cpu_mask_batch: tuple[int, ...] | None = field(
        default=None,
        metadata=flag(
            "--spec-draft-cpu-mask-batch",
            "-Cbd",
            "--cpu-mask-batch-draft",
            help="the draft model's CPU affinity mask for batches (default: --spec-draft-cpu-mask)",
            type=parse_cpu_mask,
            action=AddCpus,
            write=cpu_mask_argv,
            metavar="M",
        ),
    )
    spec_draft_cpu_strict_batch: bool | None = _strict(
        "--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft", default="--spec-draft-cpu-strict"
    )
    spec_draft_prio_batch: int | None = _prio(
        "--spec-draft-prio-batch", "--prio-batch-draft", default="--spec-draft-prio"
    )
    spec_draft_poll_batch: int | None = _poll(
        "--spec-draft-poll-batch", "--poll-batch-draft", default="--spec-draft-poll"
    )


def gpu_layers(text: str) -> int:
    """``-ngl`` / ``-ngld`` as llama-server reads them: ``auto`` (-1), ``all`` (-2), or a number of layers."""
    return _GPU_LAYERS[text] if text in _GPU_LAYERS else int(text)


_GPU_LAYERS = {"auto": -1, "all": -2}


def _layers_text(n: int) -> list[str]:
    return [next((name for name, value in _GPU_LAYERS.items() if value == n), str(n))]


def device_list(text: str) -> tuple[str, ...]:
    """``-dev`` / ``-devd``: device names, comma-separated (checked against llama.cpp's devices at start), or
    ``none``: no device (an empty tuple)."""
    return () if text == "none" else tuple(text.split(","))


def tensor_split(text: str) -> tuple[float, ...]:
    """``-ts``: the proportion of the model each GPU holds, separated by ``,`` or ``/`` (``3,1``)."""
    parts = re.split(r"[,/]+", text)
    if len(parts) >= _MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"got {len(parts)} input configs, but system only has {_MAX_DEVICES} devices")
    return tuple(float(part) for part in parts)


def one_device(text: str) -> str:
    """``-mmdev``: one device name, or ``none``."""
    if "," in text:
        raise argparse.ArgumentTypeError("only one device may be specified for mmproj")
    return text


def _devices_text(devices: tuple[str, ...] | None) -> list[str]:
    return [",".join(devices or ()) or "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSettings:
    """Which devices hold the layers and run the work, passed to llama.cpp as llama-server passes them
    (``lfmserve.loading.placement`` turns them into llama.cpp's parameters; a CPU build has only the CPU, and says
    so once at start for the flags it then has no use for). ``--list-devices`` prints the devices and exits."""

    TITLE: ClassVar[str] = "devices and offload"

    n_gpu_layers: int = field(
        default=-1,
        metadata=flag(
            "-ngl",
            "--gpu-layers",
            "--n-gpu-layers",
            help="most layers kept in VRAM: a number, auto or all (default: auto, every layer)",
            type=gpu_layers,
            metavar="N",
            write=_layers_text,
        ),
    )
    devices: tuple[str, ...] | None = field(
        default=None,
        metadata=flag(
            "-dev",
            "--device",
            help="devices to offload to, comma-separated (none = don't offload; default: every GPU; see "
            "--list-devices)",
            type=device_list,
            metavar="DEV1,DEV2,...",
            write=_devices_text,
        ),
    )
    list_devices: bool = switch(
        "--list-devices",
        help="print the devices (llama-server's list, then the CPU's) and exit",
        default=False,
        action="store_true",
    )
    split_mode: str = field(
        default="layer",
        metadata=flag(
            "-sm",
            "--split-mode",
            help="how to split the model across GPUs: none (one GPU: -mg), layer (layers and KV), row (weights by "
            "rows) or tensor (weights and KV, experimental)",
            choices=("none", "layer", "row", "tensor"),
        ),
    )
    tensor_split: tuple[float, ...] = field(
        default=(),
        metadata=flag(
            "-ts",
            "--tensor-split",
            help="the proportion of the model each GPU holds, comma-separated (3,1)",
            type=tensor_split,
            metavar="N0,N1,...",
            write=lambda split: [",".join(map(str, split))],
        ),
    )
    main_gpu: int = field(
        default=0,
        metadata=flag(
            "-mg",
            "--main-gpu",
            help="the GPU of the whole model with -sm none, or of intermediate results and KV with -sm row",
            type=int,
            metavar="INDEX",
        ),
    )
    override_tensor: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "-ot",
            "--override-tensor",
            help="the buffer type of the tensors whose names match, comma-separated and repeatable (first match "
            "wins, before --cpu-moe, --n-cpu-moe and --n-cpu-ffn): blk\\.0\\.=CPU",
            action="append",
            metavar="PATTERN=BUFFER_TYPE,...",
        ),
    )
    cpu_moe: bool = switch(
        "-cmoe", "--cpu-moe", help="keep every Mixture of Experts weight on the CPU", default=False, action="store_true"
    )
    n_cpu_moe: int = field(
        default=0,
        metadata=flag(
            "-ncmoe",
            "--n-cpu-moe",
            help="keep the MoE weights of the first N layers on the CPU",
            type=parse_count,
            metavar="N",
        ),
    )
    n_cpu_ffn: int = field(
        default=0,
        metadata=flag(
            "-ncffn",
            "--n-cpu-ffn",
            help="keep the dense FFN weights of the first N layers on the CPU (MoE experts: --n-cpu-moe)",
            type=parse_count,
            metavar="N",
        ),
    )
    no_host: bool = switch(
        "--no-host",
        help="bypass the host buffer, so that extra buffer types may be used",
        default=False,
        action="store_true",
    )
    kv_offload: bool = switch(
        "-kvo",
        "--kv-offload",
        "-nkvo",
        "--no-kv-offload",
        help="keep the KV cache, and compute attention, on the GPU (default: on)",
        default=True,
        action=OnOffAction,
    )
    op_offload: bool = switch(
        "--op-offload",
        "--no-op-offload",
        help="offload host tensor operations to the device (default: on)",
        default=True,
        action=OnOffAction,
    )
    mmproj_device: str | None = field(
        default=None,
        metadata=flag(
            "-mmdev",
            "--mmproj-device",
            help="the projector's device (none = the CPU; default: the first GPU, or the CPU with "
            "--no-mmproj-offload or -ngl 0)",
            type=one_device,
            metavar="DEVICE",
        ),
    )
    spec_draft_n_gpu_layers: int = field(
        default=-1,
        metadata=flag(
            "--spec-draft-ngl",
            "-ngld",
            "--gpu-layers-draft",
            "--n-gpu-layers-draft",
            help="most draft model layers kept in VRAM: a number, auto or all (default: auto)",
            type=gpu_layers,
            metavar="N",
            write=_layers_text,
        ),
    )
    spec_draft_device: tuple[str, ...] | None = field(
        default=None,
        metadata=flag(
            "--spec-draft-device",
            "-devd",
            "--device-draft",
            help="the draft model's devices, comma-separated (none = don't offload; default: -dev's)",
            type=device_list,
            metavar="DEV1,DEV2,...",
            write=_devices_text,
        ),
    )
    spec_draft_override_tensor: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--spec-draft-override-tensor",
            "-otd",
            "--override-tensor-draft",
            help="-ot for the draft model (which takes none of -ot's)",
            action="append",
            metavar="PATTERN=BUFFER_TYPE,...",
        ),
    )
    spec_draft_cpu_moe: bool = switch(
        "--spec-draft-cpu-moe",
        "-cmoed",
        "--cpu-moe-draft",
        help="keep every MoE weight of the draft model on the CPU",
        default=False,
        action="store_true",
    )
    spec_draft_n_cpu_moe: int = field(
        default=0,
        metadata=flag(
            "--spec-draft-n-cpu-moe",
            "--spec-draft-ncmoe",
            "-ncmoed",
            "--n-cpu-moe-draft",
            help="keep the MoE weights of the draft model's first N layers on the CPU",
            type=parse_count,
            metavar="N",
        ),
    )
    fit: bool = field(
        default=True,
        metadata=flag(
            "-fit",
            "--fit",
            help="shrink a context left to the model (-c not given) to what host memory holds: on or off "
            "(docs/usage.md says how)",
            type=fit_mode,
            metavar="on|off",
            write=lambda on: ["on" if on else "off"],
        ),
    )
    fit_target: tuple[int, ...] = field(
        default=(1024,),
        metadata=flag(
            "-fitt",
            "--fit-target",
            help="MiB --fit leaves free (comma-separated per device; one value for all)",
            type=fit_targets,
            metavar="MiB0,MiB1,...",
            write=lambda mib: [",".join(map(str, mib))],
        ),
    )
    fit_ctx: int = field(
        default=4096,
        metadata=flag("-fitc", "--fit-ctx", help="the smallest context a slot --fit may shrink to", type=int),
    )
