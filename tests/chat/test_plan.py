"""A chat request's plan: which tools the template sees, which constraint applies, and every conflict a 400."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ASK, TOOLS, ServerThread


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
            'unsupported or invalid JSON schema: Unimplemented keys: ["not"]',
        ),
        ({"json_schema": {"type": "object"}, "grammar": "root ::= x"}, "use either 'json_schema' or 'grammar'"),
        ({"grammar": "root ::= undefined-rule"}, "invalid grammar"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
        ({"tool_choice": "required"}, "tool_choice 'required' needs 'tools'"),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools cannot be combined"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"response_format": {"type": "json_schema"}}, "json_schema.schema"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "tool 'f': parameters must be a JSON schema of type object",
        ),
    ],
)
def test_bad_constraints_are_400_naming_the_problem(
    tools_server: ServerThread, body: dict[str, Any], message: str
) -> None:
    response = httpx.post(tools_server.url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


def test_tool_choice_none_hides_the_tools(tools_server: ServerThread) -> None:
    def usage(**extra: Any) -> dict[str, Any]:
        body = {"messages": ASK, "max_tokens": 3, "temperature": 0, **extra}
        response = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()
        return {"prompt": response["usage"]["prompt_tokens"], "message": response["choices"][0]["message"]}

    plain, hidden, shown = usage(), usage(tools=TOOLS, tool_choice="none"), usage(tools=TOOLS)
    assert hidden == plain and shown["prompt"] > plain["prompt"]
