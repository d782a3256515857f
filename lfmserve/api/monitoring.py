"""What ``GET /slots`` and ``GET /metrics`` report, read from the engine's state and counters.

The engine thread only bumps plain integers; this module turns them into llama-server's ``/slots``
JSON and, at scrape time, into Prometheus metrics with llama-server's names (``llamacpp:*``) plus
lfmserve's prompt-cache counters (``lfmserve:*``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric

from ..engine.core import Engine


def slots_json(engine: Engine) -> list[dict[str, Any]]:
    out = []
    for slot in engine.slots:
        request = engine.slot_request(slot.id)
        checkpoints = list(slot.checkpoints)
        out.append(
            {
                "id": slot.id,
                "n_ctx": slot.n_ctx,
                "speculative": engine.config.speculation.enabled,
                "is_processing": slot.busy,
                "params": request.sampling.to_json() | {"n_predict": request.max_tokens} if request else {},
                "n_prompt_tokens_cache": len(slot.tokens),
                "checkpoints": [
                    {"n_tokens": c.n_tokens, "size": c.n_bytes, "boundary": c.boundary, "logits": c.logits is not None}
                    for c in checkpoints
                ],
                "checkpoints_size": sum(c.n_bytes for c in checkpoints),
            }
        )
    return out


class EngineCollector:
    """A Prometheus collector reading the engine's counters when scraped."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        s = self.engine.stats
        busy = sum(1 for slot in self.engine.slots if slot.busy)

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        yield counter("llamacpp:prompt_tokens", "Number of prompt tokens processed.", s.n_prompt_tokens)
        yield counter("llamacpp:prompt_seconds", "Prompt process time.", s.prompt_seconds)
        yield counter("llamacpp:tokens_predicted", "Number of generation tokens processed.", s.n_predicted_tokens)
        yield counter("llamacpp:tokens_predicted_seconds", "Predict process time.", s.predicted_seconds)
        yield counter("llamacpp:n_decode", "Number of llama_decode() calls.", s.n_decode_calls)
        yield gauge(
            "llamacpp:n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call.",
            s.n_busy_slots_sum / s.n_decode_calls if s.n_decode_calls else 0.0,
        )
        yield gauge(
            "llamacpp:prompt_tokens_seconds",
            "Average prompt throughput in tokens/s.",
            s.n_prompt_tokens / s.prompt_seconds if s.prompt_seconds else 0.0,
        )
        yield gauge(
            "llamacpp:predicted_tokens_seconds",
            "Average generation throughput in tokens/s.",
            s.n_predicted_tokens / s.predicted_seconds if s.predicted_seconds else 0.0,
        )
        yield counter(
            "llamacpp:spec_decode_num_draft_tokens",
            "Speculative: Total draft tokens generated",
            s.n_draft_tokens,
        )
        yield counter(
            "llamacpp:spec_decode_num_accepted_tokens",
            "Speculative: Total draft tokens accepted by the target model",
            s.n_draft_tokens_accepted,
        )
        yield counter(
            "llamacpp:spec_decode_num_drafts", "Speculative: Total speculative decoding verification steps", s.n_drafts
        )
        yield gauge("llamacpp:requests_processing", "Number of requests processing.", busy)
        yield gauge("llamacpp:requests_deferred", "Number of requests deferred.", self.engine.n_waiting)
        yield counter("lfmserve:requests", "Requests accepted by the engine.", s.n_requests)
        yield counter("lfmserve:requests_deferred", "Requests that had to wait for a slot.", s.n_requests_deferred)
        yield counter("lfmserve:prompt_cache_hits", "Requests that started from a cached prefix.", s.n_cache_hits)
        yield counter("lfmserve:prompt_cache_tokens", "Prompt tokens taken from the cache.", s.n_cached_tokens)
        yield counter(
            "lfmserve:checkpoints_saved", "Recurrent / sliding-window checkpoints saved.", s.n_checkpoints_saved
        )
        yield counter("lfmserve:checkpoints_restored", "Checkpoints restored.", s.n_checkpoints_restored)
        yield counter("lfmserve:slot_copies", "Prefixes copied from another slot.", s.n_slot_copies)
        yield counter("lfmserve:ram_cache_saves", "Sequences kept in host RAM.", s.n_ram_saves)
        yield counter("lfmserve:ram_cache_restores", "Sequences restored from host RAM.", s.n_ram_restores)
        yield counter(
            "lfmserve:shifted_tokens", "Cached tokens reused by KV shifting (--cache-reuse).", s.n_shifted_tokens
        )
        yield gauge("lfmserve:ram_cache_bytes", "Host RAM held by the prompt cache.", self.engine.ram_cache.n_bytes)


def metrics_registry(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine))
    return registry
