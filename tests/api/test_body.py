"""Body parsing shared by every family: strict types, the first problem as a 400 naming the field, and the
generation fields adapted once for the chat layer."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lfmserve.api.body import Body, SamplingFields, built, parse_body
from lfmserve.chat.request import GenerationOptions
from lfmserve.engine.records import SAMPLING_NAMES
from lfmserve.errors import InvalidRequest


def _error(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_body(SamplingFields, raw)
    return info.value


def test_nothing_set_is_the_servers_defaults() -> None:
    assert parse_body(SamplingFields, b"{}").generation_options() == GenerationOptions()


def test_every_field_is_adapted_under_the_chat_layers_names() -> None:
    body = parse_body(
        SamplingFields,
        b'{"temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.1, "typical_p": 0.8, "repeat_penalty": 1.1,'
        b' "repeat_last_n": 16, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 3, "ignore_eos": true,'
        b' "logit_bias": [[5, -1.5], ["hi", false]], "stop": "END", "n_predict": 9, "cache_prompt": false,'
        b' "id_slot": 2, "json_schema": {"type": "object"}, "n_probs": 4, "stream": true, "model": "m"}',
    )
    assert body.generation_options() == GenerationOptions(
        sampling={
            "temperature": 0.5,
            "top_k": 7,
            "top_p": 0.9,
            "min_p": 0.1,
            "typical_p": 0.8,
            "repeat_penalty": 1.1,
            "repeat_last_n": 16,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "seed": 3,
            "ignore_eos": True,
        },
        logit_bias=((5, -1.5), ("hi", False)),
        max_tokens=9,
        stop=("END",),
        cache_prompt=False,
        id_slot=2,
        json_schema={"type": "object"},
        n_probs=4,
    )


def test_the_sampling_fields_are_named_as_the_sampling_knobs() -> None:
    assert SAMPLING_NAMES - {"logit_bias"} <= set(SamplingFields.model_fields)


def test_max_tokens_wins_over_n_predict_and_openais_bias_map_becomes_pairs() -> None:
    body = parse_body(
        SamplingFields, b'{"max_tokens": 3, "n_predict": 9, "logit_bias": {"12": 2.0}, "stop": ["a", "b"]}'
    )
    options = body.generation_options()
    assert (options.max_tokens, options.logit_bias, options.stop) == (3, (("12", 2.0),), ("a", "b"))


@pytest.mark.parametrize(
    ("raw", "message", "param"),
    [
        (b'{"top_k": "7"}', "Invalid value for 'top_k': Input should be a valid integer (got '7')", "top_k"),
        (b'{"stream": 1}', "Invalid value for 'stream': Input should be a valid boolean (got 1)", "stream"),
        (b'{"top_p": 2}', "Invalid value for 'top_p': Input should be less than or equal to 1 (got 2)", "top_p"),
        (
            b'{"temperature": 1e999}',
            "Invalid value for 'temperature': Value error, must be a finite number (got inf)",
            "temperature",
        ),
        (b'{"n": 2}', "Invalid value for 'n': Input should be less than or equal to 1 (got 2)", "n"),
        (b"[1]", "Invalid request body: Input should be an object", None),
        (
            b'{"json_schema": {}, "grammar": "root ::= x"}',
            "Invalid request body: Value error, use either 'json_schema' or 'grammar', not both",
            None,
        ),
    ],
)
def test_the_first_problem_is_a_400_naming_the_field(raw: bytes, message: str, param: str | None) -> None:
    error = _error(raw)
    assert (error.message, error.param) == (message, param)


def test_malformed_or_missing_json_says_where() -> None:
    assert _error(b'{"top_k": ').message == "Invalid JSON body: EOF while parsing a value at line 1 column 10"
    assert _error(b"").message == "Invalid JSON body: EOF while parsing a value at line 1 column 0"


def test_llama_servers_samplers_are_adapted_with_their_order_as_names() -> None:
    body = parse_body(
        SamplingFields,
        b'{"dynatemp_range": 0.5, "dynatemp_exponent": 1.5, "top_n_sigma": 1.0, "xtc_probability": 0.5,'
        b' "xtc_threshold": 0.2, "dry_multiplier": 0.8, "dry_base": 2, "dry_allowed_length": 3,'
        b' "dry_penalty_last_n": 0, "dry_sequence_breakers": ["\\n", "##"], "mirostat": 2, "mirostat_tau": 4,'
        b' "mirostat_eta": 0.2, "adaptive_target": -0.5, "adaptive_decay": 0.99, "min_keep": 5,'
        b' "samplers": ["Top-K", "nucleus", "temp", "adaptive_p"]}',
    )
    assert body.generation_options().sampling == {
        "dynatemp_range": 0.5,
        "dynatemp_exponent": 1.5,
        "top_n_sigma": 1.0,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "dry_multiplier": 0.8,
        "dry_base": 2.0,
        "dry_allowed_length": 3,
        "dry_penalty_last_n": 0,
        "dry_sequence_breakers": ("\n", "##"),
        "mirostat": 2,
        "mirostat_tau": 4.0,
        "mirostat_eta": 0.2,
        "adaptive_target": -0.5,
        "adaptive_decay": 0.99,
        "min_keep": 5,
        "samplers": ("top_k", "top_p", "temperature", "adaptive_p"),
    }


def test_a_samplers_string_is_one_letter_per_sampler() -> None:
    body = parse_body(SamplingFields, b'{"samplers": "edskypmxtia"}')
    assert body.samplers == (
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
        "infill",
        "adaptive_p",
    )


def test_a_dry_base_below_one_is_the_servers_as_in_llama_server() -> None:
    assert "dry_base" not in parse_body(SamplingFields, b'{"dry_base": 0.5}').generation_options().sampling


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        (b'{"dry_penalty_last_n": -1}', "dry_penalty_last_n", "Input should be greater than or equal to 0 (got -1)"),
        (b'{"dry_allowed_length": -2}', "dry_allowed_length", "Input should be greater than or equal to 0 (got -2)"),
        (b'{"dry_sequence_breakers": []}', "dry_sequence_breakers", "Tuple should have at least 1 item"),
        (b'{"dry_sequence_breakers": "\\n"}', "dry_sequence_breakers", "Input should be a valid array (got '\\n')"),
        (b'{"dry_multiplier": "high"}', "dry_multiplier", "Input should be a valid number (got 'high')"),
        (b'{"xtc_probability": 1.5}', "xtc_probability", "Input should be less than or equal to 1 (got 1.5)"),
        (b'{"xtc_threshold": -0.1}', "xtc_threshold", "Input should be greater than or equal to 0 (got -0.1)"),
        (b'{"mirostat": 3}', "mirostat", "Input should be less than or equal to 2 (got 3)"),
        (b'{"mirostat_tau": "x"}', "mirostat_tau", "Input should be a valid number (got 'x')"),
        (b'{"mirostat_eta": true}', "mirostat_eta", "Input should be a valid number (got True)"),
        (b'{"top_n_sigma": [1]}', "top_n_sigma", "Input should be a valid number (got [1])"),
        (b'{"dynatemp_range": "0.5"}', "dynatemp_range", "Input should be a valid number (got '0.5')"),
        (b'{"dynatemp_exponent": {}}', "dynatemp_exponent", "Input should be a valid number (got {})"),
        (b'{"adaptive_target": 1.5}', "adaptive_target", "Input should be less than or equal to 1 (got 1.5)"),
        (b'{"adaptive_decay": 1.0}', "adaptive_decay", "Input should be less than or equal to 0.99 (got 1.0)"),
        (b'{"min_keep": -1}', "min_keep", "Input should be greater than or equal to 0 (got -1)"),
        (b'{"samplers": ["top_k", "warp"]}', "samplers", "unknown sampler 'warp'"),
        (b'{"samplers": "kz"}', "samplers", "unknown sampler letter 'z'"),
        (b'{"samplers": [7]}', "samplers.0", "Input should be a valid string (got 7)"),
        (b'{"n_keep": -2}', "n_keep", "Input should be greater than or equal to -1 (got -2)"),
        (b'{"n_discard": -1}', "n_discard", "Input should be greater than or equal to 0 (got -1)"),
    ],
)
def test_each_sampler_field_out_of_range_is_a_400_naming_it(raw: bytes, field: str, message: str) -> None:
    error = _error(raw)
    assert error.param == field
    assert str(error).startswith(f"Invalid value for '{field}': ") and message in str(error)


def test_a_new_body_model_parses_bodies_from_several_threads_at_once_and_is_then_built() -> None:
    """A model builds its validator on its first body, not at import. First bodies parsed in several threads at the
    same moment (a large body is parsed off the event loop) all parse, and the model is built afterwards."""

    class Probe(Body):
        name: str
        size: int = 0

    assert not Probe.__pydantic_complete__
    start = threading.Barrier(8)

    def parse(i: int) -> Probe:
        start.wait()
        return parse_body(Probe, f'{{"name": "n{i}", "size": {i}}}'.encode())

    with ThreadPoolExecutor(8) as pool:
        parsed = list(pool.map(parse, range(8)))
    assert [(body.name, body.size) for body in parsed] == [(f"n{i}", i) for i in range(8)]
    assert Probe.__pydantic_complete__ and built(Probe) is Probe
