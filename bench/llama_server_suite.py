"""Run llama.cpp's own server test suite against lfmserve, and print passed / failed / excluded per file.

The suite is llama-server's ``tools/server/tests`` from the pinned llama-cpp-python sdist (downloaded
with pip into the cache folder, unpacked there, never committed). Its ``LLAMA_SERVER_BIN_PATH`` points
at a shim that starts ``python -m lfmserve`` with the suite's flags, the suite's ``--hf-repo``
downloads replaced by local stand-ins written with :mod:`lfmserve.testing`.

The suite's stories260K is a trained model; the stand-in is a random one, so tests that assert the
text or the token counts stories260K produces cannot pass on either server with the stand-in. Those
are excluded by name in :data:`EXCLUDED`, each with its reason (docs/testing.md lists them). Running the
same selection with ``--server llama-server`` (a binary built from the same llama.cpp) shows what the
suite asks of the stand-in, not of lfmserve.

Usage::

    pip install -e '.[suite]'
    python bench/llama_server_suite.py                 # every in-scope file, a table at the end
    python bench/llama_server_suite.py test_basic.py -k health --verbose
    python bench/llama_server_suite.py --server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from lfmserve.testing import TinyLfm2, free_port, write_lfm2_gguf

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SDIST_ROOT = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
#: What the runner needs of the sdist: the suite and the chat templates its tests read.
SUITE_MEMBERS = ("tools/server/tests/", "models/templates/")
CACHE = Path(os.environ.get("LFMSERVE_SUITE_CACHE", Path.home() / ".cache" / "lfmserve-suite"))

#: The suite's files this runner selects; the others test what other issues build (embedding, rerank,
#: vision, MCP and built-in tools, the CORS proxy, LoRA, infill, speculative decoding).
IN_SCOPE = (
    "test_basic.py",
    "test_chat_completion.py",
    "test_compat_anthropic.py",
    "test_compat_gcp.py",
    "test_compat_oai_responses.py",
    "test_completion.py",
    "test_ctx_shift.py",
    "test_ignore_eos.py",
    "test_kv_keep_only_active.py",
    "test_metrics.py",
    "test_router.py",
    "test_security.py",
    "test_sleep.py",
    "test_slot_save.py",
    "test_stream.py",
    "test_template.py",
    "test_tokenize.py",
    "test_tool_call.py",
)

#: Tests no stand-in can pass, and why: ``file::test`` (with all its cases), or ``file::test[id`` for the cases
#: whose id starts so.
_TEXT = "asserts the text stories260K generates (a random stand-in cannot)"
_COUNTS = "asserts stories260K's tokenizer's prompt token counts, and its generated text"
_VISION = "needs tinygemma3 (vision): out of scope here"
_HUB = "downloads from the Hugging Face hub, which this machine cannot reach (llama-server cannot either)"
EXCLUDED: dict[str, str] = {
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
    "test_compat_anthropic.py::test_anthropic_tool_result_with_image": "expects llama-server's 500 for an image "
    "sent to a text model; lfmserve answers 400 with the same message (a client's mistake is a 400)",
    "test_compat_anthropic.py::test_anthropic_vision_format_accepted": "expects llama-server's 500 for an image "
    "sent to a text model; lfmserve answers 400 with the same message (a client's mistake is a 400)",
    "test_compat_anthropic.py::test_anthropic_vision_base64_with_multimodal_model": _VISION,
    "test_compat_oai_responses.py::test_responses_with_openai_library": _TEXT,
    "test_compat_oai_responses.py::test_responses_stream_with_openai_library": _TEXT,
    "test_ctx_shift.py::test_ctx_shift_enabled": "asserts stories260K's prompt token count (226)",
    "test_ctx_shift.py::test_ctx_shift_disabled_short_prompt[-1-248-True": "needs a model that does not end its "
    "answer before the context is full (the random stand-in emits an end token first)",
    "test_ctx_shift.py::test_ctx_shift_disabled_stream": "needs a model that does not end its answer before the "
    "context is full (the random stand-in emits an end token first)",
    "test_metrics.py::test_metrics_embedding_prompt_is_counted": "starts bert-bge-small (embeddings): out of scope",
    "test_router.py::test_router_remote_preset": _HUB + ": a preset repo (ggml-org/test-preset-ci)",
    "test_router.py::test_router_download_model": _HUB + ": POST /models downloads a model",
    "test_router.py::test_router_delete_model": _HUB + ": it first downloads the model it deletes",
    "test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled": "starts with --tools (built-in "
    "tools): out of scope",
    "test_security.py::test_cors_proxy_only_forwards_explicit_proxy_headers": "the web UI's CORS proxy: out of scope",
    "test_security.py::test_local_media_file": _VISION,
    "test_slot_save.py::test_slot_save_restore": "asserts stories260K's text, and that slot 0 re-processes the 6 "
    "prompt tokens slot 1 already holds (lfmserve copies them from slot 1: prompt_n is 1)",
    "test_slot_save.py::test_slot_erase": _TEXT,
    "test_slot_save.py::test_slot_save_restore_text_only_on_multimodal": _VISION,
    "test_slot_save.py::test_slot_save_restore_with_image": _VISION,
    "test_slot_save.py::test_slot_save_restore_with_two_images": _VISION,
    "test_slot_save.py::test_slot_save_restore_with_image_across_restart": _VISION,
    "test_slot_save.py::test_slot_save_restore_image_payload_larger_than_context": _VISION,
    "test_slot_save.py::test_slot_restore_media_file_without_mmproj": _VISION,
}

#: Selected tests that fail for want of something lfmserve does not have yet; they run, so a fix shows.
KNOWN_FAILURES: dict[str, str] = {
    "test_stream.py::test_stream": "llama-server's resumable streams (X-Conversation-Id, GET and DELETE "
    "/v1/stream?conv_id=) are not in lfmserve yet",
    "test_completion.py::test_completion_unified": "with --kv-unified llama-server lets one slot use the whole "
    "context; lfmserve keeps each slot to -c / -np, so a slot never fails for cells another slot holds",
}

#: The models the suite's router tests expect in its Hugging Face cache (``LLAMA_CACHE``): repo, file, stand-in.
#: The router lists them as ``repo:QUANT``; tinygemma3's stand-in has a chat template (its tests chat with it).
ROUTER_CACHE: tuple[tuple[str, str, TinyLfm2], ...] = (
    ("ggml-org/tinygemma3-GGUF", "tinygemma3-Q8_0.gguf", TinyLfm2(seed=3, name="TinyGemma3-Stand-In")),
    (
        "ggml-org/test-model-stories260K",
        "stories260K-F32.gguf",
        TinyLfm2(seed=260, arch="llama", name="Stories260K-Stand-In", chat_template=None, context_length=2048),
    ),
    (
        "ggml-org/test-model-stories260K-infill",
        "stories260K-infill-F32.gguf",
        TinyLfm2(seed=261, arch="llama", name="Stories260K-Infill-Stand-In", chat_template=None),
    ),
)

#: The suite's ``--hf-repo`` values (with ``--hf-file``, joined by ``/``) and the stand-in each maps to.
STAND_INS: dict[str, TinyLfm2] = {
    # stories260K: a llama-architecture model without a chat template; attention-only, so context
    # shifting works on the stand-in as on it.
    "ggml-org/test-model-stories260K": TinyLfm2(
        seed=260, arch="llama", name="Stories260K-Stand-In", chat_template=None, context_length=2048
    ),
}


@dataclass(frozen=True, slots=True)
class FileResult:
    passed: int
    failed: int
    skipped: int
    excluded: int
    failures: tuple[str, ...]


def unpack_suite(cache: Path) -> Path:
    """The suite's folder (``tools/server/tests``), downloaded and unpacked into ``cache`` once."""
    root = cache / "llama.cpp"
    tests = root / "tools" / "server" / "tests"
    if (tests / "utils.py").is_file():
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


