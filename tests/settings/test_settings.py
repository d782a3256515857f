import dataclasses
import os
from pathlib import Path

import pytest

from lfmserve.loading.defaults import DEFAULTABLE
from lfmserve.settings import Settings, sampling_fields
from lfmserve.settings.argv import secret_variables
from lfmserve.settings.groups import GROUPS


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
    assert (
        s.source.model,
        s.engine.ctx_size,
        s.sampling.n_predict,
        s.threads.threads,
        s.engine.batch_size,
        s.engine.ubatch_size,
        s.engine.parallel,
        s.devices.n_gpu_layers,
    ) == (
        "m.gguf",
        4096,
        64,
        3,
        512,
        128,
        2,
        99,
    )
    assert (s.server.host, s.server.port, s.source.alias, s.chat.jinja) == ("0.0.0.0", 9000, "lfm", False)
    assert s.sampling.defaults() == {
        "temperature": 0.1,
        "top_k": 50,
        "top_p": 0.9,
        "min_p": 0.1,
        "repeat_penalty": 1.05,
        "repeat_last_n": 32,
        "seed": 42,
    }
    assert s.server.api_keys == ("a", "b", "c")


def test_hf_flags() -> None:
    s = Settings.from_argv(["-hf", "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q8_0", "--hf-file", "x.gguf", "--jinja"])
    assert (s.source.hf_repo, s.source.hf_file, s.chat.jinja, s.source.model) == (
        "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q8_0",
        "x.gguf",
        True,
        None,
    )


def test_api_key_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    keys = tmp_path / "keys"
    keys.write_text("k1\n\n k2 \n")
    assert Settings.from_argv(["--api-key-file", str(keys), "--api-key", "k0"]).server.api_keys == ("k0", "k1", "k2")


def test_environment_defaults_are_overridden_by_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_PORT", "9100")
    monkeypatch.setenv("LFMSERVE_CTX_SIZE", "1024")
    s = Settings.from_argv(["--port", "9200"])
    assert (s.server.port, s.engine.ctx_size) == (9200, 1024)


def test_the_command_line_replaces_a_repeatable_flags_environment_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_API_KEY", "k1")
    monkeypatch.setenv("LFMSERVE_LORA", "a.gguf")
    assert Settings.from_argv(["--api-key", "k2", "--lora", "a.gguf"]).server.api_key == ("k2",)
    assert Settings.from_argv(["--lora", "a.gguf"]).source.lora == ("a.gguf",)
    assert Settings.from_argv([]).source.lora == ("a.gguf",)
    assert Settings.from_argv([]).server.api_key == ("k1",)


def test_llama_servers_variables_for_keys_and_the_hub_token_are_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("from-file\n")
    monkeypatch.setenv("LLAMA_API_KEY", "from-llama")
    monkeypatch.setenv("LLAMA_ARG_API_KEY_FILE", str(keys))
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    s = Settings.from_argv([])
    assert (s.server.api_key, s.server.api_key_file, s.server.api_keys, s.source.hf_token) == (
        ("from-llama",),
        str(keys),
        ("from-llama", "from-file"),
        "hf_x",
    )
    monkeypatch.setenv("LFMSERVE_API_KEY", "from-lfmserve")  # lfmserve's own name comes first
    assert Settings.from_argv([]).server.api_key == ("from-lfmserve",)
    assert Settings.from_argv(["-hft", "hf_y"]).source.hf_token == "hf_y"


def test_an_empty_environment_leaves_only_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_API_KEY", "k1")
    monkeypatch.setenv("LFMSERVE_CTX_SIZE", "1024")
    s = Settings.from_argv(["--port", "9200"], environ={})
    assert (s.server.port, s.engine.ctx_size, s.server.api_key) == (9200, Settings().engine.ctx_size, ())


