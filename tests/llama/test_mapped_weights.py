"""``-lm auto`` holds the weights once: the mapped pages of the tensors llama.cpp repacked are given back after
load, only those, and the model computes what it computed before (Gemma-3-270M Q4_K_M, whose matrices llama.cpp
repacks on CPUs with AVX2 or AVX-512 and without AMX; a tiny LFM2 in IQ4_NL, which AMX does not take, repacked
with AVX2 or NEON). Whatever fails on the way is one warning and a mapping left whole."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.llama import mapped_weights
from lfmserve.llama.backend import init_backend
from lfmserve.llama.context import NativeContext
from lfmserve.llama.mapped_weights import _FileTensor, _GgmlTensor, _GraphWeights
from lfmserve.llama.model import NativeModel
from lfmserve.process_memory import mapped_bytes
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

PROMPT = [2, 9259, 236764, 1144, 563, 506, 5279, 529]
TINY_PROMPT = [1, 5, 9, 30, 40]
PAGE = os.sysconf("SC_PAGE_SIZE")


def _greedy(model: NativeModel, n: int, prompt: list[int] = PROMPT) -> tuple[list[int], np.ndarray]:
    """``n`` greedy tokens after ``prompt``, and the prompt's logits."""
    context = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        tokens: list[int] = list(prompt)
        first: np.ndarray | None = None
        for _ in range(n):
            start = 0 if first is None else len(tokens) - 1
            context.batch.clear()
            index = context.batch.add(tokens[start:], start, 0, True)
            context.decode()
            logits = context.logits(index).copy()
            first = logits if first is None else first
            tokens.append(int(logits.argmax()))
        assert first is not None
        return tokens[len(prompt) :], first
    finally:
        context.close()


def _kernel_pages_out_cold_pages() -> bool:
    """A running DAMON scheme that pages out memory nobody touched for a while (some VMs run one): resident page
    counts then drift while a test runs, so they cannot be compared exactly."""
    root = Path("/sys/kernel/mm/damon/admin/kdamonds")
    for kdamond in root.glob("*"):
        state = kdamond / "state"
        if state.exists() and state.read_text().strip() == "on":
            actions = kdamond.glob("contexts/*/schemes/*/action")
            if any(action.read_text().strip() == "pageout" for action in actions):
                return True
    return False


@pytest.mark.skipif(_kernel_pages_out_cold_pages(), reason="the kernel pages out cold pages (DAMON): counts drift")
def test_only_the_repacked_weights_pages_are_given_back(gemma_gguf: Path) -> None:
    path = [str(gemma_gguf)]
    mapped = NativeModel(gemma_gguf, load_mode="mmap")
    try:
        if "CPU_REPACK" not in mapped.buffers:
            pytest.skip("llama.cpp does not repack weights on this CPU: nothing is held twice")
        # llama.cpp maps with MAP_POPULATE: every page of the range it keeps mapped is resident.
        one_mapping = mapped_bytes(None, path)
        released = NativeModel(gemma_gguf, load_mode="auto")
        try:
            assert mapped.released_bytes == 0 and released.released_bytes > 0
            # The second mapping of the same range holds exactly the first's pages less those given back.
            assert mapped_bytes(None, path) == 2 * one_mapping - released.released_bytes
            # What was given back is the repacked copy's source, less the pages it shares with other tensors.
            repacked = released.buffers["CPU_REPACK"]
            assert 0.98 * repacked < released.released_bytes <= repacked
            assert _greedy(released, 12)[0] == _greedy(mapped, 12)[0]
            assert np.array_equal(_greedy(released, 1)[1], _greedy(mapped, 1)[1])
            # Decoding read no page that was given back: none came back.
            assert mapped_bytes(None, path) == 2 * one_mapping - released.released_bytes
        finally:
            released.close()
    finally:
        mapped.close()


def test_without_repacking_or_mapping_nothing_is_given_back(gemma_gguf: Path) -> None:
    unpacked, read = NativeModel(gemma_gguf, repack=False), NativeModel(gemma_gguf, load_mode="none")
    try:
        assert ("CPU_REPACK" in unpacked.buffers, unpacked.released_bytes, read.released_bytes) == (False, 0, 0)
    finally:
        unpacked.close()
        read.close()


@pytest.fixture(scope="module")
def iq4_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LFM2 with every matrix in IQ4_NL: llama.cpp repacks those with AVX2 or NEON, and AMX, whose matrix
    multiply crashes on batches (:func:`lfmserve.llama.backend.amx_built_in`), does not take them. 512 tokens, a
    multiple of 8, so the tied output embedding is repacked too, while the input's is read from the file."""
    folder = tmp_path_factory.mktemp("iq4")
    source = write_lfm2_gguf(folder / "tiny-f32.gguf", TinyLfm2(seed=1, n_vocab=512))
    init_backend()
    params = llama.llama_model_quantize_default_params()
    params.ftype = llama.LLAMA_FTYPE_MOSTLY_IQ4_NL
    params.output_tensor_type = params.token_embedding_type = llama.GGML_TYPE_IQ4_NL
    params.pure = True  # no tensor bumped to a type AMX takes
    params.nthread = 1
    target = folder / "tiny-iq4_nl.gguf"
    assert llama.llama_model_quantize(str(source).encode(), str(target).encode(), params) == 0
    return target


