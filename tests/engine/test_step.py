"""One batch step on its own (no engine thread): which tokens each step decodes for the running generations, on
the tiny attention-only model (no checkpoints) and the tiny LFM2 (recurrent state: snapshots and replays).

Each test builds the step's real collaborators (a context, its slots' memory, generations with greedy samplers)
and reads the batch the step decoded: llama.cpp's batch keeps it until the next step clears it. Then, through
the engine, a tiny Gemma 3's image rows, which mtmd decodes with causal attention off: the log-probabilities
after them are those of llama.cpp's own helper, alone, beside a stream, in pieces and across a checkpoint."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.generation import Generation, Limits, Submission
from lfmserve.engine.media import MediaEncoder, prompt_from_chunks
from lfmserve.engine.memory import SlotMemory
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest, EngineStats, MediaSpan
from lfmserve.engine.sampling import Sampler
from lfmserve.engine.speculation import SpeculationConfig
from lfmserve.engine.speculation.speculator import Generation as Drafting
from lfmserve.engine.speculation.speculator import Speculator
from lfmserve.engine.step import BatchStep
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector, PromptChunk
from lfmserve.testing import (
    TinyGemma3,
    TinyGemma3Projector,
    tinted_pixels,
    write_gemma3_gguf,
    write_gemma3_mmproj_gguf,
)
from tests.engine.conftest import GREEDY, random_tokens, run

#: Greedy and never ending early: a generation runs to its ``max_tokens``.
ENDLESS = replace(GREEDY, ignore_eos=True)


class _Outputs:
    """A generation's sink: what it emitted."""

    def __init__(self) -> None:
        self.items: list[EngineOutput | BaseException] = []

    def put(self, item: EngineOutput | BaseException) -> None:
        self.items.append(item)

    @property
    def tokens(self) -> list[int]:
        return [t for item in self.items if isinstance(item, EngineOutput) for t in item.token_ids]


class _FixedDraft(Speculator):
    """Gives the next step's generating sequences the draft ``then`` holds, once."""

    def __init__(self, n_ctx_slot: int) -> None:
        super().__init__(SpeculationConfig(types=("ngram-simple",)), n_ctx_slot=n_ctx_slot)
        self.then: tuple[int, ...] = ()

    def plan(self, generating: Sequence[Drafting], capacity: int) -> None:
        for gen in generating:
            gen.draft, gen.draft_source = self.then, None
        self.then = ()


