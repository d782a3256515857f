"""What ``GET /slots`` and ``GET /metrics`` report, read from the engine's state and counters.

The engine thread only bumps plain integers; this module turns them into llama-server's ``/slots``
JSON and, at scrape time, into Prometheus text with llama-server's metrics (``llamacpp:*``, the names,
types, help and order of ``server_task_result_metrics::to_metrics``) plus lfmserve's prompt-cache
counters and request histograms (``lfmserve:*``). The text is written here rather than by
``prometheus_client``, which would name the ``# TYPE`` line of a counter without its ``_total`` and
cannot type ``n_tokens_max`` a counter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..process_memory import process_memory

if TYPE_CHECKING:  # annotations only: a router renders its metrics here without loading the engine
    from ..engine.core import Engine
    from ..engine.histograms import Histogram, RequestHistograms
    from ..engine.records import EngineStats, SlotTask

#: llama-server's ``Content-Type`` for /metrics.
CONTENT_TYPE = "text/plain; version=0.0.4"


def slots_json(engine: Engine) -> list[dict[str, Any]]:
    """``GET /slots``: llama-server's fields for each slot (``server_slot::to_json``), then lfmserve's checkpoints.

    A slot that has run a request shows that request's settings and progress, the last one's once it is
    idle (with its counters at zero, as llama-server resets them).
    """
    out = []
    for slot in engine.slots:
        checkpoints = list(slot.checkpoints)
        entry: dict[str, Any] = {
            "id": slot.id,
            "n_ctx": slot.n_ctx,
            "speculative": engine.config.speculation.enabled,
            "is_processing": slot.busy,
        }
        task = engine.slot_task(slot.id)
        if task is not None:
            entry |= _task_json(task, n_tokens=len(slot.tokens), engine=engine)
        entry["checkpoints"] = [
            {"n_tokens": c.n_tokens, "size": c.n_bytes, "boundary": c.boundary, "logits": c.logits is not None}
            for c in checkpoints
        ]
        entry["checkpoints_size"] = sum(c.n_bytes for c in checkpoints)
        out.append(entry)
    return out


def _task_json(task: SlotTask, *, n_tokens: int, engine: Engine) -> dict[str, Any]:
    request = task.request
    return {
        "id_task": task.id_task,
        "n_prompt_tokens": n_tokens,
        "n_prompt_tokens_processed": task.n_prompt_processed,
        "n_prompt_tokens_cache": task.n_prompt_cached,
        "params": request.sampling.to_json()
        | {
            "max_tokens": request.max_tokens,
            "n_predict": request.max_tokens,
            "n_probs": request.n_probs,
            "speculative.types": engine.config.speculation.type_names,
        },
        "next_token": [
            {
                "has_next_token": task.running,
                "has_new_line": task.has_new_line,
                "n_remain": task.n_remain,
                "n_decoded": task.n_decoded,
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class Metric:
    """One unlabelled sample, with its ``# HELP`` and ``# TYPE`` lines."""

    name: str
    kind: Literal["counter", "gauge"]
    help: str
    value: float


class MetricSource(Protocol):
    """What reports its own samples: the resumable streams' sessions, a router's conversations."""

    def metrics(self) -> list[Metric]: ...


def counter(name: str, doc: str, value: int) -> Metric:
    """One of lfmserve's own counters, ``lfmserve:<name>_total``."""
    return Metric(f"lfmserve:{name}_total", "counter", doc, value)


