"""Run llama.cpp's own server test suite against lfmserve, and print passed / failed / excluded per file.

The suite is llama-server's ``tools/server/tests`` from the pinned llama-cpp-python sdist (downloaded
with pip into the cache folder, unpacked there, never committed). Its ``LLAMA_SERVER_BIN_PATH`` points
at a shim that starts ``python -m lfmserve`` with the suite's flags, the suite's ``--hf-repo``
downloads replaced by local stand-ins written with :mod:`lfmserve.testing`.

The suite's stories260K is a trained model; the stand-in is a random one, so tests that assert the
text or the token counts stories260K produces cannot pass on either server with the stand-in. Those
are excluded by name in :data:`EXCLUDED`, each with its reason (the README lists them). Running the
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
#: vision, router (and test_stream.py, whose streams go through it), MCP and built-in tools, the CORS proxy,
#: LoRA, infill, speculative decoding).
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
    "test_security.py",
    "test_sleep.py",
    "test_slot_save.py",
    "test_template.py",
    "test_tokenize.py",
    "test_tool_call.py",
)

#: Tests no stand-in can pass, and why: by node id prefix (``file::test[`` is every case of a parametrised test,
#: as pytest's ``--deselect`` matches prefixes).
EXCLUDED: dict[str, str] = {}

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
#: that their models are downloaded; the stand-ins are local files, so there is nothing to download.
PLUGIN = """
def pytest_sessionstart(session):
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)
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


def run_file(tests: Path, name: str, env: dict[str, str], extra: list[str], verbose: bool) -> FileResult:
    """Runs a file's selected tests but the excluded ones, and counts the outcomes from pytest's JUnit report."""
    prefixes = tuple(f"unit/{node}" for node in EXCLUDED if node.startswith(name + "::"))
    excluded = [node for node in collect(tests, name, env, extra) if node.startswith(prefixes)]
    report = Path(tempfile.mkdtemp(prefix="suite-")) / (name + ".xml")
    command = pytest_command(name, "--junitxml", str(report), "-o", "junit_family=xunit1", *extra)
    command += [f"--deselect={prefix}" for prefix in prefixes]
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
    options = parser.parse_args()

    tests = unpack_suite(CACHE)
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(write_shim(CACHE)),
        "LFMSERVE_SUITE_STAND_INS": json.dumps(write_stand_ins(CACHE / "models")),
        "LLAMA_CACHE": str(CACHE / "hf"),
        "HF_HUB_OFFLINE": "1",
        "PORT": str(free_port()),  # the suite's default 8080 may be taken; runs side by side never collide
        "PYTHONPATH": os.pathsep.join([str(CACHE), os.environ.get("PYTHONPATH", "")]),
    }
    write_plugin(CACHE)
    if options.server:
        env["LFMSERVE_SUITE_SERVER"] = str(Path(options.server).expanduser())
    extra = ["-k", options.k] if options.k else []
    results = {}
    for name in options.files or IN_SCOPE:
        results[name] = run_file(tests, name, env, extra, options.verbose)
        r = results[name]
        print(f"{name}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped, {r.excluded} excluded", flush=True)
        for failure in r.failures:
            print(f"    FAILED {failure}", flush=True)

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
