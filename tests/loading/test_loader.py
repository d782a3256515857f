"""From Settings and a GGUF to a ready Serving: which file, which template, which defaults, which engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.chat.template import CHATML_TEMPLATE, BuiltinTemplate, ChatTemplate
from lfmserve.errors import LfmError
from lfmserve.llama.model import NativeModel
from lfmserve.loading.files import resolve_model_files
from lfmserve.loading.loader import chat_template, load_serving, model_name, sampling_defaults
from lfmserve.settings import Settings
from lfmserve.testing import LFM2_CHAT_TEMPLATE, TinyLfm2, write_lfm2_gguf


def test_a_local_model_must_exist(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    with pytest.raises(LfmError, match=f"model file not found: {path}"):
        resolve_model_files(Settings.of(model=str(path)))
    path.write_bytes(b"")
    with pytest.raises(LfmError, match=f"model file is empty: {path}"):
        resolve_model_files(Settings.of(model=str(path)))
    with pytest.raises(LfmError, match=f"model path is a directory, not a GGUF file: {tmp_path}"):
        resolve_model_files(Settings.of(model=str(tmp_path)))
    path.write_bytes(b"GGUF")
    assert resolve_model_files(Settings.of(model=str(path))).model == str(path)  # what it holds is llama.cpp's to judge


def test_the_model_id_is_the_alias_else_the_file_name() -> None:
    assert (
        model_name(Settings().source, "/models/LFM2.5-1.2B-Instruct-Q4_K_M.gguf") == "LFM2.5-1.2B-Instruct-Q4_K_M.gguf"
    )
    assert model_name(Settings.of(alias="lfm").source, "/models/x.gguf") == "lfm"


def test_the_template_is_the_file_else_the_ggufs_else_chatml(tiny_gguf: Path, tmp_path: Path) -> None:
    model = NativeModel(tiny_gguf)
    bare_path = write_lfm2_gguf(tmp_path / "bare.gguf", TinyLfm2(seed=1, chat_template=None))
    bare = NativeModel(bare_path)
    override = tmp_path / "t.jinja"
    override.write_text("{{ messages[0]['content'] }}")
    try:
        assert chat_template(Settings.of(chat_template_file=str(override)).chat, model).source == override.read_text()
        gguf = chat_template(Settings().chat, model)
        assert isinstance(gguf, ChatTemplate) and gguf.source == LFM2_CHAT_TEMPLATE
        assert chat_template(Settings().chat, bare).source == CHATML_TEMPLATE
        builtin = chat_template(Settings.of(jinja=False).chat, bare)
        assert isinstance(builtin, BuiltinTemplate) and builtin.source == "chatml"
    finally:
        model.close()
        bare.close()


def test_chat_template_names_a_builtin_format_or_is_jinja_and_reasoning_reaches_it(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    user = [{"role": "user", "content": "Hi there"}]
    try:
        for jinja in (True, False):  # a llama.cpp name is its built-in format either way (llama-server: --no-jinja)
            command_r = chat_template(Settings.of(chat_template="command-r", jinja=jinja).chat, model)
            assert isinstance(command_r, BuiltinTemplate)
            assert command_r.render(user) == (
                "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
            )
        chatml = chat_template(Settings.of(chat_template="chatml").chat, model)
        assert isinstance(chatml, ChatTemplate) and chatml.source == CHATML_TEMPLATE
        source = "{{ messages[0].content }}:{{ enable_thinking }}"
        assert chat_template(Settings.of(chat_template=source).chat, model).render(user) == "Hi there:True"
        assert (
            chat_template(Settings.of(chat_template=source, reasoning="off").chat, model).render(user)
            == "Hi there:False"
        )
        nothink = chat_template(Settings.of(chat_template=source, reasoning_format="nothink").chat, model)
        assert nothink.render(user) == "Hi there:False"
    finally:
        model.close()


def test_chat_template_kwargs_with_flags_of_their_own_warn_and_bad_ones_stop_the_start(
    tiny_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = NativeModel(tiny_gguf)
    source = "{{ enable_thinking }} {{ preserve_reasoning }} {{ clear_thinking }}"
    try:
        kwargs = '{"enable_thinking": false, "preserve_reasoning": false}'
        template = chat_template(Settings.of(chat_template=source, chat_template_kwargs=kwargs).chat, model)
        assert template.render([]) == "False False True"
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
            "Setting 'enable_thinking' via --chat-template-kwargs is deprecated. Use --reasoning on / --reasoning off "
            "instead.",
            "Setting 'preserve_reasoning' via --chat-template-kwargs is deprecated. Use --reasoning-preserve / "
            "--no-reasoning-preserve instead.",
        ]
        with pytest.raises(LfmError, match=r"^--chat-template-kwargs '\[\]': expected a JSON object$"):
            chat_template(Settings.of(chat_template=source, chat_template_kwargs="[]").chat, model)
    finally:
        model.close()


def test_defaults_layer_the_command_line_over_the_gguf(tmp_path: Path) -> None:
    path = write_lfm2_gguf(tmp_path / "k.gguf", TinyLfm2(seed=1, name="Some Model", sampling={"temp": 0.6, "top_k": 9}))
    model = NativeModel(path)
    try:
        resolved = sampling_defaults(Settings.of(top_k=3).sampling, model)
        assert (resolved.params.temperature, resolved.params.top_k, resolved.params.min_p) == (0.6, 3, 0.05)
        assert (resolved.sources["temperature"], resolved.sources["top_k"], resolved.family) == (
            "GGUF general.sampling",
            "command line",
            None,
        )
    finally:
        model.close()


def test_loading_gives_a_serving_of_the_model(tiny_gguf: Path) -> None:
    settings = Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=2, threads=1, n_predict=64, alias="tiny")
    serving = load_serving(settings, str(tiny_gguf))
    try:
        assert (
            serving.model_name,
            serving.options.default_max_tokens,
            serving.engine.n_slots,
            serving.engine.n_ctx_slot,
        ) == (
            "tiny",
            64,
            2,
            512,
        )
        assert (
            serving.options.fingerprint == "llama-cpp-python 0.3.36"
            and serving.defaults.family == "LFM2 text, LFM2.5-JP"
        )
    finally:
        serving.engine.close()