class Harness:
    """A context of four 256-token slots, its memory and a batch step, and the generations started on it."""

    def __init__(
        self,
        model: NativeModel,
        *,
        n_batch: int,
        n_ubatch: int,
        drafts: bool = False,
        n_ctx: int = 1024,
        projector: Projector | None = None,
    ) -> None:
        self.model = model
        config = EngineConfig(n_ctx=n_ctx, n_slots=4, n_batch=n_batch, n_ubatch=n_ubatch, n_threads=1)
        self.ctx = NativeContext(
            model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=4, n_threads=1, n_threads_batch=1
        )
        self.stats = EngineStats()
        exact = not model.info.needs_checkpoints(swa_full=config.kv.swa_full)
        self.memory = SlotMemory(self.ctx, config, self.stats, exact_truncation=exact)
        self.drafts = _FixedDraft(self.memory.n_ctx_slot) if drafts else None
        encoder = MediaEncoder(projector, max_bytes=2**24, stats=self.stats) if projector else None
        self.step = BatchStep(self.ctx, self.memory, self.stats, config, encoder=encoder, speculator=self.drafts)
        self.running: list[Generation] = []
        self.outputs: dict[int, _Outputs] = {}
        self._ids = itertools.count(1)

    def start(self, prompt: tuple[int, ...], max_tokens: int = 200, media: tuple[MediaSpan, ...] = ()) -> Generation:
        """A generation of ``prompt`` in the next free slot, as admission leaves it (nothing cached)."""
        slot = next(s for s in self.memory.slots if not s.busy)
        slot.busy = True
        request = EngineRequest(prompt_tokens=prompt, media=media, sampling=ENDLESS, max_tokens=max_tokens)
        sink = _Outputs()
        submission = Submission(next(self._ids), request, sink)
        sampler = Sampler(self.model, ENDLESS, prompt, self.memory.n_ctx_slot)
        limits = Limits(self.memory.n_ctx_slot, self.model.eog_tokens)
        gen = Generation(submission, slot, sampler, limits=limits, piece=self.model.token_to_piece, stats=self.stats)
        self.running.append(gen)
        self.outputs[gen.id] = sink
        return gen

    def run(self) -> bool:
        """One step over the generations still running, as the engine gives them."""
        self.running = [gen for gen in self.running if not gen.done]
        return self.step.run(self.running)

    def decoded(self) -> list[tuple[int, int, bool]]:
        """The last token batch: (sequence, position, logits asked) of each of its tokens."""
        batch = self.ctx.batch
        n = batch.n_tokens
        return [
            (int(s), int(p), bool(w)) for s, p, w in zip(batch.seq[:n], batch.pos[:n], batch.logits[:n], strict=True)
        ]

    def media_decoded(self) -> list[tuple[int, int, int]]:
        """The last step's media rows: (sequence, first position, row count) of each run of them."""
        batch = self.ctx.embd_batch
        runs: list[tuple[int, int, int]] = []
        for seq, pos in zip(batch.seq[: batch.n_tokens], batch.pos[: batch.n_tokens], strict=True):
            if runs and runs[-1][0] == seq and runs[-1][1] + runs[-1][2] == pos:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
            else:
                runs.append((int(seq), int(pos), 1))
        return runs

    def per_sequence(self) -> dict[int, int]:
        """How many tokens of each sequence the last token batch held."""
        counts: dict[int, int] = {}
        for seq, _, _ in self.decoded():
            counts[seq] = counts.get(seq, 0) + 1
        return counts

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture
def harness() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(model: NativeModel, *, n_batch: int = 64, n_ubatch: int = 16, **options: Any) -> Harness:
        made.append(Harness(model, n_batch=n_batch, n_ubatch=n_ubatch, **options))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_alone_prompts_share_the_whole_batch_and_each_samples_its_first_token(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model)
    gens = [h.start(random_tokens(llama_model, n, seed=n)) for n in (5, 7, 9)]
    assert h.run()
    # No stream generates yet: the prompts are not held to a micro-batch, all 21 positions go in one decode.
    assert h.per_sequence() == {0: 5, 1: 7, 2: 9}
    assert [w for _, _, w in h.decoded()].count(True) == 3  # each prompt's last position only
    assert [len(g.slot.tokens) for g in gens] == [5, 7, 9] and [g.n_decoded for g in gens] == [1, 1, 1]
    assert all(g.pending_token is not None for g in gens)
    assert (h.stats.n_prompt_tokens, h.stats.n_decode_calls) == (21, 1)


def test_a_step_decodes_exactly_one_token_for_each_generating_stream(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model)
    gens = [h.start(random_tokens(llama_model, n, seed=n)) for n in (5, 7, 9)]
    h.run()
    for step in range(1, 4):
        pending = [g.pending_token for g in gens]
        assert h.run()
        # Each stream's pending token at the position after its slot's tokens, with its logits.
        assert h.decoded() == [(0, 4 + step, True), (1, 6 + step, True), (2, 8 + step, True)]
        assert [g.slot.tokens[-1] for g in gens] == pending
        assert [len(g.slot.tokens) for g in gens] == [5 + step, 7 + step, 9 + step]
        assert [g.n_decoded for g in gens] == [1 + step] * 3
    assert [h.outputs[g.id].tokens[:4] for g in gens] == [[*g.slot.tokens[-3:], g.pending_token] for g in gens]
    assert (h.stats.n_prompt_tokens, h.stats.n_decode_calls, h.stats.n_tokens_max) == (21, 4, 12)


