"""The routing key of a request, and the replicas ranked for it: affinity first, then a load bound.

Why a key from the body: an LFM2 replica reuses its cache only from checkpointed boundaries (system prompt,
message ends), so what must land on the same replica is a *conversation*: every turn re-sends the same tools,
template options and opening messages, and only appends. Hashing those (not the whole prompt) gives one key
per conversation that does not change from turn to turn. A client that knows better sends ``x-session-id``.

Why rendezvous hashing with a load bound (Mirrokni et al., "consistent hashing with bounded loads"): each key
has a stable order of preference over the replicas, adding a replica moves only the keys that now prefer it
(about 1/N), and a replica loaded beyond ``balance`` times the average is passed over, so a hot key or an
unlucky spread spills to the next replica in its order instead of queueing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The header a client may send to name its conversation (Ray Serve reads the same one).
SESSION_HEADER = "x-session-id"
#: How much of a completion prompt the key covers: its opening, which a family of prompts shares.
PROMPT_PREFIX_CHARS = 512
#: A replica above this multiple of the mean load (counting the request being placed) is passed over.
DEFAULT_BALANCE = 1.25


def route_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """``session:<id>`` from ``x-session-id``; else a hash of the conversation's fixed part; "" for nothing to go by.

    Chat bodies (OpenAI chat, Anthropic messages, OpenAI Responses): tools, ``chat_template_kwargs`` and the
    messages up to and including the first user message (the system prompt included). Completions: the first
    :data:`PROMPT_PREFIX_CHARS` characters of the prompt.
    """
    for name, value in headers.items():
        if name.lower() == SESSION_HEADER and value:
            return f"session:{value}"
    opening = _opening(body)
    if opening is None:
        return ""
    fixed = {"tools": body.get("tools"), "template": body.get("chat_template_kwargs"), "opening": opening}
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()
    return f"{'prompt' if isinstance(opening, str) else 'chat'}:{digest[:24]}"


def _opening(body: Mapping[str, Any]) -> list[Any] | str | None:
    """The part of the body that every turn repeats: the leading messages through the first user message."""
    messages = body.get("messages")
    if messages is None and isinstance(body.get("input"), list):
        messages = body["input"]  # OpenAI Responses
    if isinstance(messages, list) and messages:
        system = [{"role": "system", "content": body["system"]}] if body.get("system") else []  # Anthropic
        if body.get("instructions"):  # OpenAI Responses
            system.append({"role": "system", "content": body["instructions"]})
        head = [*system]
        for message in messages:
            head.append(message)
            if isinstance(message, Mapping) and message.get("role") == "user":
                break
        return head
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt[:PROMPT_PREFIX_CHARS]
    return None


def preference(key: str, replicas: Sequence[str]) -> list[str]:
    """The replicas in the key's rendezvous order: highest hash of (key, replica) first; stable per key."""
    return sorted(replicas, key=lambda replica: _weight(key, replica), reverse=True)


def _weight(key: str, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{replica}".encode(), digest_size=8).digest(), "big")


def rank(
    key: str,
    replicas: Sequence[str],
    loads: Mapping[str, int],
    *,
    capacity: int | None = None,
    balance: float = DEFAULT_BALANCE,
) -> list[str]:
    """Every replica, best first, for a request with ``key`` when ``loads`` (in-flight requests) stand.

    The key's rendezvous order, except that a replica whose load would exceed ``ceil(balance * mean)`` (the
    mean counting this request) or reach ``capacity`` (its slots) goes behind the ones that would not, in the
    same order. A request without a key ("") prefers the least loaded replicas.
    """
    if not replicas:
        return []
    if not key:
        return sorted(replicas, key=lambda replica: (loads.get(replica, 0), replica))
    bound = math.ceil(balance * (sum(loads.get(r, 0) for r in replicas) + 1) / len(replicas))
    ordered = preference(key, replicas)

    def fits(replica: str) -> bool:
        load = loads.get(replica, 0)
        return load + 1 <= bound and (capacity is None or load < capacity)

    return [r for r in ordered if fits(r)] + [r for r in ordered if not fits(r)]
