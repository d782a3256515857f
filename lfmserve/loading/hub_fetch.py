"""``python -m lfmserve.loading.hub_fetch``: downloads a model's files into the Hugging Face cache for a router,
in a process of its own, so that a cancel (the router kills it) stops it at once whatever the network is doing;
a cancelled file is left ``.incomplete`` in the cache, where the next download of it resumes.

It reads ``{"repo", "files", "token"}`` from stdin (a token never goes on a command line, where ``/proc`` shows
it), writes one JSON line per progress report, ``{"url", "done", "total"}`` (a file's first and last, and at most
one each 0.1 s between), and exits 0; on a failure it writes ``{"error": MESSAGE}`` and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .hub import cache_dir

#: Seconds between two progress reports of a file (llama-server's download children report as often).
REPORT_EVERY_S = 0.1


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class _Reporter:
    """What huggingface_hub takes for a progress bar class (``tqdm_class``): it counts bytes and reports them."""

    url = ""

    def __init__(self, *args: Any, total: int | None = None, initial: int = 0, **kwargs: Any) -> None:
        self.total, self.done, self.last = total or 0, initial, 0.0
        self._report(force=True)

    def __enter__(self) -> _Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._report(force=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        self._report(force=False)

    def close(self) -> None:
        """Called by huggingface_hub when a bar it made ends (the context's exit reports)."""

    def _report(self, *, force: bool) -> None:
        now = time.monotonic()
        if force or now - self.last >= REPORT_EVERY_S:
            self.last = now
            _say({"url": self.url, "done": self.done, "total": self.total})


def fetch(repo: str, files: list[str], token: str | None) -> None:
    import huggingface_hub

    for path in files:
        url = huggingface_hub.hf_hub_url(repo, path)
        reporter: Any = type("Reporter", (_Reporter,), {"url": url})
        local = huggingface_hub.hf_hub_download(repo, path, cache_dir=cache_dir(), token=token, tqdm_class=reporter)
        size = os.path.getsize(local)
        _say({"url": url, "done": size, "total": size})  # also for a file that was already cached


def main() -> int:
    job = json.loads(sys.stdin.read())
    try:
        fetch(job["repo"], job["files"], job.get("token"))
    except Exception as exc:  # whatever the hub or the disk raised: the router reports it as download_failed
        _say({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
