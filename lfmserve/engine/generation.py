"""One request while the engine runs it: from its slot and sampler to the output that ends it.

A :class:`Submission` waits in the engine's queue; once it has a slot it becomes a :class:`Generation`,
which prefills its prompt (the batch step feeds it chunks), then turns each sampled token into text
(detokenizer, then stop strings) and hands it to the request's sink, until end of generation, a stop
string, a finished grammar or a limit ends it. Engine-thread state only.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from ..llama.context import NativeContext
from .detokenizer import StreamingDetokenizer
from .records import (
    EngineOutput,
    EngineRequest,
    EngineStats,
    FinishReason,
    MediaSpan,
    PromptProgress,
    StopType,
    Timings,
)
from .sampling import Sampler
from .scheduler import Slot
from .speculation import Acceptance
from .speculation.ngram import Drafter
from .stop import StopMatcher
from .stream import OutputSink
from .thinking import ThinkingTracker

logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Submission:
    """A request the engine has accepted, waiting for a slot."""

    id: int
    request: EngineRequest
    sink: OutputSink
    #: It had to wait at least once (counted once, for /metrics).
    deferred: bool = False
    #: When the caller submitted it (its queue time and latency count from here).
    t_submitted: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True, slots=True)
class Limits:
    """What ends every generation besides its own request: the slot's size and the end-of-generation tokens."""

    n_ctx_slot: int
    end_tokens: frozenset[int]
    #: A full slot drops its older half and generation goes on (``--context-shift``), instead of stopping.
    context_shift: bool = False


