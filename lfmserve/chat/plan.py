"""What a chat request asks beyond plain text: tools, a response format, reasoning; decided once per request.

:func:`plan_chat` turns ``tools``/``tool_choice``/``parallel_tool_calls``, ``response_format`` (or the
native ``json_schema``/``grammar``), ``reasoning_format``/``reasoning_effort`` and
``chat_template_kwargs`` into a :class:`ChatPlan`: the variables the template receives, the token mask
that constrains sampling, the special tokens whose text the parser must see, and how to parse the
output. Everything invalid is a 400 here, before the engine sees the request.

Tool choice, as llama-server: ``none`` hides the tools (nothing is parsed); ``auto`` parses calls and
constrains each one to the declared schemas once the model opens it; ``required`` and a named
function constrain the whole output to one call block (and, unlike llama-server, allow no free text
before it), so the answer is always a valid call. Calls are read only in the form the template teaches: a
template that shows the tools (LFM's) also lets a call list start the answer without its markers; under one
that does not (plain ChatML), an ``auto`` answer is a call only where the constraint wrote it, and with no
marker token to start the constraint at, it is content, as llama-server reads it.

Tools beside a response format (or the native ``json_schema``), as OpenAI's API allows: under ``auto`` one grammar
takes the whole output, a call block or JSON that follows the schema (llama-server's LFM2 handler, at the pin,
forces a call and drops the schema); ``required`` and a named function still call; ``none`` answers the schema.
A GBNF ``grammar`` beside tools (not ``none``) is refused, as llama-server refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.constraints import Grammars, TokenMask, checked_schema
from ..errors import InvalidRequest
from .output import THINK_END, THINK_START, AssistantOutputParser
from .request import ChatRequest, GenerationOptions, NamedTool, ToolChoice
from .tool_calls import CALL_END, CALL_START
from .tool_grammar import tool_call_grammar


@dataclass(slots=True)
class ChatPlan:
    """What the template, the sampler and the output parser are given for one chat request."""

    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    constraint: TokenMask | None = None
    split_reasoning: bool = True
    parse_tool_calls: bool = False
    #: The tools' names: a call list at the start of the answer is read without its markers too.
    tool_names: frozenset[str] = frozenset()
    keep_special: frozenset[int] = frozenset()

    def parser(self, prompt: str, *, continues_reasoning: bool = False) -> AssistantOutputParser:
        """A fresh output parser; a prompt that ends by opening a think block, or continues a message's
        reasoning, starts in reasoning."""
        in_reasoning = continues_reasoning or opens_thinking(prompt)
        return AssistantOutputParser(
            split_reasoning=self.split_reasoning,
            parse_tool_calls=self.parse_tool_calls,
            tool_names=self.tool_names,
            starts_in_reasoning=self.split_reasoning and in_reasoning,
        )


def opens_thinking(prompt: str) -> bool:
    """The prompt ends by opening a think block (the template writes ``<think>`` for the model)."""
    return prompt.rstrip().endswith(THINK_START)


def native_constraint(
    options: GenerationOptions,
    grammars: Grammars,
    default_grammar: str | None = None,
    default_schema: dict[str, Any] | bool | None = None,
) -> TokenMask | None:
    """llama-server's native ``json_schema`` / ``grammar`` fields (every generation route has them); a request
    with neither follows the server's (``--grammar``, ``--json-schema``), if any."""
    if options.json_schema is None and options.grammar is None:
        options = replace(options, json_schema=default_schema, grammar=default_grammar)
    if options.json_schema is not None:
        return grammars.json_schema(options.json_schema, param="json_schema")
    if options.grammar is not None:
        return grammars.gbnf(options.grammar, param="grammar")
    return None


def template_kwargs(request: ChatRequest) -> dict[str, Any]:
    """``chat_template_kwargs`` plus ``reasoning_effort`` ("none" turns thinking off unless the kwargs say)."""
    kwargs: dict[str, Any] = dict(request.template_kwargs)
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise InvalidRequest(
            f"invalid type for 'enable_thinking' (expected boolean, got {kwargs['enable_thinking']!r})",
            param="chat_template_kwargs.enable_thinking",
        )
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
        if request.reasoning_effort == "none":
            kwargs.setdefault("enable_thinking", False)
    return kwargs


