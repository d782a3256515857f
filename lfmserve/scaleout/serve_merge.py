"""``GET /slots`` and ``GET /metrics`` for a whole deployment: every replica's answer, merged into one.

The ingress asks each replica (Serve's ``handle.broadcast``) and hands the answers here, each tagged with the
replica's name (its ``x-lfmserve-replica`` header). ``/slots`` becomes one list whose entries also carry
``"replica"`` (slot ids are per replica); ``/metrics`` keeps each metric's ``# HELP`` / ``# TYPE`` once and
labels every sample ``replica="..."``, so Prometheus can sum counters or look at one replica. A replica that
failed is left out while another answered; when none did, the first failure is the answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .serve_asgi import HttpResponse
from .serve_replica import REPLICA_HEADER

#: llama-server's header with the server's start time (the earliest replica's, merged).
START_TIME_HEADER = b"process-start-time-unix"


def merge_slots(answers: Sequence[HttpResponse]) -> HttpResponse:
    """One ``/slots`` list: each replica's slots, in replica order, tagged with ``"replica"``."""
    ok = _answered(answers)
    if not ok:
        return _first_failure(answers)
    slots = [{**slot, "replica": _name(answer)} for answer in sorted(ok, key=_name) for slot in json.loads(answer.body)]
    return HttpResponse(200, ((b"content-type", b"application/json"),), json.dumps(slots).encode())


def merge_metrics(answers: Sequence[HttpResponse]) -> HttpResponse:
    """One Prometheus text: each family's header once, then its samples from every replica, labelled."""
    ok = sorted(_answered(answers), key=_name)
    if not ok:
        return _first_failure(answers)
    families: dict[str, tuple[list[str], list[str]]] = {}
    for answer in ok:
        for name, header, samples in _families(answer.body.decode()):
            family = families.setdefault(name, (header, []))
            family[1].extend(_labelled(sample, _name(answer)) for sample in samples)
    lines = [line for header, samples in families.values() for line in (*header, *samples)]
    starts = [value for value in (answer.header(START_TIME_HEADER) for answer in ok) if value is not None]
    headers = [(b"content-type", ok[0].header(b"content-type") or b"text/plain")]
    if starts:
        headers.append((b"Process-Start-Time-Unix", min(starts, key=int)))
    return HttpResponse(200, tuple(headers), ("\n".join(lines) + "\n").encode())


def _answered(answers: Sequence[HttpResponse]) -> list[HttpResponse]:
    return [answer for answer in answers if answer.status == 200]


def _first_failure(answers: Sequence[HttpResponse]) -> HttpResponse:
    if answers:
        return answers[0]
    body = {"error": {"code": 503, "message": "no replica answered", "type": "unavailable_error"}}
    return HttpResponse(503, ((b"content-type", b"application/json"),), json.dumps(body).encode())


def _name(answer: HttpResponse) -> str:
    return (answer.header(REPLICA_HEADER) or b"").decode()


def _families(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(name, its # lines, its samples) in order; a sample belongs to the family whose header came last."""
    families: list[tuple[str, list[str], list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(maxsplit=3)
            name = parts[2] if len(parts) > 2 else ""
            if not families or families[-1][0] != name:
                families.append((name, [], []))
            families[-1][1].append(line)
        else:
            if not families:
                families.append(("", [], []))
            families[-1][2].append(line)
    return families


def _labelled(sample: str, replica: str) -> str:
    """``name{...} value`` with ``replica="..."`` as its first label."""
    label = 'replica="{}"'.format(replica.replace("\\", "\\\\").replace('"', '\\"'))
    brace, space = sample.find("{"), sample.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        labels = sample[brace + 1 :]
        return f"{sample[:brace]}{{{label}{'' if labels.startswith('}') else ','}{labels}"
    name, _, rest = sample.partition(" ")
    return f"{name}{{{label}}} {rest}"