def test_while_a_stream_generates_a_prompt_is_prefilled_one_micro_batch_a_step(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model, n_batch=64, n_ubatch=16)
    stream = h.start(random_tokens(llama_model, 4, seed=1))
    h.run()
    prompt = h.start(random_tokens(llama_model, 40, seed=2))
    h.run()
    # The stream's token, then 16 prompt positions from 0, none asking for logits: the prompt is not at its end.
    assert h.decoded() == [(0, 4, True), *((1, p, False) for p in range(16))]
    assert (len(prompt.slot.tokens), prompt.pending_token) == (16, None)
    h.run()
    assert h.per_sequence() == {0: 1, 1: 16} and len(prompt.slot.tokens) == 32
    h.run()
    # The last 8: the prompt's end asks for logits, and its first token is sampled in this step.
    assert h.decoded() == [(0, 6, True), *((1, p, False) for p in range(32, 39)), (1, 39, True)]
    assert len(prompt.slot.tokens) == 40 and prompt.pending_token is not None and prompt.n_decoded == 1
    assert stream.n_decoded == 4  # one token every step, the prefill beside it
    h.run()
    assert h.per_sequence() == {0: 1, 1: 1}


def test_the_micro_batch_goes_to_the_oldest_prompt_first(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model, n_batch=64, n_ubatch=16)
    h.start(random_tokens(llama_model, 4, seed=1))
    h.run()
    older, newer = h.start(random_tokens(llama_model, 10, seed=2)), h.start(random_tokens(llama_model, 30, seed=3))
    h.run()
    assert h.per_sequence() == {0: 1, 1: 10, 2: 6}  # the older prompt whole, the newer the rest of the 16
    assert older.pending_token is not None and len(newer.slot.tokens) == 6
    h.run()
    assert h.per_sequence() == {0: 1, 1: 1, 2: 16}
    h.run()
    assert h.per_sequence() == {0: 1, 1: 1, 2: 8} and newer.pending_token is not None


def test_alone_a_prompt_longer_than_the_batch_takes_a_whole_batch_a_step(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model, n_batch=64, n_ubatch=16)
    gen = h.start(random_tokens(llama_model, 100, seed=4))
    h.run()
    assert h.per_sequence() == {0: 64} and not any(w for _, _, w in h.decoded())
    assert (len(gen.slot.tokens), gen.n_decoded) == (64, 0)
    h.run()
    assert h.per_sequence() == {0: 36} and h.decoded()[-1] == (0, 99, True)
    assert (len(gen.slot.tokens), gen.n_decoded, h.stats.n_prompt_tokens) == (100, 1, 100)


def test_a_prompt_chunk_stops_at_the_next_checkpoint(harness: Callable[..., Harness], model: NativeModel) -> None:
    """On the tiny LFM2, whose recurrent state can only be restored where it was saved."""
    h = harness(model, n_batch=64, n_ubatch=16)
    gen = h.start(random_tokens(model, 30, seed=5))
    gen.checkpoints_due = [(10, True)]
    h.run()
    assert h.per_sequence() == {0: 10}
    assert [(c.n_tokens, c.boundary) for c in gen.slot.checkpoints] == [(10, True)]
    h.run()
    assert h.per_sequence() == {0: 20} and gen.pending_token is not None
    # And the prompt's end, with its logits (a regenerated reply samples from them at once).
    assert [(c.n_tokens, c.boundary, c.logits is not None) for c in gen.slot.checkpoints] == [
        (10, True, False),
        (30, False, True),
    ]
    assert h.stats.n_checkpoints_saved == 2


def test_a_finished_generation_frees_its_slot_and_leaves_the_batch(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model)
    short = h.start(random_tokens(llama_model, 6, seed=6), max_tokens=2)
    other = h.start(random_tokens(llama_model, 8, seed=7))
    h.run()  # both prompts, and each one's first token
    h.run()  # the second token: the short one is done
    outputs = h.outputs[short.id]
    last = outputs.items[-1]
    assert short.done and not short.slot.busy and isinstance(last, EngineOutput)
    assert (last.finish_reason, last.n_decoded, len(outputs.tokens)) == ("length", 2, 2)
    # The last sampled token was never decoded: the slot holds the prompt and the first token only.
    assert len(short.slot.tokens) == 7 and short.slot.tokens[-1] == outputs.tokens[0]
    h.run()
    assert h.per_sequence() == {1: 1} and other.n_decoded == 3


