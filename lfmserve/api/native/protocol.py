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
    """``POST /completion``: one prompt, or a list of prompts answered together."""

    prompt: WirePrompt | list[WirePrompt]

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
