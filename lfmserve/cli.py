"""Command line: ``lfmserve [llama-server flags]`` resolves the model, then serves it over HTTP;
``lfmserve chat ...`` hands its flags to :mod:`lfmserve.tui` (a terminal chat); ``lfmserve serve-ray ...`` to
:mod:`lfmserve.scaleout.serve_app` (replicas on Ray Serve, with the ``ray`` extra).

The only caller of ``logging.basicConfig``. It listens on every ``--host`` address (sockets bound here,
before the model loads, and handed to uvicorn). A missing model file, a port already taken, an unknown
flag or a failed load exits non-zero with one clear line on stderr. SIGTERM or Ctrl-C stops taking
connections, gives the running requests ``--shutdown-timeout`` seconds to finish, ends the rest with a
503 in the API's shape, and exits 0 (:mod:`lfmserve.api.server`, for a model and for a router alike).
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import LfmError
from .log_lines import JsonLineFormatter, LineFormatter, colors_on

if TYPE_CHECKING:
    from .router.link import ChildLink
    from .router.spawn import ChildStart
    from .settings import Settings

logger = logging.getLogger("lfmserve")


def main(argv: Sequence[str] | None = None) -> int:
    """``lfmserve chat ...`` chats (:mod:`lfmserve.tui`); ``lfmserve serve-ray ...`` serves on Ray Serve; anything
    else serves."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["chat"]:
        from .tui.main import main as chat

        return chat(args[1:])
    if args[:1] == ["serve-ray"]:
        return serve_ray(args[1:])
    return serve(args)


def command() -> int:
    """The ``lfmserve`` command (and ``python -m lfmserve``): :func:`main`, then every object the process made moved
    out of the cyclic collector's reach, so that the interpreter's exit does not walk the whole heap of the app and
    its imports once more (0.15 s of each stop, measured). The exit handlers still run (logs flushed, helper
    processes told). Not in :func:`main`, which tests also call in their own process."""
    code = main()
    gc.freeze()
    return code


def serve_ray(argv: Sequence[str]) -> int:
    """``lfmserve serve-ray [flags]``; Ray is imported only here (after the flags are read), its absence one line."""
    from .scaleout.serve_options import ServeRayOptions

    options = ServeRayOptions.from_argv(argv)
    configure_logging(options.settings)
    try:
        from .scaleout.serve_app import main as serve_app
    except ImportError as exc:
        print(f"lfmserve: error: serve-ray needs Ray Serve ({exc}): pip install 'lfmserve[ray]'", file=sys.stderr)
        return 1
    return serve_app(options)


def configure_logging(settings: Settings, model: str | None = None) -> None:
    """The process's one logging setup, llama-server's logging flags applied to lfmserve's lines and llama.cpp's
    (docs/usage.md, "Logging"): text on stderr, JSONL on stdout, a copy in ``--log-file``, nothing at all with
    ``--log-disable``; ``-lv``'s level, DEBUG with ``-v``. A router's child names its model in each line (they
    share the router's stderr)."""
    options = settings.logging
    if options.log_disable:
        logging.disable()  # every record dropped before any handler, --log-file's too, as in llama-server
        return
    console = logging.StreamHandler(sys.stdout if options.log_jsonl else sys.stderr)
    handlers: list[logging.Handler] = [console]
    if options.log_file:
        try:
            handlers.append(logging.FileHandler(options.log_file, mode="w", encoding="utf-8"))
        except OSError as exc:
            raise SystemExit(f"lfmserve: error: --log-file {options.log_file}: {exc.strerror}") from None
    for handler in handlers:
        colors = handler is console and colors_on(options.log_colors, console.stream)
        handler.setFormatter(
            JsonLineFormatter(options, model) if options.log_jsonl else LineFormatter(options, model, colors)
        )
    logging.basicConfig(level=logging.DEBUG if settings.server.verbose else options.level, handlers=handlers)
    for chatty in ("httpx", "httpx2", "httpcore", "huggingface_hub"):  # one line per hub request is noise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if settings.ignored:  # llama-server's scripts pass options this build has no use for: said once, at start
        from .settings.llama_server import ignored_line

        logger.warning("%s", ignored_line(settings.ignored))
    for variable in settings.ollama:  # Ollama's server variables: what each became, said once at start
        logger.log(logging.WARNING if variable.warning else logging.INFO, "%s", variable.line)


