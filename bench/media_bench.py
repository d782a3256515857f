"""Image benchmark: lfmserve vs ``llama-server --mmproj``, side by side in one run, the same files.

Both load the LFM2-350M-shaped Q4_K_M model with LFM2-VL's image tokens and the projector shaped like
LFM2-VL-450M's (SigLIP2 base, 12 layers, width 768, F16; random weights, written by ``lfmserve.testing``)
with the same context, slots and threads, and answer the same greedy ``/v1/chat/completions`` streams
with JPEG snapshots as data URIs. Scenarios, each with a picture no earlier run has sent:

* TTFT of a 640x480 and of a 1024x768 image (cold: nothing cached);
* TTFT of a second question about the same image in a new conversation with the same system prompt
  (lfmserve restarts from its checkpoint after the image), and with another system prompt, so the
  prompts part before the image (lfmserve's media cache keeps the encoder's output; llama-server encodes
  again in both);
* TTFT of turn 2 of a conversation whose first turn had the image;
* inter-token latency p95 (and worst gap) of 2 running text streams while a 640x480 image prompt is
  processed: the gaps that end between the image request's start and its first token.

Results go to ``bench/results/media-*.jsonl`` and a markdown table with ratios to llama-server.

Example::

    python bench/media_bench.py --build
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import sys
import time
from typing import Any

import httpx
import numpy as np
from common import (
    Runs,
    Server,
    bench_arguments,
    bench_model,
    bench_projector,
    lfmserve_command,
    llama_server_binary,
    results_log,
    run_interleaved,
)
from PIL import Image
from serve_bench import chat, median_result, pct, table, text

SCENARIOS = ["cold_640x480", "cold_1024x768", "second_question", "second_question_other_system", "turn_2", "itl"]
ROWS = [  # (label, path)
    ("TTFT s, 640x480 image (cold)", "cold_640x480.ttft"),
    ("TTFT s, 1024x768 image (cold)", "cold_1024x768.ttft"),
    ("TTFT s, second question about the image, new conversation", "second_question.ttft"),
    ("the same, the new conversation with another system prompt", "second_question_other_system.ttft"),
    ("TTFT s, turn 2 of a conversation with an image", "turn_2.ttft"),
    ("inter-token latency p95 s of 2 streams during an image prompt", "itl.itl_p95"),
    ("worst inter-token gap s during that image prompt", "itl.itl_max"),
    ("failed requests", "failed"),
]


def snapshot(width: int, height: int, seed: int) -> str:
    """A JPEG data URI of a camera-like picture: a tinted gradient with noise, different for every seed."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, width)[None, :, None] * rng.integers(0, 256, 3)
    pixels = np.clip(ramp + rng.integers(-40, 41, (height, width, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def ask(image: str, question: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": question}],
    }


async def cold(client: httpx.AsyncClient, width: int, height: int, seed: int) -> dict[str, Any]:
    stream = await chat(client, [ask(snapshot(width, height, seed), "Describe the scene.")], 4)
    return {"ttft": stream.ttft, "failed": int(stream.error is not None)}


async def second_question(client: httpx.AsyncClient, seed: int, *, other_system: bool) -> dict[str, Any]:
    image = snapshot(640, 480, seed)
    system = {"role": "system", "content": "You watch a front door."}
    first = await chat(client, [system, ask(image, "Describe.")], 4)
    if other_system:
        system = {"role": "system", "content": "You count the cars."}
    second = await chat(client, [system, ask(image, "How many cars are there?")], 4)
    return {"ttft": second.ttft, "first_ttft": first.ttft, "failed": int(bool(first.error or second.error))}


async def turn_2(client: httpx.AsyncClient, seed: int) -> dict[str, Any]:
    messages = [ask(snapshot(640, 480, seed), "What is in the picture?")]
    first = await chat(client, messages, 24)
    messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "And the colours?"}]
    second = await chat(client, messages, 4)
    return {"ttft": second.ttft, "first_ttft": first.ttft, "failed": int(bool(first.error or second.error))}


async def itl_during_image(client: httpx.AsyncClient, seed: int) -> dict[str, Any]:
    """Gaps between 2 running streams' tokens that end while an image prompt is processed."""
    runners = [
        asyncio.create_task(chat(client, [{"role": "user", "content": text(8, f"s{seed}runner{i}")}], 400))
        for i in range(2)
    ]
    await asyncio.sleep(1.5)
    t_image = time.perf_counter()
    image = await chat(client, [ask(snapshot(640, 480, seed), "Describe the scene.")], 1)
    t_first = t_image + image.ttft
    streams = await asyncio.gather(*runners)
    gaps = [
        b - a
        for stream in streams
        for a, b in zip(stream.t_tokens, stream.t_tokens[1:], strict=False)
        if t_image < b <= t_first + 0.05
    ]
    return {
        "itl_p95": pct(gaps, 0.95),
        "itl_max": max(gaps, default=float("nan")),
        "n_gaps": len(gaps),
        "image_ttft": image.ttft,
        "runner_tokens_after_image": min(len(s.t_tokens) for s in streams),
        "failed": int(image.error is not None or any(s.error for s in streams)),
    }


async def run_scenario(url: str, name: str, rep: int) -> dict[str, Any]:
    """One scenario against one server; ``rep`` picks pictures no earlier run has sent."""
    seed = 1000 * SCENARIOS.index(name) + rep
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await chat(client, [{"role": "user", "content": f"warm up {rep}"}], 2)
        if name == "cold_640x480":
            return await cold(client, 640, 480, seed)
        if name == "cold_1024x768":
            return await cold(client, 1024, 768, seed)
        if name.startswith("second_question"):
            return await second_question(client, seed, other_system=name.endswith("other_system"))
        if name == "turn_2":
            return await turn_2(client, seed)
        return await itl_during_image(client, seed)


def run_one(url: str, name: str, rep: int) -> dict[str, Any]:
    return asyncio.run(run_scenario(url, name, rep))


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=16384, repeats=3)
    parser.add_argument("--parallel", type=int, default=4, help="slots of both servers")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=SCENARIOS, help="(default: all)")
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    flags = ["-m", str(bench_model(vision_tokens=True)), "--mmproj", str(bench_projector())]
    flags += ["-c", str(args.ctx_size), "-t", str(args.threads), "-np", str(args.parallel), "--jinja"]
    servers = [Server("llama-server", [str(binary), *flags]), Server("lfmserve", [lfmserve_command(), *flags])]
    runs: Runs = {}
    with results_log(args, "media") as log, contextlib.ExitStack() as stack:
        urls = {srv.name: stack.enter_context(srv) for srv in servers}  # both loaded; one is sent work at a time
        run_interleaved(
            urls,
            args.scenarios,
            args.repeats,
            lambda url, name, rep: asyncio.run(run_scenario(url, name, rep)),
            log,
            runs,
        )
    all_results = {srv: {name: median_result(r) for name, r in by.items()} for srv, by in runs.items()}
    print(table(all_results, ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