def plan_chat(
    request: ChatRequest,
    grammars: Grammars,
    *,
    reasoning_format: str,
    parse: bool = True,
    template_tools: bool = True,
) -> ChatPlan:
    """Decide the template variables, constraint and parser; every conflict or bad value is a 400 here.
    ``parse=False`` (``--skip-chat-parsing``) leaves the whole answer in the content: constraints still apply, but
    no reasoning or tool call is taken out of it. ``template_tools``: the template shows the model its tools
    (its caps' ``supports_tools``); see the module docstring."""
    plan = ChatPlan(template_kwargs=template_kwargs(request))
    plan.split_reasoning = (request.reasoning_format or reasoning_format) != "none"
    plan.keep_special = _known(grammars, THINK_START, THINK_END)
    schema, schema_field = _answer_schema(request), _schema_field(request)
    if schema is not None:
        plan.split_reasoning = False  # the output is JSON from its first token; a "<think>" in it is text
    choice = request.tool_choice
    if request.tools and choice != "none":
        answer = None if schema is None else checked_schema(schema, param=schema_field)  # checked under any choice
        _plan_tools(
            plan, request, choice, grammars, answer if choice == "auto" else None, template_tools=template_tools
        )
    elif choice not in ("auto", "none"):
        raise InvalidRequest(f"tool_choice {_choice_name(choice)!r} needs 'tools'", param="tool_choice")
    elif schema is not None:
        plan.constraint = grammars.json_schema(schema, param=schema_field)
    elif request.generation.grammar is not None:
        plan.constraint = grammars.gbnf(request.generation.grammar, param="grammar")
    if not parse:
        plan.split_reasoning = plan.parse_tool_calls = False
    return plan


def _answer_schema(request: ChatRequest) -> dict[str, Any] | bool | None:
    """The schema the answer must follow: ``response_format``'s, or llama-server's native ``json_schema``."""
    generation = request.generation
    if request.response_schema is None:
        return generation.json_schema
    if generation.json_schema is not None or generation.grammar is not None:
        raise InvalidRequest(
            "use either 'response_format' or 'json_schema'/'grammar', not both", param="response_format"
        )
    return request.response_schema


def _schema_field(request: ChatRequest) -> str:
    """The field a 400 about the answer's schema names."""
    return "json_schema" if request.response_schema is None else "response_format"


def _plan_tools(
    plan: ChatPlan,
    request: ChatRequest,
    choice: ToolChoice,
    grammars: Grammars,
    answer: dict[str, Any] | None,
    *,
    template_tools: bool,
) -> None:
    """Tools the model may (``auto``) or must call; ``answer``: under ``auto``, the schema an answer that calls
    nothing follows instead (one grammar for the whole output then, from its first token)."""
    if request.generation.grammar is not None:  # llama-server: "Cannot use custom grammar constraints with tools."
        raise InvalidRequest(
            "a custom 'grammar' cannot be combined with tools unless tool_choice is 'none'", param="grammar"
        )
    plan.tools = [dict(tool) for tool in request.tools]
    plan.parse_tool_calls = True
    if template_tools:  # the model read the tools' names in its prompt and may start by calling one
        plan.tool_names = frozenset(str(tool["function"]["name"]) for tool in plan.tools)
    start, end = grammars.special_token(CALL_START), grammars.special_token(CALL_END)
    plan.keep_special |= _known(grammars, CALL_START, CALL_END)
    markers_are_tokens = start is not None and end is not None
    only = choice.name if isinstance(choice, NamedTool) else None
    if only is not None and only not in {tool["function"]["name"] for tool in plan.tools}:
        raise InvalidRequest(f"tool_choice names '{only}', which is not in 'tools'", param="tool_choice")
    lazy = choice == "auto" and answer is None
    if not lazy:
        plan.split_reasoning = False  # the output is one call block (or the JSON answer) from its first token
    elif not markers_are_tokens:
        # No token to start constraining at: calls are read only where the template taught their form.
        plan.parse_tool_calls = template_tools
        return
    grammar = tool_call_grammar(
        plan.tools,
        only=only,
        parallel=request.parallel_tool_calls and only is None,
        markers_are_tokens=markers_are_tokens,
        answer=answer,
    )
    trigger, release = (start, end) if lazy else (None, None)
    plan.constraint = grammars.lark(grammar, param="tools", trigger=trigger, release=release)


def _known(grammars: Grammars, *texts: str) -> frozenset[int]:
    """The ids of those of ``texts`` that are control tokens of the vocabulary."""
    return frozenset(t for t in map(grammars.special_token, texts) if t is not None)


def _choice_name(choice: ToolChoice) -> str:
    return choice.name if isinstance(choice, NamedTool) else choice
