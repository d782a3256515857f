"""What /slots and /metrics report, read from an engine's state and counters (a stand-in engine: no model)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import generate_latest

from lfmserve.api.monitoring import metrics_registry, slots_json
from lfmserve.engine.prompt_cache import RamPromptCache
from lfmserve.engine.records import EngineConfig, EngineRequest, EngineStats, SamplingParams
from lfmserve.engine.scheduler import CachedSequence, Checkpoint, Slot
from lfmserve.engine.speculation import SpeculationConfig


@dataclass
class _Engine:
    """The parts of Engine that monitoring reads."""

    slots: tuple[Slot, ...]
    stats: EngineStats = field(default_factory=EngineStats)
    n_waiting: int = 0
    ram_cache: RamPromptCache = field(default_factory=lambda: RamPromptCache(1000))
    requests: dict[int, EngineRequest] = field(default_factory=dict)
    config: EngineConfig = field(default_factory=EngineConfig)

    def slot_request(self, slot_id: int) -> EngineRequest | None:
        return self.requests.get(slot_id)


def test_slots_show_each_slots_request_cache_and_checkpoints() -> None:
    busy = Slot(0, n_ctx=512, tokens=[1, 2, 3, 4], busy=True)
    busy.checkpoints = [Checkpoint(2, b"s" * 10, True), Checkpoint(4, b"t" * 10, False, b"l" * 8)]
    engine = _Engine(
        (busy, Slot(1, n_ctx=512)), config=EngineConfig(speculation=SpeculationConfig(types=("ngram-simple",)))
    )
    engine.requests[0] = EngineRequest(prompt_tokens=(1, 2, 3), sampling=SamplingParams(temperature=0.5), max_tokens=9)
    shown = slots_json(engine)  # type: ignore[arg-type]
    assert shown[1] == {
        "id": 1,
        "n_ctx": 512,
        "speculative": True,
        "is_processing": False,
        "params": {},
        "n_prompt_tokens_cache": 0,
        "checkpoints": [],
        "checkpoints_size": 0,
    }
    assert shown[0]["params"] == {**SamplingParams(temperature=0.5).to_json(), "n_predict": 9}
    assert shown[0]["checkpoints"] == [
        {"n_tokens": 2, "size": 10, "boundary": True, "logits": False},
        {"n_tokens": 4, "size": 18, "boundary": False, "logits": True},
    ]
    assert (shown[0]["is_processing"], shown[0]["n_prompt_tokens_cache"], shown[0]["checkpoints_size"]) == (True, 4, 28)


def test_metrics_have_llama_servers_names_and_the_engines_counts() -> None:
    stats = EngineStats(
        n_prompt_tokens=120,
        prompt_seconds=0.5,
        n_predicted_tokens=30,
        predicted_seconds=1.5,
        n_decode_calls=40,
        n_busy_slots_sum=60,
        n_requests=5,
        n_cache_hits=2,
        n_shifted_tokens=7,
        n_drafts=4,
        n_draft_tokens=22,
        n_draft_tokens_accepted=13,
    )
    engine = _Engine((Slot(0, busy=True), Slot(1)), stats=stats, n_waiting=3)
    engine.ram_cache.put(CachedSequence((1, 2), b"x" * 64))
    text = generate_latest(metrics_registry(engine)).decode()  # type: ignore[arg-type]
    values = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and not line.startswith("#")
    }
    assert {name: values[name] for name in values if name.startswith("llamacpp:")} == {
        "llamacpp:prompt_tokens_total": 120.0,
        "llamacpp:prompt_seconds_total": 0.5,
        "llamacpp:tokens_predicted_total": 30.0,
        "llamacpp:tokens_predicted_seconds_total": 1.5,
        "llamacpp:n_decode_total": 40.0,
        "llamacpp:n_busy_slots_per_decode": 1.5,
        "llamacpp:prompt_tokens_seconds": 240.0,
        "llamacpp:predicted_tokens_seconds": 20.0,
        "llamacpp:requests_processing": 1.0,
        "llamacpp:requests_deferred": 3.0,
        "llamacpp:spec_decode_num_draft_tokens_total": 22.0,
        "llamacpp:spec_decode_num_accepted_tokens_total": 13.0,
        "llamacpp:spec_decode_num_drafts_total": 4.0,
    }
    assert (values["lfmserve:requests_total"], values["lfmserve:prompt_cache_hits_total"]) == (5.0, 2.0)
    assert (values["lfmserve:shifted_tokens_total"], values["lfmserve:ram_cache_bytes"]) == (7.0, 64.0)
