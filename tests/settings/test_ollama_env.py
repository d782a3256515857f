"""Ollama's server variables as Ollama's ``envconfig`` reads them: the fields each sets, under every flag and
``LFMSERVE_*`` / ``LLAMA_ARG_*`` variable, what a malformed value does, and each one's start-up line."""

from __future__ import annotations

from typing import Any

import pytest

from lfmserve.router.child import child_argv
from lfmserve.settings import Settings
from lfmserve.settings.ollama_env import OLLAMA_LOCAL_ORIGINS

LOCAL = ",".join(OLLAMA_LOCAL_ORIGINS)


def _parse(environ: dict[str, str], *argv: str) -> Settings:
    return Settings.from_argv(list(argv), environ=environ)


def _fields(settings: Settings, *names: str) -> tuple[Any, ...]:
    groups = [getattr(settings, group) for group in ("server", "engine", "router", "logging")]
    return tuple(next(getattr(g, name) for g in groups if hasattr(g, name)) for name in names)


def _refusal(environ: dict[str, str], capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        _parse(environ, *argv)
    assert exit_info.value.code == 1
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "host", "port", "became"),
    [
        ("0.0.0.0", "0.0.0.0", 11434, "--host 0.0.0.0 --port 11434"),
        ("localhost:9000", "localhost", 9000, "--host localhost --port 9000"),
        ("http://example.com", "example.com", 80, "--host example.com --port 80"),
        ("https://example.com/", "example.com", 443, "--host example.com --port 443"),
        ("http://10.0.0.2:8080/ollama", "10.0.0.2", 8080, "--host 10.0.0.2 --port 8080"),
        ("tcp://10.0.0.2", "10.0.0.2", 11434, "--host 10.0.0.2 --port 11434"),
        ("[::1]:8080", "::1", 8080, "--host ::1 --port 8080"),
        ("::1", "::1", 11434, "--host ::1 --port 11434"),
        (":8080", "0.0.0.0", 8080, "--host 0.0.0.0 --port 8080"),
        ("http://", "127.0.0.1", 80, "--host 127.0.0.1 --port 80"),
        ("' 127.0.0.2:1234 '", "127.0.0.2", 1234, "--host 127.0.0.2 --port 1234"),
        ("box:http", "box", 11434, "--host box --port 11434; port 'http' is not a port: Ollama's default"),
        ("box:70000", "box", 11434, "--host box --port 11434; port '70000' is not a port: Ollama's default"),
        ("https://box:", "box", 443, "--host box --port 443; port '' is not a port: Ollama's default"),
    ],
)
def test_ollama_host_is_the_host_and_port_as_ollama_parses_it(value: str, host: str, port: int, became: str) -> None:
    settings = _parse({"OLLAMA_HOST": value})
    assert (settings.server.host, settings.server.port) == (host, port)
    name, cleaned, text, warning = _only(settings)
    assert (name, text, warning) == ("OLLAMA_HOST", became, "Ollama's default" in became)
    assert cleaned == value.strip("'").strip()


def _only(settings: Settings) -> tuple[str, str, str, bool]:
    (variable,) = settings.ollama
    return variable.name, variable.value, variable.became, variable.warning


@pytest.mark.parametrize(
    ("value", "ttl", "became"),
    [
        ("2s", 2, "--models-ttl 2"),
        ("5m", 300, "--models-ttl 300"),
        ("1h30m", 5400, "--models-ttl 5400"),
        ("+1m1s", 61, "--models-ttl 61"),
        ("300", 300, "--models-ttl 300"),
        ("1.5s", 2, "--models-ttl 2; whole seconds, rounded up"),
        ("500ms", 1, "--models-ttl 1; whole seconds, rounded up"),
        ("-1", 0, "--models-ttl 0; for ever"),
        ("-1s", 0, "--models-ttl 0; for ever"),
        ("0", 1, "--models-ttl 1; 1 s, the shortest: --models-ttl 0 keeps models for ever"),
        ("0s", 1, "--models-ttl 1; 1 s, the shortest: --models-ttl 0 keeps models for ever"),
    ],
)
def test_ollama_keep_alive_is_the_routers_idle_time(value: str, ttl: int, became: str) -> None:
    settings = _parse({"OLLAMA_KEEP_ALIVE": value})
    assert (settings.router.models_ttl, _only(settings)) == (ttl, ("OLLAMA_KEEP_ALIVE", value, became, False))