def write_stand_ins(folder: Path) -> dict[str, str]:
    """Each stand-in written once; the map from the suite's repo names to their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for repo, spec in STAND_INS.items():
        path = folder / (repo.replace("/", "--") + f"-seed{spec.seed}.gguf")
        if not path.is_file():
            write_lfm2_gguf(path, spec)
        paths[repo] = str(path)
    return paths


def write_router_cache(cache: Path) -> None:
    """The router's stand-ins in the Hugging Face cache layout (``models--org--repo/snapshots/REV/FILE``, linked
    to a blob, with ``refs/main``), where llama-server's router and lfmserve's both look."""
    revision = "0" * 40
    for repo, filename, spec in ROUTER_CACHE:
        folder = cache / ("models--" + repo.replace("/", "--"))
        snapshot = folder / "snapshots" / revision
        if (snapshot / filename).is_file():
            continue
        blob = folder / "blobs" / f"stand-in-seed{spec.seed}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        write_lfm2_gguf(blob, spec)
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / filename).symlink_to(os.path.relpath(blob, snapshot))
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(revision)


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
        args = ["--model", stand_ins[key], *args]
    else:  # a model the runner has no stand-in for: asked of the (offline) hub, as the suite does
        args = ["--hf-repo", repo, *(["--hf-file", hf_file] if hf_file else []), *args]
server = os.environ.get("LFMSERVE_SUITE_SERVER")
if server:
    os.execv(server, [server, *args])
os.execv(sys.executable, [sys.executable, "-m", "lfmserve", *args])
'''


#: A pytest plugin the runner adds: the suite's session fixture first starts every preset server once so
#: that their models are downloaded, and the stand-ins are local files, so there is nothing to download; and
#: the excluded tests are deselected by their exact ids (pytest's own ``--deselect`` matches prefixes, which
#: would take ``test_chat_template_assistant_prefill`` with ``test_chat_template``).
PLUGIN = """
import json
import os


