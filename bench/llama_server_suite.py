"""Run llama.cpp's own server test suite against lfmserve, and print passed / failed / excluded per file.

The suite is llama-server's ``tools/server/tests`` from the pinned llama-cpp-python sdist (downloaded
with pip into the cache folder, unpacked there, never committed). Its ``LLAMA_SERVER_BIN_PATH`` points
at a shim that starts ``python -m lfmserve`` with the suite's flags, the suite's ``--hf-repo``
downloads replaced by local stand-ins written with :mod:`lfmserve.testing`.

Each stand-in has the architecture of the model it replaces (stories260K: llama; bge-small: bert;
jina-reranker-v1-tiny-en: jina-bert-v2; tinygemma3: gemma3 with a gemma3 vision projector, passed as
``--mmproj`` unless the suite says ``--no-mmproj``, as llama-server's ``-hf`` fetches a repo's projector), and
the test pictures the suite downloads from tinygemma3's repo are served from local files; the model test_router.py
downloads with ``POST /models`` comes from a fake hub on loopback (``lfmserve.testing.hub``, named to both servers by
``HF_ENDPOINT`` and llama.cpp's ``MODEL_ENDPOINT``). The suite's models are
trained; the stand-ins are random, so tests that assert the text, the ranking or the token counts a trained
model produces cannot pass on either server with them. Those are excluded by name in :data:`EXCLUDED`, each
with its reason (docs/testing.md lists them). Running the same selection with ``--server llama-server`` (a
binary built from the same llama.cpp) shows what the suite asks of the stand-ins, not of lfmserve.

Usage::

    pip install -e '.[suite]'
    python bench/llama_server_suite.py                 # every in-scope file, a table at the end
    python bench/llama_server_suite.py test_basic.py -k health --verbose
    python bench/llama_server_suite.py --server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from lfmserve.testing import (
    TinyBert,
    TinyGemma3,
    TinyGemma3Projector,
    TinyLfm2,
    bge_small_shape,
    free_port,
    image_bytes,
    jina_reranker_tiny_shape,
    llama_server_weight_flags,
    write_bert_gguf,
    write_gemma3_gguf,
    write_gemma3_mmproj_gguf,
    write_lfm2_gguf,
)
from lfmserve.testing.hub import fake_hub
from lfmserve.testing.scripted import STORY_MOE, ScriptedLlama, write_scripted_gguf, write_scripted_lora

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SDIST_ROOT = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
#: What the runner needs of the sdist: the suite, the chat templates its tests read, and the picture
#: test_security.py serves from ``--media-path ../../../tools``.
SUITE_MEMBERS = ("tools/server/tests/", "models/templates/", "tools/mtmd/test-1.jpeg")
CACHE = Path(os.environ.get("LFMSERVE_SUITE_CACHE", Path.home() / ".cache" / "lfmserve-suite"))

#: The suite's files this runner selects: all of them.
IN_SCOPE = (
    "test_basic.py",
    "test_chat_completion.py",
    "test_compat_anthropic.py",
    "test_compat_gcp.py",
    "test_compat_oai_responses.py",
    "test_completion.py",
    "test_ctx_shift.py",
    "test_embedding.py",
    "test_ignore_eos.py",
    "test_infill.py",
    "test_kv_keep_only_active.py",
    "test_lora.py",
    "test_mcp_servers.py",
    "test_metrics.py",
    "test_proxy.py",
    "test_rerank.py",
    "test_router.py",
    "test_security.py",
    "test_sleep.py",
    "test_slot_save.py",
    "test_speculative.py",
    "test_stream.py",
    "test_template.py",
    "test_tokenize.py",
    "test_tool_call.py",
    "test_tools_builtin.py",
    "test_vision_api.py",
)

#: Tests no stand-in can pass, and why: ``file::test`` (with all its cases), or ``file::test[id`` for the cases
#: whose id starts so.
_TEXT = "asserts the text stories260K generates (a random stand-in cannot)"
_COUNTS = "asserts stories260K's tokenizer's prompt token counts, and its generated text"
_HUB = "downloads from the Hugging Face hub, which this machine cannot reach (llama-server cannot either)"
_IMAGE_URL = _HUB + ": the server fetches the picture from tinygemma3's repo by URL"
_PICTURE_WORD = (
    "asserts the class tinygemma3 (trained on CIFAR-10) names for the picture, 'cat' or 'frog' (a random stand-in "
    "cannot)"
)
_URL_AND_WORD = _IMAGE_URL + "; and " + _PICTURE_WORD
_RANKING = "asserts jina-reranker-v1-tiny-en's ranking (document 2 first, 3 last): a random stand-in ranks at random"
EXCLUDED: dict[str, str] = {
    "test_proxy.py::test_mcp_proxy": "fetches http://example.com through the proxy: this machine reaches no site "
    "but the package registries (llama-server fails it here too)",
    "test_basic.py::test_load_split_model": "downloads stories15M (split in 3) and asserts its text",
    "test_chat_completion.py::test_chat_completion": _COUNTS,
    "test_chat_completion.py::test_chat_completion_stream": _COUNTS,
    "test_chat_completion.py::test_chat_completion_with_openai_library": _TEXT,
    "test_chat_completion.py::test_chat_completion_cached_tokens": "asserts stories260K's prompt and cached token "
    "counts (77; 76, 51, 47)",
    "test_chat_completion.py::test_chat_template": "the expected prompt starts with stories260K's BOS text ('<s> ')",
    "test_chat_completion.py::test_return_progress[64-4-False": "counts 4 batches of 64 for stories260K's "
    "tokenization of the prompt (the stand-in's takes 107 tokens: 2 batches)",
    "test_completion.py::test_completion": _COUNTS,
    "test_completion.py::test_completion_stream": _COUNTS,
    "test_completion.py::test_completion_with_openai_library": _TEXT,
    "test_completion.py::test_completion_stream_with_openai_library": _TEXT,
    "test_completion.py::test_completion_response_fields[I believe the meaning of life is-32-": "expects the prompt "
    "as stories260K's SentencePiece tokenizer detokenizes it ('<s> ' + prompt)",
    "test_completion.py::test_completion_prompt_cache": "asserts stories260K's prompt token counts",
    "test_completion.py::test_n_probs_post_sampling": "asserts that 10 candidates survive the sampler chain (top-k "
    "40, top-p 0.95, min-p 0.05) at each of 5 steps at temperature 1: stories260K's distributions are flat enough, "
    "the random stand-in's are not (2 survive); llama-server fails it with the stand-in too",
    "test_compat_anthropic.py::test_anthropic_tool_result_with_image": "expects llama-server's 500 for an image "
    "sent to a text model; lfmserve answers 400 with the same message (a client's mistake is a 400)",
    "test_compat_anthropic.py::test_anthropic_vision_format_accepted": "expects llama-server's 500 for an image "
    "sent to a text model; lfmserve answers 400 with the same message (a client's mistake is a 400)",
    "test_compat_oai_responses.py::test_responses_with_openai_library": _TEXT,
    "test_compat_oai_responses.py::test_responses_stream_with_openai_library": _TEXT,
    "test_ctx_shift.py::test_ctx_shift_enabled": "asserts stories260K's prompt token count (226)",
    "test_ctx_shift.py::test_ctx_shift_disabled_short_prompt[-1-248-True": "needs a model that does not end its "
    "answer before the context is full (the random stand-in emits an end token first)",
    "test_ctx_shift.py::test_ctx_shift_disabled_stream": "needs a model that does not end its answer before the "
    "context is full (the random stand-in emits an end token first)",
    "test_rerank.py::test_rerank": _RANKING,
    "test_rerank.py::test_rerank_tei_format": _RANKING,
    "test_rerank.py::test_rerank_usage": "asserts jina-reranker-v1-tiny-en's BPE token counts of the pairs (19, 26); "
    "the stand-in's vocabulary, learnt from a short text, splits the words differently",
    "test_router.py::test_router_remote_preset": _HUB + ": a preset repo (ggml-org/test-preset-ci)",
    "test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled": "starts with --tools (built-in "
    "tools): out of scope",
    "test_security.py::test_cors_proxy_only_forwards_explicit_proxy_headers": "the web UI's CORS proxy: out of scope",
    "test_slot_save.py::test_slot_save_restore": "asserts stories260K's text, and that slot 0 re-processes the 6 "
    "prompt tokens slot 1 already holds (lfmserve copies them from slot 1: prompt_n is 1)",
    "test_slot_save.py::test_slot_erase": _TEXT,
    "test_vision_api.py::test_vision_chat_completion[What is this:\\n-IMG_URL_0-": _URL_AND_WORD,
    "test_vision_api.py::test_vision_chat_completion[What is this:\\n-IMG_BASE64_URI_0-": _PICTURE_WORD,
    "test_vision_api.py::test_vision_chat_completion[What is this:\\n-IMG_URL_1-": _URL_AND_WORD,
    "test_vision_api.py::test_vision_chat_completion[Test test\\n-IMG_URL_1-": _URL_AND_WORD,
    "test_vision_api.py::test_vision_chat_completion_token_count": _IMAGE_URL,
    "test_vision_api.py::test_vision_completion[What is this: <__media__>\\n-IMG_BASE64_": _PICTURE_WORD,
}

#: Selected tests that fail for want of something lfmserve does not have yet; they run, so a fix shows.
KNOWN_FAILURES: dict[str, str] = {
    "test_ctx_shift.py::test_ctx_shift_disabled_short_prompt[64-64-False": "the random stand-in at temperature 0.8, "
    "seed 42: lfmserve's sampled answer reaches an end token after 36 tokens, llama-server's does not (their "
    "samplers draw differently from the same seed; lfmserve of the previous round answers the same 36)",
    "test_slot_save.py::test_slot_restore_media_file_without_mmproj": "a deliberate difference: after its 400 "
    "(llama-server's), slot 0 starts the prompt from the prefix slot 1 holds (lfmserve copies a prefix another slot "
    "computed; llama-server recomputes it, cache_n 0)",
    "test_slot_save.py::test_slot_save_restore_image_payload_larger_than_context": "a deliberate difference: "
    "lfmserve's slot files keep a media position as a negative id, not mtmd's chunk, so the file's token list is "
    "no longer than the context (the test wants 511 > 512)",
}

#: What a stand-in GGUF is written from.
Spec = TinyLfm2 | TinyBert | TinyGemma3 | TinyGemma3Projector | ScriptedLlama


@dataclass(frozen=True, slots=True)
class StandIn:
    """A model the runner writes in place of a download, and the projector that comes with it (llama-server's
    ``-hf`` fetches a repo's mmproj with its model)."""

    model: TinyLfm2 | TinyBert | TinyGemma3 | ScriptedLlama
    mmproj: TinyGemma3Projector | None = None


#: stories260K: a llama-architecture model without a chat template; attention-only, so context shifting works
#: on the stand-in as on it.
STORIES260K = TinyLfm2(seed=260, arch="llama", name="Stories260K-Stand-In", chat_template=None, context_length=2048)
#: tinygemma3: Gemma 3 with Gemma 3's chat template, and a Gemma 3 vision projector.
TINYGEMMA3_MMPROJ = TinyGemma3Projector(seed=3)
TINYGEMMA3 = StandIn(TinyGemma3(seed=3, name="TinyGemma3-Stand-In"), TINYGEMMA3_MMPROJ)

#: stories15M_MOE, a llama MoE telling bedtime stories, and its Shakespeare LoRA (test_lora.py): scripted
#: (:mod:`lfmserve.testing.scripted`) to say the words the suite looks for, its own at scale 0 and the adapter's
#: cycles at 0.3, 0.7 and 1.0, so that a word shows up only when the adapter runs at the scale the test asked for.
STORIES15M_MOE = STORY_MOE
#: stories15M, test_speculative.py's draft model: the same words without experts (it guesses what the MoE says).
STORIES15M = replace(STORIES15M_MOE, n_expert=0, name="Stories15M-Stand-In")
#: stories260K-infill (test_infill.py): a llama model whose vocabulary names the FIM tokens, saying story words.
STORIES260K_INFILL = ScriptedLlama(words=("Jimmy", "park", "Daddy", "excited"), fim=True, name="Infill-Stand-In")
#: What the suite fetches with ``download_file`` into its ``tmp`` folder (which skips a file already there).
DOWNLOADS: dict[str, tuple[ScriptedLlama, bool]] = {
    "moe_shakespeare15M.gguf": (STORIES15M_MOE, True),  # the LoRA adapter
    "stories15M-q4_0.gguf": (STORIES15M, False),
}

#: The suite's ``--hf-repo`` values (with ``--hf-file``, joined by ``/``) and the stand-in each maps to.
STAND_INS: dict[str, StandIn] = {
    "ggml-org/stories15M_MOE/stories15M_MOE-F16.gguf": StandIn(STORIES15M_MOE),
    "ggml-org/test-model-stories260K-infill": StandIn(STORIES260K_INFILL),
    "ggml-org/test-model-stories260K": StandIn(STORIES260K),
    "ggml-org/models/bert-bge-small/ggml-model-f16.gguf": StandIn(bge_small_shape(seed=1)),
    "ggml-org/models/jina-reranker-v1-tiny-en/ggml-model-f16.gguf": StandIn(jina_reranker_tiny_shape(seed=1)),
    "ggml-org/tinygemma3-GGUF:Q8_0": TINYGEMMA3,
}

#: The files the suite's router tests expect in its Hugging Face cache (``LLAMA_CACHE``): repo, file, stand-in.
#: The router lists a repo as ``repo:QUANT`` and finds its projector as a file with ``mmproj`` in its name.
ROUTER_CACHE: tuple[tuple[str, str, Spec], ...] = (
    ("ggml-org/tinygemma3-GGUF", "tinygemma3-Q8_0.gguf", TINYGEMMA3.model),
    ("ggml-org/tinygemma3-GGUF", "mmproj-tinygemma3.gguf", TINYGEMMA3_MMPROJ),
    ("ggml-org/test-model-stories260K", "stories260K-F32.gguf", STORIES260K),
    ("ggml-org/test-model-stories260K-infill", "stories260K-infill-F32.gguf", STORIES260K_INFILL),
)

#: The repo and file test_router.py downloads with ``POST /models`` (``ggml-org/test-model-router-download:F16``),
#: served with a stand-in by the fake hub, to the files in :data:`HUB_FILES` only.
DOWNLOAD_REPO, DOWNLOAD_FILE = "ggml-org/test-model-router-download", "test-model-router-download-F16.gguf"
HUB_FILES = ("test_router.py",)

#: The test pictures the suite downloads from tinygemma3's repo, and the seeds of the tinted stand-ins served for
#: them (32x32 PNG, as CIFAR-10's pictures are).
TEST_IMAGES = {
    "https://huggingface.co/ggml-org/tinygemma3-GGUF/resolve/main/test/11_truck.png": 11,
    "https://huggingface.co/ggml-org/tinygemma3-GGUF/resolve/main/test/91_cat.png": 91,
}


@dataclass(frozen=True, slots=True)
class FileResult:
    passed: int
    failed: int
    skipped: int
    excluded: int
    failures: tuple[str, ...]

    @property
    def share(self) -> float:
        """The share of the file's tests that passed, exclusions counted as not passed (skips left out)."""
        counted = self.passed + self.failed + self.excluded
        return self.passed / counted if counted else 1.0


def unpack_suite(cache: Path) -> Path:
    """The suite's folder (``tools/server/tests``), downloaded and unpacked into ``cache`` once."""
    root = cache / "llama.cpp"
    tests = root / "tools" / "server" / "tests"
    if (tests / "utils.py").is_file() and all((root / member).exists() for member in SUITE_MEMBERS):
        return tests
    cache.mkdir(parents=True, exist_ok=True)
    sdists = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", cache]
            + [LLAMA_CPP_PYTHON],
            check=True,
        )
        sdists = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdists[-1]) as sdist:
        for member in sdist.getmembers():
            inner = member.name.removeprefix(SDIST_ROOT)
            if inner != member.name and inner.startswith(SUITE_MEMBERS) and (member.isfile() or member.isdir()):
                member.name = inner
                sdist.extract(member, root, filter="data")
    return tests