def test_a_prefill_only_prompt_asks_for_no_logits_and_finishes_once_in_memory(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    h = harness(llama_model)
    gen = h.start(random_tokens(llama_model, 12, seed=8), max_tokens=0)
    h.run()
    assert h.decoded() == [(0, p, False) for p in range(12)]
    last = h.outputs[gen.id].items[-1]
    assert isinstance(last, EngineOutput) and (last.finish_reason, last.n_decoded, last.token_ids) == ("length", 0, ())
    assert gen.done and len(gen.slot.tokens) == 12


def _greedy_tokens(harness: Callable[..., Harness], model: NativeModel, prompt: tuple[int, ...], n: int) -> list[int]:
    """The first ``n`` tokens greedy decoding samples after ``prompt``, a token a step."""
    h = harness(model)
    gen = h.start(prompt)
    while gen.n_decoded < n:
        h.run()
    return h.outputs[gen.id].tokens


def _drafting(
    harness: Callable[..., Harness], model: NativeModel, *, seed: int
) -> tuple[tuple[int, ...], list[int], Harness, Generation]:
    """An 8-token prompt, the 4 tokens greedy decoding samples after it, and a drafting harness that has run one
    step: its pending token is the first of those."""
    prompt = random_tokens(model, 8, seed=seed)
    greedy = _greedy_tokens(harness, model, prompt, 4)
    h = harness(model, drafts=True)
    gen = h.start(prompt)
    h.run()
    assert gen.pending_token == greedy[0]
    return prompt, greedy, h, gen


def test_a_draft_is_decoded_after_the_pending_token_and_its_rejected_tail_is_removed(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    prompt, r, h, gen = _drafting(harness, llama_model, seed=9)
    assert h.drafts is not None
    wrong = (r[3] + 1) % llama_model.n_vocab
    h.drafts.then = (r[1], r[2], wrong)
    h.run()
    # The pending token and the three drafted ones, each asking for logits: one decode, four positions.
    assert h.decoded() == [(0, 8, True), (0, 9, True), (0, 10, True), (0, 11, True)]
    # Two drafted tokens were what greedy decoding samples, the third was not: r[3] is sampled in its place.
    assert gen.slot.tokens == [*prompt, r[0], r[1], r[2]] and gen.pending_token == r[3]
    assert h.ctx.seq_pos_max(0) == 10  # the wrong token's cell is gone
    assert h.outputs[gen.id].tokens == r[:4] and gen.n_decoded == 4
    assert (h.stats.n_drafts, h.stats.n_draft_tokens, h.stats.n_draft_tokens_accepted) == (1, 3, 2)
    assert (gen.timings.draft_n, gen.timings.draft_n_accepted) == (3, 2)


def test_a_draft_is_counted_before_the_last_output_it_finishes(
    harness: Callable[..., Harness], llama_model: NativeModel
) -> None:
    """Whoever has a request's last output reads counters that include its drafts (/metrics beside timings)."""
    prompt = random_tokens(llama_model, 8, seed=9)
    r = _greedy_tokens(harness, llama_model, prompt, 3)
    h = harness(llama_model, drafts=True)
    gen = h.start(prompt, max_tokens=3)
    sink, counted = h.outputs[gen.id], list[tuple[int, int, int]]()
    put = sink.put

    def counting_put(item: EngineOutput | BaseException) -> None:
        counted.append((h.stats.n_drafts, h.stats.n_draft_tokens, h.stats.n_draft_tokens_accepted))
        put(item)

    sink.put = counting_put  # type: ignore[method-assign]
    h.run()
    assert h.drafts is not None and gen.pending_token == r[0]
    h.drafts.then = (r[1], r[2])
    h.run()  # r[1] kept; sampling r[2], the third token, finishes the generation
    assert gen.done and sink.tokens == r[:3]
    assert (gen.timings.draft_n, gen.timings.draft_n_accepted) == (2, 1)
    assert counted[-1] == (1, 2, 1)


def test_a_recurrent_model_restores_its_state_and_replays_the_kept_tokens(
    harness: Callable[..., Harness], model: NativeModel
) -> None:
    prompt, r, h, gen = _drafting(harness, model, seed=10)
    assert h.drafts is not None
    h.drafts.then = (r[1], (r[2] + 1) % model.n_vocab)
    h.run()
    assert h.per_sequence() == {0: 3}
    # One drafted token kept, then a wrong one: the state before the step is back, and the two tokens decoded
    # since that were kept wait to be decoded again, before the pending one.
    assert gen.slot.tokens == list(prompt) and gen.replay == (r[0], r[1]) and gen.pending_token == r[2]
    assert h.ctx.seq_pos_max(0) == 7
    h.run()
    assert h.decoded() == [(0, 8, False), (0, 9, False), (0, 10, True)]
    assert gen.slot.tokens == [*prompt, r[0], r[1], r[2]] and not gen.replay and gen.pending_token == r[3]
    assert h.outputs[gen.id].tokens == r[:4]


# -- media rows that mtmd decodes with causal attention off (Gemma 3's images) -----------------------------

N_LOGPROBS = 6


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NativeModel, Projector]]:
    """The tiny Gemma 3 and a projector that makes 256 rows of an image, as Gemma 3's does."""
    folder = tmp_path_factory.mktemp("gemma3")
    model = NativeModel(write_gemma3_gguf(folder / "gemma3.gguf", TinyGemma3(seed=1)))
    path = write_gemma3_mmproj_gguf(folder / "mmproj.gguf", TinyGemma3Projector(seed=1, image_size=256))
    projector = Projector(str(path), model, n_threads=1)
    yield model, projector
    projector.close()
    model.close()