def prometheus_text(metrics: Iterable[Metric]) -> str:
    """The samples as Prometheus text; a router writes its own /metrics with it too."""
    lines = [
        line
        for metric in metrics
        for line in (
            f"# HELP {metric.name} {metric.help}",
            f"# TYPE {metric.name} {metric.kind}",
            f"{metric.name} {_number(metric.value)}",
        )
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class _Window:
    """The throughput counters at a scrape: the rate gauges average over the time between two scrapes."""

    n_prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    n_predicted_steps: int = 0
    predicted_seconds: float = 0.0

    @staticmethod
    def of(stats: EngineStats) -> _Window:
        return _Window(stats.n_prompt_tokens, stats.prompt_seconds, stats.n_predicted_steps, stats.predicted_seconds)


class MetricsReporter:
    """``GET /metrics`` for one engine: Prometheus text, with the rate gauges averaged since the last scrape.

    Example::

        reporter = MetricsReporter(engine, streams)
        text = reporter.render()   # "# HELP llamacpp:prompt_tokens_total ...\\n# TYPE ... counter\\n..."
    """

    def __init__(self, engine: Engine, streams: MetricSource | None = None) -> None:
        """``streams``: the server's resumable streams, whose bounds are reported too."""
        self.engine = engine
        self.streams = streams
        self._window = _Window()
        #: The memory gauges, sampled again only after the engine did something: an idle server scraped twice
        #: answers the same (llama.cpp's sleep test compares a scrape awake with one while asleep).
        self._memory: tuple[tuple[object, ...], list[Metric]] | None = None

    @property
    def t_start(self) -> int:
        """When the engine started (Unix seconds), for the ``Process-Start-Time-Unix`` header."""
        return int(self.engine.stats.t_start)

    def render(self) -> str:
        stats = self.engine.stats
        last, self._window = self._window, _Window.of(stats)
        metrics = [*_counters(stats), *self._gauges(stats, last), *_lfmserve_metrics(self.engine), *self._memory_now()]
        if self.streams is not None:
            metrics += self.streams.metrics()
        histograms = [line for name, doc, h in _histograms(stats.requests) for line in _histogram_lines(name, doc, h)]
        return prometheus_text(metrics) + "".join(f"{line}\n" for line in histograms)

    def _memory_now(self) -> list[Metric]:
        stats = self.engine.stats
        activity = (_Window.of(stats), stats.n_requests, stats.n_decode_calls, self.engine.ram_cache.n_bytes)
        if self._memory is None or self._memory[0] != activity:
            self._memory = activity, _memory_metrics(self.engine)
        return self._memory[1]

    def _gauges(self, s: EngineStats, last: _Window) -> list[Metric]:
        def rate(n: float, seconds: float) -> float:
            return n / seconds if seconds > 0 else 0.0

        return [
            Metric(
                "llamacpp:prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s",
                rate(s.n_prompt_tokens - last.n_prompt_tokens, s.prompt_seconds - last.prompt_seconds),
            ),
            Metric(
                "llamacpp:predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s",
                rate(s.n_predicted_steps - last.n_predicted_steps, s.predicted_seconds - last.predicted_seconds),
            ),
            Metric(
                "llamacpp:requests_processing",
                "gauge",
                "Number of requests processing",
                sum(1 for slot in self.engine.slots if slot.busy),
            ),
            Metric("llamacpp:requests_deferred", "gauge", "Number of requests deferred", self.engine.n_waiting),
            Metric(
                "llamacpp:n_busy_slots_per_decode",
                "gauge",
                "Average number of busy slots per llama_decode() call",
                s.n_busy_slots_sum / max(s.n_decode_calls, 1),
            ),
        ]


def _counters(s: EngineStats) -> list[Metric]:
    return [
        Metric(
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed, excluding cached tokens",
            s.n_prompt_tokens,
        ),
        Metric(
            "llamacpp:prompt_tokens_cached_total",
            "counter",
            "Number of prompt tokens reused from the cache",
            s.n_cached_tokens,
        ),
        Metric("llamacpp:prompt_seconds_total", "counter", "Total time spent processing prompts", s.prompt_seconds),
        Metric(
            "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed", s.n_predicted_tokens
        ),
        Metric(
            "llamacpp:tokens_predicted_seconds_total",
            "counter",
            "Total time spent generating tokens",
            s.predicted_seconds,
        ),
        Metric(
            "llamacpp:n_decode_total",
            "counter",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            s.n_decode_calls,
        ),
        Metric(
            "llamacpp:n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)", s.n_tokens_max
        ),
        Metric(
            "llamacpp:spec_decode_num_draft_tokens_total",
            "counter",
            "Speculative: Total draft tokens generated",
            s.n_draft_tokens,
        ),
        Metric(
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "counter",
            "Speculative: Total draft tokens accepted by the target model",
            s.n_draft_tokens_accepted,
        ),
        Metric(
            "llamacpp:spec_decode_num_drafts_total",
            "counter",
            "Speculative: Total speculative decoding verification steps",
            s.n_drafts,
        ),
    ]


def memory_json(engine: Engine) -> dict[str, int]:
    """What the server holds in memory (``/props``' ``memory``): the process's resident bytes (RSS, its anonymous
    and file-backed parts, PSS), the model's tensors (``llama_model_size``), the bytes of them llama.cpp repacked
    (held in anonymous memory) and the mapped pages of those given back (``-lm auto``), and the contexts' KV cache,
    recurrent state, compute and output buffers."""
    process = process_memory()
    buffers = engine.buffers()
    return {
        **(process.to_json() if process else {}),
        "weights": engine.model.info.size_bytes,
        "weights_repacked": buffers.get("CPU_REPACK", 0),
        "weights_released": engine.model.released_bytes,
        "kv_cache": buffers.get("KV", 0),
        "recurrent_state": buffers.get("RS", 0),
        "compute": buffers.get("compute", 0),
        "output": buffers.get("output", 0),
    }


_MEMORY_HELP = {
    "resident": "Resident memory of the server process (RSS).",
    "anonymous": "Anonymous resident memory of the server process (heap, repacked weights, KV cache).",
    "file_backed": "File-backed resident memory of the server process (mapped model file, libraries).",
    "pss": "Proportional resident memory of the server process (shared pages divided among their processes).",
    "weights": "Bytes of the model's tensors.",
    "weights_repacked": "Bytes of the weights llama.cpp repacked into its own buffers.",
    "weights_released": "Mapped pages of the repacked weights given back after load (-lm auto).",
    "kv_cache": "Bytes of the KV cache buffers.",
    "recurrent_state": "Bytes of the recurrent state buffers.",
    "compute": "Bytes of llama.cpp's compute buffers.",
    "output": "Bytes of llama.cpp's output (logits) buffers.",
}


def _memory_metrics(engine: Engine) -> list[Metric]:
    return [
        Metric(f"lfmserve:memory_{name}_bytes", "gauge", _MEMORY_HELP[name], value)
        for name, value in memory_json(engine).items()
    ]


def _lfmserve_metrics(engine: Engine) -> list[Metric]:
    """lfmserve's own counters: how requests waited and how the prompt cache served them."""
    s = engine.stats

    return [
        counter("requests", "Requests accepted by the engine.", s.n_requests),
        counter("requests_deferred", "Requests that had to wait for a slot.", s.n_requests_deferred),
        counter("prompt_cache_hits", "Requests that started from a cached prefix.", s.n_cache_hits),
        counter("checkpoints_saved", "Recurrent / sliding-window checkpoints saved.", s.n_checkpoints_saved),
        counter("checkpoints_restored", "Checkpoints restored.", s.n_checkpoints_restored),
        counter("slot_copies", "Prefixes copied from another slot.", s.n_slot_copies),
        counter("ram_cache_saves", "Sequences kept in host RAM.", s.n_ram_saves),
        counter("ram_cache_restores", "Sequences restored from host RAM.", s.n_ram_restores),
        counter("disk_cache_writes", "Prompt cache files written (--cache-disk).", s.n_disk_cache_writes),
        counter("disk_cache_drops", "Prompt cache files not written: the disk was behind.", s.n_disk_cache_drops),
        counter("disk_cache_errors", "Prompt cache files lost to an error while writing.", s.n_disk_cache_errors),
        counter("shifted_tokens", "Cached tokens reused by KV shifting (--cache-reuse).", s.n_shifted_tokens),
        counter("context_shifts", "Full slots that dropped their older half (--context-shift).", s.n_context_shifts),
        Metric("lfmserve:ram_cache_bytes", "gauge", "Host RAM held by the prompt cache.", engine.ram_cache.n_bytes),
    ]


def _histograms(requests: RequestHistograms) -> list[tuple[str, str, Histogram]]:
    """vLLM's request histograms, under lfmserve's prefix.

    llama-server has no histograms, and its own test parser wants a ``# TYPE`` line for every unlabelled
    ``llamacpp:`` sample, which a histogram's ``_sum`` and ``_count`` never have.
    """
    return [
        ("lfmserve:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         requests.time_to_first_token),
        ("lfmserve:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
         requests.e2e_latency),
        ("lfmserve:request_queue_time_seconds", "Histogram of time spent waiting for a slot in seconds.",
         requests.queue_time),
        ("lfmserve:request_prompt_tokens", "Number of prefill tokens processed.", requests.prompt_tokens),
        ("lfmserve:request_generation_tokens", "Number of generation tokens processed.", requests.generation_tokens),
    ]  # fmt: skip


def _histogram_lines(name: str, doc: str, histogram: Histogram) -> list[str]:
    """Prometheus' histogram: cumulative ``_bucket`` counts by ``le``, then ``_sum`` and ``_count``."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
        cumulative += count
        label = "+Inf" if math.isinf(bound) else repr(float(bound))
        lines.append(f'{name}_bucket{{le="{label}"}} {cumulative}')
    return [*lines, f"{name}_sum {_number(float(histogram.total))}", f"{name}_count {cumulative}"]


def _number(value: float) -> str:
    """A sample value: counts as integers, times as Python writes floats (both are Prometheus numbers)."""
    if isinstance(value, int):
        return str(value)
    return repr(value) if math.isfinite(value) else "NaN"
