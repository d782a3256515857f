"""llama-server's native request bodies: ``/completion``, ``/tokenize``, ``/detokenize``, slot files.

``/apply-template`` takes OpenAI's chat fields: its body is in :mod:`lfmserve.api.openai.protocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from ..body import Body, SamplingFields

if TYPE_CHECKING:
    from ...chat.request import Prompt

#: One prompt on the wire: text, token ids, or both mixed.
WirePrompt = str | list[int] | list[str | int]


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
        if isinstance(prompt, str) or not prompt:
            return [prompt]  # type: ignore[list-item]
        kinds = {type(item) for item in prompt}
        if list not in kinds and int in kinds:
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]


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
