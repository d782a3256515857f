"""How a chat becomes a prompt: the template, and where the model's thinking goes.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .fields import flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSettings:
    """How a chat becomes a prompt: the template, and where the model's thinking goes."""

    TITLE: ClassVar[str] = "chat template and reasoning"

    jinja: bool = switch(
        "--jinja",
        help="render the GGUF's Jinja chat template (default; --no-jinja uses llama.cpp's built-in formats)",
        default=True,
    )
    chat_template_file: str | None = field(
        default=None, metadata=flag("--chat-template-file", help="Jinja chat template file overriding the GGUF's")
    )
    chat_template: str | None = field(
        default=None,
        metadata=flag(
            "--chat-template",
            help="chat template: one of llama.cpp's built-in names (chatml, llama3, gemma...) or Jinja source",
        ),
    )
    reasoning_format: str = field(
        default="auto",
        metadata=flag(
            "--reasoning-format",
            help="where <think> text goes: auto/deepseek = reasoning_content, none = left in content, "
            "nothink = reasoning off",
            choices=("auto", "deepseek", "deepseek-legacy", "none", "nothink"),
        ),
    )
    reasoning: str = field(
        default="auto",
        metadata=flag(
            "-rea",
            "--reasoning",
            help="reasoning in the chat: on, off (the template is told enable_thinking=false) or auto",
            choices=("on", "off", "auto"),
        ),
    )
    reasoning_budget: int = field(
        default=-1,
        metadata=flag(
            "--reasoning-budget", help="thinking tokens allowed (-1 = unrestricted, 0 = end thinking at once)", type=int
        ),
    )
    reasoning_budget_message: str = field(
        default="",
        metadata=flag(
            "--reasoning-budget-message",
            help="text written before the end of thinking when the reasoning budget ends it",
        ),
    )
    chat_template_kwargs: str | None = field(
        default=None,
        metadata=flag(
            "--chat-template-kwargs",
            help="JSON object of template variables every request gets under its own chat_template_kwargs, "
            "e.g. '{\"keep_past_thinking\": true}'",
        ),
    )
    reasoning_effort: str = field(
        default="default",
        metadata=flag(
            "--reasoning-effort",
            help="the template's reasoning_effort unless a request sets one: default (the template's own), or a "
            "level such as minimal, low, medium, high, xhigh or max",
        ),
    )
    reasoning_preserve: bool | None = switch(
        "--reasoning-preserve",
        help="tell the template to keep the reasoning of every past assistant turn, not only the last "
        "(preserve_reasoning; default: unset, the template's own choice, as its authors render it)",
        default=None,
    )
    skip_chat_parsing: bool = switch(
        "--skip-chat-parsing",
        help="return the model's output as content, unparsed: reasoning and tool calls included",
        default=False,
    )
    system_prompt_file: str | None = field(
        default=None,
        metadata=flag(
            "--system-prompt-file",
            help="file whose text is the system message of every chat that starts without one (read at start; "
            "Ollama's SYSTEM)",
            metavar="FNAME",
        ),
    )
    chat_messages_file: str | None = field(
        default=None,
        metadata=flag(
            "--chat-messages-file",
            help="JSON file of the messages put before every chat's own, a list of {role, content} objects (read "
            "at start; Ollama's MESSAGE lines)",
            metavar="FNAME",
        ),
    )
    prefill_assistant: bool = switch(
        "--prefill-assistant",
        help="continue a chat's final assistant message (default; --no-prefill-assistant closes it and starts a "
        "new assistant turn)",
        default=True,
    )

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """``--chat-template-kwargs`` as a mapping; ValueError (a startup error) unless it is a JSON object, and
        for an ``enable_thinking`` that is not a boolean (which every request would fail on, as in llama-server)."""
        if not self.chat_template_kwargs:
            return {}
        try:
            kwargs = json.loads(self.chat_template_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--chat-template-kwargs is not valid JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"--chat-template-kwargs {self.chat_template_kwargs!r}: expected a JSON object")
        if not isinstance(kwargs.get("enable_thinking", False), bool):
            raise ValueError("--chat-template-kwargs: 'enable_thinking' must be true or false")
        return kwargs

    @property
    def template_variables(self) -> dict[str, Any]:
        """What every render gets under a request's own ``chat_template_kwargs`` (llama-server's
        ``default_template_kwargs``): ``--chat-template-kwargs``, then ``--reasoning-effort`` and
        ``--reasoning-preserve``. Unlike llama-server, ``preserve_reasoning`` is left unset when neither sets it:
        LFM2.5-8B-A1B's template would keep every past turn's thinking, which its authors' render drops."""
        variables = self.template_kwargs
        if self.reasoning_effort != "default":
            variables["reasoning_effort"] = self.reasoning_effort
        if self.reasoning_preserve is not None:
            variables["preserve_reasoning"] = self.reasoning_preserve
        return variables
