"""Command line: ``lfmserve [llama-server flags]`` resolves the model, then serves it over HTTP.

The only caller of ``logging.basicConfig``. A missing model file, an unknown flag or a failed load
exits non-zero with one clear line on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import uvicorn

from .api.app import create_app
from .errors import LfmError
from .models.loader import load_serving, resolve_model_path
from .settings import Settings

logger = logging.getLogger("lfmserve")


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
        path = resolve_model_path(settings)
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

    app = create_app(settings, lambda: load_serving(settings, path), on_load_error=stop_on_load_error)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info" if settings.verbose else "warning",
        access_log=settings.verbose,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    logger.info("listening on http://%s:%d (model %s)", settings.host, settings.port, path)
    server.run()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
