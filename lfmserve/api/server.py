"""The HTTP server of a single model and of the router: uvicorn on sockets bound before anything loads, stopped by
SIGTERM or Ctrl-C through a drain.

Both servers stop the same way: no new connections, then the app's drain (new requests on open connections get a
503, the running ones have ``--shutdown-timeout`` seconds to finish, what still runs then ends with a 503 in its
API's shape, a stream with its error event), then uvicorn's own shutdown writes the ends of those answers and runs
the lifespan's (a router stops its children there). What a drain ends is the app's own:
:meth:`~lfmserve.api.state.AppState.drain` closes the engine, a router's proxy cuts its children's answers.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

import uvicorn
from starlette.types import ASGIApp

from ..settings import ServerSettings

#: Refuse new requests, give the running ones the seconds given, then end the rest.
Drain = Callable[[float], Awaitable[None]]
#: After the drain only the ends of answers remain to be written; a client that does not read them is cut then.
_WRITE_ENDS_S = 5


class Server(uvicorn.Server):
    """uvicorn, draining the app before its own shutdown: uvicorn alone would cancel the running requests after its
    timeout, each with a traceback and no answer, so a stream would end cut, with no error event."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, drain: Drain) -> None:
        tls = tls_files(settings)
        config = uvicorn.Config(
            app,
            # h11 writes header names as given (httptools lower-cases them): clients that copy the headers into a
            # plain dict, as llama.cpp's test suite does, find llama-server's "Access-Control-Allow-Origin". It
            # costs about 5 us more per streamed event (measured: 8 against 3 us of the loop's time); through a
            # router, the decode ratio to the model served alone was the same as with httptools (0.99 and 0.98).
            http="h11",
            ws="none",  # llama-server's API has no websockets; "auto" would import the websockets package
            log_config=None,  # its lines go through lfmserve's handlers: --log-file, --log-jsonl and the rest
            log_level="info" if settings.verbose else "warning",
            access_log=settings.verbose,
            timeout_graceful_shutdown=_WRITE_ENDS_S,
            ssl_certfile=tls[0],
            ssl_keyfile=tls[1],
        )
        super().__init__(config)
        self._drain = drain
        self._shutdown_timeout_s = settings.shutdown_timeout

    def serve_on(self, sockets: list[socket.socket]) -> bool:
        """Serve on ``sockets`` until SIGTERM / Ctrl-C and the drain; False when the server could not start."""
        # uvicorn raises the signal it stopped for again once it is done, with the handlers it found: with these,
        # that second delivery finds the shutdown already done and the process exits with its caller's code.
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, lambda *_: None)
        self.run(sockets=sockets)
        return self.started

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while draining
        await self._drain(self._shutdown_timeout_s)
        await super().shutdown(sockets)


async def settle(busy: Callable[[], bool], timeout_s: float) -> None:
    """Wait until ``busy()`` is false, or ``timeout_s`` has passed: the running requests' grace in a drain."""
    deadline = time.monotonic() + timeout_s
    while busy() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def tls_files(settings: ServerSettings) -> tuple[str | None, str | None]:
    """``--ssl-cert-file`` and ``--ssl-key-file`` (both None: plain HTTP), checked by loading them: uvicorn would
    find a bad file only once serving, and say neither which file nor flag. Raises OSError (ssl.SSLError is one)
    naming the files, or when only one of the two is given (llama-server then serves plain HTTP without a word)."""
    cert, key = settings.ssl_cert_file, settings.ssl_key_file
    if cert is None and key is None:
        return None, None
    if cert is None or key is None:
        raise OSError("--ssl-cert-file and --ssl-key-file must be given together")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except OSError as exc:
        raise OSError(f"--ssl-cert-file {cert} / --ssl-key-file {key}: {exc}") from exc
    return cert, key


def listen(settings: ServerSettings) -> list[socket.socket]:
    """A bound socket for each address of ``--host`` (comma-separated, IPv4 or IPv6), all on ``--port``, with
    ``SO_REUSEPORT`` under ``--reuse-port``.

    As llama-server binds them: with several addresses, ``::`` is bound IPv6-only so that it does not also
    claim 0.0.0.0, and ``--port 0`` is refused (each address would get a different port). Raises OSError
    naming the address that could not be bound.
    """
    port = settings.port
    names = [name.strip() for name in settings.host.split(",") if name.strip()]
    if not names:
        raise OSError("--host requires at least one address")
    if port == 0 and len(names) > 1:
        raise OSError("--port 0 is not supported with multiple TCP addresses")
    sockets: list[socket.socket] = []
    try:
        for name in names:
            sockets.append(_bind(name, port, v6only=len(names) > 1, reuse_port=settings.reuse_port))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise OSError(f"couldn't bind HTTP server socket, hostname: {name}, port: {port}: {exc}") from exc
    return sockets


def _bind(host: str, port: int, *, v6only: bool, reuse_port: bool) -> socket.socket:
    """The first of ``host``'s addresses that binds (cpp-httplib tries them in order too)."""
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # rebind while old connections linger
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6 and v6only:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def url(sock: socket.socket, settings: ServerSettings) -> str:
    """The address a bound socket serves, as a URL for the log (https with the TLS files, and the prefix)."""
    host, port = sock.getsockname()[:2]
    scheme = "https" if settings.ssl_cert_file else "http"
    address = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return f"{scheme}://{address}:{port}{settings.api_prefix}"