def _repacked(path: Path, **kwargs: Any) -> NativeModel:
    """``path`` loaded with repacking on (AMX or not: see :func:`iq4_gguf`); skips where nothing is repacked."""
    model = NativeModel(path, repack=True, **kwargs)
    if "CPU_REPACK" not in model.buffers:
        model.close()
        pytest.skip("llama.cpp does not repack IQ4_NL on this CPU: nothing is held twice")
    return model


def _warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The (logger, message) of every WARNING or worse logged so far in the test."""
    return [(record.name, record.getMessage()) for record in caplog.records if record.levelno >= logging.WARNING]


def _held_twice(n_released: int, reason: str) -> tuple[str, str]:
    """The one warning a release that failed logs."""
    message = f"the mapped weights llama.cpp copied stay held twice ({n_released} bytes released): {reason}"
    return "lfmserve.llama.mapped_weights", message


def test_the_copied_weights_pages_are_given_back_and_the_model_computes_the_same(iq4_gguf: Path) -> None:
    released, mapped = _repacked(iq4_gguf), _repacked(iq4_gguf, load_mode="mmap")
    try:
        assert released.released_bytes > 0 and mapped.released_bytes == 0
        assert released.released_bytes % PAGE == 0 and released.released_bytes <= released.buffers["CPU_REPACK"]
        tokens, logits = _greedy(released, 8, TINY_PROMPT)
        assert tokens == _greedy(mapped, 8, TINY_PROMPT)[0]
        assert np.array_equal(logits, _greedy(mapped, 1, TINY_PROMPT)[1])
    finally:
        released.close()
        mapped.close()


def test_a_tied_embedding_read_from_the_file_keeps_its_pages(iq4_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The input's ``token_embd.weight`` is read from the mapping while the output's copy is repacked: both are
    seen, and no page of the file's copy is given back."""
    calls: list[tuple[Any, ...]] = []
    ranges = mapped_weights._copied_ranges

    def spy(*args: Any) -> Any:
        calls.append((*args, list(ranges(*args))))
        return iter(calls[-1][-1])

    monkeypatch.setattr(mapped_weights, "_copied_ranges", spy)
    model = _repacked(iq4_gguf)
    model.close()
    [(weights, tensors, mappings, released)] = calls
    [base] = {mapping.base for mapping in mappings[str(iq4_gguf.resolve())]}
    embedding = tensors["token_embd.weight"]
    in_file = base + embedding.offset
    assert len(weights["token_embd.weight"]) == 2 and in_file in weights["token_embd.weight"]
    assert released and all(end <= in_file or start >= in_file + embedding.size for start, end in released)