@pytest.mark.parametrize("value", ["1.5", "5 m", "5M", "forever", "1h30", ".s", "9999999999999999h"])
def test_a_keep_alive_that_is_neither_duration_nor_seconds_is_ignored_with_a_warning(value: str) -> None:
    settings = _parse({"OLLAMA_KEEP_ALIVE": value})
    why = "ignored, not a duration ('5m', '-1') nor whole seconds: Ollama too keeps its default"
    assert (settings.router.models_ttl, _only(settings)) == (0, ("OLLAMA_KEEP_ALIVE", value, why, True))


@pytest.mark.parametrize(
    ("environ", "values", "became"),
    [
        ({"OLLAMA_NUM_PARALLEL": "2"}, {"parallel": 2}, "--parallel 2"),
        ({"OLLAMA_NUM_PARALLEL": "0"}, {"parallel": 1}, "--parallel 1"),
        ({"OLLAMA_MAX_LOADED_MODELS": "1"}, {"models_max": 1}, "--models-max 1"),
        (
            {"OLLAMA_MAX_LOADED_MODELS": "0"},
            {"models_max": 4},
            "0 is Ollama's default: --models-max keeps lfmserve's",
        ),
        ({"OLLAMA_MAX_QUEUE": "7"}, {"max_queue": 7}, "--max-queue 7"),
        ({"OLLAMA_CONTEXT_LENGTH": "4096"}, {"ctx_size": 16384}, "--ctx-size 16384; 4096 a slot, times --parallel 4"),
        ({"OLLAMA_CONTEXT_LENGTH": "0"}, {"ctx_size": 0}, "0 is Ollama's default: --ctx-size keeps lfmserve's"),
        ({"OLLAMA_FLASH_ATTENTION": "1"}, {"flash_attn": "on"}, "--flash-attn on"),
        ({"OLLAMA_FLASH_ATTENTION": "True"}, {"flash_attn": "on"}, "--flash-attn on"),
        ({"OLLAMA_FLASH_ATTENTION": "f"}, {"flash_attn": "off"}, "--flash-attn off"),
        ({"OLLAMA_FLASH_ATTENTION": "0"}, {"flash_attn": "off"}, "--flash-attn off"),
        (
            {"OLLAMA_KV_CACHE_TYPE": "Q8_0"},
            {"cache_type_k": "q8_0", "cache_type_v": "q8_0"},
            "--cache-type-k q8_0 --cache-type-v q8_0",
        ),
        ({"OLLAMA_DEBUG": "1"}, {"log_verbosity": 5, "verbose": False}, "--log-verbosity 5"),
        ({"OLLAMA_DEBUG": "true"}, {"log_verbosity": 5, "verbose": False}, "--log-verbosity 5"),
        ({"OLLAMA_DEBUG": "2"}, {"log_verbosity": 3, "verbose": True}, "--log-verbose"),
        ({"OLLAMA_DEBUG": "false"}, {"log_verbosity": 3, "verbose": False}, "--log-verbosity 3"),
        ({"OLLAMA_DEBUG": "-1"}, {"log_verbosity": 2}, "--log-verbosity 2"),
        ({"OLLAMA_DEBUG": "-2"}, {"log_verbosity": 1}, "--log-verbosity 1"),
        ({"OLLAMA_DEBUG": "-5"}, {"log_verbosity": 0}, "--log-verbosity 0"),
        ({"OLLAMA_MODELS": "/srv/ollama"}, {"models_ollama": "/srv/ollama"}, "--models-ollama /srv/ollama"),
        ({"OLLAMA_ORIGINS": "*"}, {"cors_origins": f"*,{LOCAL}"}, f"--cors-origins *,{LOCAL}"),
        (
            {"OLLAMA_ORIGINS": " HTTP://App.Example , chrome-extension://*,"},
            {"cors_origins": f"http://app.example,chrome-extension://*,{LOCAL}"},
            f"--cors-origins http://app.example,chrome-extension://*,{LOCAL}",
        ),
    ],
)
def test_each_variable_sets_its_fields(environ: dict[str, str], values: dict[str, Any], became: str) -> None:
    settings = _parse(environ)
    assert _fields(settings, *values) == tuple(values.values())
    ((name, value),) = environ.items()
    (variable,) = settings.ollama
    assert (variable.name, variable.value, variable.became) == (name, value.strip(), became)
    assert set(variable.fields) <= set(values)  # what it set, among the fields it speaks of


