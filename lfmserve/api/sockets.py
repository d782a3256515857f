"""The server's sockets, bound before anything loads, and its TLS files, checked then: a taken port or a bad
certificate is one line before the model loads. Apart from the HTTP server (:mod:`.server`) so that a start
binds them without importing uvicorn first.
"""

from __future__ import annotations

import socket
import ssl

from ..settings import ServerSettings


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
