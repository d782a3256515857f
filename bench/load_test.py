"""A bounded load test: many clients for minutes, some leaving mid-answer; nothing may fail or leak.

lfmserve serves the tiny random LFM2 model (written by ``lfmserve.testing``); ``--clients`` clients send a
random mix of streamed and whole chats, native completions and tokenizations, and ``--disconnect`` of them
hang up mid-answer (a stream closed after a few chunks, a whole answer abandoned by a short timeout). At the
end every slot must be idle, nothing waiting, no request answered with a 5xx, and the server's RSS growth
is reported beside the caches it is allowed to fill.

Example::

    python bench/load_test.py --clients 32 --duration 180
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from common import Server, lfmserve_command

from lfmserve.testing import TinyLfm2, write_lfm2_gguf


@dataclass
class Tally:
    requests: int = 0
    disconnects: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _body(rng: random.Random) -> tuple[str, dict[str, Any]]:
    question = " ".join(rng.choice(["what", "is", "the", "ocean", "machine", "learning", "cat"]) for _ in range(8))
    kind = rng.choice(["stream", "chat", "completion", "tokenize"])
    if kind == "tokenize":
        return "/tokenize", {"content": question}
    if kind == "completion":
        return "/completion", {"prompt": question, "n_predict": rng.randint(1, 64), "stream": rng.random() < 0.5}
    chat = {"messages": [{"role": "user", "content": question}], "max_tokens": rng.randint(1, 96)}
    return "/v1/chat/completions", {**chat, "stream": kind == "stream"}


async def _one(client: httpx.AsyncClient, rng: random.Random, disconnect: float, tally: Tally) -> None:
    path, body = _body(rng)
    leave = rng.random() < disconnect
    tally.requests += 1
    try:
        if body.get("stream"):
            async with client.stream("POST", path, json=body) as response:
                tally.by_status[response.status_code] = tally.by_status.get(response.status_code, 0) + 1
                n = 0
                async for line in response.aiter_lines():
                    n += line.startswith("data: ")
                    if line.startswith("error: "):
                        tally.failures.append(f"{path}: {line[:200]}")
                    if leave and n >= 3:
                        tally.disconnects += 1
                        return  # closing the response here hangs up mid-stream
            return
        timeout = 0.05 if leave else 60
        response = await client.post(path, json=body, timeout=timeout)
        tally.by_status[response.status_code] = tally.by_status.get(response.status_code, 0) + 1
        if response.status_code >= 500:
            tally.failures.append(f"{path}: {response.status_code} {response.text[:200]}")
    except httpx.TimeoutException:
        if not leave:
            tally.failures.append(f"{path}: timed out")
        tally.disconnects += 1
    except httpx.HTTPError as exc:
        tally.failures.append(f"{path}: {exc!r}")


async def _client(url: str, seed: int, until: float, disconnect: float, tally: Tally) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while time.monotonic() < until:
            await _one(client, rng, disconnect, tally)


async def _settled(url: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    """The slots once nothing is running (cancelled requests end within a step)."""
    async with httpx.AsyncClient(base_url=url) as client:
        deadline = time.monotonic() + timeout_s
        while True:
            slots: list[dict[str, Any]] = (await client.get("/slots")).json()
            if not any(s["is_processing"] for s in slots) or time.monotonic() > deadline:
                return slots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=180, help="seconds of load")
    parser.add_argument("--disconnect", type=float, default=0.3, help="fraction of requests that hang up")
    parser.add_argument("--cache-ram", type=int, default=64, help="MiB of host RAM for the prompt cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = write_lfm2_gguf(Path(tmp) / "tiny.gguf", TinyLfm2(seed=1))
        flags = ["-m", str(model), "-c", "8192", "-np", "4", "-t", "2", "--metrics", "--cache-ram", str(args.cache_ram)]
        server = Server("lfmserve", [lfmserve_command(), *flags])
        with server as url:
            pid = server.process.pid
            rss_start = _rss_mib(pid)
            tally = Tally()
            until = time.monotonic() + args.duration
            samples: list[float] = []

            async def run() -> None:
                async def sample() -> None:
                    while time.monotonic() < until:
                        samples.append(_rss_mib(pid))
                        await asyncio.sleep(1)

                await asyncio.gather(
                    sample(), *(_client(url, i, until, args.disconnect, tally) for i in range(args.clients))
                )

            asyncio.run(run())
            slots = asyncio.run(_settled(url))
            metrics = httpx.get(url + "/metrics").text
            rss_end = _rss_mib(pid)
    gauges = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith(("llamacpp:requests_processing", "llamacpp:requests_deferred", "lfmserve:ram_cache_bytes"))
    }
    report = {
        "clients": args.clients,
        "seconds": args.duration,
        "requests": tally.requests,
        "disconnects": tally.disconnects,
        "by_status": tally.by_status,
        "failures": len(tally.failures),
        "slots_busy_after": sum(s["is_processing"] for s in slots),
        "requests_processing_after": gauges.get("llamacpp:requests_processing"),
        "requests_deferred_after": gauges.get("llamacpp:requests_deferred"),
        "ram_cache_mib_after": round(gauges.get("lfmserve:ram_cache_bytes", 0) / 2**20, 2),
        "cache_ram_limit_mib": args.cache_ram,
        "rss_mib": {
            "start": round(rss_start, 1),
            "median": round(statistics.median(samples), 1),
            "end": round(rss_end, 1),
        },
    }
    print(json.dumps(report, indent=1))
    for failure in tally.failures[:20]:
        print("failure:", failure, file=sys.stderr)
    ok = not tally.failures and report["slots_busy_after"] == 0 and not any(s >= 500 for s in tally.by_status)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
