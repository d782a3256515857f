"""What /slots and /metrics report, read from an engine's state and counters: a stand-in engine (no model), then
a real one over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.api.monitoring import MetricsReporter, slots_json
from lfmserve.engine.prompt_cache import RamPromptCache
from lfmserve.engine.records import EngineConfig, EngineRequest, EngineStats, SamplingParams, SlotTask
from lfmserve.engine.scheduler import CachedSequence, Checkpoint, Slot
from lfmserve.engine.speculation import SpeculationConfig
from lfmserve.settings import Settings
from tests.conftest import ServerThread


@dataclass
class _ModelInfo:
    size_bytes: int = 0


@dataclass
class _Model:
    info: _ModelInfo = field(default_factory=_ModelInfo)
    released_bytes: int = 0


@dataclass
class _Engine:
    """The parts of Engine that monitoring reads."""

    slots: tuple[Slot, ...]
    stats: EngineStats = field(default_factory=EngineStats)
    n_waiting: int = 0
    ram_cache: RamPromptCache = field(default_factory=lambda: RamPromptCache(1000))
    tasks: dict[int, SlotTask] = field(default_factory=dict)
    config: EngineConfig = field(default_factory=EngineConfig)
    model: _Model = field(default_factory=_Model)
    llama_buffers: dict[str, int] = field(default_factory=dict)

    def slot_task(self, slot_id: int) -> SlotTask | None:
        return self.tasks.get(slot_id)

    def buffers(self) -> dict[str, int]:
        return dict(self.llama_buffers)


def test_slots_show_llama_servers_fields_for_the_running_and_the_last_request() -> None:
    busy = Slot(0, n_ctx=512, tokens=[1, 2, 3, 4], busy=True)
    busy.checkpoints = [Checkpoint(2, b"s" * 10, True), Checkpoint(4, b"t" * 10, False, b"l" * 8)]  # type: ignore[arg-type]
    engine = _Engine(
        (busy, Slot(1, n_ctx=512), Slot(2, n_ctx=512, tokens=[1, 2])),
        config=EngineConfig(speculation=SpeculationConfig(types=("ngram-simple",))),
    )
    request = EngineRequest(prompt_tokens=(1, 2, 3), sampling=SamplingParams(temperature=0.5), max_tokens=9, n_probs=2)
    engine.tasks[0] = SlotTask(7, request, running=True, n_prompt_processed=2, n_prompt_cached=1, n_decoded=2)
    engine.tasks[2] = SlotTask(5, request)  # finished: llama-server resets the counters, keeps the settings
    shown = slots_json(engine)  # type: ignore[arg-type]
    params = {
        **SamplingParams(temperature=0.5).to_json(),
        "max_tokens": 9,
        "n_predict": 9,
        "n_probs": 2,
        "speculative.types": "ngram-simple",
    }
    assert shown[0] == {
        "id": 0,
        "n_ctx": 512,
        "speculative": True,
        "is_processing": True,
        "id_task": 7,
        "n_prompt_tokens": 4,
        "n_prompt_tokens_processed": 2,
        "n_prompt_tokens_cache": 1,
        "params": params,
        "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 7, "n_decoded": 2}],
        "checkpoints": [
            {"n_tokens": 2, "size": 10, "boundary": True, "logits": False},
            {"n_tokens": 4, "size": 18, "boundary": False, "logits": True},
        ],
        "checkpoints_size": 28,
    }
    assert shown[1] == {
        "id": 1,
        "n_ctx": 512,
        "speculative": True,
        "is_processing": False,
        "checkpoints": [],
        "checkpoints_size": 0,
    }
    assert shown[2]["id_task"] == 5 and shown[2]["n_prompt_tokens"] == 2 and shown[2]["params"] == params
    assert shown[2]["next_token"] == [{"has_next_token": False, "has_new_line": False, "n_remain": -1, "n_decoded": 0}]
    assert (shown[2]["n_prompt_tokens_processed"], shown[2]["n_prompt_tokens_cache"]) == (0, 0)


def _families(text: str) -> dict[str, tuple[str, list[str]]]:
    """``{name: (type, sample lines)}``, each family checked to start with its own HELP and TYPE lines."""
    out: dict[str, tuple[str, list[str]]] = {}
    lines = text.splitlines()
    at = 0
    while at < len(lines):
        help_line, type_line = lines[at : at + 2]
        name, kind = type_line.split(" ")[2:4]
        assert help_line.startswith(f"# HELP {name} ")
        end = next((i for i in range(at + 2, len(lines)) if lines[i].startswith("# HELP ")), len(lines))
        out[name] = (kind, lines[at + 2 : end])
        at = end
    return out


def _samples(text: str) -> dict[str, tuple[str, float]]:
    """``{name: (type, value)}`` of the counters and gauges (one sample each, named as the family)."""
    out = {}
    for name, (kind, samples) in _families(text).items():
        if kind != "histogram":
            ((sample_name, value),) = (line.split(" ") for line in samples)
            assert sample_name == name
            out[name] = (kind, float(value))
    return out


def _histograms(text: str) -> dict[str, dict[str, float]]:
    """``{name: {"le=...": cumulative count, ..., "sum": s, "count": n}}`` of the histograms."""
    out = {}
    for name, (kind, samples) in _families(text).items():
        if kind == "histogram":
            values = {}
            for line in samples:
                sample, value = line.split(" ")
                key = sample.removeprefix(name + "_")
                values[key.replace('bucket{le="', "le=").rstrip('"}')] = float(value)
            out[name] = values
    return out


def test_metrics_are_llama_servers_list_in_its_order_then_lfmserves() -> None:
    stats = EngineStats(
        t_start=1700000000.5,
        n_prompt_tokens=120,
        prompt_seconds=0.5,
        n_cached_tokens=11,
        n_predicted_tokens=30,
        n_predicted_steps=27,
        predicted_seconds=1.5,
        n_decode_calls=40,
        n_busy_slots_sum=60,
        n_tokens_max=150,
        n_requests=5,
        n_cache_hits=2,
        n_shifted_tokens=7,
        n_context_shifts=1,
        n_drafts=4,
        n_draft_tokens=22,
        n_draft_tokens_accepted=13,
    )
    engine = _Engine((Slot(0, busy=True), Slot(1)), stats=stats, n_waiting=3)
    engine.ram_cache.put(CachedSequence((1, 2), b"x" * 64))  # type: ignore[arg-type]
    reporter = MetricsReporter(engine)  # type: ignore[arg-type]
    samples = _samples(reporter.render())
    assert [(name, kind, value) for name, (kind, value) in samples.items() if name.startswith("llamacpp:")] == [
        ("llamacpp:prompt_tokens_total", "counter", 120.0),
        ("llamacpp:prompt_tokens_cached_total", "counter", 11.0),
        ("llamacpp:prompt_seconds_total", "counter", 0.5),
        ("llamacpp:tokens_predicted_total", "counter", 30.0),
        ("llamacpp:tokens_predicted_seconds_total", "counter", 1.5),
        ("llamacpp:n_decode_total", "counter", 40.0),
        ("llamacpp:n_tokens_max", "counter", 150.0),
        ("llamacpp:spec_decode_num_draft_tokens_total", "counter", 22.0),
        ("llamacpp:spec_decode_num_accepted_tokens_total", "counter", 13.0),
        ("llamacpp:spec_decode_num_drafts_total", "counter", 4.0),
        ("llamacpp:prompt_tokens_seconds", "gauge", 240.0),
        ("llamacpp:predicted_tokens_seconds", "gauge", 18.0),  # 27 decode steps in 1.5 s: first tokens are free
        ("llamacpp:requests_processing", "gauge", 1.0),
        ("llamacpp:requests_deferred", "gauge", 3.0),
        ("llamacpp:n_busy_slots_per_decode", "gauge", 1.5),
    ]
    assert samples["lfmserve:requests_total"] == ("counter", 5.0)
    assert samples["lfmserve:prompt_cache_hits_total"] == ("counter", 2.0)
    assert samples["lfmserve:shifted_tokens_total"] == ("counter", 7.0)
    assert samples["lfmserve:context_shifts_total"] == ("counter", 1.0)
    assert samples["lfmserve:ram_cache_bytes"] == ("gauge", 64.0)
    assert reporter.t_start == 1700000000


def test_memory_is_the_processs_and_llama_cpps_buffers() -> None:
    buffers = {"CPU_Mapped": 100, "CPU_REPACK": 7_000, "KV": 2_048, "RS": 33, "compute": 512, "output": 64}
    engine = _Engine(
        (Slot(0),), model=_Model(_ModelInfo(size_bytes=9_000), released_bytes=4_096), llama_buffers=buffers
    )
    samples = _samples(MetricsReporter(engine).render())  # type: ignore[arg-type]
    memory = {name: value for name, (kind, value) in samples.items() if name.startswith("lfmserve:memory_")}
    resident, anonymous = memory.pop("lfmserve:memory_resident_bytes"), memory.pop("lfmserve:memory_anonymous_bytes")
    file_backed, pss = memory.pop("lfmserve:memory_file_backed_bytes"), memory.pop("lfmserve:memory_pss_bytes")
    assert resident == anonymous + file_backed and 0 < anonymous < resident and 0 < pss <= resident
    assert memory == {
        "lfmserve:memory_weights_bytes": 9000.0,
        "lfmserve:memory_weights_repacked_bytes": 7000.0,
        "lfmserve:memory_weights_released_bytes": 4096.0,
        "lfmserve:memory_kv_cache_bytes": 2048.0,
        "lfmserve:memory_recurrent_state_bytes": 33.0,
        "lfmserve:memory_compute_bytes": 512.0,
        "lfmserve:memory_output_bytes": 64.0,
    }
    assert {kind for name, (kind, _) in samples.items() if name.startswith("lfmserve:memory_")} == {"gauge"}


def test_the_memory_gauges_of_an_idle_engine_stay_as_they_were_until_it_does_something() -> None:
    engine = _Engine((Slot(0),), llama_buffers={"KV": 2_048})
    reporter = MetricsReporter(engine)  # type: ignore[arg-type]

    def memory() -> dict[str, float]:
        return {n: v for n, (_, v) in _samples(reporter.render()).items() if n.startswith("lfmserve:memory_")}

    before = memory()
    engine.llama_buffers["KV"] = 4_096  # stands for the process's memory moving while nothing is served
    assert memory() == before  # llama.cpp's sleep test compares a scrape awake with one asleep
    engine.stats.n_requests += 1  # a request came: sampled again
    assert memory()["lfmserve:memory_kv_cache_bytes"] == 4096.0


def test_the_rates_average_over_the_time_since_the_last_scrape() -> None:
    stats = EngineStats(n_prompt_tokens=100, prompt_seconds=1.0, n_predicted_steps=10, predicted_seconds=1.0)
    reporter = MetricsReporter(_Engine((Slot(0),), stats=stats))  # type: ignore[arg-type]
    reporter.render()
    stats.n_prompt_tokens, stats.prompt_seconds = 400, 2.0  # 300 tokens in the last second
    samples = _samples(reporter.render())
    assert samples["llamacpp:prompt_tokens_seconds"] == ("gauge", 300.0)
    assert samples["llamacpp:predicted_tokens_seconds"] == ("gauge", 0.0)  # nothing generated since
    assert samples["llamacpp:prompt_tokens_total"] == ("counter", 400.0)  # the totals stay cumulative


def test_an_engine_that_never_decoded_reports_zeros() -> None:
    text = MetricsReporter(_Engine((Slot(0),))).render()  # type: ignore[arg-type]
    process = {f"lfmserve:memory_{name}_bytes" for name in ("resident", "anonymous", "file_backed", "pss")}
    assert all(value == 0.0 for name, (_, value) in _samples(text).items() if name not in process)
    assert all(v == 0.0 for histogram in _histograms(text).values() for v in histogram.values())


def test_request_histograms_are_vllms_under_lfmserves_prefix() -> None:
    stats = EngineStats()
    stats.requests.observe(queued_s=0.2, first_token_s=0.03, total_s=1.2, n_prompt=300, n_generated=20)
    stats.requests.observe(queued_s=0.0, first_token_s=None, total_s=0.1, n_prompt=7, n_generated=0)
    text = MetricsReporter(_Engine((Slot(0),), stats=stats)).render()  # type: ignore[arg-type]
    histograms = _histograms(text)
    assert list(histograms) == [
        "lfmserve:time_to_first_token_seconds",
        "lfmserve:e2e_request_latency_seconds",
        "lfmserve:request_queue_time_seconds",
        "lfmserve:request_prompt_tokens",
        "lfmserve:request_generation_tokens",
    ]
    ttft = histograms["lfmserve:time_to_first_token_seconds"]
    assert (ttft["le=0.02"], ttft["le=0.04"], ttft["le=+Inf"], ttft["count"], ttft["sum"]) == (0, 1, 1, 1, 0.03)
    e2e = histograms["lfmserve:e2e_request_latency_seconds"]
    assert (e2e["le=0.3"], e2e["le=1.0"], e2e["le=1.5"], e2e["count"]) == (1, 1, 2, 2)
    prompt = histograms["lfmserve:request_prompt_tokens"]
    assert (prompt["le=5.0"], prompt["le=10.0"], prompt["le=200.0"], prompt["le=500.0"], prompt["sum"]) == (
        0, 1, 1, 2, 307
    )  # fmt: skip
    assert 'lfmserve:time_to_first_token_seconds_bucket{le="0.001"} 0' in text.splitlines()


def test_every_unlabelled_llamacpp_sample_has_a_type_line_of_its_own() -> None:
    """llama-server's own test parser requires it; a histogram's ``_sum`` and ``_count`` would have none."""
    stats = EngineStats()
    stats.requests.observe(queued_s=0.1, first_token_s=0.02, total_s=0.5, n_prompt=10, n_generated=3)
    lines = MetricsReporter(_Engine((Slot(0),), stats=stats)).render().splitlines()  # type: ignore[arg-type]
    typed = {line.split(" ")[2] for line in lines if line.startswith("# TYPE ")}
    llamacpp = [line.split(" ")[0] for line in lines if line.startswith("llamacpp:") and "{" not in line]
    assert len(llamacpp) == 15 and set(llamacpp) <= typed
    assert "lfmserve:time_to_first_token_seconds_count" in {line.split(" ")[0] for line in lines}


# -- over HTTP, on the tiny attention-only model ----------------------------------------------------------


@pytest.fixture(scope="module")
def metrics_server(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    settings = Settings.of(
        model=str(tiny_llama_gguf), ctx_size=1024, parallel=1, batch_size=256, threads=2, metrics=True
    )
    return server_factory(settings)


def _complete(server: ServerThread, prompt: str, n_predict: int, **options: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 0, **options}
    response = httpx.post(server.url + "/completion", json=body, timeout=60)
    assert response.status_code == 200, response.text
    timings: dict[str, Any] = response.json()["timings"]
    return timings


def test_metrics_count_what_the_requests_timings_report(metrics_server: ServerThread) -> None:
    runs = [_complete(metrics_server, "the quick brown fox jumps over the lazy dog", n) for n in (1, 4, 16)]
    response = httpx.get(metrics_server.url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 0 < int(response.headers["Process-Start-Time-Unix"]) <= time.time()
    samples = _samples(response.text)
    assert samples["llamacpp:prompt_tokens_total"][1] == sum(t["prompt_n"] for t in runs)
    assert samples["llamacpp:prompt_tokens_cached_total"][1] == sum(t["cache_n"] for t in runs) > 0
    assert samples["llamacpp:tokens_predicted_total"][1] == 21 == sum(t["predicted_n"] for t in runs)
    # one decode for each prompt (whole, then only its last token: the rest is cached), one per token after the first
    assert samples["llamacpp:n_decode_total"][1] == (1 + 0) + (1 + 3) + (1 + 15)
    assert samples["llamacpp:requests_processing"][1] == 0 and samples["llamacpp:n_busy_slots_per_decode"][1] == 1
    histograms = _histograms(response.text)
    served = {name: values["count"] for name, values in histograms.items()}
    assert set(served.values()) == {3}  # one observation per request served
    assert histograms["lfmserve:request_generation_tokens"]["sum"] == 21
    ttft, e2e = (histograms[f"lfmserve:{n}_seconds"]["sum"] for n in ("time_to_first_token", "e2e_request_latency"))
    assert 0 < ttft < e2e


def test_slots_show_the_last_request_with_its_budget_reset(metrics_server: ServerThread) -> None:
    _complete(metrics_server, "I believe", 8, id_slot=0)
    (slot,) = httpx.get(metrics_server.url + "/slots").json()
    assert slot["is_processing"] is False and slot["params"]["n_predict"] == 8 and slot["id_task"] > 0
    assert slot["next_token"] == [{"has_next_token": False, "has_new_line": False, "n_remain": -1, "n_decoded": 0}]
