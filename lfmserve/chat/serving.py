"""One loaded model's serving logic, shared by every API family: neutral requests in, engine outputs out.

No HTTP and no wire shapes here: :class:`Serving` renders the chat template, tokenizes, resolves
sampling defaults and logit biases, submits to the engine and follows what comes back. The API
families shape the outputs into their JSON. A non-streaming answer is the collected stream, so both
modes share one path.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.constraints import Grammars
from ..engine.core import Engine
from ..engine.media import prompt_from_chunks
from ..engine.records import (
    EngineOutput,
    EngineRequest,
    MediaSpan,
    ResolvedDefaults,
    ThinkingBudget,
    TokenLogprob,
)
from ..engine.stream import AsyncStream, CollectingStream
from ..errors import InvalidRequest
from ..llama.model import NativeModel
from ..llama.mtmd import Media
from ..media.sources import MediaPolicy
from ..media.video import VideoOptions
from .embedding_serving import EmbeddingServing
from .media import MediaReader, chat_media_sources, process_media_marker
from .output import THINK_END, THINK_START, AssistantOutputParser
from .plan import ChatPlan, native_constraint, opens_thinking, plan_chat
from .preamble import Preamble
from .prompt_tokens import prompt_tokens
from .render import continuation, render_chat, render_history
from .request import ChatRequest, GenerationOptions, MediaPrompt, Prompt
from .template import ChatFormatter


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingOptions:
    """What the server's flags decide for every request (the loader makes it from the settings groups)."""

    #: The id clients see (``--alias``, else the file name).
    model_name: str
    defaults: ResolvedDefaults
    #: ``-n``: the most tokens a request that does not say generates (-1: until the end).
    default_max_tokens: int = -1
    #: ``system_fingerprint``: the llama.cpp build.
    fingerprint: str = ""
    #: ``--reasoning-format``: where a request that does not say puts the model's thinking.
    reasoning_format: str = "auto"
    media_policy: MediaPolicy = field(default_factory=MediaPolicy)
    #: ``--video-fps``, ``--video-timestamp-interval``, ``--video-ffmpeg-dir``: how a video's frames are taken.
    video: VideoOptions = field(default_factory=VideoOptions)
    #: ``--video-decodes``, resolved: how many videos are decoded at once.
    video_decodes: int = 1
    #: ``--embd-normalize``: how embedding vectors are normalised unless a request says.
    embd_normalize: int = 2
    #: ``--cache-prompt``: whether a request that does not say reuses its cached prefix.
    cache_prompt: bool = True
    #: ``-r``: stop strings every request has besides its own.
    reverse_prompts: tuple[str, ...] = ()
    #: ``--stop``: the stop strings of a request that gives none of its own.
    default_stop: tuple[str, ...] = ()
    #: ``--system-prompt-file``, ``--chat-messages-file``: what every chat is put between (Ollama's layers).
    preamble: Preamble = field(default_factory=Preamble)
    #: ``--verbose``: answers carry llama-server's ``__verbose`` unless a request says otherwise.
    verbose: bool = False
    #: ``--reasoning-budget`` (-1: no limit) and ``--reasoning-budget-message``.
    reasoning_budget: int = -1
    reasoning_budget_message: str = ""
    #: ``--skip-chat-parsing``: the answer is all content, its reasoning and tool calls left as text.
    skip_chat_parsing: bool = False
    #: ``--prefill-assistant``: a chat's final assistant message is continued rather than closed.
    prefill_assistant: bool = True
    #: ``--grammar`` / ``--json-schema``: what a request's output follows when it asks for nothing else.
    grammar: str | None = None
    json_schema: dict[str, Any] | bool | None = None
    #: ``--keep``: prompt tokens a context shift keeps unless a request says (-1: all).
    n_keep: int = 0
    #: ``-bs``: shown as llama-server shows it; sampling runs on the CPU either way.
    backend_sampling: bool = False


@dataclass(slots=True)
class Collected:
    """A whole generation: the joined text and the last output (finish reason, counts, timings)."""

    text: str
    tokens: list[int]
    last: EngineOutput
    logprobs: list[TokenLogprob]


