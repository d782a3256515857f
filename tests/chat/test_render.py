"""Chat requests as templates render them: history with tool calls and results, template variables, media parts."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lfmserve.chat.plan import ChatPlan, template_kwargs
from lfmserve.chat.render import continuation, render_chat, template_message, text_with_markers
from lfmserve.chat.request import ChatRequest, ContentPart, Message
from lfmserve.chat.template import CHATML_TEMPLATE, ChatTemplate, TemplateCaps
from lfmserve.errors import InvalidRequest, TemplateError
from lfmserve.settings import ChatSettings, Settings
from lfmserve.testing import GEMMA3_CHAT_TEMPLATE
from tests.conftest import ServerThread, fixture_template

# -- a three-turn tool conversation, rendered by each fixture template --------------------------------
CITY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]},
    },
}


RESULT = '{"temperature": 21}'


def _expected(template: str, answer: str) -> str:
    tools_json = json.dumps([CITY_TOOL])
    call_double = '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
    turns = {
        "lfm2-tools.jinja": (
            "<|im_start|>system\nList of tools: "
            f"<|tool_list_start|>[{json.dumps(CITY_TOOL)}]<|tool_list_end|><|im_end|>\n",
            f"<|im_start|>assistant\n{call_double}<|im_end|>\n",
            f"<|im_start|>tool\n<|tool_response_start|>{RESULT}<|tool_response_end|><|im_end|>\n",
        ),
        "lfm2.5-instruct.jinja": (
            f"<|im_start|>system\nList of tools: [{json.dumps(CITY_TOOL)}]<|im_end|>\n",
            f"<|im_start|>assistant\n{call_double}<|im_end|>\n",
            f"<|im_start|>tool\n{RESULT}<|im_end|>\n",
        ),
        "lfm2.5-8b-a1b.jinja": (
            f"<|im_start|>system\nToday's date: {datetime.now():%Y-%m-%d}\n\nList of tools: {tools_json}<|im_end|>\n",
            "<|im_start|>assistant\n<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>\n",
            f"<|im_start|>tool\n{RESULT}<|im_end|>\n",
        ),
    }[template]
    system, call, result = turns
    return (
        f"<|startoftext|>{system}<|im_start|>user\nWeather in Paris?<|im_end|>\n{call}{result}"
        f"<|im_start|>assistant\n{answer}<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("template", ["lfm2-tools.jinja", "lfm2.5-instruct.jinja", "lfm2.5-8b-a1b.jinja"])
def test_three_turn_tool_conversation_renders_as_the_template_expects(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, template: str
) -> None:
    server = server_factory(
        Settings.of(
            model=str(tiny_gguf),
            ctx_size=4096,
            parallel=1,
            threads=2,
            chat_template_file=str(fixture_template(template)),
        )
    )
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=[CITY_TOOL],
        tool_choice="required",
        max_tokens=40,
        parallel_tool_calls=False,
    )
    assert first.choices[0].message.tool_calls, first
    call = first.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
    messages.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump()]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULT})
    second = client.chat.completions.create(model="tiny", messages=messages, tools=[CITY_TOOL], max_tokens=8)
    answer = second.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks!"}]
    third = client.chat.completions.create(model="tiny", messages=messages, tools=[CITY_TOOL], max_tokens=4)
    rendered = httpx.post(server.url + "/apply-template", json={"messages": messages, "tools": [CITY_TOOL]}).json()
    assert rendered["prompt"] == _expected(template, answer)
    tokenized = httpx.post(server.url + "/tokenize", json={"content": rendered["prompt"]}).json()["tokens"]
    assert third.usage is not None and third.usage.prompt_tokens == len(tokenized)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert first.usage is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    if template == "lfm2.5-8b-a1b.jinja":
        # It renders the call with single quotes: the cache diverges inside the call, and the hybrid model's
        # state is restored from the checkpoint kept at the end of the first prompt.
        assert cached == first.usage.prompt_tokens
    else:  # the call is written back exactly as generated: all of it is reused (the end token was never decoded)
        assert cached == first.usage.prompt_tokens + first.usage.completion_tokens - 1


def test_a_tool_result_then_typed_user_content_is_accepted_by_the_template(tools_server: ServerThread) -> None:
    messages = [
        {"role": "user", "content": "Look"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "And this?"}, {"type": "text", "text": "Or that?"}],
        },
    ]
    response = httpx.post(tools_server.url + "/apply-template", json={"messages": messages, "tools": [CITY_TOOL]})
    assert response.status_code == 200, response.text
    assert (
        "<|im_start|>tool\n<|tool_response_start|>sunny<|tool_response_end|><|im_end|>\n<|im_start|>user\n"
        "And this?\nOr that?<|im_end|>"
    ) in response.json()["prompt"]
    # An image on a server without a projector: llama-server's message, on both routes (a 500 there).
    messages[-1]["content"][1] = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}  # type: ignore[index]
    for route in ("/apply-template", "/v1/chat/completions"):
        refused = httpx.post(tools_server.url + route, json={"messages": messages, "max_tokens": 2})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        )
        assert refused.json()["error"]["param"] == "messages.3.content.1"


def test_template_kwargs_reasoning_effort_and_past_reasoning_reach_the_template(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.jinja"
    probe.write_text(
        "{% for m in messages %}{{ m.role }}:{{ m.content }}|{{ m.thinking }}\n{% endfor %}"
        "thinking={{ enable_thinking | default('unset') }} effort={{ reasoning_effort | default('unset') }}"
        " keep={{ keep_past_thinking | default('unset') }}"
    )
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=2048, parallel=1, chat_template_file=str(probe)))
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "r"},
        {"role": "user", "content": "c"},
    ]

    def rendered(**extra: Any) -> str:
        body = {"messages": history, **extra}
        return str(httpx.post(server.url + "/apply-template", json=body).json()["prompt"])

    lines = "user:a|\nassistant:b|r\nuser:c|\n"
    # The template reacts to enable_thinking, so under --reasoning auto it is told true (llama-server's rule).
    assert rendered() == lines + "thinking=True effort=unset keep=unset"
    assert rendered(reasoning_effort="none") == lines + "thinking=False effort=none keep=unset"
    kwargs = {"enable_thinking": True, "keep_past_thinking": True}
    assert (
        rendered(reasoning_effort="none", chat_template_kwargs=kwargs) == lines + "thinking=True effort=none keep=True"
    )
    # The chat route renders through the same code: its prompt is the same tokens.
    chat = httpx.post(
        server.url + "/v1/chat/completions", json={"messages": history, "max_tokens": 1, "reasoning_effort": "none"}
    ).json()
    tokens = httpx.post(
        server.url + "/tokenize", json={"content": rendered(reasoning_effort="none"), "add_special": True}
    ).json()["tokens"]
    assert chat["usage"]["prompt_tokens"] == len(tokens)


# -- each template family against llama-server's /apply-template (bench/template_parity.py) -------------------
#: The tool declared in bench/template_parity.py's conversations.
PARITY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PARIS_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL_LOOP = (
    Message(role="user", content="Weather in Paris?"),
    Message(role="assistant", tool_calls=(PARIS_CALL,)),
    Message(role="tool", content='{"temperature": 21}', tool_call_id="call_1"),
    Message(role="assistant", content="It is 21 degrees."),
    Message(role="user", content="Thanks!"),
)
THINKING = (
    Message(role="user", content="2 + 2?"),
    Message(role="assistant", content="4", reasoning_content="add"),
    Message(role="user", content="And 3 + 3?"),
)
#: llama-server's prompts for them (BOS left out, as its /apply-template does; TODAY is the date), by template.
_LISTED = f"List of tools: [{json.dumps(PARITY_TOOL)}]"
_CHATML_TOOL_LOOP = (
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
    '<|im_start|>tool\n{"temperature": 21}<|im_end|>\n<|im_start|>assistant\nIt is 21 degrees.<|im_end|>\n'
    "<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n"
)
LLAMA_SERVER_TOOL_LOOP = {
    "lfm2-tools.jinja": "<|im_start|>system\n"
    + _LISTED.replace("[", "<|tool_list_start|>[", 1)
    + "<|tool_list_end|><|im_end|>\n"
    + _CHATML_TOOL_LOOP.replace(
        '{"temperature": 21}', '<|tool_response_start|>{"temperature": 21}<|tool_response_end|>'
    ),
    "lfm2.5-instruct.jinja": f"<|im_start|>system\n{_LISTED}<|im_end|>\n" + _CHATML_TOOL_LOOP,
    "lfm2.5-8b-a1b.jinja": f"<|im_start|>system\nToday's date: TODAY\n\n{_LISTED}<|im_end|>\n"
    + _CHATML_TOOL_LOOP.replace(
        "assistant\n<|im_end|>", "assistant\n<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>"
    ),
    "chatml": _CHATML_TOOL_LOOP,
}
LLAMA_SERVER_THINKING = (
    "<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3 + 3?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def _parity_template(name: str, settings: ChatSettings | None = None) -> ChatTemplate:
    """A fixture template (or ChatML, the one a GGUF without a template gets) as the server loads it by default."""
    source = CHATML_TEMPLATE if name == "chatml" else fixture_template(name).read_text()
    variables = (settings or ChatSettings()).template_variables
    return ChatTemplate(source, bos_token="<|startoftext|>", eos_token="<|im_end|>", variables=variables)


@pytest.mark.parametrize("name", list(LLAMA_SERVER_TOOL_LOOP))
def test_a_tool_loop_renders_as_llama_server_but_where_the_template_lists_tools_without_rendering_calls(
    name: str,
) -> None:
    """LFM2's and LFM2.5-1.2B's templates list the tools but drop ``tool_calls``: llama-server leaves the call's
    turn empty, lfmserve writes the call there as the model generated it (docs/usage.md, "Tool calls")."""
    template = _parity_template(name)
    prompt = render_chat(template, ChatRequest(messages=TOOL_LOOP, tools=(PARITY_TOOL,)))
    expected = LLAMA_SERVER_TOOL_LOOP[name].replace("TODAY", f"{datetime.now():%Y-%m-%d}")
    if name in ("lfm2-tools.jinja", "lfm2.5-instruct.jinja"):
        written = '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
        expected = expected.replace("assistant\n<|im_end|>", f"assistant\n{written}<|im_end|>")
    assert prompt == ("" if name == "chatml" else "<|startoftext|>") + expected


def test_gemma_3s_own_template_refuses_a_tool_result_as_llama_server_does() -> None:
    """Its roles must alternate user/model: llama-server answers 400 with the same message (and its Jinja trace)."""
    template = ChatTemplate(GEMMA3_CHAT_TEMPLATE, bos_token="<bos>", eos_token="<eos>")
    with pytest.raises(TemplateError, match="^Chat template error: Conversation roles must alternate user/assistant"):
        render_chat(template, ChatRequest(messages=TOOL_LOOP, tools=(PARITY_TOOL,)))
    assert render_chat(template, ChatRequest(messages=THINKING)) == (
        "<bos><start_of_turn>user\n2 + 2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3 + 3?<end_of_turn>\n<start_of_turn>model\n"
    )


@pytest.mark.parametrize("name", list(LLAMA_SERVER_TOOL_LOOP))
def test_past_thinking_is_left_out_by_default_as_llama_server_and_the_templates_authors_render(name: str) -> None:
    bos = "" if name == "chatml" else "<|startoftext|>"
    assert render_chat(_parity_template(name), ChatRequest(messages=THINKING)) == bos + LLAMA_SERVER_THINKING
    # --reasoning-preserve asks LFM2.5-8B-A1B's template for it (it reads the reasoning as ``thinking``).
    preserving = _parity_template(name, ChatSettings(reasoning_preserve=True))
    kept = LLAMA_SERVER_THINKING.replace("\n4<", "\n<think>add</think>4<") if "8b" in name else LLAMA_SERVER_THINKING
    assert render_chat(preserving, ChatRequest(messages=THINKING)) == bos + kept


# -- messages as templates read them, without a model --------------------------------------------------
class _Template:
    """A ChatFormatter stand-in that records what it is given."""

    source = ""
    think_tags = None

    def __init__(self, *, typed: bool, tool_calls: bool, tools: bool = True) -> None:
        self.caps = TemplateCaps(True, typed, True, tools, tool_calls, tool_calls, False)
        self.seen: dict[str, Any] = {}

    def render(self, messages: Any, *, tools: Any = None, add_generation_prompt: bool = True, extra: Any = None) -> str:
        self.seen = {"messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt, **extra}
        return "rendered"

    def normalize_content(self, content: Any) -> Any:
        if isinstance(content, list) and not self.caps.supports_typed_content:
            return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
        return content


CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_history_reaches_the_template_in_its_shape() -> None:
    template = _Template(typed=True, tool_calls=True)
    request = ChatRequest(
        messages=(
            Message(role="user", content=(ContentPart("text", "Look"), ContentPart("image"), ContentPart("audio"))),
            Message(role="assistant", reasoning_content="hmm", tool_calls=(CALL,)),
            Message(role="tool", content="sunny", tool_call_id="c1", name="get_weather"),
        ),
        tools=(CITY_TOOL,),
        template_kwargs={"enable_thinking": True},
        reasoning_effort="none",
        add_generation_prompt=False,
    )
    assert render_chat(template, request, media_marker="<M>") == "rendered"
    assert template.seen == {
        "messages": [
            # a message with media is one text, its media as markers (llama-server's rule), even for a template
            # that reads typed parts
            {"role": "user", "content": "Look<M><M>"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "hmm",
                "thinking": "hmm",
                "tool_calls": [{**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
            },
            {"role": "tool", "content": "sunny", "name": "get_weather", "tool_call_id": "c1"},
        ],
        "tools": [CITY_TOOL],
        "add_generation_prompt": False,
        "enable_thinking": True,  # the kwargs win over reasoning_effort "none"
        "reasoning_effort": "none",
    }


def test_calls_a_template_with_tools_ignores_are_written_into_the_content_as_generated() -> None:
    template = _Template(typed=False, tool_calls=False)
    message = Message(role="assistant", content="Checking.", tool_calls=(CALL,))
    assert template_message(template, message)["content"] == (
        'Checking.<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
    )
    # A template without tools gets them as llama-server gives them: as tool_calls only, which it drops.
    plain = template_message(_Template(typed=False, tool_calls=False, tools=False), message)
    assert plain == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [{**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    parts = Message(role="user", content=(ContentPart("text", "a"), ContentPart("text", "b")))
    assert template_message(template, parts)["content"] == "a\nb"  # a string-content template gets the text


def test_reasoning_effort_none_turns_thinking_off_unless_the_kwargs_say() -> None:
    plain = ChatRequest(messages=(Message(role="user", content="Hi"),))
    assert template_kwargs(plain) == {}
    assert template_kwargs(ChatRequest(messages=plain.messages, reasoning_effort="none")) == {
        "reasoning_effort": "none",
        "enable_thinking": False,
    }
    assert template_kwargs(ChatRequest(messages=plain.messages, reasoning_effort="high")) == {
        "reasoning_effort": "high"
    }


def test_tool_call_arguments_that_are_not_json_are_a_400() -> None:
    broken = Message(role="assistant", tool_calls=({"function": {"name": "f", "arguments": "{oops"}},))
    with pytest.raises(InvalidRequest, match="tool call arguments are not valid JSON") as info:
        template_message(_Template(typed=False, tool_calls=True), broken)
    assert info.value.param == "messages"
    empty = Message(role="assistant", tool_calls=({"function": {"name": "f", "arguments": " "}},))
    assert template_message(_Template(typed=False, tool_calls=True), empty)["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": {},
    }


def test_media_parts_become_markers_with_no_newline_beside_them() -> None:
    """llama-server's join (common/chat.cpp): text parts by newlines, but none before or after a marker."""
    a, b, c = (ContentPart("text", t) for t in "abc")
    image, audio = ContentPart("image", source="x"), ContentPart("audio", source="y")
    assert text_with_markers((a, b, image, c), "<M>") == "a\nb<M>c"
    assert text_with_markers((image, a, audio, audio, b, c), "<M>") == "<M>a<M><M>b\nc"
    assert text_with_markers((image,), "<M>") == "<M>"


