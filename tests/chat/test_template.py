"""The real LFM templates (shared/fixtures) rendered to exact prompt strings, tools included."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from lfmserve.chat.template import ChatTemplate, Reasoning, ThinkTags
from lfmserve.errors import TemplateError
from lfmserve.settings import ChatSettings
from tests.conftest import fixture_template

BOS, EOS = "<|startoftext|>", "<|im_end|>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TOOL_JSON = (
    '{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
)
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "<think>look it up</think>It is sunny."},
    {"role": "user", "content": "Thanks <3 & bye"},
]


def load(name: str) -> ChatTemplate:
    return ChatTemplate(fixture_template(name).read_text(), bos_token=BOS, eos_token=EOS)


def test_lfm2_tools_template_puts_tools_in_a_tool_list() -> None:
    prompt = load("lfm2-tools.jinja").render(CONVERSATION, tools=TOOLS)
    assert prompt == (
        "<|startoftext|><|im_start|>system\nBe brief.\nList of tools: <|tool_list_start|>["
        + TOOL_JSON
        + "]<|tool_list_end|><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>look it up</think>It is sunny.<|im_end|>\n"
        "<|im_start|>user\nThanks <3 & bye<|im_end|>\n<|im_start|>assistant\n"
    )


def test_lfm2_tools_template_wraps_tool_results() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "calling"},
        {"role": "tool", "content": '{"temp": 22}'},
    ]
    prompt = load("lfm2-tools.jinja").render(messages, add_generation_prompt=False)
    assert prompt == (
        "<|startoftext|><|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n"
        '<|im_start|>tool\n<|tool_response_start|>{"temp": 22}<|tool_response_end|><|im_end|>\n'
    )


def test_lfm25_instruct_template_lists_tools_and_strips_past_thinking() -> None:
    template = load("lfm2.5-instruct.jinja")
    messages = CONVERSATION + [{"role": "assistant", "content": "<think>last</think>Bye!"}]
    prompt = template.render(messages, tools=TOOLS, add_generation_prompt=False)
    assert prompt == (
        "<|startoftext|><|im_start|>system\nBe brief.\nList of tools: [" + TOOL_JSON + "]<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\nIt is sunny.<|im_end|>\n"
        "<|im_start|>user\nThanks <3 & bye<|im_end|>\n<|im_start|>assistant\n<think>last</think>Bye!<|im_end|>\n"
    )
    kept = template.render(messages, add_generation_prompt=False, extra={"keep_past_thinking": True})
    assert "<|im_start|>assistant\n<think>look it up</think>It is sunny.<|im_end|>" in kept


def test_lfm25_8b_template_renders_date_tools_thinking_and_past_calls() -> None:
    template = load("lfm2.5-8b-a1b.jinja")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
        {
            "role": "assistant",
            "content": "",
            "thinking": "need the tool",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}
            ],
        },
        {"role": "tool", "content": "sunny"},
    ]
    prompt = template.render(messages, tools=TOOLS)
    today = datetime.now().strftime("%Y-%m-%d")
    assert prompt == (
        "<|startoftext|><|im_start|>system\nBe brief.\n\nToday's date: "
        + today
        + "\n\nList of tools: ["
        + TOOL_JSON
        + "]<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>need the tool</think>"
        "<|tool_call_start|>[get_weather(city='Paris', days=3)]<|tool_call_end|><|im_end|>\n"
        "<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("preserve", "first_turn"), [(None, "Sunny."), (True, "<think>sun</think>Sunny."), (False, "Sunny.")]
)
def test_lfm25_8b_template_keeps_past_thinking_only_when_told_to_preserve_reasoning(
    preserve: bool | None, first_turn: str
) -> None:
    """``--reasoning-preserve`` is its ``preserve_thinking``; without it, the template's own default (false), as
    transformers and llama-server render it. The probes tell it to, so it is a template that preserves reasoning."""
    variables = ChatSettings(reasoning_preserve=preserve).template_variables
    source = fixture_template("lfm2.5-8b-a1b.jinja").read_text()
    template = ChatTemplate(source, bos_token=BOS, eos_token=EOS, variables=variables)
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Sunny.", "thinking": "sun"},
        {"role": "user", "content": "Thanks"},
    ]
    assert template.render(messages) == (
        "<|startoftext|><|im_start|>user\nWeather?<|im_end|>\n"
        f"<|im_start|>assistant\n{first_turn}<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"
    )
    assert template.caps.supports_preserve_reasoning


@pytest.mark.parametrize("name", ["lfm2-tools.jinja", "lfm2.5-instruct.jinja", "lfm2.5-8b-a1b.jinja"])
def test_every_fixture_renders_plain_chatml_for_a_plain_chat(name: str) -> None:
    prompt = load(name).render([{"role": "user", "content": "Hi"}])
    assert prompt == "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_caps_are_found_by_rendering() -> None:
    tools, instruct, moe = (load(n).caps for n in ("lfm2-tools.jinja", "lfm2.5-instruct.jinja", "lfm2.5-8b-a1b.jinja"))
    assert tools.supports_tools and not tools.supports_tool_calls and not tools.supports_typed_content
    assert instruct.supports_tools and instruct.supports_system_role
    assert moe.supports_tool_calls and moe.supports_parallel_tool_calls and moe.supports_typed_content


def test_text_parts_are_joined_with_newlines_when_the_template_reads_strings() -> None:
    template = load("lfm2-tools.jinja")
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert template.normalize_content(parts) == "a\nb"
    assert load("lfm2.5-8b-a1b.jinja").normalize_content(parts) == parts


def test_tojson_keeps_key_order_and_does_not_escape_html() -> None:
    template = ChatTemplate("{{ messages[0] | tojson }}", bos_token="", eos_token="")
    assert template.render([{"role": "user", "content": "<b>&"}]) == '{"role": "user", "content": "<b>&"}'


def test_generation_tag_loop_controls_and_kwargs() -> None:
    source = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}{{ flavour }}"
    )
    template = ChatTemplate(source, bos_token="", eos_token="")
    messages = [{"role": "user", "content": str(i)} for i in range(5)]
    assert template.render(messages, extra={"flavour": "!"}) == "[0][1]!"


def test_raise_exception_becomes_a_template_error_with_its_message() -> None:
    template = ChatTemplate("{{ raise_exception('Only user and assistant roles') }}", bos_token="", eos_token="")
    with pytest.raises(TemplateError, match="Only user and assistant roles"):
        template.render([{"role": "user", "content": "x"}])


def test_the_sandbox_refuses_python_internals_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = (
        "{{ ''.__class__.__mro__[1].__subclasses__() }}"
        "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
    )
    template = ChatTemplate(source, bos_token="", eos_token="")
    with pytest.raises(TemplateError, match="unsafe"):
        template.render([{"role": "user", "content": "x"}])
    assert not marker.exists()


def test_a_syntax_error_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="syntax error"):
        ChatTemplate("{% for %}", bos_token="", eos_token="")


# -- llama-server's variables: enable_thinking, the date, lenient undefined ------------------------------
#: Small templates that end their generation prompt as the suite's Qwen3, QwQ and Command-R7B ones do.
QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
QWQ_LIKE = (
    "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% if not enable_thinking %}</think>{% endif %}{% endif %}"
)
PLAIN = "{% for m in messages %}[{{ m.content }}]{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
USER = [{"role": "user", "content": "What is today?"}]


@pytest.mark.parametrize(
    ("source", "reasoning", "end"),
    [
        (QWEN3_LIKE, "auto", "<|im_start|>assistant\n"),
        (QWEN3_LIKE, "on", "<|im_start|>assistant\n"),
        (QWEN3_LIKE, "off", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        (QWQ_LIKE, "auto", "<|assistant|><think>\n"),
        (QWQ_LIKE, "off", "<|assistant|><think>\n</think>"),
    ],
)
def test_reasoning_sets_enable_thinking_as_llama_server(source: str, reasoning: Reasoning, end: str) -> None:
    template = ChatTemplate(source, bos_token="", eos_token="", reasoning=reasoning)
    assert template.supports_thinking
    assert template.render(USER).endswith(end)


def test_a_template_that_ignores_enable_thinking_is_told_false_under_auto_and_kwargs_win() -> None:
    probe = "{{ enable_thinking }}"
    assert ChatTemplate(PLAIN, bos_token="", eos_token="").enable_thinking is False
    assert ChatTemplate(PLAIN + probe, bos_token="", eos_token="").render(USER) == "[What is today?]<|assistant|>True"
    template = ChatTemplate(PLAIN + probe, bos_token="", eos_token="", reasoning="off")
    assert template.render(USER, extra={"enable_thinking": True}).endswith("True")


def test_every_render_gets_todays_date_as_llama_cpp_spells_it() -> None:
    template = ChatTemplate("{{ date_string }}|{{ datetime }}", bos_token="", eos_token="")
    now = datetime.now()
    assert template.render(USER) == f"{now.strftime('%d %b %Y')}|{now.strftime('%b %d %Y')}"


def test_an_undefined_value_added_to_text_is_empty_text_and_fails_elsewhere() -> None:
    template = ChatTemplate("{{ 'Tools:\\n' + functions }}|{{ functions + '!' }}", bos_token="", eos_token="")
    assert template.render(USER) == "Tools:\n|!"
    with pytest.raises(TemplateError, match="undefined"):
        ChatTemplate("{{ functions + 1 }}", bos_token="", eos_token="").render(USER)


def test_think_tags_keep_the_whitespace_the_template_writes_around_reasoning() -> None:
    qwen3 = (
        "{% for m in messages %}{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n"
        "{% endif %}{{ m.content }}{% endfor %}<think>"
    )
    assert ChatTemplate(qwen3, bos_token="", eos_token="").think_tags == ThinkTags("<think>\n", "\n</think>\n\n")
    drops_reasoning = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n"  # as DeepSeek-R1's does
    assert ChatTemplate(drops_reasoning, bos_token="", eos_token="").think_tags == ThinkTags("<think>", "</think>")
    assert ChatTemplate(PLAIN, bos_token="", eos_token="").think_tags is None