class Serving:
    """Example::

    media = await serving.read_media(chat_request)
    request, parser = serving.prepare_chat(chat_request, media)
    done = await serving.run(request)
    message = parser.parse(done.text)
    """

    def __init__(self, model: NativeModel, engine: Engine, template: ChatFormatter, options: ServingOptions) -> None:
        self.model = model
        self.engine = engine
        self.template = template
        self.options = options
        #: The multimodal projector, if the model has one (the engine encodes with it).
        self.projector = engine.media.projector if engine.media is not None else None
        self.media = MediaReader(
            self.projector, options.media_policy, options.video, video_decodes=options.video_decodes
        )
        #: The text that stands for a media item in a prompt.
        self.media_marker = self.projector.marker if self.projector is not None else process_media_marker()
        self.grammars = Grammars(model)
        self.embeddings = EmbeddingServing(model, engine, self.projector, self.media, options.embd_normalize)

    @property
    def model_name(self) -> str:
        return self.options.model_name

    @property
    def defaults(self) -> ResolvedDefaults:
        return self.options.defaults

    def close(self) -> None:
        """Free the llama.cpp handles: the engine's contexts (and draft model), the projector, then the model
        (no grammar tokenizer is built from it after that)."""
        self.grammars.close()
        self.engine.close()
        if self.projector is not None:
            self.projector.close()
        self.model.close()

    # -- chat ------------------------------------------------------------------------------------
    def render_chat(self, request: ChatRequest) -> str:
        """The prompt a chat request renders to, every tool and template variable included (/apply-template);
        media parts are the media marker."""
        self.media.check_types(chat_media_sources(request))
        request = self.options.preamble.apply(request)
        return render_chat(
            self.template, request, media_marker=self.media_marker, prefill=self.options.prefill_assistant
        )

    async def read_media(self, request: ChatRequest) -> list[Media]:
        """The chat's media, fetched and decoded (in a worker thread); [] when it has none."""
        sources = chat_media_sources(request)
        return await self.media.read(sources) if sources else []

    def prepare_chat(
        self, request: ChatRequest, media: Sequence[Media] = ()
    ) -> tuple[EngineRequest, AssistantOutputParser]:
        """The engine request for a chat whose media :meth:`read_media` has read, and a parser for its output."""
        return self.prepare_choices(request, media, n=1)[0]

    def prepare_choices(
        self, request: ChatRequest, media: Sequence[Media] = (), *, n: int, return_progress: bool = False
    ) -> list[tuple[EngineRequest, AssistantOutputParser]]:
        """``n`` independent answers to one chat (OpenAI's ``n``): the prompt rendered once, each answer with its
        own grammar state and parser; at most one per slot, as llama-server allows. ``return_progress``: the
        engine reports the prompt's prefill as it goes."""
        if n > self.engine.n_slots:
            raise InvalidRequest(f"n is {n}, but the server has {self.engine.n_slots} slots", param="n")
        if len(media) != len(chat_media_sources(request)):
            raise InvalidRequest("the chat's media have not been read (Serving.read_media)", param="messages")
        request = self.options.preamble.apply(request)  # text only: the media's places are unchanged
        reasoning_format, parse = self.options.reasoning_format, not self.options.skip_chat_parsing
        shown = self.template.caps.supports_tools
        plans = [
            plan_chat(request, self.grammars, reasoning_format=reasoning_format, parse=parse, template_tools=shown)
            for _ in range(n)
        ]
        prefill = self.options.prefill_assistant
        prompt = render_chat(self.template, request, plans[0], media_marker=self.media_marker, prefill=prefill)
        tokens, spans = self.tokenize_with_media(prompt, media, chat=True)
        in_reasoning = continuation(request, prefill=prefill) == "reasoning"
        thinking = thinking_budget(self.model, request, self.options, inside=in_reasoning or opens_thinking(prompt))
        return [
            (
                replace(
                    _choice(self.engine_request(request.generation, tokens, plan, media=spans), index),
                    return_progress=return_progress,
                    thinking_budget=thinking,
                ),
                plan.parser(prompt, continues_reasoning=in_reasoning),
            )
            for index, plan in enumerate(plans)
        ]

    def history_tokens(
        self, request: ChatRequest, media: Sequence[Media] = ()
    ) -> tuple[Sequence[int], tuple[MediaSpan, ...]]:
        """The positions and media spans of a chat's messages with every turn closed (:func:`render_history`):
        what a conversation's cache should hold between turns, all its tools and template variables included."""
        prompt = render_history(self.template, self.options.preamble.apply(request), media_marker=self.media_marker)
        return self.tokenize_with_media(prompt, media, chat=True)

    def tokenize_with_media(
        self, text: str, media: Sequence[Media], *, chat: bool
    ) -> tuple[Sequence[int], tuple[MediaSpan, ...]]:
        """A prompt's positions and media spans; ``chat``: a rendered template (no second BOS)."""
        if not media:
            if chat:
                return self.model.tokenize_chat(text), ()
            return self.model.tokenize(text, add_special=True, parse_special=True), ()
        assert self.projector is not None  # the media reader refuses media without one
        bos = self.model.info.bos_token
        try:
            chunks = self.projector.tokenize(text, media, add_special=not (chat and bos and text.startswith(bos)))
        except ValueError as exc:  # markers and media differ in number
            raise InvalidRequest(str(exc), param="prompt") from None
        return prompt_from_chunks(chunks)

    # -- completions -----------------------------------------------------------------------------
    async def read_prompt_media(self, prompts: Sequence[Prompt]) -> list[list[Media]]:
        """Each completion prompt's media (``multimodal_data``), fetched and decoded; [] for a prompt without."""
        media: list[list[Media]] = []
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, MediaPrompt):
                media.append([])
                continue
            if self.projector is None:
                raise InvalidRequest(
                    "Multimodal data provided, but model does not support multimodal requests.", param="prompt"
                )
            items = [(None, source, f"prompt.{i}.multimodal_data.{j}") for j, source in enumerate(prompt.sources)]
            media.append(await self.media.read(items))
        return media

    def prepare_completion(
        self,
        prompts: Sequence[Prompt],
        options: GenerationOptions,
        *,
        stream: bool,
        media: Sequence[Sequence[Media]] = (),
    ) -> list[EngineRequest]:
        """One engine request per prompt (text, token ids, a mix of both, or text with the media that
        :meth:`read_prompt_media` read); a stream follows one."""
        requests = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, MediaPrompt):
                items = media[i] if i < len(media) else ()
                if len(items) != len(prompt.sources):
                    raise InvalidRequest("the prompt's media have not been read (Serving.read_prompt_media)")
                tokens, spans = self.tokenize_with_media(prompt.text, items, chat=False)
                requests.append(self.engine_request(options, tokens, media=spans))
            else:
                requests.append(self.engine_request(options, self.tokenize_prompt(prompt)))
        if stream and len(requests) > 1:
            raise InvalidRequest("streaming is supported for a single prompt only", param="prompt")
        return requests

    def tokenize_prompt(self, prompt: str | Sequence[int | str]) -> list[int]:
        """A completion prompt's tokens: text, token ids, or a mix of both (llama-server's tokenize_mixed)."""
        return prompt_tokens(self.model, prompt)

    # -- engine requests ---------------------------------------------------------------------------
    def engine_request(
        self,
        options: GenerationOptions,
        prompt_tokens: Sequence[int],
        plan: ChatPlan | None = None,
        *,
        media: tuple[MediaSpan, ...] = (),
    ) -> EngineRequest:
        sampling = self.defaults.params.updated(options.sampling)
        sampling = sampling.updated({"logit_bias": logit_bias_pairs(self.model, options.logit_bias)})
        constraint = plan.constraint if plan else None
        if constraint is None:
            constraint = native_constraint(options, self.grammars, self.options.grammar, self.options.json_schema)
        return EngineRequest(
            prompt_tokens=tuple(prompt_tokens),
            media=media,
            sampling=sampling,
            max_tokens=self.options.default_max_tokens if options.max_tokens is None else options.max_tokens,
            stop=tuple(dict.fromkeys((options.stop or self.options.default_stop) + self.options.reverse_prompts)),
            cache_prompt=self.options.cache_prompt if options.cache_prompt is None else options.cache_prompt,
            id_slot=options.id_slot,
            keep_special=plan.keep_special if plan else frozenset(),
            constraint=constraint,
            n_probs=0 if options.n_probs is None else max(options.n_probs, 1),
            post_sampling_probs=options.post_sampling_probs,
            draft_max=options.draft_max,
            lora=options.lora,
            n_keep=self.options.n_keep if options.n_keep is None else options.n_keep,
            n_discard=options.n_discard,
        )

    # -- running ---------------------------------------------------------------------------------
    async def run(self, request: EngineRequest) -> Collected:
        """Generate to the end and return the whole text (the client waits for it all)."""
        return (await self.run_all([request]))[0]

    async def run_all(self, requests: Sequence[EngineRequest]) -> list[Collected]:
        """Several requests at once, run concurrently in the engine's slots, each to its end.

        All are submitted before any is awaited, so one that the engine refuses is refused before the others
        run; if one fails, or the caller gives up (the client has gone), the others are cancelled too, so no
        generation outlives its answer, and their outcomes (each cancelled one's error) are dropped unread.
        """
        submitted: list[tuple[int, CollectingStream]] = []
        try:
            for request in requests:
                stream = CollectingStream()
                submitted.append((self.engine.submit(request, stream), stream))
            lasts = await asyncio.gather(*(stream.last() for _, stream in submitted))
        except BaseException:
            for request_id, stream in submitted:
                self.engine.cancel(request_id)  # a no-op for the ones that finished
                stream.discard()
            raise
        return [
            Collected("".join(stream.texts), stream.tokens, last, stream.logprobs)
            for (_, stream), last in zip(submitted, lasts, strict=True)
        ]

    def start(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Submit now (so invalid requests raise before any response starts) and follow the outputs.

        Leaving the iteration early (the client has gone) cancels the request in the engine.
        """
        stream = AsyncStream()
        request_id = self.engine.submit(request, stream)
        return self._follow(stream, request_id)

    async def _follow(self, stream: AsyncStream, request_id: int) -> AsyncIterator[EngineOutput]:
        finished = False
        try:
            async for out in stream:
                finished = out.finished
                yield out
        finally:
            if not finished:
                self.engine.cancel(request_id)

    # -- what the API families show --------------------------------------------------------------
    def piece(self, token: int) -> bytes:
        """A token's text as the output shows it (kept markers are parsed away before they are shown)."""
        return self.model.token_to_piece(token)

    def shown_steps(self, steps: Sequence[TokenLogprob]) -> list[TokenLogprob]:
        """The steps of the message itself: the end-of-generation token is not part of it."""
        return [step for step in steps if not self.model.is_eog(step.token)]

    # -- text ----------------------------------------------------------------------------------------
    def prompt_text(self, request: EngineRequest) -> str:
        """A request's prompt as text, its media left out (llama-server's ``server_tokens::detokenize``)."""
        if not request.media:
            return self.model.detokenize(request.prompt_tokens, special=True)
        return self.model.detokenize([t for t in request.prompt_tokens if t >= 0], special=True)

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids as text, their pieces joined (special tokens spelled out), as llama-server's /detokenize
        answers; an id outside the vocabulary is a 400."""
        bad = [t for t in tokens if not self.model.is_valid_token(t)]
        if bad:
            raise InvalidRequest(
                f"Invalid token id {bad[0]} (vocabulary has {self.model.n_vocab} tokens)", param="tokens"
            )
        return self.model.join_pieces(tokens)


def _choice(request: EngineRequest, index: int) -> EngineRequest:
    """The request of choice ``index``: a seed given is the first choice's, the next ones take the seeds after it
    (as llama-server seeds its child tasks), so choices differ and each is still reproducible."""
    seed = request.sampling.seed
    if index and seed != -1:
        return replace(request, sampling=request.sampling.updated({"seed": (seed + index) % 2**32}))
    return request


def thinking_budget(
    model: NativeModel, request: ChatRequest, options: ServingOptions, *, inside: bool
) -> ThinkingBudget | None:
    """The request's reasoning budget (its own, else ``--reasoning-budget``) in the model's tokens; None without a
    limit or a control, or for a model whose vocabulary cannot write ``<think>`` and ``</think>``. A control without
    a limit has a budget no thinking spends, as llama-server's has (``INT_MAX``)."""
    budget = options.reasoning_budget if request.reasoning_budget is None else request.reasoning_budget
    if budget < 0 and request.reasoning_control is None:
        return None
    start, end = (tuple(model.tokenize(tag, add_special=False, parse_special=True)) for tag in (THINK_START, THINK_END))
    if not start or not end:
        return None
    message = request.reasoning_budget_message
    message = options.reasoning_budget_message if message is None else message
    written = tuple(model.tokenize(message, add_special=False, parse_special=True)) if message else ()
    limit = budget if budget >= 0 else _UNSPENT
    return ThinkingBudget(limit, start, end, written, starts_inside=inside, control=request.reasoning_control)


#: The budget of a request that only has a control: more tokens than any context holds.
_UNSPENT = 2**31 - 1


def _bias_value(bias: Any) -> float:
    """A bias as a float: a finite number, or ``false`` (llama-server's "never this token")."""
    if bias is False:
        return float("-inf")
    try:
        value = float(bias) if isinstance(bias, int | float) and not isinstance(bias, bool) else math.nan
    except OverflowError:  # an integer too large for a float
        value = math.inf
    if not math.isfinite(value):
        raise InvalidRequest(f"logit_bias values are finite numbers or false (got {bias!r})", param="logit_bias")
    return value


def logit_bias_pairs(model: NativeModel, entries: Sequence[tuple[Any, ...]]) -> tuple[tuple[int, float], ...] | None:
    """Token ids (or text, tokenized) and biases; ``False`` bans a token, as in llama-server. None for no entries:
    the server's biases (``-l``) stay, as a request's replace them in llama-server."""
    if not entries:
        return None
    if any(len(entry) != 2 for entry in entries):
        raise InvalidRequest("logit_bias entries must be [token, bias] pairs", param="logit_bias")
    out: list[tuple[int, float]] = []
    for key, bias in entries:
        value = _bias_value(bias)
        if isinstance(key, str) and not key.lstrip("-").isdigit():
            ids = model.tokenize(key, add_special=False, parse_special=False)
        elif isinstance(key, int | str) and not isinstance(key, bool):
            ids = [int(key)]
        else:
            raise InvalidRequest(f"logit_bias tokens are ids or text (got {key!r})", param="logit_bias")
        for token in ids:
            if not model.is_valid_token(token):
                raise InvalidRequest(
                    f"logit_bias token id {token} is out of range (vocabulary has {model.n_vocab} tokens)",
                    param="logit_bias",
                )
            out.append((token, value))
    return tuple(out)
