"""docs/cli.md is the generated reference, and it names every flag ``lfmserve --help`` lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lfmserve.settings import Settings
from lfmserve.settings.argv import parser
from lfmserve.settings.reference import cli_markdown

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_the_generated_reference() -> None:
    assert CLI_MD.read_text(encoding="utf-8") == cli_markdown(), (
        "docs/cli.md is stale: python -m lfmserve.settings.reference > docs/cli.md"
    )


def test_every_flag_of_help_is_in_docs_cli_md(capsys: pytest.CaptureFixture[str]) -> None:
    help_flags = set(parser().options)
    with pytest.raises(SystemExit):
        Settings.from_argv(["--help"])
    listed = capsys.readouterr().out
    assert all(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", listed) for name in help_flags)  # what --help shows
    documented = set(re.findall(r"`(--?[A-Za-z][\w.-]*)`", CLI_MD.read_text(encoding="utf-8")))
    assert len(help_flags) > 150
    assert help_flags - {"-h", "--help"} <= documented
    assert {"--ctx-size", "-np", "--no-jinja", "-nr", "--no-repack", "--spec-type", "--draft-max"} <= documented
