"""The chat flags: --chat-template-kwargs, --reasoning-effort, --reasoning-preserve, --skip-chat-parsing and
--prefill-assistant, as parsed and as the template variables they make."""

from __future__ import annotations

import pytest

from lfmserve.settings import ChatSettings, Settings


def test_the_chat_flags_parse_to_their_fields_and_back() -> None:
    argv = [
        "--chat-template-kwargs",
        '{"keep_past_thinking": true}',
        "--reasoning-effort",
        "high",
        "--no-reasoning-preserve",
        "--skip-chat-parsing",
        "--no-prefill-assistant",
    ]
    settings = Settings.from_argv(argv)
    assert settings.chat == ChatSettings(
        chat_template_kwargs='{"keep_past_thinking": true}',
        reasoning_effort="high",
        reasoning_preserve=False,
        skip_chat_parsing=True,
        prefill_assistant=False,
    )
    assert settings.to_argv() == argv
    assert Settings.from_argv(["--reasoning-preserve", "--no-skip-chat-parsing", "--prefill-assistant"]).chat == (
        ChatSettings(reasoning_preserve=True)
    )


def test_the_defaults_are_llama_servers_but_past_reasoning_is_the_templates_choice() -> None:
    chat = Settings.from_argv([]).chat
    assert (chat.chat_template_kwargs, chat.reasoning_effort, chat.reasoning_preserve) == (None, "default", None)
    assert (chat.skip_chat_parsing, chat.prefill_assistant) == (False, True)
    # llama-server sets preserve_reasoning unless a flag did; lfmserve leaves it to the template's own default.
    assert chat.template_variables == {}


@pytest.mark.parametrize(
    ("fields", "variables"),
    [
        (
            {"chat_template_kwargs": '{"a": [1, "x"], "b": null}'},
            {"a": [1, "x"], "b": None},
        ),
        ({"reasoning_effort": "xhigh"}, {"reasoning_effort": "xhigh"}),
        # "default" keeps what --chat-template-kwargs says, or the template's own.
        (
            {"chat_template_kwargs": '{"reasoning_effort": "low"}', "reasoning_effort": "default"},
            {"reasoning_effort": "low"},
        ),
        (
            {"chat_template_kwargs": '{"reasoning_effort": "low"}', "reasoning_effort": "max"},
            {"reasoning_effort": "max"},
        ),
        ({"chat_template_kwargs": '{"preserve_reasoning": false}'}, {"preserve_reasoning": False}),
        (
            {"chat_template_kwargs": '{"preserve_reasoning": false}', "reasoning_preserve": True},
            {"preserve_reasoning": True},
        ),
        ({"reasoning_preserve": False}, {"preserve_reasoning": False}),
        ({"reasoning_preserve": True}, {"preserve_reasoning": True}),
    ],
)
def test_template_variables_are_the_kwargs_then_the_reasoning_flags(
    fields: dict[str, object], variables: object
) -> None:
    assert Settings.of(**fields).chat.template_variables == variables


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ("{bad", "--chat-template-kwargs is not valid JSON: Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1)"),
        ("[1]", "--chat-template-kwargs '[1]': expected a JSON object"),
        ('{"enable_thinking": "false"}', "--chat-template-kwargs: 'enable_thinking' must be true or false"),
    ],
)  # fmt: skip
def test_kwargs_that_are_not_a_json_object_are_refused(kwargs: str, message: str) -> None:
    chat = Settings.of(chat_template_kwargs=kwargs).chat
    with pytest.raises(ValueError) as refused:
        _ = chat.template_variables
    assert str(refused.value) == message