def write_spec(folder: Path, spec: Spec) -> Path:
    """``spec``'s GGUF in ``folder``, written once: the file is named by a digest of the spec, so a changed spec
    writes a new file instead of reusing a stale one."""
    path = folder / f"{type(spec).__name__}-{hashlib.sha256(repr(spec).encode()).hexdigest()[:16]}.gguf"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    match spec:
        case TinyLfm2():
            write_lfm2_gguf(partial, spec)
        case TinyBert():
            write_bert_gguf(partial, spec)
        case TinyGemma3():
            write_gemma3_gguf(partial, spec)
        case TinyGemma3Projector():
            write_gemma3_mmproj_gguf(partial, spec)
        case ScriptedLlama():
            write_scripted_gguf(partial, spec)
    return partial.rename(path)


def write_downloads(folder: Path) -> None:
    """The files the suite downloads into its ``tmp`` folder: the LoRA adapter and the draft model."""
    folder.mkdir(exist_ok=True)
    for name, (spec, adapter) in DOWNLOADS.items():
        if adapter:
            write_scripted_lora(folder / name, spec)
        else:
            shutil.copyfile(write_spec(CACHE / "models", spec), folder / name)


def write_stand_ins(folder: Path) -> dict[str, dict[str, str | None]]:
    """Each stand-in written once; the map from the suite's repo names to their model and projector paths."""
    return {
        repo: {
            "model": str(write_spec(folder, stand_in.model)),
            "mmproj": str(write_spec(folder, stand_in.mmproj)) if stand_in.mmproj else None,
        }
        for repo, stand_in in STAND_INS.items()
    }


