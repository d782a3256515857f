"""What a chat request asks beyond plain text: tools, a response format, reasoning; decided once per request.

:func:`plan_chat` turns ``tools``/``tool_choice``/``parallel_tool_calls``, ``response_format`` (or the
native ``json_schema``/``grammar``), ``reasoning_format``/``reasoning_effort`` and
``chat_template_kwargs`` into a :class:`ChatPlan`: the variables the template receives, the token mask
that constrains sampling, the special tokens whose text the parser must see, and how to parse the
output. Everything invalid is a 400 here, before the engine sees the request.

Tool choice, as llama-server: ``none`` hides the tools (nothing is parsed); ``auto`` parses calls and
constrains each one to the declared schemas once the model opens it; ``required`` and a named
function constrain the whole output to one call block (and, unlike llama-server, allow no free text
before it), so the answer is always a valid call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .assistant_output import THINK_END, THINK_START, AssistantOutputParser
from .constraints import Grammars, TokenMask
from .errors import InvalidRequest
from .protocol import ApplyTemplateRequest, ChatCompletionRequest, NamedToolChoice, SamplingFields
from .tool_calls import CALL_END, CALL_START
from .tool_grammar import tool_call_grammar


@dataclass(slots=True)
class ChatPlan:
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    mask: TokenMask | None = None
    split_reasoning: bool = True
    parse_tool_calls: bool = False
    keep_special: frozenset[int] = frozenset()

    def parser(self, prompt: str) -> AssistantOutputParser:
        """A fresh output parser; a prompt that ends by opening a think block starts in reasoning."""
        return AssistantOutputParser(
            split_reasoning=self.split_reasoning,
            parse_tool_calls=self.parse_tool_calls,
            starts_in_reasoning=self.split_reasoning and prompt.rstrip().endswith(THINK_START),
        )


def constraint_mask(body: SamplingFields, grammars: Grammars) -> TokenMask | None:
    """llama-server's native ``json_schema`` / ``grammar`` fields (every generation route has them)."""
    if body.json_schema is not None:
        return grammars.json_schema(body.json_schema, param="json_schema")
    if body.grammar is not None:
        return grammars.gbnf(body.grammar, param="grammar")
    return None


def plan_chat(body: ChatCompletionRequest, grammars: Grammars, *, reasoning_format: str) -> ChatPlan:
    plan = ChatPlan(template_kwargs=template_kwargs(body))
    plan.split_reasoning = (body.reasoning_format or reasoning_format) != "none"
    plan.keep_special = _known(grammars, THINK_START, THINK_END)
    plan.mask = constraint_mask(body, grammars)
    schema = body.response_format.output_schema() if body.response_format else None
    if schema is not None:
        if plan.mask is not None:
            raise InvalidRequest(
                "use either 'response_format' or 'json_schema'/'grammar', not both", param="response_format"
            )
        plan.mask = grammars.json_schema(schema, param="response_format")
    if schema is not None or body.json_schema is not None:
        plan.split_reasoning = False  # the output is JSON from its first token; a "<think>" in it is text
    choice = body.tool_choice or "auto"
    if body.tools and choice != "none":
        _plan_tools(plan, body, choice, grammars)
    elif choice not in ("auto", "none"):
        raise InvalidRequest(f"tool_choice {_choice_name(choice)!r} needs 'tools'", param="tool_choice")
    return plan


def _plan_tools(plan: ChatPlan, body: ChatCompletionRequest, choice: str | NamedToolChoice, grammars: Grammars) -> None:
    assert body.tools
    if plan.mask is not None:
        raise InvalidRequest("tools cannot be combined with a response format or grammar", param="tools")
    plan.tools = [tool.model_dump(exclude_none=True) for tool in body.tools]
    plan.parse_tool_calls = True
    start, end = grammars.special_token(CALL_START), grammars.special_token(CALL_END)
    plan.keep_special |= _known(grammars, CALL_START, CALL_END)
    markers_are_tokens = start is not None and end is not None
    only = None if isinstance(choice, str) else choice.function.name
    if only is not None and only not in {tool["function"]["name"] for tool in plan.tools}:
        raise InvalidRequest(f"tool_choice names '{only}', which is not in 'tools'", param="tool_choice")
    lazy = choice == "auto"
    if not lazy:
        plan.split_reasoning = False  # the output is one call block from its first token
    elif not markers_are_tokens:
        return  # the calls are parsed, but there is no token to start constraining at
    grammar = tool_call_grammar(
        plan.tools, only=only, parallel=body.parallel_tool_calls and only is None, markers_are_tokens=markers_are_tokens
    )
    plan.mask = grammars.lark(grammar, param="tools", trigger=start if lazy else None, release=end if lazy else None)


def _known(grammars: Grammars, *texts: str) -> frozenset[int]:
    """The ids of those of ``texts`` that are control tokens of the vocabulary."""
    return frozenset(t for t in map(grammars.special_token, texts) if t is not None)


def _choice_name(choice: Any) -> str:
    return choice if isinstance(choice, str) else choice.function.name


def template_kwargs(body: ChatCompletionRequest | ApplyTemplateRequest) -> dict[str, Any]:
    """``chat_template_kwargs`` plus ``reasoning_effort`` ("none" turns thinking off unless the kwargs say)."""
    kwargs: dict[str, Any] = dict(body.chat_template_kwargs or {})
    if body.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", body.reasoning_effort)
        if body.reasoning_effort == "none":
            kwargs.setdefault("enable_thinking", False)
    return kwargs
