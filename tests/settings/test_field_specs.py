"""Every settings field's command line, as a table: typed metadata, secrets that no listing or child's command
line shows, and files read (and refused) when the flags are parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.settings import Settings
from lfmserve.settings.argv import all_fields
from lfmserve.settings.fields import FlagSpec, flag, flag_spec

#: A value for each secret field, all holding "SECRET" (a file's path here; the key file's contents too).
SECRET_VALUES = {
    "hf_token": "hf_SECRET",
    "api_key": ("k-SECRET",),
    "api_key_file": "{keys}",
    "ssl_key_file": "/run/SECRET.pem",
    "mcp_servers_json": '{"mcpServers": {"s": {"command": "x", "env": {"TOKEN": "SECRET"}}}}',
}


@pytest.mark.parametrize(("group", "name"), [(group, f.name) for group, f in all_fields()])
def test_each_fields_metadata_is_typed_and_a_secret_is_kept_out_of_repr(group: str, name: str) -> None:
    f = next(f for g, f in all_fields() if f.name == name)
    spec = flag_spec(f)
    assert isinstance(spec, FlagSpec) and spec.flags and all(n.startswith("-") for n in spec.flags)
    assert all(isinstance(other, FlagSpec) for other in spec.also)
    assert not spec.secret or (f.repr is False and name in SECRET_VALUES)


def test_a_misspelled_flag_option_fails_when_the_field_is_declared() -> None:
    with pytest.raises(TypeError, match=r"--x: unknown flag options \['choises'\]"):
        flag("--x", help="x", choises=("a", "b"))


@pytest.mark.parametrize("name", sorted(SECRET_VALUES))
def test_a_secret_is_never_in_repr_nor_in_a_childs_command_line(name: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k-SECRET-from-file\n")
    value = SECRET_VALUES[name]
    settings = Settings.of(ctx_size=64, **{name: str(keys) if value == "{keys}" else value})
    assert "SECRET" not in repr(settings) and str(keys) not in repr(settings)
    child = settings.without_secrets()
    assert child.to_argv() == ["--ctx-size", "64"] and "SECRET" not in repr(child.to_argv())


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--api-key-file", "{missing}"], "--api-key-file {missing}: No such file or directory"),
        (["--api-key-file", "{folder}"], "--api-key-file {folder}: Is a directory"),
        (["--ui-config-file", "{missing}"], "--ui-config-file {missing}: No such file or directory"),
        (["--ui-config-file", "{list}"], "--ui-config-file {list}: not a JSON object"),
        (["--ui-config", "[1]"], "--ui-config: not a JSON object"),
        (["--ui-config", "{"], "--ui-config: not valid JSON: Expecting property name enclosed in double quotes"),
    ],
)
def test_a_bad_file_or_json_fails_at_parse_with_one_line_and_exit_1(
    argv: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    names = {"{missing}": str(tmp_path / "missing"), "{folder}": str(tmp_path), "{list}": str(tmp_path / "list.json")}
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv([names.get(arg, arg) for arg in argv], environ={})
    assert exit_info.value.code == 1
    for placeholder, path in names.items():
        error = error.replace(placeholder, path)
    assert capsys.readouterr().err.startswith(f"lfmserve: error: {error}")


def test_the_key_file_and_the_ui_defaults_are_read_once_when_parsed(tmp_path: Path) -> None:
    keys, ui = tmp_path / "keys", tmp_path / "ui.json"
    keys.write_text("k1\n\n k2 \n")
    ui.write_text('{"theme": "dark"}')
    server = Settings.from_argv(["--api-key-file", str(keys), "--ui-config-file", str(ui)], environ={}).server
    keys.unlink()
    ui.unlink()
    assert server.api_keys == ("k1", "k2") and server.ui_settings == {"theme": "dark"}
