"""The HTTP server: where it listens, who may call it, which routes it opens; its key and UI files, read when parsed.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .fields import OnOffAction, flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """The HTTP server: where it listens, who may call it, and which routes it opens."""

    TITLE: ClassVar[str] = "server"

    host: str = field(default="127.0.0.1", metadata=flag("--host", help="addresses to listen on, comma-separated"))
    port: int = field(default=8080, metadata=flag("--port", help="port to listen on", type=int))
    api_key: tuple[str, ...] = field(
        default=(),
        repr=False,
        metadata=flag(
            "--api-key",
            help="API key clients must send (repeatable, or comma-separated)",
            action="append",
            environment=("LLAMA_API_KEY",),
            secret=True,
        ),
    )
    api_key_file: str | None = field(
        default=None,
        repr=False,
        metadata=flag(
            "--api-key-file",
            help="file with one API key per line",
            environment=("LLAMA_ARG_API_KEY_FILE",),
            secret=True,
        ),
    )
    cors_origins: str = field(
        default="*",
        metadata=flag(
            "--cors-origins",
            help="origins allowed by CORS, comma-separated, * in one any characters (http://localhost:*); 'localhost' "
            "allows only local pages (default: *)",
        ),
    )
    cors_methods: str = field(
        default="GET, POST, DELETE, OPTIONS",
        metadata=flag("--cors-methods", help="methods a CORS preflight allows, comma-separated"),
    )
    cors_headers: str = field(
        default="*", metadata=flag("--cors-headers", help="request headers a CORS preflight allows, comma-separated")
    )
    cors_credentials: bool = switch(
        "--cors-credentials",
        help="allow credentials (cookies, Authorization) across origins; with --cors-origins * the request's Origin "
        "is echoed, since * cannot carry credentials (default; --no-cors-credentials answers * itself)",
        default=True,
    )
    api_prefix: str = field(
        default="",
        metadata=flag(
            "--api-prefix",
            help="path prefix every route and the web UI are served under, without the trailing slash "
            "(/llm: /llm/v1/chat/completions, /llm/health, the UI at /llm/); other paths answer 404",
        ),
    )
    ssl_cert_file: str | None = field(
        default=None, metadata=flag("--ssl-cert-file", help="PEM certificate: serve HTTPS (with --ssl-key-file)")
    )
    ssl_key_file: str | None = field(
        default=None,
        repr=False,
        metadata=flag("--ssl-key-file", help="PEM private key of --ssl-cert-file", secret=True),
    )
    reuse_port: bool = switch(
        "--reuse-port",
        help="bind with SO_REUSEPORT, so several servers can listen on the same port (the kernel spreads the "
        "connections)",
        default=False,
        action="store_true",
    )
    sse_ping_interval: int = field(
        default=30,
        metadata=flag(
            "--sse-ping-interval",
            help="seconds a stream may stay silent before a ':' comment line keeps it alive (0 or -1 = never)",
            type=int,
        ),
    )
    max_body_bytes: int = field(
        default=64 * 2**20,
        metadata=flag(
            "--max-body-bytes",
            help="largest request body accepted, in bytes (default 64 MiB: a few large images); more answers 413",
            type=int,
        ),
    )
    shutdown_timeout: float = field(
        default=10.0,
        metadata=flag(
            "--shutdown-timeout",
            help="seconds running requests may take to finish on SIGTERM / Ctrl-C; the rest then end with a 503",
            type=float,
        ),
    )
    sleep_idle_seconds: int = field(
        default=-1,
        metadata=flag(
            "--sleep-idle-seconds",
            help="unload the model after this many idle seconds, reload it on the next request (-1 = never)",
            type=int,
        ),
    )
    ui: bool = switch(
        "--ui",
        "--webui",
        "--no-ui",
        "--no-webui",
        help="serve the web UI at / (default; --no-ui answers 404 there)",
        default=True,
        action=OnOffAction,
    )
    ui_config: str | None = field(
        default=None,
        metadata=flag(
            "--ui-config",
            "--webui-config",
            help="JSON object of the web UI's default settings, sent as /props ui_settings (wins over "
            "--ui-config-file)",
        ),
    )
    ui_config_file: str | None = field(
        default=None,
        metadata=flag("--ui-config-file", "--webui-config-file", help="file holding --ui-config's JSON object"),
    )
    props: bool = switch(
        "--props", help="allow changing server properties with POST /props", default=False, action="store_true"
    )
    slots_endpoint: bool = switch("--slots", help="expose GET /slots (default; --no-slots answers 501)", default=True)
    slot_save_path: str | None = field(
        default=None, metadata=flag("--slot-save-path", help="folder for POST /slots/{id}?action=save|restore")
    )
    metrics: bool = switch("--metrics", help="expose GET /metrics (Prometheus)", default=False, action="store_true")
    trace_requests: str | None = field(
        default=None,
        metadata=flag(
            "--trace-requests",
            help="append each generation request's shape (route key, hashes and lengths of its message prefixes, "
            "max_tokens; never its text) to this JSONL file, for bench/replay_trace.py",
        ),
    )
    threads_http: int = field(
        default=-1,
        metadata=flag(
            "--threads-http", help="accepted for llama-server's scripts (requests are served by asyncio)", type=int
        ),
    )
    timeout: int = field(
        default=3600,
        metadata=flag(
            "-to",
            "--timeout",
            help="accepted for llama-server's scripts, where it is the socket read/write timeout; uvicorn has none "
            "(a connection idle between requests closes after 5 s, as in llama-server)",
            type=int,
        ),
    )
    verbose: bool = switch(
        "-v",
        "--verbose",
        "--log-verbose",
        help="log everything, whatever -lv says: per-step detail, llama.cpp's own log, each request's access line",
        default=False,
        action="store_true",
    )
    show_version: bool = switch(
        "--version",
        help="print lfmserve's version and the llama.cpp build it runs, then exit",
        default=False,
        action="store_true",
    )
    cache_list: bool = switch(
        "-cl",
        "--cache-list",
        help="list the models in the Hugging Face cache (as -hf names them), then exit",
        default=False,
        action="store_true",
    )

    #: What --api-key-file and --ui-config(-file) hold, read once, when the settings are made
    #: (:meth:`__post_init__`).
    _file_keys: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _ui_settings: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Read the key file and the web UI's defaults now: a missing file or one that is not a JSON object is the
        parse's one error line (ValueError naming the flag), before anything loads, and each is read once."""
        if self.api_key_file:
            keys = _read_text(f"--api-key-file {self.api_key_file}", self.api_key_file).splitlines()
            object.__setattr__(self, "_file_keys", tuple(keys))
        if self.ui_config is not None:
            object.__setattr__(self, "_ui_settings", _json_object("--ui-config", self.ui_config))
        elif self.ui_config_file is not None:
            name = f"--ui-config-file {self.ui_config_file}"
            object.__setattr__(self, "_ui_settings", _json_object(name, _read_text(name, self.ui_config_file)))

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Keys from --api-key (comma-separated allowed) and --api-key-file, blank lines dropped."""
        keys = [k.strip() for value in self.api_key for k in value.split(",")] + [k.strip() for k in self._file_keys]
        return tuple(k for k in keys if k)

    @property
    def ui_settings(self) -> dict[str, Any]:
        """The web UI's defaults from --ui-config, else --ui-config-file (a copy: the caller may change it)."""
        return dict(self._ui_settings)


def _read_text(name: str, path: str) -> str:
    """The file at ``path``, whole; ValueError starting with ``name`` (its flag and path) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"{name}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not UTF-8 text") from None


def _json_object(name: str, text: str) -> dict[str, Any]:
    """``text`` as a JSON object; ValueError naming where it came from otherwise."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name}: not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}: not a JSON object")
    return value
