"""Why speculation gains what it gains: spec_bench's greedy replies replayed through the drafter, offline.

Each extractive workload of spec_bench is decoded once on Gemma-3-270M (greedy, in process); then the
reply is replayed token by token: at each step the drafter guesses from the history, a policy picks how
much of the guess to verify, the reply says how much of it is kept, and the step is costed with the batch
costs measured on this machine (``engine/speculation/worth.py``: a batch of n tokens costs 1 + 0.8 +
0.4 (n - 2) single-token decodes). The figure is the reply's tokens per single-token decode: the speed-up
over decoding one token at a time, were the cost model exact. Policies: llama-server's (verify the whole
draft, its look-up only), lfmserve's without and with re-alignment.

Example::

    python bench/spec_replay.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from spec_bench import MAX_TOKENS, WORKLOADS

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest, SamplingParams
from lfmserve.engine.speculation import Acceptance, NgramSizes, best_draft_length
from lfmserve.engine.speculation.ngram import NgramSimple
from lfmserve.engine.speculation.worth import step_cost
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.model import NativeModel
from lfmserve.testing import gemma3_270m_path

Policy = Callable[[float, int], int]
POLICIES: dict[str, tuple[Policy, bool]] = {
    "llama-server (whole draft)": (lambda q, n: n, False),
    "lfmserve, no re-alignment": (best_draft_length, False),
    "lfmserve": (best_draft_length, True),
}


def replies(model: NativeModel) -> dict[str, tuple[list[int], list[int]]]:
    """Each extractive workload's prompt and greedy reply."""
    engine = Engine(model, EngineConfig(n_ctx=8192, n_slots=1, n_batch=2048, n_ubatch=512, n_threads=2))
    out = {}
    try:
        for name in ("fix", "copy", "json"):
            prompt = model.tokenize(WORKLOADS[name]["prompt"], add_special=True, parse_special=True)
            stream = SyncStream()
            sampling = SamplingParams(temperature=0.0, ignore_eos=True)
            engine.submit(EngineRequest(prompt_tokens=tuple(prompt), sampling=sampling, max_tokens=MAX_TOKENS), stream)
            out[name] = (prompt, [t for o in stream for t in o.token_ids])
    finally:
        engine.close()
    return out


def replay(prompt: list[int], reply: list[int], policy: Policy, *, realign: bool) -> float:
    """The reply's tokens per single-token decode under ``policy``.

    As the engine does, a guess left unverified is compared with the tokens then sampled, to measure
    acceptance for free (``Generation.leave_unverified``).
    """
    drafter, acceptance = NgramSimple(NgramSizes()), Acceptance()
    if not realign:
        drafter._realign = lambda tokens, sampled: None  # type: ignore[method-assign]
    unverified: list[int] = []
    matched, cost, i = 0, 0.0, 0
    while i < len(reply) - 1:
        guess = drafter.draft([*prompt, *reply[:i]], reply[i])[: len(reply) - i - 2]
        k = policy(acceptance.q, len(guess)) if guess else 0
        if k == 0:
            if guess and not unverified:
                unverified, matched = guess, 0
            cost += step_cost(1)
            i += 1
            if unverified:  # the token just sampled, against the unverified guess
                hit = reply[i] == unverified[0]
                unverified, matched = unverified[1:], matched + hit
                if not hit or not unverified:
                    acceptance.update(matched, cut_short=not hit)
                    unverified = []
            continue
        if unverified:
            acceptance.update(matched, cut_short=False)
            unverified = []
        kept = 0
        while kept < k and reply[i + 1 + kept] == guess[kept]:
            kept += 1
        drafter.accept(kept)
        acceptance.update(kept, cut_short=kept < k)
        cost += step_cost(1 + k)
        i += kept + 1
    return len(reply) / cost


def main() -> int:
    model = NativeModel(gemma3_270m_path())
    try:
        decoded = replies(model)
    finally:
        model.close()
    print("| policy | " + " | ".join(decoded) + " |\n|---" * 1 + "|---" * len(decoded) + "|")
    for name, (policy, realign) in POLICIES.items():
        row = [f"{replay(p, r, policy, realign=realign):.2f}" for p, r in decoded.values()]
        print(f"| {name} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