def test_secrets_are_left_out_of_repr_and_of_without_secrets(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k-secret-from-file\n")
    argv = ["--api-key", "k-secret", "--api-key-file", str(keys), "--hf-token", "hf_secret", "-c", "64"]
    s = Settings.from_argv(argv)
    assert "secret" not in repr(s) and str(keys) not in repr(s)
    bare = s.without_secrets()
    assert (bare.server.api_key, bare.server.api_key_file, bare.source.hf_token, bare.engine.ctx_size) == (
        (),
        None,
        None,
        64,
    )
    assert bare.to_argv() == ["--ctx-size", "64"]
    assert secret_variables() == (
        "LFMSERVE_HF_TOKEN",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "LFMSERVE_API_KEY",
        "LLAMA_API_KEY",
        "LFMSERVE_API_KEY_FILE",
        "LLAMA_ARG_API_KEY_FILE",
        "LFMSERVE_SSL_KEY_FILE",
        "LLAMA_ARG_SSL_KEY_FILE",
        "LFMSERVE_MCP_SERVERS_JSON",
        "LLAMA_ARG_MCP_SERVERS_JSON",
    )


def test_unknown_flag_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(["--no-such-flag"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --no-such-flag" in err


def test_environment_values_convert_to_the_fields_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFMSERVE_METRICS", "Yes")
    monkeypatch.setenv("LFMSERVE_JINJA", "off")
    monkeypatch.setenv("LFMSERVE_TEMPERATURE", "0.25")
    monkeypatch.setenv("LFMSERVE_API_KEY", "k1,k2")
    s = Settings.from_argv([])
    assert (s.server.metrics, s.chat.jinja, s.sampling.temperature, s.server.api_keys) == (
        True,
        False,
        0.25,
        ("k1", "k2"),
    )
    assert s.sampling.defaults() == {"temperature": 0.25}


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
        (
            "LFMSERVE_MODELS_MEMORY_MAX",
            "inf",
            "environment variable LFMSERVE_MODELS_MEMORY_MAX has value 'inf': not a valid parse_size",
        ),
        (
            "LFMSERVE_MODELS_MAX",
            "-2",
            "environment variable LFMSERVE_MODELS_MAX has value '-2': not a valid parse_count",
        ),
    ],
)
def test_an_environment_value_that_does_not_convert_is_a_startup_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv([])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"lfmserve: error: {message} (see --help)\n"


def test_the_sampling_defaults_are_named_as_the_request_fields() -> None:
    assert sampling_fields() == (
        "temperature",
        "dynatemp_range",
        "dynatemp_exponent",
        "top_k",
        "top_p",
        "min_p",
        "top_n_sigma",
        "xtc_probability",
        "xtc_threshold",
        "typical_p",
        "repeat_penalty",
        "repeat_last_n",
        "presence_penalty",
        "frequency_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "adaptive_target",
        "adaptive_decay",
        "samplers",
        "seed",
    )
    assert set(sampling_fields()) <= set(DEFAULTABLE)


def test_help_has_a_section_per_group_then_the_refused_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_argv(["--help"])
    out = capsys.readouterr().out
    titles = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == [
        "options",
        "model source",
        "chat template and reasoning",
        "images and audio",
        "embeddings and reranking",
        "loading the weights",
        "context, batching and prompt cache",
        "threads and CPU placement",
        "devices and offload",
        "speculative decoding",
        "server",
        "agent tools (off unless asked for)",
        "router (no -m / -hf: several models behind one URL)",
        "sampling defaults",
        "logging",
        "ignored on this build",
        "refused flags",
    ]
    section = {title: out.split(title + ":")[1].split("\n\n")[0] for title in titles}
    assert (
        "--ctx-size" in section["context, batching and prompt cache"]
        and "-fa" in section["context, batching and prompt cache"]
    )
    assert "--temp" in section["sampling defaults"] and "--reverse-prompt" in section["sampling defaults"]
    assert "--spec-type" in section["speculative decoding"] and "--spec-type" not in section["server"]
    assert "--cors-origins" in section["server"] and "--draft-max" in section["refused flags"]
    assert "--hf-repo" in section["model source"] and "--mmproj" in section["model source"]


def test_of_and_replace_put_each_field_in_its_group() -> None:
    settings = Settings.of(model="m.gguf", ctx_size=4096, port=9000, temperature=0.1, spec_type="ngram-simple")
    assert (settings.source.model, settings.engine.ctx_size, settings.server.port) == ("m.gguf", 4096, 9000)
    assert (settings.sampling.temperature, settings.speculation.spec_type) == (0.1, "ngram-simple")
    assert settings.chat == Settings().chat  # untouched groups keep their defaults
    moved = settings.replace(ctx_size=512, jinja=False)
    assert (moved.engine.ctx_size, moved.chat.jinja, moved.source.model, settings.engine.ctx_size) == (
        512,
        False,
        "m.gguf",
        4096,
    )
    with pytest.raises(TypeError, match="^unknown settings: ctx, modle$"):
        Settings.of(modle="m.gguf", ctx=1)


def test_field_names_are_unique_across_the_groups() -> None:
    names = [f.name for kind in GROUPS.values() for f in dataclasses.fields(kind) if f.init]
    assert len(names) == len(set(names)) == 240
    # + the options ignored, Ollama's variables set and the fields llama.cpp's config files gave
    assert set(GROUPS) | {"ignored", "ollama", "configured"} == {f.name for f in dataclasses.fields(Settings)}


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-m", "m.gguf", "-c", "4096", "-np", "2", "-t", "3", "--port", "9000", "--host", "0.0.0.0"],
        ["-hf", "LiquidAI/LFM2-VL-450M-GGUF:Q8_0", "--no-mmproj", "-a", "vl,lfm", "--tags", "vision"],
        ["--no-jinja", "--reasoning-format", "none", "--chat-template", "-weird-{{ x }}", "--reasoning", "off"],
        ["--embeddings", "--pooling", "mean", "--rerank", "--embd-normalize", "-1", "--media-cache", "0"],
        ["-nocb", "-no-kvu", "--no-repack", "--no-ui", "--no-cache-prompt", "-fa", "on", "-ctk", "q8_0"],
        ["--repack", "--kv-unified", "--context-shift", "--swa-full", "--offline", "--metrics", "--props", "-v"],
        ["--api-key", "a,b", "--api-key", "c", "-r", "User:", "-r", "###", "--temp", "0.25", "-s", "-1"],
        ["--spec-type", "ngram-simple,draft-simple", "-md", "d.gguf", "--spec-draft-p-min", "0.5", "-to", "60"],
        ["--spec-default", "--spec-ngram-mod-n-max", "10", "--spec-exact"],
        ["--no-media-fetch", "--media-fetch-private", "--no-media-encode-beside", "--no-mmproj-offload"],
    ],
)
def test_to_argv_gives_the_flags_that_reproduce_the_settings(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [name for name in os.environ if name.startswith("LFMSERVE_")]:
        monkeypatch.delenv(variable)
    settings = Settings.from_argv(argv)
    assert Settings.from_argv(settings.to_argv()) == settings


def test_to_argv_writes_only_what_differs_from_the_defaults_by_the_longest_spelling() -> None:
    settings = Settings.of(
        model="m.gguf", ctx_size=4096, jinja=False, repack=False, api_key=("a", "-b"), offline=True, models_max=2
    )
    assert settings.to_argv() == [
        "--model",
        "m.gguf",
        "--offline",
        "--no-jinja",
        "--no-repack",
        "--ctx-size",
        "4096",
        "--api-key",
        "a",
        "--api-key=-b",
        "--models-max",
        "2",
    ]
    assert Settings().to_argv() == []


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--draft-max", "--draft-max: the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max"),
        ("--model-url", "--model-url: downloads by URL are not supported by lfmserve: use -hf or -m"),
    ],
)
def test_a_refused_flag_exits_1_with_its_reason(flag: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv([flag, "3"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith(f"lfmserve: error: {message}")


def test_the_llama_server_suites_spellings() -> None:
    s = Settings.from_argv(
        "--backend_sampling --cache_ram 0 -nocb -no-kvu --no-ui --no-cache-prompt --no-cache-idle-slots -fa on"
        " -ctk q8_0 -ctv q4_0 --swa-full --context-shift --alias tinyllama-2,fim,code --tags chat,small"
        " -r User: --reverse-prompt ### --reasoning off --reasoning-format nothink --sleep-idle-seconds 3".split()
    )
    assert (
        s.sampling.backend_sampling,
        s.engine.cache_ram,
        s.engine.cont_batching,
        s.engine.kv_unified,
        s.server.ui,
    ) == (True, 0, False, False, False)
    assert (
        s.engine.cache_prompt,
        s.engine.cache_idle_slots,
        s.engine.flash_attn,
        s.engine.cache_type_k,
        s.engine.cache_type_v,
    ) == (
        False,
        False,
        "on",
        "q8_0",
        "q4_0",
    )
    assert (
        s.engine.swa_full,
        s.engine.context_shift,
        s.chat.reasoning,
        s.chat.reasoning_format,
        s.server.sleep_idle_seconds,
    ) == (
        True,
        True,
        "off",
        "nothink",
        3,
    )
    assert (s.source.aliases, s.source.tag_list, s.sampling.reverse_prompt) == (
        ("code", "fim", "tinyllama-2"),
        ("chat", "small"),
        ("User:", "###"),
    )
    defaults = Settings()
    assert (defaults.server.cors_origins, defaults.server.ui, defaults.engine.kv_unified) == ("*", True, False)
    assert defaults.engine.cache_prompt is True


@pytest.mark.parametrize(
    ("argv", "repack"), [([], None), (["--repack"], True), (["--no-repack"], False), (["-nr"], False)]
)
def test_repacking_is_llama_servers_switch_and_undecided_by_default(argv: list[str], repack: bool | None) -> None:
    assert Settings.from_argv(argv).weights.repack is repack


def test_a_cache_type_llama_server_does_not_take_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_argv(["-ctk", "q3_k"])
    assert "argument -ctk/--cache-type-k: invalid choice: 'q3_k'" in capsys.readouterr().err


def test_lora_adapters_in_flag_order_with_their_scales() -> None:
    argv = ["--lora", "a.gguf,b.gguf", "--lora-scaled", "c.gguf:0.5,d.gguf:-1", "--lora-scaled", "e.gguf", "2"]
    source = Settings.from_argv(argv).source
    assert source.lora_adapters == (
        ("a.gguf", 1.0),
        ("b.gguf", 1.0),
        ("c.gguf", 0.5),
        ("d.gguf", -1.0),
        ("e.gguf", 2.0),
    )
    assert Settings.from_argv([*argv, "--lora-init-without-apply"]).source.lora_adapters == tuple(
        (name, 0.0) for name in ("a.gguf", "b.gguf", "c.gguf", "d.gguf", "e.gguf")
    )
    with pytest.raises(ValueError, match="^--lora-scaled 'c.gguf': expected FILE:SCALE$"):
        _ = Settings.from_argv(["--lora-scaled", "c.gguf"]).source.lora_adapters


@pytest.mark.parametrize(
    ("argv", "router"),
    [
        (["--models-memory-max", "6G"], (4, 0, 6 * 2**30)),
        (["--models-memory-max", "1.5GiB", "--models-max", "0", "--models-ttl", "0"], (0, 0, 3 * 2**29)),
        (["--models-memory-max", "512mb"], (4, 0, 512 * 2**20)),
        (["--models-memory-max", "6e9", "--models-ttl", "300"], (4, 300, 6 * 10**9)),
    ],
)
def test_the_routers_counts_and_sizes(argv: list[str], router: tuple[int, int, int]) -> None:
    settings = Settings.from_argv(argv).router
    assert (settings.models_max, settings.models_ttl, settings.models_memory_max) == router


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models-memory-max", value], f"argument --models-memory-max: invalid parse_size value: {value!r}")
        for value in ("inf", "", "nan", "1e400", "0", "-5", "6X", "99999999999T")
    ]
    + [
        (["--models-max", "-1"], "argument --models-max: invalid parse_count value: '-1'"),
        (["--models-ttl", "-5"], "argument --models-ttl: invalid parse_count value: '-5'"),
        (["--models-ttl", "1.5"], "argument --models-ttl: invalid parse_count value: '1.5'"),
    ],
)
def test_a_bad_router_count_or_size_exits_1_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value no size or count is ends with argparse's one line, never a traceback (``inf`` once overflowed)."""
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(argv)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"lfmserve: error: {message} (see --help)\n"