def test_the_context_is_a_requests_context_times_the_slots_ollamas_or_others() -> None:
    environ = {"OLLAMA_CONTEXT_LENGTH": "4096", "OLLAMA_NUM_PARALLEL": "2"}
    assert _parse(environ).engine.ctx_size == 8192
    assert _parse(environ, "-np", "3").engine.ctx_size == 12288
    assert _parse({**environ, "LLAMA_ARG_N_PARALLEL": "1"}).engine.ctx_size == 4096
    per_slot = _parse(environ, "--kv-unified-per-slot", "512")
    assert per_slot.engine.ctx_size == 0
    assert per_slot.ollama[1].line == "OLLAMA_CONTEXT_LENGTH=4096: not used (--kv-unified-per-slot 512 given)"


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("OLLAMA_NUM_PARALLEL", "two", "not a whole number"),
        ("OLLAMA_NUM_PARALLEL", "-1", "not a whole number"),
        ("OLLAMA_NUM_PARALLEL", "+2", "not a whole number"),
        ("OLLAMA_CONTEXT_LENGTH", "8k", "not a whole number"),
        ("OLLAMA_MAX_LOADED_MODELS", "1.0", "not a whole number"),
        ("OLLAMA_MAX_QUEUE", "0", "not a whole number above 0"),
        ("OLLAMA_MAX_QUEUE", "lots", "not a whole number above 0"),
        ("OLLAMA_DEBUG", "yes", "not a bool or a level"),
    ],
)
def test_a_malformed_number_is_ignored_with_a_warning_as_ollama_keeps_its_default(
    variable: str, value: str, why: str
) -> None:
    settings = _parse({variable: value})
    assert settings == Settings(ollama=settings.ollama)  # every field at lfmserve's default
    assert _only(settings) == (variable, value, f"ignored, {why}: Ollama too keeps its default", True)


@pytest.mark.parametrize("value", ["yes", "off", "on", "2"])
def test_flash_attention_that_is_no_go_bool_is_on_as_ollama_reads_it(value: str) -> None:
    settings = _parse({"OLLAMA_FLASH_ATTENTION": value})
    why = "--flash-attn on; not a Go bool (1, true, 0, false...): on, as Ollama reads it"
    assert (settings.engine.flash_attn, _only(settings)) == ("on", ("OLLAMA_FLASH_ATTENTION", value, why, True))


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "OLLAMA_KV_CACHE_TYPE",
            "q9_0",
            "environment variable OLLAMA_KV_CACHE_TYPE has value 'q9_0': not one of f32, f16, bf16, q8_0, q4_0, "
            "q4_1, iq4_nl, q5_0, q5_1",
        ),
        (
            "OLLAMA_ORIGINS",
            "http://a.example,b.example",
            "environment variable OLLAMA_ORIGINS has value 'http://a.example,b.example': 'b.example' is not an "
            "origin (scheme://host[:port], one * at most)",
        ),
        (
            "OLLAMA_ORIGINS",
            "http://*.example:*",
            "environment variable OLLAMA_ORIGINS has value 'http://*.example:*': 'http://*.example:*' is not an "
            "origin (scheme://host[:port], one * at most)",
        ),
        (
            "OLLAMA_ORIGINS",
            "ws://a.example",
            "environment variable OLLAMA_ORIGINS has value 'ws://a.example': 'ws://a.example' is not an origin "
            "(scheme://host[:port], one * at most)",
        ),
    ],
)
def test_a_value_ollama_cannot_start_with_exits_1_naming_the_variable(
    capsys: pytest.CaptureFixture[str], variable: str, value: str, message: str
) -> None:
    assert _refusal({variable: value}, capsys) == f"lfmserve: error: {message} (see --help)\n"
    # refused whatever outranks it: a bad value is bad wherever it would have gone
    assert message in _refusal({variable: value}, capsys, "-ctk", "f16", "-ctv", "f16", "--cors-origins", "*")