def write_router_cache(cache: Path) -> None:
    """The router's stand-ins in the Hugging Face cache layout (``models--org--repo/snapshots/REV/FILE``, linked
    to a blob, with ``refs/main``), where llama-server's router and lfmserve's both look."""
    revision = "0" * 40
    for repo, filename, spec in ROUTER_CACHE:
        folder = cache / ("models--" + repo.replace("/", "--"))
        snapshot = folder / "snapshots" / revision
        link = snapshot / filename
        target = os.path.relpath(write_spec(folder / "blobs", spec), snapshot)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        snapshot.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(revision)


def write_test_images(folder: Path) -> dict[str, str]:
    """The stand-ins for the suite's test pictures; the map from their URLs to their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for url, seed in TEST_IMAGES.items():
        path = folder / url.rsplit("/", 1)[1]
        path.write_bytes(image_bytes(32, 32, seed=seed, format="PNG"))
        paths[url] = str(path)
    return paths


SHIM = '''#!{python}
"""llama-server for llama.cpp's test suite: lfmserve, with the suite's downloads mapped to local stand-ins."""
import json, os, sys

stand_ins = json.loads(os.environ["LFMSERVE_SUITE_STAND_INS"])
args, repo, hf_file = [], None, None
argv = iter(sys.argv[1:])
for arg in argv:
    if arg in ("--hf-repo", "-hf", "-hfr"):
        repo = next(argv)
    elif arg in ("--hf-file", "-hff"):
        hf_file = next(argv)
    else:
        args.append(arg)
if repo is not None:
    key = repo if hf_file is None else repo + "/" + hf_file
    if key in stand_ins:
        files = stand_ins[key]
        args = ["--model", files["model"], *args]
        if files["mmproj"] and "--no-mmproj" not in args:  # -hf brings the repo's projector unless told not to
            args += ["--mmproj", files["mmproj"]]
    else:  # a model the runner has no stand-in for: asked of the (offline) hub, as the suite does
        args = ["--hf-repo", repo, *(["--hf-file", hf_file] if hf_file else []), *args]
server = os.environ.get("LFMSERVE_SUITE_SERVER")
if server:
    flags = json.loads(os.environ.get("LFMSERVE_SUITE_SERVER_FLAGS", "[]"))
    os.execv(server, [server, *args, *flags])
os.execv(sys.executable, [sys.executable, "-m", "lfmserve", *args])
'''


#: A pytest plugin the runner adds: the suite's session fixture first starts every preset server once so
#: that their models are downloaded, and the stand-ins are local files, so there is nothing to download; the
#: test pictures the tests fetch with ``requests.get`` are served from local files (a URL the tests send to the
#: server is still the server's to fetch); and the excluded tests are deselected by their exact ids (pytest's
#: own ``--deselect`` matches prefixes, which would take ``test_chat_template_assistant_prefill`` with
#: ``test_chat_template``).
PLUGIN = """
import json
import os
import pathlib