def _image_chunks(projector: Projector, n_words_before: int = 0) -> list[PromptChunk]:
    words = " hello" * n_words_before
    text = f"<start_of_turn>user\n{words}What is this: {projector.marker}\nSay.<end_of_turn>\n<start_of_turn>model\n"
    return projector.tokenize(text, [Media.image(tinted_pixels(64, 48, seed=2))])


def _mtmd_logprobs(model: NativeModel, projector: Projector, chunks: list[PromptChunk], n_batch: int) -> list[float]:
    """The greedy tokens' log-probabilities after a prefill as llama-server's: text in batches of ``n_batch``,
    each image through mtmd's own ``mtmd_helper_eval_chunk_single``, in a fresh context."""
    params = llama.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 2048, n_batch, n_batch
    params.n_threads = params.n_threads_batch = 1
    ctx = llama.llama_init_from_model(model.handle, params)
    batch = llama.llama_batch_init(n_batch, 0, 1)

    def decode(tokens: Sequence[int], pos: int) -> None:
        for start in range(0, len(tokens), n_batch):
            part = tokens[start : start + n_batch]
            batch.n_tokens = len(part)
            for i, token in enumerate(part):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos + start + i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, i == len(part) - 1
            assert llama.llama_decode(ctx, batch) == 0

    try:
        pos = llama.llama_pos(0)
        for chunk in chunks:
            if chunk.kind == "text":
                decode(chunk.tokens, pos.value)
                pos.value += chunk.n_tokens
            else:
                rc = mtmd.mtmd_helper_eval_chunk_single(
                    projector.handle, ctx, chunk._handle, pos, 0, n_batch, False, pos
                )
                assert rc == 0
        logprobs = []
        for _ in range(N_LOGPROBS):
            logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, -1), shape=(model.n_vocab,)).astype(float)
            token = int(np.argmax(logits))
            logprobs.append(float(logits[token] - logits.max() - np.log(np.exp(logits - logits.max()).sum())))
            decode([token], pos.value)
            pos.value += 1
        return logprobs
    finally:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)


def _request(chunks: list[PromptChunk]) -> EngineRequest:
    prompt, spans = prompt_from_chunks(chunks)
    return EngineRequest(prompt_tokens=prompt, media=spans, sampling=GREEDY, max_tokens=N_LOGPROBS, n_probs=1)


def _logprobs(outputs: list[EngineOutput]) -> list[float]:
    return [entry.logprob for out in outputs for entry in out.logprobs]


@contextlib.contextmanager
def _gemma3_engine(gemma3: tuple[NativeModel, Projector], n_ubatch: int, **config: int) -> Iterator[Engine]:
    """An engine over a projector of its own: the module's encodes on this thread (the harness's steps), and a
    projector's context encodes on one thread only."""
    model, projector = gemma3
    options = {"n_ctx": 2048, "n_slots": 2, "n_batch": n_ubatch, "n_ubatch": n_ubatch, "n_threads": 1, **config}
    own = Projector(projector.path, model, n_threads=projector.n_threads)
    engine = Engine(model, EngineConfig(**options), projector=own)
    try:
        yield engine
    finally:
        engine.close()
        own.close()