class Generation:
    """A request that holds a slot: prefilling, then one sampled token per step until it finishes or fails."""

    #: ``--spec-synth-rates``' chances, drawn from the request's seed (made at the first draft).
    _synthetic_rng: random.Random | None = None

    def __init__(
        self,
        submission: Submission,
        slot: Slot,
        sampler: Sampler,
        *,
        limits: Limits,
        piece: Callable[[int], bytes],
        stats: EngineStats,
    ) -> None:
        self.id = submission.id
        self._t_submitted = submission.t_submitted
        self.request = submission.request
        self.slot = slot
        self.sampler = sampler
        self._sink = submission.sink
        self._limits = limits
        self._stats = stats
        self._detokenizer = StreamingDetokenizer(piece)
        self._thinking = ThinkingTracker.of(self.request.thinking_budget)
        self._stopper = StopMatcher(self.request.stop)
        #: Prompt tokens the slot already held when the generation started.
        self.n_cached = len(slot.tokens)
        self.timings = Timings(cache_n=self.n_cached)
        #: The last sampled token, decoded in the next step (None while the prompt is prefilling).
        self.pending_token: int | None = None
        #: Where this generation's logits are in the current batch (-1: it wants none this step).
        self.batch_index = -1
        #: Tokens guessed to follow the pending one, decoded with it this step (speculative decoding).
        self.draft: tuple[int, ...] = ()
        #: The n-gram drafter that guessed ``draft`` (None: the draft model), told how much of it was kept.
        self.draft_source: Drafter | None = None
        #: Its n-gram drafters (made at its first draft: some index its history).
        self.drafters: list[Drafter] | None = None
        #: The slot's length and recurrent state before this step's decode, for a rejected draft to restore
        #: (recurrent models: see ``BatchStep``).
        self.snapshot: tuple[int, npt.NDArray[np.uint8]] | None = None
        #: Kept tokens the memory lost with a restored state: decoded again before the pending token.
        self.replay: tuple[int, ...] = ()
        #: How often its drafted tokens are kept, which sets how long a draft is worth verifying.
        self.acceptance = Acceptance()
        #: The record ``draft`` is measured by: ``acceptance``, or its drafter's own (``Drafter.own_acceptance``).
        self.draft_acceptance = self.acceptance
        #: A draft left unverified (it did not look worth it), compared with each token sampled after it.
        self.unverified: tuple[int, ...] = ()
        self._unverified_kept = 0
        self._unverified_acceptance = self.acceptance
        self.n_decoded = 0
        #: The slot's context ran out (generation stopped there, or older tokens were dropped to go on).
        self.truncated = False
        #: The text generated so far has a line break (``/slots`` shows it, as llama-server does).
        self.has_new_line = False
        #: Where prefilling stops to checkpoint: (position, is a message boundary).
        self.checkpoints_due: list[tuple[int, bool]] = []
        #: The media chunk being prefilled and its embedding rows (held: the cache may drop them meanwhile).
        self.media_rows: tuple[MediaSpan, npt.NDArray[np.float32]] | None = None
        #: When the prompt's time starts (set once the memory is prepared and the checkpoints planned).
        self.t_prompt_start = 0.0
        self._t_generation_start = 0.0
        self.done = False

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.request.prompt_tokens

    @functools.cached_property
    def banned_tokens(self) -> frozenset[int]:
        """Tokens this request never samples (a logit bias of -inf; end of generation under ``ignore_eos``):
        a draft model is kept from guessing them."""
        sampling = self.request.sampling
        banned = {token for token, bias in sampling.logit_bias if bias == float("-inf")}
        return frozenset(banned | self._limits.end_tokens if sampling.ignore_eos else banned)

    @property
    def history(self) -> list[int]:
        """Every token of the slot, those still to replay included (what drafts are guessed from)."""
        return [*self.slot.tokens, *self.replay] if self.replay else self.slot.tokens

    @property
    def prefilling(self) -> bool:
        return not self.done and self.pending_token is None

    def time_prompt(self, now: float) -> None:
        """The prompt's timings, as far as it is in the slot's memory: llama-server advances them after each
        batch, so progress reports and per-token timings show them grow."""
        self.timings.prompt_n = len(self.slot.tokens) - self.n_cached
        self.timings.prompt_ms = 1e3 * (now - self.t_prompt_start)

    def prompt_done(self, now: float) -> None:
        """The whole prompt is in the slot's memory: generation starts now (or ends, for a prefill-only request)."""
        self.time_prompt(now)
        if self.request.max_tokens == 0:
            self._finish("", (), "length", "limit")

    def report_progress(self, now: float) -> None:
        """``return_progress``: how far the prefill is, as an output without text (llama-server's progress)."""
        if self.request.return_progress:
            elapsed_ms = 1e3 * (now - self.t_prompt_start)
            progress = PromptProgress(len(self.prompt), self.n_cached, len(self.slot.tokens), elapsed_ms)
            self._sink.put(replace(self._output("", ()), progress=progress))

    def sample(
        self, ctx: NativeContext, stored_logits: npt.NDArray[np.float32] | None = None, *, force: int | None = None
    ) -> None:
        """Sample the next token from this step's logits (or kept ones) and emit its text, or finish; ``force``:
        take that token instead (a reasoning budget's own forced tokens come first)."""
        thinking = self._thinking
        if thinking is not None and thinking.forced_token() is not None:
            force = thinking.forced_token()
        token = self.sampler.sample(ctx, self.batch_index, stored_logits, force=force)
        if thinking is not None:
            thinking.accept(token)
        now = time.perf_counter()
        self.n_decoded += 1
        if self.n_decoded == 1:  # generation's time runs from its first token, which the prompt's decode gave
            self._t_generation_start = now
        self.timings.predicted_n = self.n_decoded
        self.timings.predicted_ms = 1e3 * (now - self._t_generation_start)
        detokenizer, stopper = self._detokenizer, self._stopper
        if token in self._limits.end_tokens and not self.request.sampling.ignore_eos:
            self._finish(detokenizer.flush() + stopper.flush(), (token,), "stop", "eos")
            return
        text, stop_word = stopper.feed(detokenizer.add(token))
        self.has_new_line |= "\n" in text
        # The pending token takes the slot's last free cell: nothing may follow it, unless the context shifts.
        full = len(self.slot.tokens) + 1 >= self._limits.n_ctx_slot and not self._limits.context_shift
        self.truncated |= full
        if stop_word is not None:
            self._finish(text, (token,), "stop", "word", stop_word)
        elif self.sampler.grammar_finished:
            self._finish(text + self._drain(), (token,), "stop", "eos")
        elif self.n_decoded == self.request.max_tokens or full:
            self._finish(text + self._drain(), (token,), "length", "limit")
        else:
            self.pending_token = token
            self._sink.put(self._output(text, (token,)))

    def sample_drafted(self, ctx: NativeContext, draft: tuple[int, ...], synth_rates: Sequence[float] = ()) -> int:
        """Sample at the pending token's position and each drafted one while the samples are the draft: the
        tokens decoding one at a time would give. Returns how many drafted tokens were kept (in the slot's
        tokens now; the memory past them is the caller's to drop). The timings and the engine's counters count
        them as they go: the last sample may finish the generation, and whoever has its last output reads both.
        ``synth_rates``: ``--spec-synth-rates``' chance of keeping each position's drafted token whatever the
        model says."""
        self.timings.draft_n += len(draft)
        self._stats.n_drafts += 1
        self._stats.n_draft_tokens += len(draft)
        accepted = 0
        for i, drafted in enumerate(draft):
            kept_by_chance = self._synthetic_keep(synth_rates, i, drafted)
            self.sample(ctx, force=kept_by_chance)
            # Under synthetic acceptance only chance keeps a drafted token, even one the model samples too.
            if self.done or self.pending_token != drafted or (synth_rates and kept_by_chance is None):
                break
            self.slot.tokens.append(drafted)  # decoded already, with the sample just taken
            self.batch_index += 1
            accepted += 1
            self.timings.draft_n_accepted += 1
            self._stats.n_draft_tokens_accepted += 1
        else:
            self.sample(ctx)  # every drafted token kept: the last position's logits give one more
        return accepted

    def _synthetic_keep(self, rates: Sequence[float], position: int, drafted: int) -> int | None:
        """The drafted token when chance keeps it (llama-server's synthetic acceptance, seeded by the request's
        seed), never an end token nor under a grammar; None: sample."""
        if not rates or drafted in self._limits.end_tokens or self.request.constraint is not None:
            return None
        if self._synthetic_rng is None:
            seed = self.request.sampling.seed
            self._synthetic_rng = random.Random(None if seed < 0 or seed == 0xFFFFFFFF else seed)
        return drafted if self._synthetic_rng.random() < rates[position] else None

    def leave_unverified(self, draft: tuple[int, ...], acceptance: Acceptance) -> None:
        """Keep ``draft`` unverified, to compare with the tokens sampled next (unless one is being compared);
        what it would have kept goes to ``acceptance``."""
        if not self.unverified:
            self.unverified, self._unverified_kept, self._unverified_acceptance = draft, 0, acceptance

    def matched_unverified(self, acceptance: Acceptance) -> int:
        """How many tokens of the unverified draft, when ``acceptance`` measures it, were sampled so far."""
        return self._unverified_kept if self.unverified and self._unverified_acceptance is acceptance else 0

    def drop_unverified(self) -> None:
        """Stop comparing (a draft is verified instead): what matched so far counts as kept."""
        if self.unverified:
            self._unverified_acceptance.update(self._unverified_kept, cut_short=False)
            self.unverified = ()

    def observe_unverified(self) -> None:
        """Compare the token just sampled with the unverified draft: what verifying it would have kept."""
        if not self.unverified or self.pending_token is None:
            return
        matched = self.pending_token == self.unverified[0]
        if matched:
            self.unverified = self.unverified[1:]
            self._unverified_kept += 1
        if not matched or not self.unverified:
            self._unverified_acceptance.update(self._unverified_kept, cut_short=not matched)
            self.unverified = ()

    def fail(self, error: BaseException) -> None:
        """End with an error the consumer raises (cancelled, or the engine failed it)."""
        self._release()
        self._sink.put(error)

    def _drain(self) -> str:
        """The text still held back (a split character, a partial stop string) when generation ends."""
        tail, _ = self._stopper.feed(self._detokenizer.flush())
        return tail + self._stopper.flush()

    def _finish(
        self, text: str, tokens: tuple[int, ...], reason: FinishReason, stop_type: StopType, stopping_word: str = ""
    ) -> None:
        last = self._output(text, tokens, reason, stop_type, stopping_word)
        t = self.timings
        self._stats.n_predicted_tokens += self.n_decoded
        self._stats.n_predicted_steps += t.n_predicted_steps
        self._stats.predicted_seconds += t.predicted_ms / 1e3
        self._stats.requests.observe(
            queued_s=self.t_prompt_start - self._t_submitted,
            first_token_s=self._t_generation_start - self._t_submitted if self.n_decoded else None,
            total_s=time.perf_counter() - self._t_submitted,
            n_prompt=len(self.prompt),
            n_generated=self.n_decoded,
        )
        logger.info(
            "request %d done: slot %d, prompt %d (cached %d), completion %d, ttft %.0f ms, %.1f tok/s (%s)",
            self.id,
            self.slot.id,
            len(self.prompt),
            self.n_cached,
            self.n_decoded,
            t.prompt_ms,
            t.to_json()["predicted_per_second"],
            stop_type,
        )
        self._release()  # before the last output: a client that has the whole answer finds the slot free
        self._sink.put(last)

    def _output(
        self,
        text: str,
        tokens: tuple[int, ...],
        finish_reason: FinishReason | None = None,
        stop_type: StopType | None = None,
        stopping_word: str = "",
    ) -> EngineOutput:
        logprob = self.sampler.last_logprob if tokens else None
        return EngineOutput(
            logprobs=(logprob,) if logprob is not None else (),
            text=text,
            token_ids=tokens,
            id_slot=self.slot.id,
            n_prompt_tokens=len(self.prompt),
            n_cached_tokens=self.n_cached,
            n_decoded=self.n_decoded,
            timings=replace(self.timings),
            finish_reason=finish_reason,
            stop_type=stop_type,
            stopping_word=stopping_word,
            truncated=self.truncated,
        )

    def _release(self) -> None:
        self.sampler.close()
        self.slot.busy = False
        self.slot.last_used = time.monotonic()
        self.done = True
