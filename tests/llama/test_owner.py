"""One thread computes on a native context: the first that does; any other gets an error instead of a second
OpenMP team. The engine's thread is named in the kernel, and so are the OpenMP workers it starts."""

from __future__ import annotations

import base64
import collections
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.owner import ComputeOwner, name_os_thread
from lfmserve.testing import image_bytes
from tests.conftest import ServerThread, vl_settings


def _on_another_thread(work: Callable[[], object]) -> object:
    with ThreadPoolExecutor(1, thread_name_prefix="other") as pool:
        return pool.submit(work).result()


def test_the_first_thread_to_compute_owns_the_context_and_another_is_refused() -> None:
    owner = ComputeOwner("this llama context")
    owner.check()
    owner.check()
    with pytest.raises(EngineError) as info:
        _on_another_thread(owner.check)
    assert info.value.message == (
        "this llama context computes on thread 'MainThread' only, not on 'other_0': a second computing thread gives "
        "OpenMP a second team of threads, and every later step slows down"
    )
    owner.check()  # still the owner's
    fresh = ComputeOwner("that context")
    _on_another_thread(fresh.check)  # bound to a thread that has ended since
    fresh.check()  # so this one takes it over


def test_a_context_bound_to_a_live_thread_never_decodes_on_another(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    ctx = NativeContext(model, n_ctx=256, n_batch=32, n_ubatch=32, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        ctx.batch.add([1, 2], 0, 0, True)
        with ThreadPoolExecutor(1, thread_name_prefix="other") as pool:
            pool.submit(ctx.decode).result()  # binds to that thread, which lives on in the pool
            with pytest.raises(EngineError, match="computes on thread 'other_0' only, not on 'MainThread'"):
                ctx.decode()
            assert ctx.seq_pos_max(0) == 1  # the refused decode never reached llama.cpp
        # Its thread ended (and its OpenMP team with it): the context may move to this one.
        ctx.seq_clear(0)
        ctx.decode()
        assert ctx.seq_pos_max(0) == 1
    finally:
        ctx.close()
        model.close()


def test_a_thread_s_kernel_name_is_set_and_cut_to_15_bytes() -> None:
    def named() -> str:
        name_os_thread("lfmserve-engine-and-more")
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
            return comm.read().strip()

    assert _on_another_thread(named) == "lfmserve-engine"


def _native_threads() -> dict[int, str]:
    """The process's threads that Python did not start, by id: OpenMP's and other libraries' workers."""
    python = {thread.native_id for thread in threading.enumerate()}
    names = {}
    for task in os.listdir("/proc/self/task"):
        if int(task) not in python:
            try:
                with open(f"/proc/self/task/{task}/comm") as comm:
                    names[int(task)] = comm.read().strip()
            except FileNotFoundError:  # it ended between the listing and the read (a thread the last test left)
                continue
    return names


@pytest.fixture(scope="module")
def before() -> dict[int, str]:
    return _native_threads()


@pytest.fixture(scope="module")
def vl_server(
    before: dict[int, str], server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path
) -> Iterator[ServerThread]:
    yield server_factory(vl_settings(vl_gguf, mmproj_gguf, threads=2, parallel=2))


def _new_teams(before: dict[int, str]) -> dict[str, int]:
    """Threads started since ``before``, by kernel name; uvloop's resolver pool (``libuv-worker``) left out."""
    started = {tid: name for tid, name in _native_threads().items() if tid not in before}
    return dict(collections.Counter(name for name in started.values() if name != "libuv-worker"))


def _settled_teams(before: dict[int, str], expected: dict[str, int]) -> dict[str, int]:
    """:func:`_new_teams` once it is ``expected``, or what it is after 30 s. A thread named ``python`` was
    counted in two full runs of the suite (not alone, nor in the next runs): a Python thread that is ending leaves
    :func:`threading.enumerate` before its task leaves ``/proc``. A second OpenMP team stays, and still fails."""
    deadline = time.monotonic() + 30
    while (teams := _new_teams(before)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return teams


def test_after_loading_the_only_team_is_the_engine_thread_s(vl_server: ServerThread, before: dict[int, str]) -> None:
    # Two threads: the engine's thread and one OpenMP worker it started, named after it; none of the loader's.
    assert _settled_teams(before, {"lfmserve-engine": 1}) == {"lfmserve-engine": 1}


def test_after_text_and_an_image_it_is_still_the_only_one(vl_server: ServerThread, before: dict[int, str]) -> None:
    image = base64.b64encode(image_bytes(64, 64, seed=1)).decode()
    parts = [
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{image}"}},
        {"type": "text", "text": "x"},
    ]
    for content in ("hello", parts):
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 3}
        assert httpx.post(vl_server.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert _settled_teams(before, {"lfmserve-engine": 1}) == {"lfmserve-engine": 1}