def pytest_sessionstart(session):
    import requests
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)
    images = json.loads(os.environ.get("LFMSERVE_SUITE_IMAGES", "{}"))
    download = requests.get

    def get(url, *args, **kwargs):
        if url not in images:
            return download(url, *args, **kwargs)
        response = requests.Response()
        response.status_code, response.url = 200, url
        response._content = pathlib.Path(images[url]).read_bytes()
        return response

    requests.get = get


def pytest_collection_modifyitems(config, items):
    excluded = set(json.loads(os.environ.get("LFMSERVE_SUITE_EXCLUDED", "[]")))
    deselected = [item for item in items if item.nodeid in excluded]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid not in excluded]
"""


PLUGIN_NAME = "lfmserve_suite_plugin"


def write_plugin(folder: Path) -> None:
    (folder / f"{PLUGIN_NAME}.py").write_text(PLUGIN)


def write_shim(folder: Path) -> Path:
    shim = folder / "llama-server"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    return shim


def pytest_command(name: str, *extra: str) -> list[str]:
    """pytest over one of the suite's files: its fast tests (the suite's own default), with the runner's plugin."""
    command = [sys.executable, "-m", "pytest", f"unit/{name}", "-m", "not slow", "-p", "no:cacheprovider"]
    return command + ["-p", PLUGIN_NAME, "-q", *extra]


