import pytest

from lfmserve.models.defaults import DEFAULTABLE
from lfmserve.settings import Settings, sampling_fields


def test_llama_server_flags_and_short_forms() -> None:
    s = Settings.from_argv(
        [
            "-m",
            "m.gguf",
            "-c",
            "4096",
            "-n",
            "64",
            "-t",
            "3",
            "-b",
            "512",
            "-ub",
            "128",
            "-np",
            "2",
            "-ngl",
            "99",
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "-a",
            "lfm",
            "--no-jinja",
            "--temp",
            "0.1",
            "--top-k",
            "50",
            "--top-p",
            "0.9",
            "--min-p",
            "0.1",
            "--repeat-penalty",
            "1.05",
            "--repeat-last-n",
            "32",
            "-s",
            "42",
            "--api-key",
            "a,b",
            "--api-key",
            "c",
        ]
    )
    assert (s.model, s.ctx_size, s.n_predict, s.threads, s.batch_size, s.ubatch_size, s.parallel, s.n_gpu_layers) == (
        "m.gguf",
        4096,
        64,
        3,
        512,
        128,
        2,
        99,
    )
    assert (s.host, s.port, s.alias, s.jinja) == ("0.0.0.0", 9000, "lfm", False)
    assert s.sampling_defaults() == {
        "temperature": 0.1,
        "top_k": 50,
        "top_p": 0.9,
        "min_p": 0.1,
        "repeat_penalty": 1.05,
        "repeat_last_n": 32,
        "seed": 42,
    }
    assert s.api_keys == ("a", "b", "c")


def test_hf_flags() -> None:
    s = Settings.from_argv(["-hf", "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q8_0", "--hf-file", "x.gguf", "--jinja"])
    assert (s.hf_repo, s.hf_file, s.jinja, s.model) == ("LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q8_0", "x.gguf", True, None)


def test_api_key_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    keys = tmp_path / "keys"
    keys.write_text("k1\n\n k2 \n")
    assert Settings.from_argv(["--api-key-file", str(keys), "--api-key", "k0"]).api_keys == ("k0", "k1", "k2")


def test_environment_defaults_are_overridden_by_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_PORT", "9100")
    monkeypatch.setenv("LFMSERVE_CTX_SIZE", "1024")
    s = Settings.from_argv(["--port", "9200"])
    assert (s.port, s.ctx_size) == (9200, 1024)


def test_unknown_flag_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(["--no-such-flag"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --no-such-flag" in err


def test_environment_values_convert_to_the_fields_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_METRICS", "Yes")
    monkeypatch.setenv("LFMSERVE_JINJA", "off")
    monkeypatch.setenv("LFMSERVE_TEMPERATURE", "0.25")
    monkeypatch.setenv("LFMSERVE_API_KEY", "k1,k2")
    s = Settings.from_argv([])
    assert (s.metrics, s.jinja, s.temperature, s.api_keys) == (True, False, 0.25, ("k1", "k2"))
    assert s.sampling_defaults() == {"temperature": 0.25}


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LFMSERVE_METRICS", "maybe", "environment variable LFMSERVE_METRICS has value 'maybe': not a valid bool"),
        ("LFMSERVE_JINJA", "2", "environment variable LFMSERVE_JINJA has value '2': not a valid bool"),
        ("LFMSERVE_PORT", "http", "environment variable LFMSERVE_PORT has value 'http': not a valid int"),
        (
            "LFMSERVE_TEMPERATURE",
            "warm",
            "environment variable LFMSERVE_TEMPERATURE has value 'warm': not a valid float",
        ),
    ],
)
def test_an_environment_value_that_does_not_convert_is_a_startup_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv([])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"lfmserve: error: {message} (see --help)\n"


def test_the_sampling_defaults_are_named_as_the_request_fields() -> None:
    assert sampling_fields() == ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed")
    assert set(sampling_fields()) <= set(DEFAULTABLE)


def test_help_lists_the_flags_in_llama_servers_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_argv(["--help"])
    out = capsys.readouterr().out
    titles = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == ["options", "common params", "sampling params", "speculative params", "server params"] + [
        "refused flags"
    ]
    section = {title: out.split(title + ":")[1].split("\n\n")[0] for title in titles}
    assert "--ctx-size" in section["common params"] and "-fa" in section["common params"]
    assert "--temp" in section["sampling params"] and "--reverse-prompt" in section["sampling params"]
    assert "--spec-type" in section["speculative params"] and "--spec-type" not in section["server params"]
    assert "--cors-origins" in section["server params"] and "--draft-max" in section["refused flags"]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--draft-max", "--draft-max: the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max"),
        ("--lora", "--lora: LoRA adapters are not supported by lfmserve"),
        ("--models-dir", "--models-dir: the router (several models in one server) is not supported by lfmserve"),
    ],
)
def test_a_refused_flag_exits_2_with_its_reason(flag: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv([flag, "3"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f"lfmserve: error: {message}")


def test_the_llama_server_suites_spellings() -> None:
    s = Settings.from_argv(
        "--backend_sampling --cache_ram 0 -nocb -no-kvu --no-ui --no-cache-prompt --no-cache-idle-slots -fa on"
        " -ctk q8_0 -ctv q4_0 --swa-full --context-shift --alias tinyllama-2,fim,code --tags chat,small"
        " -r User: --reverse-prompt ### --reasoning off --reasoning-format nothink --sleep-idle-seconds 3".split()
    )
    assert (s.backend_sampling, s.cache_ram, s.cont_batching, s.kv_unified, s.ui) == (True, 0, False, False, False)
    assert (s.cache_prompt, s.cache_idle_slots, s.flash_attn, s.cache_type_k, s.cache_type_v) == (
        False,
        False,
        "on",
        "q8_0",
        "q4_0",
    )
    assert (s.swa_full, s.context_shift, s.reasoning, s.reasoning_format, s.sleep_idle_seconds) == (
        True,
        True,
        "off",
        "nothink",
        3,
    )
    assert (s.aliases, s.tag_list, s.reverse_prompt) == (
        ("code", "fim", "tinyllama-2"),
        ("chat", "small"),
        ("User:", "###"),
    )
    defaults = Settings()
    assert (defaults.cors_origins, defaults.ui, defaults.kv_unified, defaults.cache_prompt) == ("*", True, True, True)


@pytest.mark.parametrize(
    ("argv", "repack"), [([], None), (["--repack"], True), (["--no-repack"], False), (["-nr"], False)]
)
def test_repacking_is_llama_servers_switch_and_undecided_by_default(argv: list[str], repack: bool | None) -> None:
    assert Settings.from_argv(argv).repack is repack


def test_a_cache_type_llama_server_does_not_take_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_argv(["-ctk", "q3_k"])
    assert "argument -ctk/--cache-type-k: invalid choice: 'q3_k'" in capsys.readouterr().err