def pytest_sessionstart(session):
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)


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
    (tests / "tmp").mkdir(exist_ok=True)  # the suite's TMP_DIR, made by the downloads the runner skips
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(write_shim(CACHE)),
        "LFMSERVE_SUITE_STAND_INS": json.dumps(write_stand_ins(CACHE / "models")),
        "LLAMA_CACHE": str(CACHE / "hf"),  # the router's cache models (write_router_cache)
        "HF_HUB_OFFLINE": "1",
        "PORT": str(free_port()),  # the suite's default 8080 may be taken; runs side by side never collide
        "PYTHONPATH": os.pathsep.join([str(CACHE), os.environ.get("PYTHONPATH", "")]),
    }
    write_plugin(CACHE)
    write_router_cache(CACHE / "hf")
    if options.server:
        env["LFMSERVE_SUITE_SERVER"] = str(Path(options.server).expanduser())
    extra = ["-k", options.k] if options.k else []
    results = {}
    for name in options.files or IN_SCOPE:
        results[name] = run_file(tests, name, env, extra, options.verbose)
        r = results[name]
        print(f"{name}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped, {r.excluded} excluded", flush=True)
        for failure in r.failures:
            known = [why for node, why in KNOWN_FAILURES.items() if f"{name}::{failure}".startswith(node)]
            print(f"    FAILED {failure}" + (f" (known: {known[0]})" if known else ""), flush=True)

    columns = ("passed", "failed", "skipped", "excluded")
    print("\n| file | " + " | ".join(columns) + " |\n|---|" + "---:|" * len(columns))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(str(getattr(r, c)) for c in columns) + " |")
    total = {c: sum(getattr(r, c) for r in results.values()) for c in columns}
    print("| **all** | " + " | ".join(str(total[c]) for c in columns) + " |")
    if options.json:
        options.json.write_text(json.dumps({n: vars_of(r) for n, r in results.items()}, indent=1))
    return 0 if total["failed"] == 0 else 1


def vars_of(result: FileResult) -> dict[str, object]:
    return {f: getattr(result, f) for f in FileResult.__slots__}


if __name__ == "__main__":
    sys.exit(main())