@pytest.mark.parametrize(
    ("environ", "argv", "values", "line"),
    [
        (
            {"OLLAMA_NUM_PARALLEL": "2", "LLAMA_ARG_N_PARALLEL": "3"},
            [],
            {"parallel": 3},
            "OLLAMA_NUM_PARALLEL=2: not used (--parallel 3 given)",
        ),
        (
            {"OLLAMA_NUM_PARALLEL": "2", "LFMSERVE_PARALLEL": "5", "LLAMA_ARG_N_PARALLEL": "3"},
            [],
            {"parallel": 5},
            "OLLAMA_NUM_PARALLEL=2: not used (--parallel 5 given)",
        ),
        (
            {"OLLAMA_NUM_PARALLEL": "2"},
            ["-np", "1"],
            {"parallel": 1},
            "OLLAMA_NUM_PARALLEL=2: not used (--parallel 1 given)",
        ),
        ({"OLLAMA_NUM_PARALLEL": "2"}, ["-np", "2"], {"parallel": 2}, "OLLAMA_NUM_PARALLEL=2: --parallel 2"),
        (
            {"OLLAMA_HOST": "0.0.0.0:9000", "LLAMA_ARG_PORT": "8081"},
            [],
            {"host": "0.0.0.0", "port": 8081},
            "OLLAMA_HOST=0.0.0.0:9000: --host 0.0.0.0 (--port 8081 given)",
        ),
        (
            {"OLLAMA_HOST": "0.0.0.0:9000"},
            ["--host", "127.0.0.1", "--port", "8082"],
            {"host": "127.0.0.1", "port": 8082},
            "OLLAMA_HOST=0.0.0.0:9000: not used (--host 127.0.0.1 --port 8082 given)",
        ),
        (
            {"OLLAMA_KV_CACHE_TYPE": "q8_0", "LLAMA_ARG_CACHE_TYPE_K": "f32"},
            [],
            {"cache_type_k": "f32", "cache_type_v": "q8_0"},
            "OLLAMA_KV_CACHE_TYPE=q8_0: --cache-type-v q8_0 (--cache-type-k f32 given)",
        ),
        (
            {"OLLAMA_ORIGINS": "http://a.example"},
            ["--cors-origins", "localhost"],
            {"cors_origins": "localhost"},
            "OLLAMA_ORIGINS=http://a.example: not used (--cors-origins localhost given)",
        ),
        (
            {"OLLAMA_DEBUG": "2", "LLAMA_ARG_LOG_VERBOSITY": "2"},
            [],
            {"log_verbosity": 2, "verbose": False},
            "OLLAMA_DEBUG=2: not used (--log-verbosity 2 given)",
        ),
        (
            {"OLLAMA_DEBUG": "1"},
            ["-v"],
            {"log_verbosity": 3, "verbose": True},
            "OLLAMA_DEBUG=1: not used (--log-verbose given)",
        ),
        (
            {"OLLAMA_CONTEXT_LENGTH": "4096", "LLAMA_ARG_CTX_SIZE": "2048"},
            [],
            {"ctx_size": 2048},
            "OLLAMA_CONTEXT_LENGTH=4096: not used (--ctx-size 2048 given)",
        ),
        (
            {"OLLAMA_KEEP_ALIVE": "5m", "LFMSERVE_MODELS_TTL": "60"},
            [],
            {"models_ttl": 60},
            "OLLAMA_KEEP_ALIVE=5m: not used (--models-ttl 60 given)",
        ),
        (
            {"OLLAMA_MAX_LOADED_MODELS": "1"},
            ["--models-max", "2"],
            {"models_max": 2},
            "OLLAMA_MAX_LOADED_MODELS=1: not used (--models-max 2 given)",
        ),
        (
            {"OLLAMA_FLASH_ATTENTION": "1", "LLAMA_ARG_FLASH_ATTN": "off"},
            [],
            {"flash_attn": "off"},
            "OLLAMA_FLASH_ATTENTION=1: not used (--flash-attn off given)",
        ),
        (
            {"OLLAMA_MAX_QUEUE": "7"},
            ["--max-queue", "9"],
            {"max_queue": 9},
            "OLLAMA_MAX_QUEUE=7: not used (--max-queue 9 given)",
        ),
        (
            {"OLLAMA_MODELS": "/srv/a"},
            ["--models-ollama", "/srv/b"],
            {"models_ollama": "/srv/b"},
            "OLLAMA_MODELS=/srv/a: not used (--models-ollama /srv/b given)",
        ),
        (
            {"OLLAMA_MODELS": "/srv/a", "LFMSERVE_MODELS_OLLAMA_ENABLED": "0"},
            [],
            {"models_ollama": "/srv/a"},
            "OLLAMA_MODELS=/srv/a: not used (--no-models-ollama given)",
        ),
    ],
)
def test_flags_and_the_other_variables_outrank_ollamas(
    environ: dict[str, str], argv: list[str], values: dict[str, Any], line: str
) -> None:
    settings = _parse(environ, *argv)
    assert _fields(settings, *values) == tuple(values.values())
    assert [variable.line for variable in settings.ollama] == [line]


