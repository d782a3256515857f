"""The device flags (:class:`~lfmserve.settings.DeviceSettings`) as llama.cpp's placement of the weights: the
target's and the draft model's :class:`~lfmserve.engine.records.Placement` and the projector's device, made as
llama-server makes them (``common_model_params_to_llama``, ``common_base_params_to_speculative``), checked against
this build's devices and buffer types before anything is downloaded or loaded, and the one warning a CPU build
gives for the flags it has no use for.

Example::

    placement = model_placement(Settings.from_argv(["-ngl", "0", "--cpu-moe"]).devices)
    placement.overrides  # ((r"\\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from ..engine.records import Placement, SplitMode
from ..errors import EngineError
from ..settings import DeviceSettings, Settings

logger = logging.getLogger(__name__)

#: llama.cpp's ``LLM_FFN_EXPS_REGEX`` (``--cpu-moe``) and ``LLM_FFN_DENSE_REGEX`` (``--n-cpu-ffn``), as patterns.
FFN_EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE = r"\.ffn_(up|down|gate)\."
#: Where ``--cpu-moe`` and the others keep their weights: the CPU device's buffer type.
CPU = "CPU"
#: The start-up warning's reason, the one llama-server's options ignored on this build are given.
_CPU_ONLY = "device placement: this llama.cpp build runs on the CPU"


def model_placement(devices: DeviceSettings) -> Placement:
    """The target model's placement: llama-server's ``-ngl``, ``-sm``, ``-mg``, ``-ts``, ``-dev``, ``--no-host``,
    and ``-ot`` with its shortcuts (``--cpu-moe``, ``--n-cpu-moe``, ``--n-cpu-ffn``)."""
    return Placement(
        n_gpu_layers=devices.n_gpu_layers,
        split_mode=_split_mode(devices.split_mode),
        main_gpu=devices.main_gpu,
        tensor_split=devices.tensor_split,
        devices=devices.devices,
        overrides=tensor_overrides(
            devices.override_tensor,
            cpu_moe=devices.cpu_moe,
            n_cpu_moe=devices.n_cpu_moe,
            n_cpu_ffn=devices.n_cpu_ffn,
            flag="-ot",
        ),
        no_host=devices.no_host,
    )


def draft_placement(devices: DeviceSettings) -> Placement:
    """The draft model's, as llama-server's ``common_base_params_to_speculative`` makes it: the target's, but for its
    own layers (``-ngld``), overrides (``-otd``, ``-cmoed``, ``-ncmoed``: none of the target's) and devices
    (``-devd``, else ``-dev``'s); one device of its own splits by layer."""
    own = devices.spec_draft_device
    return Placement(
        n_gpu_layers=devices.spec_draft_n_gpu_layers,
        split_mode="layer" if own is not None and len(own) == 1 else _split_mode(devices.split_mode),
        main_gpu=devices.main_gpu,
        tensor_split=devices.tensor_split,
        devices=devices.devices if own is None else own,
        overrides=tensor_overrides(
            devices.spec_draft_override_tensor,
            cpu_moe=devices.spec_draft_cpu_moe,
            n_cpu_moe=devices.spec_draft_n_cpu_moe,
            n_cpu_ffn=0,
            flag="-otd",
        ),
        no_host=devices.no_host,
    )


def tensor_overrides(
    entries: Sequence[str], *, cpu_moe: bool, n_cpu_moe: int, n_cpu_ffn: int, flag: str
) -> tuple[tuple[str, str], ...]:
    """The (tensor name pattern, buffer type) pairs of ``-ot`` values (each ``<pattern>=<buffer type>,...``), then
    of ``--cpu-moe`` (every layer's experts), ``--n-cpu-moe N`` and ``--n-cpu-ffn N`` (the first N layers' experts
    or dense FFN weights), on the CPU. llama.cpp takes the first pattern a tensor's name matches, so ``-ot`` can
    carve exceptions out of the shortcuts. Raises :class:`~lfmserve.errors.EngineError` for an entry without ``=``
    (llama-server's "invalid value")."""
    pairs = []
    for value in entries:
        for entry in value.split(","):
            pattern, equals, buffer_type = entry.partition("=")
            if not equals:
                raise EngineError(f"{flag} {entry}: invalid value (expected <tensor name pattern>=<buffer type>)")
            pairs.append((pattern, buffer_type))
    if cpu_moe:
        pairs.append((FFN_EXPERTS, CPU))
    pairs += [(rf"blk\.{layer}{FFN_EXPERTS}", CPU) for layer in range(n_cpu_moe)]
    pairs += [(rf"blk\.{layer}{FFN_DENSE}", CPU) for layer in range(n_cpu_ffn)]
    return tuple(pairs)


def projector_device(settings: Settings) -> tuple[bool, str | None]:
    """Whether the projector runs on a device, and which (None: mtmd's choice, the first GPU): ``-mmdev DEVICE``
    that device, ``-mmdev none`` the CPU; not given, a GPU unless ``--no-mmproj-offload`` or ``-ngl 0``."""
    device = settings.devices.mmproj_device
    if device is not None:
        return (False, None) if device == "none" else (True, device)
    return settings.media.mmproj_offload and settings.devices.n_gpu_layers != 0, None


def check_placement(settings: Settings) -> None:
    """Fail now, with llama-server's message, on a device or buffer type this build lacks (``-dev``, ``-ot``, their
    draft forms, ``-mmdev``); on a build with no device to offload to, warn once naming the flags given that then do
    nothing."""
    from ..llama import devices as native  # here: the mapping above is read where llama.cpp is not loaded (router)

    devices = settings.devices
    native.check(model_placement(devices))
    if settings.speculation.spec_draft_model or settings.speculation.spec_draft_hf:
        native.check(draft_placement(devices), device_flag="-devd", override_flag="-otd")
    use_gpu, device = projector_device(settings)
    if use_gpu and device is not None:
        native.device_handle(device, "-mmdev")
    unused = unused_on_cpu(devices)
    if unused and not native.gpu_offload():
        logger.warning("llama-server options ignored: %s (%s)", ", ".join(unused), _CPU_ONLY)


def unused_on_cpu(devices: DeviceSettings) -> list[str]:
    """The device flags given (set away from their defaults), by llama-server's short spellings: on a build with
    only the CPU none of them does anything (``-ot`` can name only the CPU's buffer type, and llama.cpp places a
    weight overridden to the CPU as it would have anyway, repacked or not)."""
    defaults = DeviceSettings()
    return [name for field, name in _SPELLINGS.items() if getattr(devices, field) != getattr(defaults, field)]


#: Each device field by the spelling the warning names it with (the off one for a switch that is on by default).
_SPELLINGS = {
    "n_gpu_layers": "-ngl",
    "devices": "-dev",
    "split_mode": "-sm",
    "tensor_split": "-ts",
    "main_gpu": "-mg",
    "override_tensor": "-ot",
    "cpu_moe": "-cmoe",
    "n_cpu_moe": "-ncmoe",
    "n_cpu_ffn": "-ncffn",
    "no_host": "--no-host",
    "kv_offload": "-nkvo",
    "op_offload": "--no-op-offload",
    "mmproj_device": "-mmdev",
    "spec_draft_n_gpu_layers": "-ngld",
    "spec_draft_device": "-devd",
    "spec_draft_override_tensor": "-otd",
    "spec_draft_cpu_moe": "-cmoed",
    "spec_draft_n_cpu_moe": "-ncmoed",
}


def device_list() -> str:
    """``--list-devices``' text (:func:`lfmserve.llama.devices.device_list`)."""
    from ..llama import devices as native

    return native.device_list()


def _split_mode(mode: str) -> SplitMode:
    return cast(SplitMode, mode)  # one of -sm's choices
