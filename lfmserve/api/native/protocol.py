"""llama-server's native request bodies: ``/completion``, ``/infill``, ``/tokenize``, ``/detokenize``, slot files.

``/apply-template`` takes OpenAI's chat fields: its body is in :mod:`lfmserve.api.openai.protocol`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ...chat.request import InfillRequest, MediaPrompt, Prompt
from ...errors import InvalidRequest
from ..body import Body, SamplingFields


class MultimodalPrompt(Body):
    """llama-server's prompt object: text holding one media marker per ``multimodal_data`` item (base64)."""

    prompt_string: str
    multimodal_data: list[str] | None = None

    def to_prompt(self) -> Prompt:
        if self.multimodal_data is None:
            return self.prompt_string
        return MediaPrompt(self.prompt_string, tuple(self.multimodal_data))


#: One prompt on the wire: text, token ids, both mixed, or text with media.
WirePrompt = str | list[int] | list[str | int] | MultimodalPrompt


class CompletionRequest(SamplingFields):
    """``POST /completion`` and OpenAI's ``POST /v1/completions``, which llama-server serves from the same body:
    one prompt, or a list of prompts answered together."""

    prompt: WirePrompt | list[WirePrompt]
    #: OpenAI's ``echo``: validated, and, as in llama-server, not implemented (the prompt is not repeated).
    echo: bool = False
    #: OpenAI's legacy completions: the number of alternatives per token (0 = only the chosen one's).
    logprobs: int | None = Field(default=None, ge=0, le=20)

    def top_probs(self) -> int | None:
        return self.logprobs if self.logprobs is not None else super().top_probs()

    def prompts(self) -> list[Prompt]:
        """The prompts, as llama-server reads them: token ids (or ids and text mixed) are one prompt; any other
        list is a prompt per item (``["a", "b"]``, ``[[1, 2], "c"]``)."""
        prompt = self.prompt
        if isinstance(prompt, MultimodalPrompt):
            return [prompt.to_prompt()]
        if isinstance(prompt, str) or not prompt:
            return [prompt]  # type: ignore[list-item]
        kinds = {type(item) for item in prompt}
        if kinds <= {int, str} and int in kinds:
            return [prompt]  # type: ignore[list-item]
        return [item.to_prompt() if isinstance(item, MultimodalPrompt) else item for item in prompt]  # type: ignore[misc]


class TokenizeRequest(Body):
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(Body):
    tokens: list[int]


class SlotFileRequest(Body):
    """``POST /slots/{id}?action=save|restore``: a plain file name inside ``--slot-save-path``."""

    filename: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$")


class InfillBody(SamplingFields):
    """``POST /infill``: ``input_prefix`` and ``input_suffix`` (text, or token ids and text), ``input_extra`` files,
    and ``prompt``, the start of the middle. Missing or mistyped fields get llama-server's messages (as 400s)."""

    input_prefix: str | list[int | str] | None = None
    input_suffix: str | list[int | str] | None = None
    input_extra: Any = None
    prompt: str = ""

    def to_infill(self) -> InfillRequest:
        for name in ("input_prefix", "input_suffix"):
            if getattr(self, name) is None:
                raise InvalidRequest(f'"{name}" is required', param=name)
        assert self.input_prefix is not None and self.input_suffix is not None  # checked above
        return InfillRequest(
            prefix=self.input_prefix, suffix=self.input_suffix, extra=self._extra(), prompt=self.prompt
        )

    def _extra(self) -> tuple[tuple[str, str], ...]:
        extra = [] if self.input_extra is None else self.input_extra
        if not isinstance(extra, list):
            raise InvalidRequest(
                '"input_extra" must be an array of {"filename": string, "text": string}', param="input_extra"
            )
        chunks = []
        for chunk in extra:
            if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
                message = 'extra_context chunk must contain a "text" field with a string value'
                raise InvalidRequest(message, param="input_extra")
            filename = chunk.get("filename", "tmp")
            if not isinstance(filename, str):
                raise InvalidRequest('extra_context chunk\'s "filename" field must be a string', param="input_extra")
            chunks.append((filename, chunk["text"]))
        return tuple(chunks)