def test_a_server_of_one_model_says_the_routers_variables_change_nothing() -> None:
    environ = {"OLLAMA_KEEP_ALIVE": "2s", "OLLAMA_MAX_LOADED_MODELS": "1", "OLLAMA_NUM_PARALLEL": "2"}
    lines = [variable.line for variable in _parse(environ, "-m", "model.gguf").ollama]
    assert lines == [
        "OLLAMA_NUM_PARALLEL=2: --parallel 2",
        "OLLAMA_MAX_LOADED_MODELS=1: --models-max 1; a router's: no effect on a server of one model",
        "OLLAMA_KEEP_ALIVE=2s: --models-ttl 2; a router's: no effect on a server of one model",
    ]


def test_empty_or_unset_variables_are_not_read_and_no_environment_reads_none() -> None:
    assert _parse({"OLLAMA_HOST": "", "OLLAMA_NUM_PARALLEL": " '' "}) == Settings()
    assert Settings.from_argv([], environ={}).ollama == ()


def test_a_routers_child_gets_the_result_as_flags_and_never_ollama_host() -> None:
    router = _parse({"OLLAMA_HOST": "0.0.0.0:9000", "OLLAMA_NUM_PARALLEL": "2", "OLLAMA_KEEP_ALIVE": "2s"})
    argv = child_argv(router, "text", 40000)
    assert argv[:4] == ["--host", "127.0.0.1", "--port", "40000"] and "--parallel" in argv
    child = Settings.from_argv(argv, environ={"OLLAMA_HOST": "0.0.0.0:9000"})  # what a child would see, were it read
    assert (child.server.host, child.server.port, child.engine.parallel) == ("127.0.0.1", 40000, 2)
    assert Settings.from_argv(argv, environ={}).ollama == ()  # serve_child reads no environment