# -- a final assistant message is continued (prefill, continue_final_message) -----------------------------
LLAMA31_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
R1_LIKE = (
    "{% for m in messages %}{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% else %}<｜Assistant｜>"
    "{{ m.content }}<｜end▁of▁sentence｜>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
)
BOOK = (Message(role="system", content="Book"), Message(role="user", content="What is the best book"))


def _prefilled(source: str, last: Message, **fields: Any) -> str:
    template = ChatTemplate(source, bos_token="<s>", eos_token="")
    return render_chat(template, ChatRequest(messages=(*BOOK, last), **fields))


def test_a_final_assistant_message_is_continued_not_closed() -> None:
    expected = (
        "<s><|start_header_id|>system<|end_header_id|>\n\nBook<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "What is the best book<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nWhill"
    )
    assert _prefilled(LLAMA31_LIKE, Message(role="assistant", content="Whill")) == expected
    explicit = {"add_generation_prompt": False, "continue_final_message": "auto"}
    assert _prefilled(LLAMA31_LIKE, Message(role="assistant", content="Whill"), **explicit) == expected
    parts = (ContentPart("text", "Wh"), ContentPart("text", "ill"))
    assert _prefilled(LLAMA31_LIKE, Message(role="assistant", content=parts)).endswith("\n\nWh\n\nill")


