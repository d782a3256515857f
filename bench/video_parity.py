"""Video parity: lfmserve's prompt for a video against llama-server's (built from the same llama.cpp), request by
request.

Both servers load the tiny LFM2-VL-shaped model and vision projector that the tests use (random weights,
written by ``lfmserve.testing``; ``-c 16384 -np 1 -t 1``, ``--verbose``), once with llama-server's video
defaults and once with ``--video-fps 3.3 --video-timestamp-interval 700`` (more timestamps, a rate whose
float32 arithmetic shows), and answer the same greedy requests with videos that ffmpeg makes here:

* ``input_video`` (a data URI) before the question, 2 s of 320x240 at 10 fps (MP4, mpeg4);
* ``video_url`` (the alias, raw base64 under ``url``), 7 s of 160x120 in MKV (a second timestamp);
* an MKV in an ``image_url`` part (both decide by the bytes), 1.5 s of 200x100 at 25 fps;
* a video and an image in one message; a video on the ``/completion`` route (``multimodal_data``).

For each the table compares ``usage.prompt_tokens`` (``tokens_evaluated`` for ``/completion``), the prompt's
text tokens as ``__verbose.prompt`` spells them (media left out), the video's layout (``Video:``, the
timestamps, each frame's size) as llama-server's mtmd logs it against the one lfmserve's
:func:`lfmserve.media.video.decode_video` gives, and the greedy answer (``content``; the same frames through
the same encoder give the same tokens). Prints a markdown table and a verdict, writes JSON lines to
``--out``; exits 1 when anything differs (or ffmpeg is missing: there is nothing to compare).

Example::

    python bench/video_parity.py                   # llama-server from the bench cache (or --build)
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
from common import CACHE, Server, bench_arguments, lfmserve_command, llama_server_binary, results_log

from lfmserve.media.video import VideoOptions, decode_video
from lfmserve.testing import TinyLfm2, TinyProjector, image_bytes, video_bytes, write_lfm2_gguf, write_mmproj_gguf

N_PREDICT = 8
QUESTION = "Describe this."
#: Server flags of each run: llama-server's video defaults, then a rate and an interval that show float32 rounding.
RUNS = {"defaults": [], "fps_3.3_every_700ms": ["--video-fps", "3.3", "--video-timestamp-interval", "700"]}
#: mtmd's debug lines for a lazy (video) bitmap's items, in llama-server's ``--verbose`` log.
_LAZY = re.compile(r"lazy callback returned (?:text: (.*)|bitmap with dimensions (\d+) x (\d+))$")


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    route: str
    body: dict[str, Any]
    #: The case's videos, in prompt order (what lfmserve's layout is computed from).
    videos: tuple[bytes, ...]


@dataclass(slots=True)
class Answer:
    prompt_tokens: int | None = None
    prompt_text: str = ""
    content: str = ""
    layout: list[str] = field(default_factory=list)
    error: str | None = None


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def chat(*parts: dict[str, Any]) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": QUESTION}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": N_PREDICT, "temperature": 0}


def cases() -> list[Case]:
    """The requests, each with videos ffmpeg makes now."""
    clip, long_clip = video_bytes(2.0, 320, 240), video_bytes(7.0, 160, 120, rate=8, container="mkv")
    mkv = video_bytes(1.5, 200, 100, rate=25, container="mkv")
    assert clip is not None and long_clip is not None and mkv is not None
    picture = image_bytes(256, 256, seed=3, format="PNG")
    long_b64 = base64.b64encode(long_clip).decode()
    return [
        Case(
            "input_video",
            "chat",
            chat({"type": "input_video", "input_video": {"data": data_uri(clip, "video/mp4")}}),
            (clip,),
        ),
        Case("video_url_7s", "chat", chat({"type": "video_url", "video_url": {"url": long_b64}}), (long_clip,)),
        Case(
            "mkv_in_image_url",
            "chat",
            chat({"type": "image_url", "image_url": {"url": data_uri(mkv, "video/x-matroska")}}),
            (mkv,),
        ),
        Case(
            "video_and_image",
            "chat",
            chat(
                {"type": "input_video", "input_video": {"data": data_uri(clip, "video/mp4")}},
                {"type": "image_url", "image_url": {"url": data_uri(picture, "image/png")}},
            ),
            (clip,),
        ),
        Case("completion_multimodal_data", "completion", {"n_predict": N_PREDICT, "temperature": 0}, (clip,)),
    ]


def ask(client: httpx.Client, case: Case) -> dict[str, Any]:
    """The case's answer as JSON (``/completion`` gets the server's media marker from ``/props``)."""
    if case.route == "chat":
        response = client.post("/v1/chat/completions", json={**case.body, "verbose": True})
    else:
        marker = client.get("/props").json()["media_marker"]
        prompt = {
            "prompt_string": f"{marker}{QUESTION}",
            "multimodal_data": [base64.b64encode(case.videos[0]).decode()],
        }
        response = client.post("/completion", json={**case.body, "prompt": prompt})
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    return dict(response.json())


def answer_of(case: Case, data: dict[str, Any]) -> Answer:
    if case.route == "chat":
        verbose = data.get("__verbose") or {}
        return Answer(
            data["usage"]["prompt_tokens"], verbose.get("prompt", ""), data["choices"][0]["message"]["content"]
        )
    return Answer(data["tokens_evaluated"], data.get("prompt", ""), data["content"])


def collect(server: Server, batch: list[Case], log_path: Path | None) -> list[Answer]:
    """Start ``server``, send each case, stop it; llama-server's layouts come from its log, read after each."""
    answers = []
    with server as url, httpx.Client(base_url=url, timeout=600) as client:
        for case in batch:
            offset = log_path.stat().st_size if log_path else 0
            try:
                answer = answer_of(case, ask(client, case))
            except (RuntimeError, httpx.HTTPError, KeyError) as exc:
                answer = Answer(error=str(exc))
            if log_path:
                answer.layout = logged_layout(log_path, offset)
            answers.append(answer)
            print(f"{server.name}: {case.name} done", file=sys.stderr, flush=True)
    return answers