def test_a_failure_releases_nothing_with_one_warning(
    iq4_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No ``/proc/self/maps`` (as on macOS): the model loads, with its mapping whole, computes the same, and is
    freed."""
    absent = tmp_path / "maps"
    monkeypatch.setattr(mapped_weights, "_PROC_MAPS", str(absent))
    freed: list[int] = []
    free = llama.llama_model_free
    monkeypatch.setattr(llama, "llama_model_free", lambda model: (freed.append(model), free(model)))
    failed, mapped = _repacked(iq4_gguf), _repacked(iq4_gguf, load_mode="mmap")
    handles = [failed.handle, mapped.handle]
    try:
        assert failed.released_bytes == 0
        assert _warnings(caplog) == [_held_twice(0, f"[Errno 2] No such file or directory: '{absent}'")]
        assert _greedy(failed, 8, TINY_PROMPT)[0] == _greedy(mapped, 8, TINY_PROMPT)[0]
    finally:
        failed.close()
        mapped.close()
    assert freed == handles


def test_a_release_that_fails_midway_says_so_once_with_what_it_released(
    iq4_gguf: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A range ``madvise`` refuses (here one not page-aligned) ends the release; what went before stays released."""
    ranges = mapped_weights._copied_ranges
    given: list[tuple[int, int]] = []

    def then_unaligned(*args: Any) -> Iterator[tuple[int, int]]:
        given.extend(ranges(*args))
        return iter([*given, (PAGE + 1, 2 * PAGE + 1)])

    monkeypatch.setattr(mapped_weights, "_copied_ranges", then_unaligned)
    model = _repacked(iq4_gguf)
    model.close()
    assert given and model.released_bytes == sum(end - start for start, end in given)
    assert _warnings(caplog) == [_held_twice(model.released_bytes, "[Errno 22] madvise: Invalid argument")]


def test_a_layout_ggml_disagrees_with_is_never_followed(
    iq4_gguf: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mapped_weights, "_LAYOUT_PROBLEM", "the problem")
    monkeypatch.setattr(mapped_weights, "_GraphWeights", None)  # observing the graph would fail otherwise
    model = _repacked(iq4_gguf)
    model.close()
    assert model.released_bytes == 0
    assert _warnings(caplog) == [_held_twice(0, "the problem")]


def test_ggml_is_reached_through_libllama_not_opened_again(iq4_gguf: Path) -> None:
    """Opening libggml-base by name maps a second copy of it (the wheel ships ``.so`` and ``.so.0`` as files):
    a fresh process that released weights maps one."""
    _repacked(iq4_gguf).close()
    script = (
        "import sys\n"
        "from lfmserve.llama.model import NativeModel\n"
        "assert NativeModel(sys.argv[1], repack=True).released_bytes > 0\n"
        "print(*sorted({line.split()[-1] for line in open('/proc/self/maps') if 'libggml-base' in line}))\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(iq4_gguf)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.split()) == 1, run.stdout


def test_the_layout_agrees_with_ggmls_accessors() -> None:
    def without(field: str) -> type[_GgmlTensor]:
        return type("Shifted", (ctypes.Structure,), {"_fields_": [f for f in _GgmlTensor._fields_ if f[0] != field]})

    assert mapped_weights._LAYOUT_PROBLEM is None and mapped_weights._layout_problem(_GgmlTensor) is None
    problem = "ggml's accessors disagree with lfmserve's struct ggml_tensor on its "
    assert mapped_weights._layout_problem(without("buffer")) == problem + "name, data, op, src"
    assert mapped_weights._layout_problem(without("view_offs")) == problem + "name, data"


def _leaf(context: int, name: bytes) -> int:
    return mapped_weights._ggml_set_name(mapped_weights._ggml_new_tensor_1d(context, 0, 4), name)


def test_every_address_of_a_name_is_kept() -> None:
    """A tied embedding is two tensors of one name: the input's and the output's, each where it was placed."""
    observed = _GraphWeights()
    with mapped_weights._scratch() as context:
        embeddings = _leaf(context, b"token_embd.weight"), _leaf(context, b"token_embd.weight")
        observed.observe(mapped_weights._ggml_add(context, *embeddings), True, None)
        addresses = {mapped_weights._ggml_get_data(embedding) for embedding in embeddings}
    assert len(addresses) == 2 and observed.addresses == {"token_embd.weight": addresses}
    assert observed.problem is None


def test_a_tensor_ggmls_accessors_disagree_on_is_not_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    observed = _GraphWeights()
    with mapped_weights._scratch() as context:
        node = mapped_weights._ggml_add(context, _leaf(context, b"a"), _leaf(context, b"b"))
        monkeypatch.setattr(mapped_weights, "_ggml_get_data", lambda _tensor: None)
        observed.observe(node, True, None)
    assert observed.addresses == {}
    assert observed.problem == f"ggml's accessors disagree with lfmserve's struct ggml_tensor at {node:#x}"


#: A model file of two tensors: the first read from the mapping, the second (3 pages, less the first's 256 bytes)
#: copied elsewhere, its 2 whole pages given back.
_FILE = "/models/m.gguf"
_BASE = 0x7F0000000000
_TENSORS = {"read": _FileTensor(_FILE, 0, 256), "copied": _FileTensor(_FILE, 256, 3 * PAGE - 256)}


@pytest.mark.parametrize(
    ("perms", "released"),
    [("r--s", [(_BASE + PAGE, _BASE + 3 * PAGE)]), ("r--p", []), ("rw-s", []), ("rw-p", [])],
)
def test_only_a_shared_read_only_mapping_of_the_file_is_released(perms: str, released: list[tuple[int, int]]) -> None:
    """Another mapping's pages may hold what the file does not: a private one's copies, a writable one's writes."""
    maps = [f"{_BASE:x}-{_BASE + 4 * PAGE:x} {perms} 00000000 fd:01 42                         {_FILE}\n"]
    mappings = mapped_weights._file_mappings({_FILE}, maps)
    weights = {"read": {_BASE}, "copied": {0x5000}}
    assert list(mapped_weights._copied_ranges(weights, _TENSORS, mappings)) == released


def test_a_tensor_read_from_the_file_at_any_of_its_addresses_keeps_its_pages() -> None:
    maps = [f"{_BASE:x}-{_BASE + 4 * PAGE:x} r--s 00000000 fd:01 42 {_FILE}\n"]
    mappings = mapped_weights._file_mappings({_FILE}, maps)
    weights = {"read": {_BASE}, "copied": {0x5000, _BASE + 256}}
    assert list(mapped_weights._copied_ranges(weights, _TENSORS, mappings)) == []
