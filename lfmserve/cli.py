"""Command line: ``lfmserve [llama-server flags]`` resolves the model, then serves it over HTTP.

The only caller of ``logging.basicConfig``. A missing model file, an unknown flag or a failed load
exits non-zero with one clear line on stderr. SIGTERM or Ctrl-C stops taking connections, gives the
running requests ``--shutdown-timeout`` seconds to finish, ends the rest with a 503 in the API's shape,
and exits 0.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Sequence

import uvicorn
from fastapi import FastAPI

from .api.app import create_app
from .api.state import AppState
from .errors import LfmError
from .models.loader import engine_config, load_serving, resolve_model_files
from .settings import Settings

logger = logging.getLogger("lfmserve")


class _GracefulServer(uvicorn.Server):
    """uvicorn, draining the app before its own shutdown: running requests finish or end with a 503, so none is
    cut off (uvicorn alone cancels them after its timeout, each with a traceback and no answer)."""

    def __init__(self, config: uvicorn.Config, app_state: AppState, timeout_s: float) -> None:
        super().__init__(config)
        self._app_state = app_state
        self._timeout_s = timeout_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while draining
        await self._app_state.drain(self._timeout_s)
        await super().shutdown(sockets)


def main(argv: Sequence[str] | None = None) -> int:
    settings = Settings.from_argv(argv)
    logging.basicConfig(
        level=logging.DEBUG if settings.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for chatty in ("httpx", "httpx2", "httpcore", "huggingface_hub"):  # one line per hub request is noise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        engine_config(settings, settings.spec_draft_hf)  # a bad engine setting fails before any download or load
        files = resolve_model_files(settings)
        settings.api_keys  # read --api-key-file now, so a missing file fails before serving  # noqa: B018
    except (LfmError, OSError) as exc:
        print(f"lfmserve: error: {exc}", file=sys.stderr)
        return 1
    exit_code = 0

    def stop_on_load_error(exc: BaseException) -> None:
        nonlocal exit_code
        print(f"lfmserve: error: {exc}", file=sys.stderr)
        exit_code = 1
        server.should_exit = True

    app: FastAPI = create_app(settings, lambda: load_serving(settings, files), on_load_error=stop_on_load_error)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info" if settings.verbose else "warning",
        access_log=settings.verbose,
        timeout_graceful_shutdown=5,  # after the drain only the ends of answers remain to be written
    )
    server = _GracefulServer(config, app.state.app_state, settings.shutdown_timeout)
    logger.info("listening on http://%s:%d (model %s)", settings.host, settings.port, files.model)
    # uvicorn raises the signal it stopped for again once it is done, with the handlers it found: with these,
    # that second delivery finds the shutdown already done and the process exits with this function's code.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: None)
    server.run()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
