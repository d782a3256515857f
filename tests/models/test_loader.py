"""From Settings and a GGUF to a ready Serving: which file, which template, which defaults, which engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.chat.template import CHATML_TEMPLATE, BuiltinTemplate, ChatTemplate
from lfmserve.engine.records import EngineConfig
from lfmserve.engine.speculation import NgramModSizes, NgramSizes, SpeculationConfig
from lfmserve.errors import EngineError, LfmError
from lfmserve.llama.model import NativeModel
from lfmserve.models.loader import (
    chat_template,
    engine_config,
    load_serving,
    model_name,
    resolve_model_files,
    sampling_defaults,
    speculation_config,
)
from lfmserve.settings import Settings
from lfmserve.testing import LFM2_CHAT_TEMPLATE, TinyLfm2, write_lfm2_gguf


def test_a_local_model_must_exist(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    with pytest.raises(LfmError, match=f"model file not found: {path}"):
        resolve_model_files(Settings(model=str(path)))
    path.write_bytes(b"")
    with pytest.raises(LfmError, match=f"model file is empty: {path}"):
        resolve_model_files(Settings(model=str(path)))
    with pytest.raises(LfmError, match=f"model path is a directory, not a GGUF file: {tmp_path}"):
        resolve_model_files(Settings(model=str(tmp_path)))
    path.write_bytes(b"GGUF")
    assert resolve_model_files(Settings(model=str(path))).model == str(path)  # what it holds is llama.cpp's to judge


def test_the_model_id_is_the_alias_else_the_file_name() -> None:
    assert model_name(Settings(), "/models/LFM2.5-1.2B-Instruct-Q4_K_M.gguf") == "LFM2.5-1.2B-Instruct-Q4_K_M.gguf"
    assert model_name(Settings(alias="lfm"), "/models/x.gguf") == "lfm"


def test_the_template_is_the_file_else_the_ggufs_else_chatml(tiny_gguf: Path, tmp_path: Path) -> None:
    model = NativeModel(tiny_gguf)
    bare_path = write_lfm2_gguf(tmp_path / "bare.gguf", TinyLfm2(seed=1, chat_template=None))
    bare = NativeModel(bare_path)
    override = tmp_path / "t.jinja"
    override.write_text("{{ messages[0]['content'] }}")
    try:
        assert chat_template(Settings(chat_template_file=str(override)), model).source == override.read_text()
        gguf = chat_template(Settings(), model)
        assert isinstance(gguf, ChatTemplate) and gguf.source == LFM2_CHAT_TEMPLATE
        assert chat_template(Settings(), bare).source == CHATML_TEMPLATE
        builtin = chat_template(Settings(jinja=False), bare)
        assert isinstance(builtin, BuiltinTemplate) and builtin.source == "chatml"
    finally:
        model.close()
        bare.close()


def test_chat_template_names_a_builtin_format_or_is_jinja_and_reasoning_reaches_it(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    user = [{"role": "user", "content": "Hi there"}]
    try:
        for jinja in (True, False):  # a llama.cpp name is its built-in format either way (llama-server: --no-jinja)
            command_r = chat_template(Settings(chat_template="command-r", jinja=jinja), model)
            assert isinstance(command_r, BuiltinTemplate)
            assert command_r.render(user) == (
                "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
            )
        chatml = chat_template(Settings(chat_template="chatml"), model)
        assert isinstance(chatml, ChatTemplate) and chatml.source == CHATML_TEMPLATE
        source = "{{ messages[0].content }}:{{ enable_thinking }}"
        assert chat_template(Settings(chat_template=source), model).render(user) == "Hi there:True"
        assert chat_template(Settings(chat_template=source, reasoning="off"), model).render(user) == "Hi there:False"
        nothink = chat_template(Settings(chat_template=source, reasoning_format="nothink"), model)
        assert nothink.render(user) == "Hi there:False"
    finally:
        model.close()


def test_defaults_layer_the_command_line_over_the_gguf(tmp_path: Path) -> None:
    path = write_lfm2_gguf(tmp_path / "k.gguf", TinyLfm2(seed=1, name="Some Model", sampling={"temp": 0.6, "top_k": 9}))
    model = NativeModel(path)
    try:
        resolved = sampling_defaults(Settings(top_k=3), model)
        assert (resolved.params.temperature, resolved.params.top_k, resolved.params.min_p) == (0.6, 3, 0.05)
        assert (resolved.sources["temperature"], resolved.sources["top_k"], resolved.family) == (
            "GGUF general.sampling",
            "command line",
            None,
        )
    finally:
        model.close()


def test_the_engine_gets_every_batching_and_cache_flag() -> None:
    settings = Settings(
        ctx_size=8192,
        parallel=3,
        batch_size=1024,
        ubatch_size=256,
        threads=3,
        threads_batch=2,
        slot_prompt_similarity=0.5,
        max_queue=7,
        ctx_checkpoints=4,
        cache_ram=16,
        cache_reuse=32,
    )
    assert engine_config(settings) == EngineConfig(
        n_ctx=8192,
        n_slots=3,
        n_batch=1024,
        n_ubatch=256,
        n_threads=3,
        n_threads_batch=2,
        slot_similarity=0.5,
        max_queue=7,
        max_checkpoints=4,
        cache_ram_bytes=16 * 2**20,
        cache_reuse=32,
    )


def test_loading_gives_a_serving_of_the_model(tiny_gguf: Path) -> None:
    settings = Settings(model=str(tiny_gguf), ctx_size=1024, parallel=2, threads=1, n_predict=64, alias="tiny")
    serving = load_serving(settings, str(tiny_gguf))
    try:
        assert (serving.model_name, serving.default_max_tokens, serving.engine.n_slots, serving.engine.n_ctx_slot) == (
            "tiny",
            64,
            2,
            512,
        )
        assert serving.fingerprint == "llama-cpp-python 0.3.36" and serving.defaults.family == "LFM2 text, LFM2.5-JP"
    finally:
        serving.engine.close()


def test_spec_flags_become_the_speculation_config_and_bad_ones_are_refused() -> None:
    settings = Settings.from_argv(
        ["-m", "m.gguf", "--spec-type", "ngram-simple,ngram-mod", "--spec-ngram-simple-size-n", "4"]
        + ["--spec-draft-n-min", "2", "--spec-ngram-mod-n-match", "16", "--spec-ngram-mod-n-max", "32"]
        + ["--spec-ngram-map-k4v-min-hits", "3", "--draft-p-min", "0.75", "--spec-ngram-map-k-size-m", "20"]
    )
    assert speculation_config(settings) == SpeculationConfig(
        types=("ngram-simple", "ngram-mod"),
        n_max=3,
        n_min=2,
        p_min=0.75,
        ngram_simple=NgramSizes(size_n=4),
        ngram_map_k=NgramSizes(size_m=20),
        ngram_map_k4v=NgramSizes(min_hits=3),
        ngram_mod=NgramModSizes(n_match=16, n_max=32),
    )
    assert speculation_config(settings).max_draft == 48  # ngram-simple's 48 > ngram-mod's 32
    assert speculation_config(Settings(model="m.gguf", spec_type="ngram-cache")).max_draft == 8
    draft = Settings.from_argv(
        ["-m", "m.gguf", "--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "5"]
    )
    assert speculation_config(draft) == SpeculationConfig(types=("draft-simple",), n_max=5, draft_model="d.gguf")
    assert speculation_config(draft).max_draft == 5
    assert not speculation_config(Settings(model="m.gguf", spec_type="none")).enabled
    with pytest.raises(EngineError, match=r"^--spec-type draft-eagle3 is not supported \(supported: ngram-simple, "):
        speculation_config(Settings(model="m.gguf", spec_type="ngram-simple,draft-eagle3"))
    with pytest.raises(EngineError, match=r"^--spec-type draft-simple needs a draft model \(-md FILE or -hfd REPO\)$"):
        speculation_config(Settings(model="m.gguf", spec_type="draft-simple"))
    with pytest.raises(EngineError, match="^ngram size N must be between 1 and 1024 inclusive$"):
        speculation_config(Settings(model="m.gguf", spec_ngram_mod_n_match=0))
    with pytest.raises(EngineError, match="^ngram size M must be between 1 and 1024 inclusive$"):
        speculation_config(Settings(model="m.gguf", spec_ngram_map_k4v_size_m=1025))
    with pytest.raises(EngineError, match="^ngram min hits must be at least 1$"):
        speculation_config(Settings(model="m.gguf", spec_ngram_map_k_min_hits=0))
    with pytest.raises(EngineError, match="^--spec-draft-p-min must be between 0 and 1$"):
        speculation_config(Settings(model="m.gguf", spec_draft_p_min=1.5))
