"""Structured output: JSON schemas, ``json_object`` and GBNF grammars constrain sampling so the output always validates.

The random model writes no JSON on its own: the token masks are what make it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import jsonschema
import llguidance
import openai
import pytest
from pydantic import BaseModel, Field

from lfmserve.engine.constraints import Grammars, bounded
from lfmserve.errors import EngineError
from lfmserve.llama.model import NativeModel
from tests.conftest import ASK, ServerThread


# Frigate's review description is a pydantic model with string lengths and number ranges; this one
# adds the other features the converter supports (pattern, const, enum, $ref/$defs, anyOf, array sizes).
class Vehicle(BaseModel):
    wheels: Literal[2, 4]
    plate: str = Field(pattern=r"^[A-Z]{2}[0-9]{2}$")


class Review(BaseModel):
    title: str = Field(min_length=3, max_length=16)
    scene: str = Field(max_length=24)
    confidence: float = Field(ge=0.0, le=1.0)
    potential_threat_level: int = Field(ge=0, le=3)
    other_concerns: list[Annotated[str, Field(max_length=6)]] = Field(default_factory=list, min_length=1, max_length=2)
    kind: Literal["person"] | Vehicle
    camera: Literal["front"] = "front"


REVIEW_SCHEMA: dict[str, Any] = Review.model_json_schema()


def test_json_schema_response_format_is_valid_for_20_seeds(client: openai.OpenAI) -> None:
    outputs = set()
    for seed in range(20):
        response = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Describe the scene."}],
            response_format={"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}},
            max_tokens=400,
            temperature=1.0,
            seed=seed,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.content is not None
        value = json.loads(choice.message.content)
        jsonschema.validate(value, REVIEW_SCHEMA)
        Review.model_validate(value)
        assert set(value) <= set(REVIEW_SCHEMA["properties"])  # no invented keys
        outputs.add(choice.message.content)
    assert len(outputs) == 20


def test_json_object_and_native_constraints(tools_server: ServerThread) -> None:
    url = tools_server.url
    body = {"messages": ASK, "max_tokens": 200, "temperature": 1.0, "seed": 1}
    response = httpx.post(url + "/v1/chat/completions", json={**body, "response_format": {"type": "json_object"}})
    assert isinstance(json.loads(response.json()["choices"][0]["message"]["content"]), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 9}}, "required": ["n"]}
    native = httpx.post(url + "/completion", json={"prompt": "x", "n_predict": 50, "json_schema": schema, "seed": 2})
    assert 5 <= json.loads(native.json()["content"])["n"] <= 9
    grammar = 'root ::= "yes" | "no" | "maybe " [0-9]'
    texts = {
        httpx.post(url + "/completion", json={"prompt": "x", "n_predict": 9, "grammar": grammar, "seed": s}).json()[
            "content"
        ]
        for s in range(6)
    }
    assert texts and all(t in ("yes", "no") or (t.startswith("maybe ") and t[-1].isdigit()) for t in texts)


def test_a_finished_grammar_ends_the_answer_even_with_ignore_eos(tools_server: ServerThread) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = {"messages": ASK, "max_tokens": 60, "ignore_eos": True, "json_schema": schema}
    choice = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and json.loads(choice["message"]["content"]) in (
        {"ok": True},
        {"ok": False},
    )


def test_schemas_are_tightened_as_llama_cpps_converter_reads_them() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "number"},
            "k": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}},
            "open": {"type": "object", "properties": {}, "additionalProperties": True},
            "fixed": {"const": {"type": "number"}},
        },
    }
    assert bounded(schema) == {
        "type": "object",
        "properties": {
            "n": {"type": "number", "multipleOf": 1e-10, "minimum": -(10**15 - 1), "maximum": 10**15 - 1},
            "k": {"type": "integer", "minimum": 0, "maximum": 10**15 - 1},
            "tags": {
                "type": "array",
                "items": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
            },
            "open": {"type": "object", "properties": {}, "additionalProperties": True},
            "fixed": {"const": {"type": "number"}},  # a value, not a schema: left alone
        },
        "additionalProperties": False,
    }


def test_untyped_items_and_properties_are_an_array_and_an_object_as_llama_cpp_reads_them() -> None:
    limits = {"minimum": -(10**15 - 1), "maximum": 10**15 - 1}
    assert bounded({"items": [{"type": "integer"}]}) == {
        "type": "array",
        "prefixItems": [{"type": "integer", **limits}],
        "items": False,
    }
    assert bounded({"items": {"type": "string"}}) == {"type": "array", "items": {"type": "string"}}
    assert bounded({"properties": {"a": {"type": "string"}}}) == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    assert bounded({"anyOf": [{"type": "null"}], "items": {}}) == {
        "anyOf": [{"type": "null"}],
        "items": {},
    }


def test_properties_named_like_keywords_are_names_not_keywords() -> None:
    """An order's ``items``, a form's ``properties``: the names of a ``properties`` map are not read as a schema
    (that made the map an "array" and every such schema a 400)."""
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}, "properties": {"type": "string"}},
        "$defs": {"enum": {"type": "string"}},
        "required": ["items"],
    }
    assert bounded(schema) == {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}, "properties": {"type": "string"}},
        "$defs": {"enum": {"type": "string"}},
        "required": ["items"],
        "additionalProperties": False,
    }
    assert llguidance.LLMatcher.grammar_from_json_schema(json.dumps(bounded(schema)))  # and llguidance reads it


def test_grammars_closed_with_their_model_build_nothing_from_it(tiny_gguf: Path) -> None:
    """The grammar tokenizer is built by the first constrained request; after the model is put to sleep (and freed)
    it must not be read: a constrained request is refused instead (reading it would abort the process)."""
    model = NativeModel(str(tiny_gguf))
    grammars = Grammars(model)
    grammars.close()
    model.close()
    with pytest.raises(EngineError, match="^the model has been unloaded$"):
        grammars.json_schema({"type": "object"}, param="response_format")
