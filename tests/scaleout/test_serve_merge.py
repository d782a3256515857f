"""The deployment's /slots and /metrics, merged from each replica's answer."""

from __future__ import annotations

import json

from lfmserve.scaleout.serve_asgi import HttpResponse
from lfmserve.scaleout.serve_merge import merge_metrics, merge_slots

METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {n}
# HELP lfmserve:ram_cache_bytes Host RAM held by the prompt cache.
# TYPE lfmserve:ram_cache_bytes gauge
lfmserve:ram_cache_bytes{{kind="ram"}} 7
"""


def answer(replica: str, body: str, status: int = 200, *extra: tuple[bytes, bytes]) -> HttpResponse:
    return HttpResponse(status, ((b"x-lfmserve-replica", replica.encode()), *extra), body.encode())


def test_slots_are_one_list_tagged_with_their_replica() -> None:
    merged = merge_slots([answer("b", json.dumps([{"id": 0}])), answer("a", json.dumps([{"id": 0}, {"id": 1}]))])
    assert merged.status == 200
    assert json.loads(merged.body) == [{"id": 0, "replica": "a"}, {"id": 1, "replica": "a"}, {"id": 0, "replica": "b"}]


def test_a_failed_replica_is_left_out_unless_none_answered() -> None:
    busy = answer("b", '{"error": {"code": 503, "message": "no slot available"}}', 503)
    assert json.loads(merge_slots([busy, answer("a", "[]")]).body) == []
    assert merge_slots([busy]) == busy
    assert merge_slots([]).status == 503


def test_metrics_keep_each_header_once_and_label_every_sample() -> None:
    start = (b"process-start-time-unix", b"100")
    merged = merge_metrics(
        [
            answer("b", METRICS.format(n=2), 200, (b"process-start-time-unix", b"90")),
            answer("a", METRICS.format(n=1), 200, start),
        ]
    )
    text = merged.body.decode()
    assert text.count("# TYPE llamacpp:prompt_tokens_total counter") == 1
    assert 'llamacpp:prompt_tokens_total{replica="a"} 1\nllamacpp:prompt_tokens_total{replica="b"} 2\n' in text
    assert 'lfmserve:ram_cache_bytes{replica="a",kind="ram"} 7' in text
    assert merged.header(b"process-start-time-unix") == b"90"