@pytest.mark.parametrize(
    ("source", "content", "reasoning", "end"),
    [  # llama-server's prompts for the suite's Qwen3 and DeepSeek-R1 templates, whitespace included
        (QWEN3_LIKE, "Whill", None, "<|im_start|>assistant\n<think>\n\n</think>\n\nWhill"),
        (QWEN3_LIKE, "", "hmm", "<|im_start|>assistant\n<think>\nhmm"),
        (QWEN3_LIKE, "ok", "hmm", "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nok"),
        (R1_LIKE, "Whill", None, "<｜Assistant｜><think></think>Whill"),
        (R1_LIKE, "", "hmm", "<｜Assistant｜><think>hmm"),
    ],
)
def test_a_continued_message_writes_its_reasoning_in_the_templates_think_tags(
    source: str, content: str, reasoning: str | None, end: str
) -> None:
    prompt = _prefilled(source, Message(role="assistant", content=content, reasoning_content=reasoning))
    assert prompt.endswith("What is the best book" + ("<|im_end|>\n" if source == QWEN3_LIKE else "") + end)


def test_continuing_only_the_reasoning_leaves_the_think_block_open_for_the_parser() -> None:
    request = ChatRequest(
        messages=(*BOOK, Message(role="assistant", content="", reasoning_content="hmm")),
        continue_final_message="reasoning",
        add_generation_prompt=False,
    )
    assert continuation(request) == "reasoning"
    message = ChatPlan().parser("…<think>hmm", continues_reasoning=True).parse(" more</think>The Hobbit")
    assert (message.reasoning, message.content) == ("more", "The Hobbit")


@pytest.mark.parametrize(
    ("messages", "fields", "error"),
    [
        ((Message(role="assistant", content="a"), Message(role="assistant", content="b")), {}, "2 or more assistant"),
        ((Message(role="assistant", content="Hello"),), {"continue_final_message": "auto"}, "Cannot set both"),
        (
            (Message(role="user", content="Hi"),),
            {"continue_final_message": "auto", "add_generation_prompt": False},
            "to be an assistant message",
        ),
        ((Message(role="assistant", tool_calls=({"function": {"name": "f", "arguments": "{}"}},)),), {}, "tool calls"),
    ],
)
def test_what_cannot_be_continued_is_a_400(messages: tuple[Message, ...], fields: dict[str, Any], error: str) -> None:
    request = ChatRequest(messages=(Message(role="user", content="Hi"), *messages), **fields)
    with pytest.raises(InvalidRequest, match=error):
        continuation(request)


def test_an_empty_chat_continues_nothing() -> None:
    assert continuation(ChatRequest(messages=())) == "none"
    with pytest.raises(InvalidRequest, match="needs the last message to be an assistant message"):
        continuation(ChatRequest(messages=(), continue_final_message="content", add_generation_prompt=False))
