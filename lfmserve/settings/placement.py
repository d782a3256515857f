"""Where the work runs: the CPU threads that compute (:class:`ThreadSettings`) and the devices that hold the
weights and caches (:class:`DeviceSettings`), with llama-server's flags.

They are groups of :class:`~lfmserve.settings.Settings` like those of :mod:`.groups`, kept apart because they
describe the machine rather than the model or the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import flag, physical_cores


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadSettings:
    """The threads llama.cpp computes with, for generation and for prompt processing."""

    TITLE: ClassVar[str] = "threads and CPU placement"

    threads: int = field(
        default_factory=physical_cores,
        metadata=flag("-t", "--threads", help="threads for generation (default: physical cores)", type=int),
    )
    threads_batch: int | None = field(
        default=None,
        metadata=flag("-tb", "--threads-batch", help="threads for prompt processing (default: --threads)", type=int),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSettings:
    """Which devices hold the layers, passed to llama.cpp as llama-server passes them (a CPU build has only the
    CPU, and says so once at start)."""

    TITLE: ClassVar[str] = "devices and offload"

    n_gpu_layers: int = field(
        default=-1,
        metadata=flag(
            "-ngl", "--gpu-layers", "--n-gpu-layers", help="layers to offload to a GPU, passed to llama.cpp", type=int
        ),
    )
