"""llama-server's sampler fields over HTTP: shown in each answer's ``generation_settings`` and in ``/props``, taken
by the OpenAI and Ollama routes, and a 400 naming the field when out of range."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lfmserve.settings import Settings
from lfmserve.testing import EOS_ID
from tests.conftest import ServerThread, post

#: Every sampler field llama-server's ``generation_settings`` shows, set away from its default.
EVERY_SAMPLER: dict[str, Any] = {
    "temperature": 0.9,
    "dynatemp_range": 0.25,
    "dynatemp_exponent": 1.5,
    "top_k": 12,
    "top_p": 0.8,
    "min_p": 0.1,
    "top_n_sigma": 2.0,
    "xtc_probability": 0.5,
    "xtc_threshold": 0.2,
    "typical_p": 0.9,
    "repeat_last_n": 32,
    "repeat_penalty": 1.1,
    "presence_penalty": 0.25,
    "frequency_penalty": 0.5,
    "dry_multiplier": 0.8,
    "dry_base": 2.0,
    "dry_allowed_length": 3,
    "dry_penalty_last_n": 128,
    "dry_sequence_breakers": ["\n", "##"],
    "mirostat": 0,
    "mirostat_tau": 4.0,
    "mirostat_eta": 0.2,
    "adaptive_target": 0.3,
    "adaptive_decay": 0.8,
    "min_keep": 2,
    "seed": 17,
}


def test_generation_settings_show_every_sampler_as_sent(tiny_server: ServerThread) -> None:
    body = {**EVERY_SAMPLER, "samplers": "kdmtxa", "prompt": "Once upon a time", "n_predict": 8}
    answer = post(tiny_server, "/completion", body)
    assert answer.status_code == 200, answer.text
    settings = answer.json()["generation_settings"]
    assert {name: settings[name] for name in EVERY_SAMPLER} == EVERY_SAMPLER
    assert settings["samplers"] == ["top_k", "dry", "min_p", "temperature", "xtc", "adaptive_p"]
    again = post(tiny_server, "/completion", body).json()
    assert again["content"] == answer.json()["content"]  # seeded: every sampler's random draws repeat


def test_props_lists_every_sampler_at_llama_servers_defaults(tiny_server: ServerThread) -> None:
    params = httpx.get(tiny_server.url + "/props").json()["default_generation_settings"]["params"]
    assert {name: params[name] for name in EVERY_SAMPLER if name not in ("temperature", "top_k", "top_p", "min_p")} == {
        "dynatemp_range": 0.0,
        "dynatemp_exponent": 1.0,
        "top_n_sigma": -1.0,
        "xtc_probability": 0.0,
        "xtc_threshold": 0.1,
        "typical_p": 1.0,
        "repeat_last_n": 64,
        "repeat_penalty": 1.05,  # the LFM2 family's (the tiny model is named as one)
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dry_multiplier": 0.0,
        "dry_base": 1.75,
        "dry_allowed_length": 2,
        "dry_penalty_last_n": 64,
        "dry_sequence_breakers": ["\n", ":", '"', "*"],
        "mirostat": 0,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
        "min_keep": 0,
        "seed": 4294967295,
    }
    assert params["samplers"] == [
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
    ]


def test_the_openai_and_ollama_routes_take_them(tiny_server: ServerThread) -> None:
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "mirostat": 2, "seed": 3}
    assert post(tiny_server, "/v1/chat/completions", chat).status_code == 200
    completion = {"prompt": "Hi", "max_tokens": 4, "xtc_probability": 1.0, "samplers": ["temp", "xtc"], "seed": 3}
    assert post(tiny_server, "/v1/completions", completion).status_code == 200
    options = {"mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.3, "typical_p": 0.9, "num_predict": 4}
    ollama = post(tiny_server, "/api/generate", {"model": "m", "prompt": "Hi", "stream": False, "options": options})
    assert ollama.status_code == 200, ollama.text


def test_an_out_of_range_sampler_is_a_400_naming_it_on_every_route(tiny_server: ServerThread) -> None:
    routes = {
        "/completion": {"prompt": "Hi", "dry_penalty_last_n": -1},
        "/v1/completions": {"prompt": "Hi", "dry_penalty_last_n": -1},
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "dry_penalty_last_n": -1},
    }
    for route, body in routes.items():
        answer = post(tiny_server, route, body)
        assert answer.status_code == 400, route
        error = answer.json()["error"]
        assert error["param"] == "dry_penalty_last_n"
        assert error["message"] == (
            "Invalid value for 'dry_penalty_last_n': Input should be greater than or equal to 0 (got -1)"
        )
    ollama = post(
        tiny_server, "/api/generate", {"model": "m", "prompt": "Hi", "stream": False, "options": {"mirostat": 3}}
    )
    assert ollama.status_code == 400 and "mirostat" in ollama.json()["error"]


def test_the_flags_are_every_requests_defaults(
    server_factory: Callable[[Settings], ServerThread], tiny_gguf: Path
) -> None:
    """Each flag is shown in /props and applies to a request that does not say; a request's own value wins."""
    settings = Settings.from_argv(
        ["-m", str(tiny_gguf), "-c", "512", "-np", "1", "-t", "1", "--ignore-eos", "-l", "100-1.5", "--keep", "5"]
        + ["--grammar", 'root ::= "yes" | "no"', "--dry-multiplier", "0.5", "--sampling-seq", "kdt", "--mirostat", "2"]
        + ["--dry-sequence-breaker", "\\n", "--dry-sequence-breaker", "::", "-r", "\\t", "-bs"]
    )
    server = server_factory(settings)
    params = httpx.get(server.url + "/props").json()["default_generation_settings"]["params"]
    selected = ("ignore_eos", "n_keep", "dry_multiplier", "samplers", "mirostat", "dry_sequence_breakers")
    assert {name: params[name] for name in selected} == {
        "ignore_eos": True,
        "n_keep": 5,
        "dry_multiplier": 0.5,
        "samplers": ["top_k", "dry", "temperature"],
        "mirostat": 2,
        "dry_sequence_breakers": ["\n", "::"],  # --escape (on by default) reads the typed \n as a new line
    }
    assert (params["backend_sampling"], params["n_probs"], params["seed"]) == (True, 0, 4294967295)
    # -l's bias, then --ignore-eos's bans of the end-of-generation tokens (2, which llama.cpp also counts, and EOS)
    bans = [{"bias": None, "token": 2}, {"bias": None, "token": EOS_ID}]
    assert params["logit_bias"] == [{"bias": -1.5, "token": 100}, *bans]
    plain = post(server, "/completion", {"prompt": "Is it?", "n_predict": 8, "temperature": 0}).json()
    assert plain["content"] in ("yes", "no") and plain["stop_type"] == "eos"  # the grammar ends the answer
    settings_used = plain["generation_settings"]
    assert settings_used["stop"] == ["\t"]  # -r's \t, read as a tab
    assert (settings_used["ignore_eos"], settings_used["n_keep"], settings_used["mirostat"]) == (True, 5, 2)
    own = {"prompt": "Is it?", "n_predict": 8, "temperature": 0, "logit_bias": [[9, 2.0]], "ignore_eos": False}
    answer = post(server, "/completion", {**own, "json_schema": {"type": "integer"}, "n_keep": -1}).json()
    assert answer["content"].lstrip("-").isdigit()  # the request's schema, not the server's grammar
    assert answer["generation_settings"]["logit_bias"] == [{"bias": 2.0, "token": 9}]
    assert (answer["generation_settings"]["ignore_eos"], answer["generation_settings"]["n_keep"]) == (False, -1)
