"""``lfmserve chat``: its flags, and the conversation they open (a server's, or a model loaded here).

The chat's own flags are few (``--url``, ``--system``, ``--tools-file``); every other flag is llama-server's,
parsed by :meth:`Settings.from_argv`, so ``-m``, ``-hf``, ``--mmproj``, ``-c``, ``-t``, ``--temp``, ``-n``
and ``--reasoning`` mean here what they mean to the server. With ``--url``, ``--model`` names the served
model (a router's: loaded when the chat opens) and ``--api-key`` is the key sent. Heavy modules load only once
the flags are known, so ``--help`` is quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LfmError

if TYPE_CHECKING:
    from ..settings import Settings
    from .conversation import Conversation, TurnOptions

_EPILOG = """\
Every other flag is llama-server's (see lfmserve --help): -m FILE / -hf REPO[:QUANT] [--mmproj FILE] load a
model in this process; -c, -t, --chat-template-file configure it; --temp, --top-k, --top-p, --min-p,
--repeat-penalty, --seed and -n N (max tokens per reply) set the sampling; --reasoning on|off|auto the
thinking. With --url, --model NAME names the served model (a router loads it) and --api-key KEY is sent.

examples:
  lfmserve chat --url http://127.0.0.1:8080
  lfmserve chat -hf LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M -c 8192 --temp 0.3
"""


#: How long to wait for a server that is still loading its model before giving up.
_READY_TIMEOUT_S = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lfmserve chat",
        usage="lfmserve chat (--url URL | -m FILE | -hf REPO[:QUANT]) [options]",
        description="Chat in the terminal with a running server, or with a model loaded in this process.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # a prefix of a chat flag must not swallow a llama-server flag
    )
    parser.add_argument("--url", metavar="URL", help="a running lfmserve or llama-server, e.g. http://127.0.0.1:8080")
    parser.add_argument("--system", metavar="TEXT", help="system prompt")
    parser.add_argument(
        "--tools-file",
        metavar="FILE",
        help="JSON file with an OpenAI tools list offered every turn (calls are shown, not run)",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    options, rest = _parser().parse_known_args(argv)
    from ..settings import Settings

    settings = Settings.from_argv(rest)
    try:
        turn = _turn_options(settings, options)
        if options.url:
            conversation, title = _remote(options.url, settings, system=options.system, turn=turn)
        else:
            conversation, title = _local(settings, system=options.system, turn=turn)
    except (LfmError, OSError, ValueError) as exc:
        print(f"lfmserve chat: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # while waiting for the server or loading the model
        return 130
    from rich.console import Console

    from .app import run
    from .session import ChatSession

    try:
        run(ChatSession(conversation, Console(highlight=False), system=options.system), title)
    finally:
        conversation.close()
    return 0


def _remote(url: str, settings: Settings, *, system: str | None, turn: TurnOptions) -> tuple[Conversation, str]:
    from ..client import Client
    from .conversation import RemoteConversation

    key = settings.server.api_keys[0] if settings.server.api_keys else None
    client = Client(url, key, model=settings.source.model or _only_model(url, key))
    try:
        if not client.health():  # a server that is not there fails at once; one still loading is waited for
            print(f"waiting for {url} to load its model ...", file=sys.stderr)
            client.wait_until_ready(timeout=_READY_TIMEOUT_S)
        capabilities = client.capabilities()  # a router loads the model here
    except LfmError:
        client.close()
        raise
    # The server applies its own defaults; the ones given here go with every request.
    turn = dataclasses.replace(turn, sampling={**settings.sampling.defaults(), **turn.sampling})
    return RemoteConversation(client, system=system, turn=turn), f"{capabilities.model} at {url}"


def _only_model(url: str, key: str | None) -> str | None:
    """The model to chat with when ``--model`` names none: a router's only model; None for a single-model server
    (it needs no name). A router with several models is an error that lists them."""
    from ..client import Client

    with Client(url, key) as client:
        listed = client.models()
    if not any(model.status for model in listed):  # a single-model server: no status
        return None
    if len(listed) == 1:
        return listed[0].id
    names = ", ".join(model.id for model in listed)
    raise LfmError(f"{url} is a router serving several models; choose one with --model NAME ({names})")


#: The context of an in-process chat when ``-c`` does not say (as :class:`lfmserve.Model`'s default).
_LOCAL_N_CTX = 4096


def _local(settings: Settings, *, system: str | None, turn: TurnOptions) -> tuple[Conversation, str]:
    from ..loading.files import resolve_model_files
    from ..local import Model
    from .conversation import LocalConversation

    files = resolve_model_files(settings)
    print(f"loading {files.model} ...", file=sys.stderr)
    if not settings.engine.ctx_size:  # the server's 0 means the model's own context, which could be 128k tokens
        settings = settings.replace(ctx_size=_LOCAL_N_CTX)
    model = Model.from_settings(settings, files)
    return LocalConversation(model, system=system, turn=turn), Path(files.model).name


def _turn_options(settings: Settings, options: argparse.Namespace) -> TurnOptions:
    """``-n`` as ``max_tokens``, ``--ignore-eos``, ``--reasoning on|off`` (``auto``: the model's default) and
    ``--tools-file``."""
    from .conversation import TurnOptions

    sampling: dict[str, Any] = {"max_tokens": settings.sampling.n_predict} if settings.sampling.n_predict >= 0 else {}
    if settings.sampling.ignore_eos:
        sampling["ignore_eos"] = True
    thinking = {"on": True, "off": False}.get(settings.chat.reasoning)
    return TurnOptions(tools=_read_tools(options.tools_file), thinking=thinking, sampling=sampling)


def _read_tools(path: str | None) -> list[dict[str, Any]] | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        tools = json.load(handle)
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ValueError(f"--tools-file {path}: not a JSON list of tools")
    return tools
