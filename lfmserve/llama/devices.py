"""llama.cpp's devices, and where a model's weights go on them: ``--list-devices``, and the fields of
``llama_model_params`` that llama-server's device flags set (its ``common_model_params_to_llama``).

llama-cpp-python binds none of ggml's device functions (``ggml_backend_dev_*``, ``ggml_backend_buft_name``): they
are declared with :func:`.backend.unbound_function`, so that they are the ones of the ggml copy llama.cpp uses.

Example::

    print(device_list())  # llama-server's --list-devices, then the CPU's devices
    placement = Placement(n_gpu_layers=0, overrides=((r"blk\\.0\\.", "CPU"),))  # lfmserve.engine.records
    params, held = model_params(placement)
    model = llama.llama_model_load_from_file(path, params)  # `held` keeps what params points to until here
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import llama_cpp.llama_cpp as llama

from ..errors import EngineError
from .backend import init_backend, unbound_function

#: ggml's ``enum ggml_backend_dev_type``: the CPU (the host's memory), a GPU, an integrated GPU, an accelerator
#: used beside the CPU (BLAS, AMX), a device wrapping others for tensor parallelism.
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")
#: llama.cpp's ``enum llama_split_mode`` by ``-sm``'s names.
SPLIT_MODES = {
    "none": llama.LLAMA_SPLIT_MODE_NONE,
    "layer": llama.LLAMA_SPLIT_MODE_LAYER,
    "row": llama.LLAMA_SPLIT_MODE_ROW,
    "tensor": llama.LLAMA_SPLIT_MODE_TENSOR,
}
_MIB = 2**20


_p = ctypes.c_void_p
_dev_count = unbound_function("ggml_backend_dev_count", ctypes.c_size_t)
_dev_get = unbound_function("ggml_backend_dev_get", _p, ctypes.c_size_t)
_dev_by_name = unbound_function("ggml_backend_dev_by_name", _p, ctypes.c_char_p)
_dev_name = unbound_function("ggml_backend_dev_name", ctypes.c_char_p, _p)
_dev_description = unbound_function("ggml_backend_dev_description", ctypes.c_char_p, _p)
_dev_type = unbound_function("ggml_backend_dev_type", ctypes.c_int, _p)
_dev_memory = unbound_function(
    "ggml_backend_dev_memory", None, _p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)
)
_dev_buffer_type = unbound_function("ggml_backend_dev_buffer_type", _p, _p)
_buft_name = unbound_function("ggml_backend_buft_name", ctypes.c_char_p, _p)
_cpu_buffer_type = unbound_function("ggml_backend_cpu_buffer_type", _p)


class BufferTypeOverride(ctypes.Structure):
    """``struct llama_model_tensor_buft_override`` (llama-cpp-python declares only its pointer, as void)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass(frozen=True, slots=True)
class Device:
    """One of ggml's backend devices, as ``--list-devices`` shows it."""

    name: str
    description: str
    #: One of :data:`DEVICE_TYPES`.
    type: str
    total_bytes: int
    free_bytes: int

    @property
    def line(self) -> str:
        """llama-server's line for it: ``  CUDA0: NVIDIA H100 (81559 MiB, 80995 MiB free)``."""
        total, free = self.total_bytes // _MIB, self.free_bytes // _MIB
        return f"  {self.name}: {self.description} ({total} MiB, {free} MiB free)"


def devices() -> list[Device]:
    """Every device llama.cpp has registered, the CPU's included, in its order."""
    init_backend()  # loads the backends of a build that keeps them in their own libraries, as llama-server does
    found = []
    for index in range(_dev_count()):
        dev = _dev_get(index)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        _dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = _dev_type(dev)
        found.append(
            Device(
                name=_dev_name(dev).decode(),
                description=_dev_description(dev).decode(),
                type=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
                total_bytes=total.value,
                free_bytes=free.value,
            )
        )
    return found


def device_list() -> str:
    """``--list-devices``: llama-server's list (the devices ``-dev`` takes, every one but the CPU's; ``(none)`` on a
    CPU build), then the CPU's devices in the same form, under their own heading so that a script reading the
    first list reads what llama-server prints."""
    found = devices()
    offload = [device.line for device in found if device.type != "CPU"]
    host = [device.line for device in found if device.type == "CPU"]
    lines = ["Available devices:", *(offload or ["  (none)"])]
    if host:
        lines += ["CPU devices (always used; -dev takes the devices above):", *host]
    return "\n".join(lines)


def gpu_offload() -> bool:
    """Whether this build can put layers on a device (a GPU, an integrated GPU or an RPC server: llama.cpp's
    ``llama_supports_gpu_offload``)."""
    init_backend()
    return bool(llama.llama_supports_gpu_offload())


def device_handle(name: str, flag: str = "-dev") -> int:
    """The device ``name`` names (case aside), as llama-server's ``parse_device_list`` finds it: the CPU is not one
    to offload to. Raises :class:`~lfmserve.errors.EngineError` with llama-server's message."""
    init_backend()
    dev = _dev_by_name(name.encode())
    if not dev or _dev_type(dev) == DEVICE_TYPES.index("CPU"):
        raise EngineError(f"{flag}: invalid device: {name}")
    return int(dev)