def serve(argv: Sequence[str]) -> int:
    """``lfmserve [llama-server flags]``; the app and the model code load here, so ``chat --help`` stays quick.
    With neither ``-m`` nor ``-hf`` it is a router (:func:`serve_router`)."""
    from .settings import Settings

    settings = Settings.from_argv(argv)
    if settings.server.show_version:
        from .loading.build import version_text

        print(version_text())
        return 0
    if settings.server.cache_list:
        return list_cache()
    if settings.devices.list_devices:
        from .loading.placement import device_list

        print(device_list())
        return 0
    if settings.source.model is None and settings.source.hf_repo is None:
        return serve_router(settings)
    return serve_model(settings)


def serve_model(settings: Settings, child: ChildLink | None = None) -> int:
    """Serve one model until SIGTERM / Ctrl-C; ``child`` is the link of a router's child, which serves on the
    socket its router bound and tells it when it is ready or why it failed."""
    from .api.sockets import listen, tls_files, url
    from .loading.ahead import LoadAhead, first_load
    from .loading.engine_config import engine_config
    from .loading.files import resolve_model_files
    from .loading.placement import check_placement

    configure_logging(settings, model=child.name if child else None)
    fail = child.failed if child else _print_error
    exit_code = 0

    def stop_on_load_error(exc: BaseException) -> None:
        nonlocal exit_code
        fail(str(exc))
        exit_code = 1
        server.should_exit = True

    try:
        engine_config(
            settings, settings.speculation.spec_draft_hf
        )  # a bad engine setting fails before any download or load
        check_placement(settings)  # and so does a device or buffer type this build lacks
        files = resolve_model_files(settings)
        tls_files(settings.server)  # checked now: a bad one is one line before the model loads (as the key file)
        # a taken port fails before the model loads
        sockets = child.sockets if child else listen(settings.server)
    except (LfmError, OSError, ValueError) as exc:
        fail(str(exc))
        return 1

    load = LoadAhead(lambda: first_load(settings, files))  # llama.cpp loads while the app is imported and built
    try:
        from .api.app import create_app
        from .api.server import Server

        app = create_app(settings, load, on_load_error=stop_on_load_error, on_ready=child.ready if child else None)
        server = Server(app, settings.server, app.state.app_state.drain)
    except (LfmError, OSError, ValueError) as exc:
        load.discard()
        fail(str(exc))
        return 1
    logger.info("listening on %s (model %s)", ", ".join(url(sock, settings.server) for sock in sockets), files.model)
    started = server.serve_on(sockets)  # a load error, seen while serving, has set exit_code by now
    return exit_code if started else 1


def _print_error(message: str) -> None:
    print(f"lfmserve: error: {message}", file=sys.stderr)


def serve_router(settings: Settings) -> int:
    """Router mode: the models of ``--models-dir``, ``--models-preset`` and the Hugging Face cache behind one URL,
    each served by a child process (:mod:`lfmserve.router`)."""
    from .api.sockets import listen
    from .router.serve import serve_router as run_router

    configure_logging(settings)
    try:
        return run_router(settings, serve_child, listen(settings.server))
    except (LfmError, OSError, ValueError) as exc:
        _print_error(str(exc))
        return 1


def list_cache() -> int:
    """``-cl`` / ``--cache-list``: the Hugging Face cache's models as llama-server lists them, by the names the
    router gives them (``org/repo:Q4_K_M``, what ``-hf`` takes)."""
    from .router.catalog import scan_cache

    names = [name for name, *_ in scan_cache()]
    print(f"number of models in cache: {len(names)}")
    for number, name in enumerate(names, 1):
        print(f"{number:4d}. {name}")
    return 0


def serve_child(start: ChildStart) -> None:
    """A router's child (run in a process forked by the router's fork server): serve the model's flags on the
    socket the router bound, and exit with serve's code. Its settings are its flags alone (its environment is not
    read), its only API key its own and its Hugging Face token the router's."""
    from .router.link import ChildLink
    from .settings import Settings

    link = ChildLink.open(start)
    settings = Settings.from_argv(start.argv, environ={})
    sys.exit(serve_model(settings.replace(api_key=(start.api_key,), hf_token=start.hf_token), link))


if __name__ == "__main__":
    sys.exit(main())
