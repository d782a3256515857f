"""llama-server's load modes (``-lm``) and its older ``--no-mmap`` / ``--mlock``: each starts a server that answers,
with the weights mapped from the file or read into memory, and locked in RAM or not, as the mode says (read from
the server process's ``/proc/PID/maps`` and ``VmLck``); a lock past the machine's limit serves unlocked, as
llama-server does, with an error that says why."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import Running, wait_healthy
from tests.test_cli import LFMSERVE

#: Flags, then whether the model file stays mapped and whether its weights are locked in RAM.
MODES = [
    (["-lm", "auto"], True, False),
    (["-lm", "none"], False, False),
    (["-lm", "mmap"], True, False),
    (["-lm", "mlock"], False, True),
    (["-lm", "mmap+mlock"], True, True),
    (["-lm", "dio"], False, False),
    (["--no-mmap"], False, False),
    (["--mlock"], True, True),
    (["--no-mmap", "--mlock"], False, True),
]
#: The older spellings' servers run in the slow suite (their mapping to a mode is checked below in the default one).
_SLOW = {"--no-mmap", "--mlock", "--no-mmap --mlock"}


@pytest.mark.parametrize(
    ("flags", "mapped", "locked"),
    [
        pytest.param(*mode, id=" ".join(mode[0]), marks=[pytest.mark.slow] if " ".join(mode[0]) in _SLOW else [])
        for mode in MODES
    ],
)
def test_each_load_mode_serves_with_its_weights_held_as_it_says(
    running: list[Running], tiny_gguf: Path, tmp_path: Path, flags: list[str], mapped: bool, locked: bool
) -> None:
    model = tmp_path / "model.gguf"  # a file of this test's own, so its mapping is told apart from others'
    shutil.copy(tiny_gguf, model)
    assert LFMSERVE is not None
    # cold: the process's own mappings are read (a warm start's also hold its helper's imports)
    server = Running([LFMSERVE, "-m", str(model), "-t", "1", "-np", "1", "--no-ui", *flags], cold=True)
    running.append(server)
    wait_healthy(server.url, server.process)
    answer = httpx.post(server.url + "/completion", json={"prompt": "hi", "n_predict": 2}, timeout=60)
    assert (answer.status_code, answer.json()["tokens_predicted"]) == (200, 2)
    pid = server.process.pid
    assert (str(model) in Path(f"/proc/{pid}/maps").read_text()) is mapped
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert (int(status["VmLck"].split()[0]) > 0) is locked


def test_the_older_spellings_say_what_load_mode_they_are() -> None:
    def mode(*argv: str) -> str:
        return Settings.from_argv(["-m", "m.gguf", *argv], environ={}).weights.model_load_mode

    assert [mode(), mode("--no-mmap"), mode("--mlock"), mode("--no-mmap", "--mlock")] == [
        "auto",
        "none",
        "mmap+mlock",
        "mlock",
    ]
    assert mode("-lm", "dio", "--no-mmap") == "dio"  # -lm, given, is what counts
    assert Settings.from_argv(["-m", "m.gguf"], environ={"LLAMA_ARG_LOAD_MODE": "none"}).weights.load_mode == "none"


def test_every_mode_the_flag_takes_is_one_llama_cpp_is_given() -> None:
    from lfmserve.llama import model
    from lfmserve.settings import fields

    assert (list(model.LOAD_MODES), sorted(model.LAZY_MODES)) == (list(fields.LOAD_MODES), sorted(fields.LAZY_MODES))


@pytest.mark.skipif(shutil.which("prlimit") is None or shutil.which("setpriv") is None, reason="needs util-linux")
def test_mlock_past_the_lock_limit_serves_unlocked_and_says_why_as_an_error(
    running: list[Running], tiny_gguf: Path
) -> None:
    assert LFMSERVE is not None
    # 64 KiB may be locked, and not even root may pass that: the capability to is dropped.
    limits = ["prlimit", "--memlock=65536:65536", "setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock"]
    server = Running([*limits, LFMSERVE, "-m", str(tiny_gguf), "-t", "1", "-np", "1", "--no-ui", "-lm", "mlock"])
    running.append(server)
    wait_healthy(server.url, server.process)
    answer = httpx.post(server.url + "/completion", json={"prompt": "hi", "n_predict": 2}, timeout=60)
    assert (answer.status_code, answer.json()["tokens_predicted"]) == (200, 2)
    status = dict(line.split(":", 1) for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines())
    assert int(status["VmLck"].split()[0]) == 0
    assert (
        "-lm mlock: the weights are not locked in RAM: this process may lock 64 KiB (RLIMIT_MEMLOCK); raise it"
        " (ulimit -l, docker's --ulimit memlock=-1) or grant CAP_IPC_LOCK. Serving with them unlocked, as"
        " llama-server does"
    ) in server.log()
