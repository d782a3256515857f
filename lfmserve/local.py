"""In-process chat: the seed's native conversation loop, for apps that cannot spawn a server.

Each turn renders the whole history with the model's chat template, prefills only the suffix the
cache does not hold yet, streams the reply until end of generation, then decodes the end-of-turn
tokens so the cache equals the next turn's render exactly. :meth:`Chat.reset` forgets the
conversation without reloading the model. The engine is the same one the server uses.

Example::

    with lfmserve.Model("LFM2.5-1.2B-Instruct-Q4_K_M.gguf") as model:
        chat = model.chat(system="You are a helpful assistant.")
        print(chat.send("My name is Ada."))
        for piece in chat.stream("What is my name?", temperature=0.1):
            print(piece, end="", flush=True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from .engine.core import Engine
from .engine.records import SAMPLING_NAMES, EngineOutput, EngineRequest
from .engine.stream import SyncStream
from .llama.model import ModelInfo, NativeModel
from .models.loader import chat_template, engine_config, sampling_defaults
from .settings import Settings, sampling_fields


@dataclass(frozen=True, slots=True)
class TurnStats:
    """What one turn cost: the prompt, what the cache already had, what was prefilled and generated."""

    n_prompt_tokens: int
    n_cached_tokens: int
    n_prefilled: int
    n_generated: int
    n_closing_tokens: int
    finish_reason: str | None


class Model:
    """A GGUF loaded in this process, with its own engine thread (one slot per concurrent chat)."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_parallel: int = 1,
        n_threads: int | None = None,
        chat_template_file: str | None = None,
        **sampling_defaults_: Any,
    ) -> None:
        settings = Settings(
            model=str(path),
            ctx_size=n_ctx,
            parallel=n_parallel,
            chat_template_file=chat_template_file,
            **_sampling_defaults(sampling_defaults_),
        )
        self.settings = dataclasses.replace(settings, threads=n_threads) if n_threads else settings
        self._native = NativeModel(path, n_gpu_layers=self.settings.n_gpu_layers)
        self.template = chat_template(self.settings, self._native)
        self.defaults = sampling_defaults(self.settings, self._native).params
        self.engine = Engine(self._native, engine_config(self.settings))
        self._next_slot = 0

    @property
    def info(self) -> ModelInfo:
        return self._native.info

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return self._native.tokenize(text, add_special=add_special, parse_special=parse_special)

    def chat(self, system: str | None = None) -> Chat:
        """A new conversation in the next slot (round robin over ``n_parallel`` slots)."""
        slot, self._next_slot = self._next_slot, (self._next_slot + 1) % self.engine.n_slots
        return Chat(self, system, slot)

    def close(self) -> None:
        self.engine.close()
        self._native.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat prompt's tokens, as the engine sees them."""
        return self._native.tokenize_chat(text)


class Chat:
    """One conversation; its history lives here and its cache in one engine slot."""

    def __init__(self, model: Model, system: str | None, slot: int) -> None:
        self.model = model
        self.slot = slot
        self.system = system
        self.messages: list[dict[str, Any]] = []
        self.last_turn: TurnStats | None = None
        self.reset()

    def reset(self) -> None:
        """Start over: drop the history and the slot's cache; the model stays loaded."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.model.engine.clear_slot(self.slot)
        self.last_turn = None

    def send(self, text: str, **sampling: Any) -> str:
        """Send a user message and return the whole reply."""
        return "".join(self.stream(text, **sampling))

    def stream(self, text: str, **sampling: Any) -> Iterator[str]:
        """Send a user message and yield the reply as it is generated.

        Stopping early (``break``, an exception, dropping the iterator) cancels the generation at once;
        the history then keeps the reply as far as it was generated.
        """
        user = {"role": "user", "content": text}
        prompt = self.model.tokenize_chat(self._render([*self.messages, user], add_generation_prompt=True))
        stream = SyncStream()
        request_id = self.model.engine.submit(self._request(prompt, sampling), stream)
        self.messages.append(user)
        self.last_turn = None
        parts: list[str] = []
        last: EngineOutput | None = None
        try:
            for out in stream:
                last = out
                if out.text:
                    parts.append(out.text)
                    yield out.text
        finally:
            if last is None or not last.finished:
                self.model.engine.cancel(request_id)
            self.messages.append({"role": "assistant", "content": "".join(parts)})
        assert last is not None
        n_closing = self._close_turn()
        self.last_turn = TurnStats(
            n_prompt_tokens=len(prompt),
            n_cached_tokens=last.n_cached_tokens,
            n_prefilled=last.timings.prompt_n,
            n_generated=last.n_decoded,
            n_closing_tokens=n_closing,
            finish_reason=last.finish_reason,
        )

    def cached_tokens(self) -> list[int]:
        """The tokens the slot's cache holds now."""
        return self.model.engine.slot_tokens(self.slot)

    def rendered_tokens(self) -> list[int]:
        """The tokenized render of the history as it stands (what the cache should equal)."""
        return self.model.tokenize_chat(self._render(self.messages, add_generation_prompt=False))

    def _render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        return self.model.template.render(messages, add_generation_prompt=add_generation_prompt)

    def _request(self, prompt: list[int], sampling: dict[str, Any]) -> EngineRequest:
        options = dict(sampling)
        max_tokens = int(options.pop("max_tokens", -1))
        stop = options.pop("stop", ())
        unknown = set(options) - SAMPLING_NAMES
        if unknown:
            raise TypeError(f"unknown sampling options: {', '.join(sorted(unknown))}")
        return EngineRequest(
            prompt_tokens=tuple(prompt),
            sampling=self.model.defaults.updated(options),
            max_tokens=max_tokens,
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            id_slot=self.slot,
        )

    def _close_turn(self) -> int:
        """Bring the cache to the render of the history (the end-of-turn tokens, and any re-tokenization)."""
        target = self.rendered_tokens()
        stream = SyncStream()
        self.model.engine.submit(EngineRequest(prompt_tokens=tuple(target), max_tokens=0, id_slot=self.slot), stream)
        last = list(stream)[-1]
        return last.timings.prompt_n


def _sampling_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``Model(temperature=0.2)``: the sampling defaults Settings can hold, under the same names."""
    unknown = set(values) - set(sampling_fields())
    if unknown:
        raise TypeError(f"unknown Model options: {', '.join(sorted(unknown))}")
    return values