def buffer_types() -> dict[str, int]:
    """The buffer types ``-ot`` may name: each device's own, by name (``CPU``, ``CUDA0``), as llama-server's
    ``parse_tensor_buffer_overrides`` lists them."""
    init_backend()
    found = {}
    for index in range(_dev_count()):
        buft = _dev_buffer_type(_dev_get(index))
        if buft:
            found[_buft_name(buft).decode()] = int(buft)
    return found


def cpu_buffer_type() -> int:
    """ggml's CPU buffer type, where ``--cpu-moe`` keeps the experts (the CPU device's own)."""
    init_backend()
    return int(_cpu_buffer_type())


class ModelPlacement(Protocol):
    """Where a model's weights go (:class:`~lfmserve.engine.records.Placement`), in llama.cpp's terms."""

    @property
    def n_gpu_layers(self) -> int: ...
    @property
    def split_mode(self) -> str: ...
    @property
    def main_gpu(self) -> int: ...
    @property
    def tensor_split(self) -> tuple[float, ...]: ...
    @property
    def devices(self) -> tuple[str, ...] | None: ...
    @property
    def overrides(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def no_host(self) -> bool: ...


@dataclass(slots=True)
class Held:
    """The arrays a placed ``llama_model_params`` points to: llama.cpp reads them while it loads, so they must
    live until the load returns."""

    tensor_split: Any = None
    devices: Any = None
    overrides: Any = None
    patterns: list[bytes] = field(default_factory=list)


def place(params: Any, placement: ModelPlacement, *, device_flag: str = "-dev", override_flag: str = "-ot") -> Held:
    """Write ``placement`` into ``params`` (a ``llama_model_params``) as llama-server does: the device list
    NULL-terminated (empty for ``-dev none``: no device), the tensor split one float per possible device, the
    buffer type overrides terminated by ``{NULL, NULL}``. A device or buffer type this build lacks raises
    :class:`~lfmserve.errors.EngineError` with llama-server's message (naming ``device_flag`` or
    ``override_flag``)."""
    held = Held()
    params.n_gpu_layers = placement.n_gpu_layers
    params.split_mode = SPLIT_MODES[placement.split_mode]
    params.main_gpu = placement.main_gpu
    params.no_host = placement.no_host
    held.tensor_split = (ctypes.c_float * llama.llama_max_devices())(*placement.tensor_split)
    params.tensor_split = held.tensor_split
    if placement.devices is not None:
        handles = [device_handle(name, device_flag) for name in placement.devices]
        held.devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
        params.devices = ctypes.addressof(held.devices)
    if placement.overrides:
        held.overrides = _override_array(placement.overrides, override_flag, held.patterns)
        params.tensor_buft_overrides = ctypes.addressof(held.overrides)
    return held


def _override_array(overrides: Sequence[tuple[str, str]], flag: str, patterns: list[bytes]) -> Any:
    known = buffer_types()
    array = (BufferTypeOverride * (len(overrides) + 1))()  # zeroed: the last entry is the {NULL, NULL} end
    for entry, (pattern, name) in zip(array, overrides, strict=False):
        if name not in known:
            available = ", ".join(sorted(known))
            raise EngineError(f'{flag}: unknown buffer type "{name}" (available buffer types: {available})')
        patterns.append(pattern.encode())
        entry.pattern, entry.buft = patterns[-1], known[name]
    return array


def model_params(placement: ModelPlacement | None) -> tuple[Any, Held]:
    """llama.cpp's default ``llama_model_params`` with ``placement`` written in (:func:`place`; None: none), and what
    they point to, to keep until the load returns."""
    params = llama.llama_model_default_params()
    return params, place(params, placement) if placement is not None else Held()


def check(placement: ModelPlacement, *, device_flag: str = "-dev", override_flag: str = "-ot") -> None:
    """Raise what :func:`place` would for ``placement`` (a device or buffer type this build lacks), before
    anything is downloaded or loaded."""
    place(llama.llama_model_default_params(), placement, device_flag=device_flag, override_flag=override_flag)


def placed_devices(params: Any) -> list[str] | None:
    """The names of the devices a ``llama_model_params`` lists (None: it lists none, so llama.cpp takes every
    GPU it finds)."""
    if not params.devices:
        return None
    array = ctypes.cast(params.devices, ctypes.POINTER(ctypes.c_void_p))
    names: list[str] = []
    while array[len(names)]:
        names.append(_dev_name(array[len(names)]).decode())
    return names


def placed_overrides(params: Any) -> list[tuple[str, str]]:
    """The (pattern, buffer type name) pairs a ``llama_model_params`` holds, up to their ``{NULL, NULL}`` end."""
    if not params.tensor_buft_overrides:
        return []
    array = ctypes.cast(params.tensor_buft_overrides, ctypes.POINTER(BufferTypeOverride))
    pairs: list[tuple[str, str]] = []
    while array[len(pairs)].pattern is not None:
        entry = array[len(pairs)]
        pairs.append((entry.pattern.decode(), _buft_name(entry.buft).decode()))
    return pairs
