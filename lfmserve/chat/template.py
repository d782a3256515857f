"""Chat templates: the GGUF's Jinja template rendered in a sandbox, compiled once per model.

The environment copies what Hugging Face transformers gives chat templates (and what LFM templates
use): ``tojson`` that keeps key order and does not escape HTML, ``raise_exception``,
``strftime_now``, loop controls, trimmed blocks and a no-op ``{% generation %}`` tag. Like
llama-server, every render also gets ``enable_thinking`` (``--reasoning``; under ``auto``, whether the
template reacts to it), today's date as ``datetime`` and ``date_string`` (Llama 3.x and
firefunction templates print them) and the server's variables (``--chat-template-kwargs``,
``--reasoning-effort``, ``--reasoning-preserve``), each under what the request itself sets;
``preserve_reasoning`` and ``reasoning_effort`` also reach the template under the other names llama.cpp
gives them (``preserve_thinking``...). It is jinja2's ``ImmutableSandboxedEnvironment``, so a template
cannot reach Python internals (``''.__class__.__mro__``) or mutate its inputs; such a template fails with
:class:`TemplateError`.

Example::

    template = ChatTemplate(source, bos_token="<|startoftext|>", eos_token="<|im_end|>")
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NoReturn, Protocol

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import EngineError, TemplateError
from .output import THINK_END, THINK_START


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}`` marks assistant text for training; it renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class _Undefined(jinja2.Undefined):
    """llama.cpp's rule: an undefined value added to a string is an empty string (firefunction's template adds
    an undefined ``functions``); any other use of it fails, as jinja2's does."""

    def __add__(self, other: object) -> Any:
        return other if isinstance(other, str) else self._fail_with_undefined_error()

    __radd__ = __add__


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' tojson: no key sorting, no HTML escaping (jinja2's built-in does both).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(f"Chat template error: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _today() -> dict[str, str]:
    """The date variables llama.cpp gives every template (``common_chat_extra_context``)."""
    now = datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


def _reasoning_aliases(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The names templates other than the asked one read for ``preserve_reasoning`` and ``reasoning_effort``
    (llama.cpp's ``caps_apply_preserve_reasoning`` / ``caps_apply_reasoning_effort``): LFM2.5-8B-A1B's template
    reads ``preserve_thinking``. A variable given by its own name still wins."""
    aliases: dict[str, Any] = {}
    preserve = kwargs.get("preserve_reasoning")
    if isinstance(preserve, bool):
        aliases["preserve_thinking"] = preserve
        for name in ("clear_thinking", "truncate_history_thinking", "drop_thinking"):
            aliases[name] = not preserve
    effort = kwargs.get("reasoning_effort")
    if isinstance(effort, str) and effort:
        aliases["reasoning_strength"] = effort
    return aliases


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationTag],
        undefined=_Undefined,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@dataclass(frozen=True, slots=True)
class TemplateCaps:
    """What a template does with its inputs, found by rendering probes (llama-server's ``chat_template_caps``)."""

    supports_string_content: bool
    supports_typed_content: bool
    supports_system_role: bool
    supports_tools: bool
    supports_tool_calls: bool
    supports_parallel_tool_calls: bool
    supports_preserve_reasoning: bool

    def to_json(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in self.__slots__}


#: ``--reasoning``: thinking on, off (the template is told ``enable_thinking=false``), or as the template does.
Reasoning = Literal["on", "off", "auto"]


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """How a template writes an assistant's reasoning around its content, whitespace included (Qwen3:
    ``"<think>\\n"`` and ``"\\n</think>\\n\\n"``): a continued message is written the same way."""

    start: str
    end: str


class ChatFormatter(Protocol):
    """What serving needs from a chat format: Jinja (:class:`ChatTemplate`) or built-in (:class:`BuiltinTemplate`)."""

    source: str
    caps: TemplateCaps
    #: The template writes reasoning in ``<think>`` tags (None: it has no reasoning).
    think_tags: ThinkTags | None
    #: The prompt changes with ``enable_thinking`` (llama-server's "supports thinking").
    supports_thinking: bool

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> str: ...

    def normalize_content(self, content: str | list[dict[str, Any]] | None) -> Any: ...


_MARK = "LFMSERVE_PROBE"


class ChatTemplate:
    """A compiled chat template plus the special tokens it may print."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str,
        eos_token: str,
        reasoning: Reasoning = "auto",
        variables: Mapping[str, Any] | None = None,
    ) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"Chat template syntax error (line {exc.lineno}): {exc.message}") from exc
        #: What every render gets as ``enable_thinking`` unless the request's kwargs say (the probes: true).
        self.enable_thinking = True
        #: The server's template variables (``--chat-template-kwargs``...), under a request's own; the probes
        #: render without them, as llama-server's do.
        self.variables: dict[str, Any] = {}
        self.caps = self._probe_caps()
        #: The template's prompt changes with ``enable_thinking`` (llama-server's "supports thinking").
        self.supports_thinking = self._reads_enable_thinking()
        self.enable_thinking = reasoning == "on" or (reasoning == "auto" and self.supports_thinking)
        self.think_tags = self._probe_think_tags() if THINK_START in source else None
        self.variables = dict(variables or {})

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Render the conversation; template errors and sandbox refusals raise :class:`TemplateError`."""
        given = {**self.variables, **(extra or {})}
        variables: dict[str, Any] = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "enable_thinking": self.enable_thinking,
            **_today(),
            **_reasoning_aliases(given),
            **given,
            "messages": [dict(m) for m in messages],
            "tools": list(tools) if tools else None,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**variables)
        except TemplateError:
            raise
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"Chat template refused by the sandbox: {exc}") from exc
        except Exception as exc:  # a template can fail in any of Python's ways; all are the request's fault
            raise TemplateError(f"Chat template error: {type(exc).__name__}: {exc}") from exc

    def normalize_content(self, content: str | list[dict[str, Any]] | None) -> Any:
        """Text parts become one string (joined by newlines) unless the template reads typed parts."""
        if isinstance(content, list) and not self.caps.supports_typed_content:
            return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
        return content

    def _probe(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None = None,
        *,
        add_generation_prompt: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """What the template renders for a capability probe; "" when it refuses the probe's shape."""
        with contextlib.suppress(TemplateError):
            return self.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, extra=extra)
        return ""

    def _reads_enable_thinking(self) -> bool:
        user = [{"role": "user", "content": "hi"}]
        on, off = (self._probe(user, add_generation_prompt=True, extra={"enable_thinking": v}) for v in (True, False))
        return on != off

    def _probe_think_tags(self) -> ThinkTags:
        """The tags with the whitespace the template puts around an assistant's reasoning; bare ``<think>`` and
        ``</think>`` when it does not show a past reasoning (DeepSeek-R1's drops it), as llama-server finds."""
        reasoning, content = _MARK + "R", _MARK + "C"
        answer = {"role": "assistant", "content": content, "reasoning_content": reasoning}
        prompt = self._probe([{"role": "user", "content": "hi"}, answer])
        found = re.search(rf"{re.escape(THINK_START)}(\s*){reasoning}(\s*){re.escape(THINK_END)}(\s*){content}", prompt)
        if found is None:
            return ThinkTags(THINK_START, THINK_END)
        return ThinkTags(THINK_START + found[1], found[2] + THINK_END + found[3])

    def _probe_caps(self) -> TemplateCaps:
        user = {"role": "user", "content": "hi"}
        typed = self._probe([{"role": "user", "content": [{"type": "text", "text": _MARK}]}])
        string = self._probe([{"role": "user", "content": _MARK}])
        system = self._probe([{"role": "system", "content": _MARK}, user])
        tool = {
            "type": "function",
            "function": {"name": _MARK, "description": "d", "parameters": {"type": "object", "properties": {}}},
        }
        tools = self._probe([user], [tool])

        def call(name: str) -> dict[str, Any]:
            return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": {"a": 1}}}

        calls = self._probe(
            [user, {"role": "assistant", "content": "", "tool_calls": [call(_MARK), call(_MARK + "2")]}]
        )
        reasoning = self._probe(
            [user, {"role": "assistant", "content": "ok", "reasoning_content": _MARK, "thinking": _MARK}, user],
            extra={"preserve_reasoning": True},
        )
        return TemplateCaps(
            supports_string_content=_MARK in string,
            supports_typed_content=_MARK in typed and '"type"' not in typed,
            supports_system_role=_MARK in system,
            supports_tools=_MARK in tools,
            supports_tool_calls=_MARK in calls,
            supports_parallel_tool_calls=_MARK + "2" in calls,
            supports_preserve_reasoning=_MARK in reasoning,
        )


class BuiltinTemplate:
    """``--no-jinja``: llama.cpp's built-in formats, chosen by recognising the template text.

    Like llama-server without ``--jinja``, it takes string content only and refuses ``tools``.
    """

    think_tags: ThinkTags | None = None

    def __init__(self, source: str, apply: Callable[[str, Sequence[tuple[str, str]], bool], str]) -> None:
        self.source = source
        self._apply = apply
        self.supports_thinking = False
        self.caps = TemplateCaps(
            supports_string_content=True,
            supports_typed_content=False,
            supports_system_role=True,
            supports_tools=False,
            supports_tool_calls=False,
            supports_parallel_tool_calls=False,
            supports_preserve_reasoning=False,
        )
        self.render([{"role": "user", "content": "probe"}])  # unknown templates fail at startup, not per request

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        if tools:
            raise TemplateError("tools param requires --jinja flag")
        pairs = [(str(m["role"]), str(m.get("content") or "")) for m in messages]
        try:
            return self._apply(self.source, pairs, add_generation_prompt)
        except EngineError as exc:
            raise TemplateError(str(exc)) from exc

    def normalize_content(self, content: str | list[dict[str, Any]] | None) -> Any:
        if isinstance(content, list):
            return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
        return content


#: llama-server's fallback when a model carries no template: ChatML.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
