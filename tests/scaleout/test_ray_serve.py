"""lfmserve on Ray Serve, end to end: two replicas of the tiny model behind the routing ingress, on a local Ray
cluster started in a fresh network namespace (so nothing leaves loopback: Ray would otherwise pick the
machine's interface address), by ``ray_serve_run.py``, whose findings are checked here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread

pytestmark = pytest.mark.slow
RUN = Path(__file__).with_name("ray_serve_run.py")


def in_namespace(*argv: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``argv`` under ``unshare -n`` with only loopback up; skips where namespaces are not allowed."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.decode().strip()}")
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )


@pytest.fixture(scope="module")
def seen(tiny_gguf: Path) -> dict[str, Any]:
    pytest.importorskip("ray")
    done = in_namespace(sys.executable, str(RUN), str(tiny_gguf), timeout_s=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_a_greedy_stream_through_ray_is_the_same_as_lfmserve_direct(
    seen: dict[str, Any], server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    from tests.scaleout.ray_serve_run import GREEDY, stream

    direct = server_factory(Settings.of(model=str(tiny_gguf), threads=1, parallel=2, ctx_size=2048))
    with httpx.Client(base_url=direct.url, timeout=60) as client:
        expected = stream(client, {"messages": [{"role": "user", "content": "Tell me about cats."}], **GREEDY})
    assert seen["greedy"]["status"] == 200
    assert seen["greedy"]["deltas"] == expected["deltas"] and "".join(expected["deltas"])


def test_the_second_turn_lands_on_the_same_replica_and_reuses_its_cache(seen: dict[str, Any]) -> None:
    turn1, turn2 = seen["turns"]
    assert turn1["status"] == turn2["status"] == 200
    assert turn1["replica"] == turn2["replica"]
    assert turn2["cache_n"] > 0


def test_a_key_with_more_requests_than_slots_spills_to_the_other_replica(seen: dict[str, Any]) -> None:
    assert all(r["status"] == 200 and r["n_deltas"] > 100 for r in seen["saturated"])
    assert {r["replica"] for r in seen["saturated"]} == set(seen["replicas_before"])


def test_slots_and_metrics_cover_every_replica(seen: dict[str, Any]) -> None:
    replicas = set(seen["replicas_before"])
    assert len(replicas) == 2
    assert sorted((slot["replica"], slot["id"]) for slot in seen["slots"]) == [
        (r, i) for r in sorted(replicas) for i in (0, 1)
    ]
    samples = [line for line in seen["metrics"].splitlines() if line.startswith("llamacpp:prompt_tokens_total")]
    assert sorted(line.split('"')[1] for line in samples) == sorted(replicas)


def test_a_killed_replica_is_replaced_and_requests_keep_succeeding(seen: dict[str, Any]) -> None:
    assert all(r["status"] == 200 and r["content"] for r in seen["after_kill"])
    before, after = set(seen["replicas_before"]), set(seen["replicas_after"])
    assert len(after) == 2 and len(after - before) == 1, (before, after)
    assert all(r["status"] == 200 and r["content"] for r in seen["after_restart"])
