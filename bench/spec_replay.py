"""Why speculation gains what it gains: spec_bench's greedy replies replayed through the drafter, offline.

Each extractive workload of spec_bench is decoded once on Gemma-3-270M (greedy, in process); then the
reply is replayed token by token: at each step the drafter guesses from the history, a policy picks how
much of the guess to verify, the reply says how much of it is kept, and the step is costed with the batch
costs measured here and now (``engine/speculation/costs.py``, as the engine measures them when it starts).
The figure is the reply's tokens per single-token decode: the speed-up over decoding one token at a time,
were the measured costs exact. Policies: llama-server's (verify the whole draft, its look-up only); then
lfmserve's "worth it" choice with the linear cost model, with the measured costs, and with the measured
costs and the short look-ups (re-alignment, the longest 3-token match) that ``ngram-simple`` adds.

Example::

    python bench/spec_replay.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from spec_bench import MAX_TOKENS, WORKLOADS

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest, SamplingParams
from lfmserve.engine.speculation import Acceptance, NgramSizes, best_draft_length
from lfmserve.engine.speculation.costs import measure_batch_costs
from lfmserve.engine.speculation.ngram import NgramSimple
from lfmserve.engine.speculation.worth import LINEAR_COSTS, BatchCosts
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.testing import gemma3_270m_path


@dataclass(frozen=True)
class Policy:
    whole_draft: bool  # llama-server: every drafted token verified
    measured_costs: bool  # the draft length chosen with the measured costs (else the linear model)
    short_lookups: bool  # ngram-simple's re-alignment and longest-match look-ups


POLICIES = {
    "llama-server (whole draft, 12-token look-up)": Policy(True, False, False),
    "worth it, linear costs, 12-token look-up": Policy(False, False, False),
    "worth it, measured costs, 12-token look-up": Policy(False, True, False),
    "lfmserve: measured costs and short look-ups": Policy(False, True, True),
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


def replay(prompt: list[int], reply: list[int], policy: Policy, costs: BatchCosts) -> float:
    """The reply's tokens per single-token decode under ``policy``, each step costed with ``costs``.

    As the engine does, a guess left unverified is compared with the tokens then sampled, to measure
    acceptance for free (``Generation.leave_unverified``).
    """
    drafter, acceptance = NgramSimple(NgramSizes()), Acceptance()
    if not policy.short_lookups:
        drafter._realign = drafter._longest_match = lambda tokens, sampled: None  # type: ignore[method-assign]
    choice_costs = costs if policy.measured_costs else LINEAR_COSTS
    unverified: list[int] = []
    unverified_by = acceptance
    matched, cost, i = 0, 0.0, 0
    while i < len(reply) - 1:
        guess = drafter.draft([*prompt, *reply[:i]], reply[i])[: len(reply) - i - 2]
        by = drafter.own_acceptance or acceptance
        k = 0
        if guess:
            q = by.q_with(matched if unverified and unverified_by is by else 0)  # as ``Speculator._choose``
            k = len(guess) if policy.whole_draft else best_draft_length(q, len(guess), costs=choice_costs)
        if k == 0:
            if guess and not unverified:
                unverified, unverified_by, matched = guess, by, 0
            cost += 1.0
            i += 1
            if unverified:  # the token just sampled, against the unverified guess
                hit = reply[i] == unverified[0]
                unverified, matched = unverified[1:], matched + hit
                if not hit or not unverified:
                    unverified_by.update(matched, cut_short=not hit)
                    unverified = []
            continue
        if unverified:
            unverified_by.update(matched, cut_short=False)
            unverified = []
        kept = 0
        while kept < k and reply[i + 1 + kept] == guess[kept]:
            kept += 1
        drafter.accept(kept)
        by.update(kept, cut_short=kept < k)
        cost += costs(1 + k)
        i += kept + 1
    return len(reply) / cost


def main() -> int:
    model = NativeModel(gemma3_270m_path())
    try:
        decoded = replies(model)
        ctx = NativeContext(model, n_ctx=4096, n_batch=512, n_ubatch=512, n_seq_max=1, n_threads=2, n_threads_batch=2)
        try:
            costs = measure_batch_costs(ctx, seq_id=0, n_max=49, budget_s=30.0)
        finally:
            ctx.close()
    finally:
        model.close()
    print("| policy | " + " | ".join(decoded) + " |\n|---" + "|---" * len(decoded) + "|")
    for name, policy in POLICIES.items():
        row = [f"{replay(p, r, policy, costs):.2f}" for p, r in decoded.values()]
        print(f"| {name} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
