"""Per-request latency and size histograms, filled by the engine thread when a request finishes and shown by
``/metrics`` as Prometheus histograms under lfmserve's prefix, with vLLM's names and buckets (dashboards made
for vLLM read them unchanged).

The engine thread only adds to plain numbers here; the text is written at scrape time
(:mod:`lfmserve.api.monitoring`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

#: vLLM's buckets for the time to the first token.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
#: vLLM's buckets for whole-request latencies (end to end, and the wait in the queue).
REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
)  # fmt: skip
#: 1-2-5 buckets for token counts (vLLM's, up to a million tokens).
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(6) for m in (1, 2, 5)) + (1e6,)


@dataclass(slots=True)
class Histogram:
    """Counts per bucket (a value goes to the first bound it does not exceed; the last bucket is ``+Inf``)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class RequestHistograms:
    """One observation per finished generation (a prefill-only request has no first token, so no TTFT)."""

    time_to_first_token: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    prompt_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    generation_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))

    def observe(
        self, *, queued_s: float, first_token_s: float | None, total_s: float, n_prompt: int, n_generated: int
    ) -> None:
        self.queue_time.observe(queued_s)
        if first_token_s is not None:
            self.time_to_first_token.observe(first_token_s)
        self.e2e_latency.observe(total_s)
        self.prompt_tokens.observe(n_prompt)
        self.generation_tokens.observe(n_generated)