def collect(tests: Path, name: str, env: dict[str, str], extra: list[str]) -> list[str]:
    """The node ids of the tests pytest selects in that file."""
    output = subprocess.run(
        pytest_command(name, "--collect-only", *extra), cwd=tests, env=env, capture_output=True, text=True
    )
    return [line for line in output.stdout.splitlines() if line.startswith(f"unit/{name}::")]


def excluded_in(node_ids: list[str]) -> list[str]:
    """The ids :data:`EXCLUDED` names: a key ending in ``[`` takes every case of that test, another key its test
    (and that test's cases)."""
    keys = [f"unit/{node}" for node in EXCLUDED]
    return [
        node
        for node in node_ids
        if any(node == key or node.startswith(key if "[" in key else key + "[") for key in keys)
    ]


def run_file(tests: Path, name: str, env: dict[str, str], extra: list[str], verbose: bool) -> FileResult:
    """Runs a file's selected tests but the excluded ones, and counts the outcomes from pytest's JUnit report."""
    excluded = excluded_in(collect(tests, name, env, extra))
    env = {**env, "LFMSERVE_SUITE_EXCLUDED": json.dumps(excluded)}
    report = Path(tempfile.mkdtemp(prefix="suite-")) / (name + ".xml")
    command = pytest_command(name, "--junitxml", str(report), "-o", "junit_family=xunit1", *extra)
    output = subprocess.run(command, cwd=tests, env=env, capture_output=not verbose, text=True)
    if not report.is_file():
        raise RuntimeError(f"{name}: pytest wrote no report\n{output.stdout}\n{output.stderr}")
    passed = failed = skipped = 0
    failures = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            skipped += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(case.get("name", "?"))
        else:
            passed += 1
    shutil.rmtree(report.parent)
    return FileResult(passed, failed, skipped, len(excluded), tuple(failures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="test files (default: every in-scope file)")
    parser.add_argument("--server", help="run another server binary instead of lfmserve (e.g. llama-server)")
    parser.add_argument("--beside", help="also run each file against this binary (e.g. llama-server), one table")
    parser.add_argument("-k", help="pytest's -k expression")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--exclusions", action="store_true", help="print the excluded tests and why, as markdown")
    options = parser.parse_args()
    if options.exclusions:
        print("| test | why it is excluded |\n|---|---|")
        for node, why in {**EXCLUDED, **KNOWN_FAILURES}.items():
            kind = "" if node in EXCLUDED else "runs, fails: "
            print(f"| `{node.rstrip('[')}` | {kind}{why} |")
        return 0

    tests = unpack_suite(CACHE)
    env = suite_environment(tests)
    servers = {"lfmserve": None} if options.server is None else {Path(options.server).name: options.server}
    if options.beside:
        servers[Path(options.beside).name] = options.beside
    extra = ["-k", options.k] if options.k else []
    results: dict[str, dict[str, FileResult]] = {server: {} for server in servers}
    hub = serve_hub(write_spec(CACHE / "models", STORIES260K).read_bytes())
    hub_env = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"} | {"HF_ENDPOINT": hub, "MODEL_ENDPOINT": hub}
    for name in options.files or IN_SCOPE:
        for server, binary in servers.items():  # one file on each server in turn: the machine's drift hits both
            file_env = hub_env if name in HUB_FILES else env
            r = run_file(tests, name, server_environment(file_env, binary), extra, options.verbose)
            results[server][name] = r
            print(
                f"{name} on {server}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped, {r.excluded} "
                f"excluded ({r.share:.0%})",
                flush=True,
            )
            for failure in r.failures:
                known = [why for node, why in KNOWN_FAILURES.items() if f"{name}::{failure}".startswith(node)]
                print(f"    FAILED {failure}" + (f" (known: {known[0]})" if known else ""), flush=True)
    print_table(results)
    if options.json:
        options.json.write_text(
            json.dumps({s: {n: vars_of(r) for n, r in by_file.items()} for s, by_file in results.items()}, indent=1)
        )
    return 0 if all(r.failed == 0 for by_file in results.values() for r in by_file.values()) else 1


def serve_hub(weights: bytes) -> str:
    """The fake hub of :data:`DOWNLOAD_REPO` on loopback for the run (a daemon thread); its URL."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(fake_hub(DOWNLOAD_REPO, {DOWNLOAD_FILE: weights}), port=0, log_level="error")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the fake hub did not start")
        time.sleep(0.01)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def suite_environment(tests: Path) -> dict[str, str]:
    """The suite's environment: the shim, the stand-ins, the pictures, the router's cache; written once."""
    write_downloads(tests / "tmp")  # the suite's TMP_DIR, where its download_file finds them
    write_plugin(CACHE)
    write_router_cache(CACHE / "hf")
    return {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(write_shim(CACHE)),
        "LFMSERVE_SUITE_STAND_INS": json.dumps(write_stand_ins(CACHE / "models")),
        "LFMSERVE_SUITE_IMAGES": json.dumps(write_test_images(CACHE / "images")),
        "LLAMA_CACHE": str(CACHE / "hf"),  # the router's cache models (write_router_cache)
        "HF_HUB_OFFLINE": "1",
        "PORT": str(free_port()),  # the suite's default 8080 may be taken; runs side by side never collide
        "PYTHONPATH": os.pathsep.join([str(CACHE), os.environ.get("PYTHONPATH", "")]),
    }


def server_environment(env: dict[str, str], binary: str | None) -> dict[str, str]:
    """``env`` for lfmserve (``binary`` None) or for another server binary."""
    if binary is None:
        return env
    # llama-server places weights as lfmserve does (no AMX repacking, whose kernels crash where built in)
    flags = json.dumps(llama_server_weight_flags())
    return {**env, "LFMSERVE_SUITE_SERVER": str(Path(binary).expanduser()), "LFMSERVE_SUITE_SERVER_FLAGS": flags}


def print_table(results: dict[str, dict[str, FileResult]]) -> None:
    """Per file and server: passed / failed / skipped / excluded, and the share passed (exclusions count as not
    passed, skips are left out)."""
    servers = list(results)
    header = " | ".join(f"{s}: passed / failed / skipped / excluded | {s}: share" for s in servers)
    print(f"\n| file | {header} |\n|---|" + "---:|---:|" * len(servers))
    for name in [*results[servers[0]], None]:
        cells = []
        for server in servers:
            r = results[server][name] if name else _total(results[server].values())
            cells += [f"{r.passed} / {r.failed} / {r.skipped} / {r.excluded}", f"{r.share:.0%}"]
        print(f"| {name or '**all**'} | " + " | ".join(cells) + " |")


def _total(results: Iterable[FileResult]) -> FileResult:
    rows = list(results)
    return FileResult(*(sum(getattr(r, c) for r in rows) for c in ("passed", "failed", "skipped", "excluded")), ())


def vars_of(result: FileResult) -> dict[str, object]:
    return {f: getattr(result, f) for f in FileResult.__slots__}


if __name__ == "__main__":
    sys.exit(main())