def logged_layout(log_path: Path, offset: int) -> list[str]:
    """The video items llama-server's mtmd logged since ``offset``: texts, and frames as ``WxH``."""
    with log_path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode("utf-8", "replace")
    items = []
    for line in text.splitlines():
        match = _LAZY.search(line)
        if match:
            items.append(match[1] if match[1] is not None else f"{match[2]}x{match[3]}")
    return items


def our_layout(videos: tuple[bytes, ...], flags: list[str]) -> list[str]:
    """The layout lfmserve puts in the prompt for the videos, with the run's flags (texts, frames as ``WxH``)."""
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    options = VideoOptions(
        fps=float(values.get("--video-fps", 4.0)),
        timestamp_interval_ms=int(values.get("--video-timestamp-interval", 5000)),
    )
    items = []
    for data in videos:
        video = decode_video(data, options, param="bench")
        size = f"{video.frames.shape[2]}x{video.frames.shape[1]}"
        items += [item if isinstance(item, str) else size for item in video.layout]
    return items


@dataclass(frozen=True, slots=True)
class Row:
    run: str
    case: str
    prompt_tokens: tuple[int | None, int | None]
    same_prompt_tokens: bool
    same_prompt_text: bool
    same_layout: bool
    same_content: bool
    n_frames: int
    error: str | None

    @property
    def same(self) -> bool:
        prompt = self.same_prompt_tokens and self.same_prompt_text and self.same_layout
        return self.error is None and prompt and self.same_content


def compare(run: str, case: Case, flags: list[str], ref: Answer, ours: Answer) -> Row:
    mine = our_layout(case.videos, flags)
    return Row(
        run,
        case.name,
        (ref.prompt_tokens, ours.prompt_tokens),
        ref.prompt_tokens == ours.prompt_tokens and ref.prompt_tokens is not None,
        bool(ref.prompt_text) and ref.prompt_text == ours.prompt_text,
        ref.layout == mine,
        ref.content == ours.content,
        sum(1 for item in mine if re.fullmatch(r"\d+x\d+", item)),
        ref.error and f"llama-server {ref.error}" or ours.error and f"lfmserve {ours.error}",
    )


def run_flags(args: argparse.Namespace, binary: Path, models: tuple[Path, Path], log: TextIO) -> list[Row]:
    model, mmproj = models
    batch = cases()
    rows = []
    for run, extra in RUNS.items():
        flags = ["-m", str(model), "--mmproj", str(mmproj), "-c", str(args.ctx_size), "-np", "1"]
        flags += ["-t", str(args.threads), "-tb", str(args.threads), "--no-webui", "--verbose", *extra]
        ref_log = args.out / f"video-parity-{run}-llama-server.log"
        ref = collect(Server("llama-server", [str(binary), *flags], log=ref_log), batch, ref_log)
        ours_log = args.out / f"video-parity-{run}-lfmserve.log"
        ours = collect(Server("lfmserve", [lfmserve_command(), *flags], log=ours_log), batch, None)
        for case, a, b in zip(batch, ref, ours, strict=True):
            row = compare(run, case, extra, a, b)
            rows.append(row)
            entry = {**asdict(row), "flags": extra}
            if not row.same:
                entry |= {
                    "llama_server": asdict(a),
                    "lfmserve": asdict(b),
                    "lfmserve_layout": our_layout(case.videos, extra),
                }
            log.write(json.dumps(entry) + "\n")
    return rows


def print_rows(rows: list[Row]) -> None:
    yes = {True: "yes", False: "**no**"}
    print("\n| run | case | frames | prompt tokens (llama-server / lfmserve) | same text | same layout | same answer |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        tokens = row.error or f"{row.prompt_tokens[0]} / {row.prompt_tokens[1]}"
        print(
            f"| {row.run} | {row.case} | {row.n_frames} | {tokens} | {yes[row.same_prompt_text]} |"
            f" {yes[row.same_layout]} | {yes[row.same_content]} |"
        )


def tiny_models(folder: Path) -> tuple[Path, Path]:
    """The tests' tiny LFM2-VL model (seed 1, LFM2-VL's image tokens) and a vision projector."""
    model = write_lfm2_gguf(folder / "tiny-lfm2-vl.gguf", TinyLfm2(seed=1, vision_tokens=True, name="Tiny-LFM2-VL"))
    return model, write_mmproj_gguf(folder / "tiny-mmproj-vision.gguf", TinyProjector(kind="vision"))


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=16384, repeats=1)
    parser.set_defaults(threads=1)
    cached = CACHE / "llama.cpp-build" / "bin" / "llama-server"
    parser.set_defaults(llama_server=cached if cached.exists() else None)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        print("video_parity: ffmpeg and ffprobe are needed (both servers take a video's frames with them)")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, results_log(args, "video-parity") as log:
        rows = run_flags(args, binary, tiny_models(Path(folder)), log)
    print_rows(rows)
    n_differ = sum(not row.same for row in rows)
    verdict = "SAME" if n_differ == 0 else "DIFFERENT"
    print(f"\nverdict: {verdict}: {n_differ} of {len(rows)} request(s) differ (prompt tokens, text, layout or answer)")
    return 1 if n_differ else 0


if __name__ == "__main__":
    sys.exit(main())