@pytest.mark.parametrize("n_ubatch", [512, 64])  # the image in one decode; in pieces of a micro-batch, as mtmd
def test_an_image_decoded_non_causally_gives_mtmds_log_probabilities(
    gemma3: tuple[NativeModel, Projector], n_ubatch: int
) -> None:
    model, projector = gemma3
    chunks = _image_chunks(projector)
    assert [(c.kind, c.n_tokens, c.non_causal) for c in chunks][1] == ("image", 256, True)
    with _gemma3_engine(gemma3, n_ubatch) as engine:
        expected = _mtmd_logprobs(model, projector, chunks, n_ubatch)
        np.testing.assert_allclose(_logprobs(run(engine, _request(chunks))), expected, rtol=1e-4, atol=1e-6)
        chunks[1].non_causal = False  # what decoding them causally gave: the comparison tells them apart
        causal = _logprobs(run(engine, replace(_request(chunks), cache_prompt=False)))
        assert np.abs(np.subtract(causal, expected)).min() > 1e-2


def test_an_image_beside_a_stream_waits_for_a_step_with_room_for_all_its_rows(
    harness: Callable[..., Harness], gemma3: tuple[NativeModel, Projector]
) -> None:
    """While a stream generates, a step holds one micro-batch (256 rows): the text before the image takes part
    of one, so the image's 256 rows wait for the next step rather than being cut in two."""
    model, projector = gemma3
    h = harness(model, n_batch=256, n_ubatch=256, n_ctx=2048, projector=projector)
    h.start(random_tokens(model, 4, seed=1))
    h.run()
    prompt, spans = prompt_from_chunks(_image_chunks(projector))
    gen = h.start(prompt, media=spans)
    (image,) = spans
    h.run()
    assert h.per_sequence() == {0: 1, 1: image.start} and h.media_decoded() == []
    h.run()
    assert h.per_sequence() == {0: 1} and h.media_decoded() == [(1, image.start, 256)]
    h.run()
    assert h.per_sequence() == {0: 1, 1: len(prompt) - image.end} and gen.pending_token is not None


def test_a_step_never_decodes_rows_of_both_attentions_together(
    harness: Callable[..., Harness], gemma3: tuple[NativeModel, Projector]
) -> None:
    """Rows mtmd decodes causally (here an image marked so) wait for a decode of their own."""
    model, projector = gemma3
    h = harness(model, n_batch=1024, n_ubatch=1024, n_ctx=4096, projector=projector)
    requests = [prompt_from_chunks(_image_chunks(projector)) for _ in range(2)]
    requests[0][1][0].chunk.non_causal = False
    gens = [h.start(prompt, media=spans) for prompt, spans in requests]
    start = requests[0][1][0].start
    h.run()
    assert h.per_sequence() == {0: start, 1: start} and h.media_decoded() == [(0, start, 256)]
    h.run()
    assert h.media_decoded() == [(1, start, 256)] and len(gens[1].slot.tokens) == start + 256


def test_a_checkpoint_due_inside_an_image_is_skipped(gemma3: tuple[NativeModel, Projector]) -> None:
    """Gemma 3's sliding window takes checkpoints every 256 tokens; one falls inside the image's rows, which are
    decoded at once, so it is dropped (the image's end is too near the prompt's end for one of its own)."""
    model, projector = gemma3
    chunks = _image_chunks(projector, n_words_before=100)
    image = prompt_from_chunks(chunks)[1][0]
    assert image.start < 256 < image.end
    with _gemma3_engine(gemma3, 512, n_slots=1) as engine:
        out = run(engine, _request(chunks))
        np.testing.assert_allclose(_logprobs(out), _mtmd_logprobs(model, projector, chunks, 512), rtol=1e-4, atol=1e-6)
        n_prompt = len(prompt_from_chunks(chunks)[0])
        assert [c.n_tokens for c in engine.slots[0].checkpoints] == [n_prompt]
