"""Where a media part's bytes come from: a ``data:`` URI, raw base64, ``http(s)://`` or ``file://``.

The forms and messages are llama-server's (``handle_media``); a client's mistake is a 400 where it
answers 500. Remote media are fetched with httpx under llama-server's limits (10 MB, 10 s), but
unlike llama-server a request cannot make the server probe its own network: a host that resolves to a
loopback, private, link-local or otherwise non-public address is refused before any connection, unless
the server runs with ``--media-fetch-private``. The connection then goes to the address that was checked
(the URL's host kept for ``Host`` and TLS), so a second DNS answer cannot swap it; redirects are
followed by hand, each one checked the same way.

Example::

    policy = MediaPolicy(media_path="/srv/snapshots/")
    data = await media_bytes("file://front-door.jpg", policy, param="messages.0.content.1")
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from ..errors import InvalidRequest

if TYPE_CHECKING:
    import httpx

#: llama-server's limits for remote media.
MAX_REMOTE_BYTES = 10 * 1024 * 1024
REMOTE_TIMEOUT_S = 10.0
#: A local file larger than this is refused (llama-server reads any size).
MAX_FILE_BYTES = 64 * 2**20
MAX_REDIRECTS = 5
_DATA_PREFIXES = ("data:image/", "data:video/", "data:audio/")


@dataclass(frozen=True, slots=True)
class MediaPolicy:
    """What a request may point at: remote URLs (and private ones), and a folder for ``file://``."""

    fetch: bool = True
    fetch_private: bool = False
    #: ``--media-path``: the folder ``file://`` names are read from (None: ``file://`` is refused).
    media_path: str | None = None
    max_remote_bytes: int = MAX_REMOTE_BYTES
    timeout_s: float = REMOTE_TIMEOUT_S


async def media_bytes(url: str, policy: MediaPolicy, *, param: str) -> bytes:
    """The bytes a media part's URL (or inline data) stands for; every problem is a 400 naming ``param``."""
    scheme = url.split(":", 1)[0].lower() if ":" in url[:8] else ""
    if scheme in ("http", "https"):
        return await _fetch(url, policy, param)
    if url.startswith("file://"):
        return await asyncio.to_thread(_read_file, url[len("file://") :], policy, param)
    if url.startswith("data:"):
        return _data_uri(url, param)
    return _base64(url, param)


def _data_uri(url: str, param: str) -> bytes:
    parts = url.split(",")
    if len(parts) != 2:
        raise InvalidRequest("Invalid uri-encoded base64 value", param=param)
    header, payload = parts
    if not header.startswith(_DATA_PREFIXES):
        raise InvalidRequest(f"Invalid uri format: {header[:100]}", param=param)
    if not header.endswith("base64"):
        raise InvalidRequest("uri must be base64 encoded", param=param)
    return _base64(payload, param)


def _base64(text: str, param: str) -> bytes:
    """Standard or URL-safe base64, whitespace and missing padding allowed; anything else is refused."""
    compact = "".join(text.split()).replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if not data:
        raise InvalidRequest("Invalid base64 value", param=param)
    return data


# -- file:// ---------------------------------------------------------------------------------------


#: Characters llama-server's ``fs_validate_filename`` refuses in a name, besides the controls and surrogates.
_FORBIDDEN_CHARACTERS = frozenset(':*?"<>|\uff0e\u2215\u2216\ufffd\ufeff')


def _read_file(name: str, policy: MediaPolicy, param: str) -> bytes:
    """A file named relative to ``--media-path``, which it must not leave (no ``..``, no link out of it).

    As llama-server does, the name is appended to the folder, so a leading slash or an empty part only adds a
    separator (``file:////a//b.jpg`` reads ``a/b.jpg``); its checks are ``fs_validate_filename``'s.
    """
    if not policy.media_path:
        raise InvalidRequest("file:// URLs are not allowed unless --media-path is specified", param=param)
    if not _allowed_name(name):
        raise InvalidRequest(f"file path is not allowed: {name[:200]}", param=param)
    root = os.path.realpath(policy.media_path)
    path = os.path.realpath(root + os.sep + name)
    if os.path.commonpath([root, path]) != root:
        raise InvalidRequest(f"file path is not allowed: {name[:200]}", param=param)
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > MAX_FILE_BYTES:
                raise InvalidRequest(f"{name[:200]} is larger than {MAX_FILE_BYTES >> 20} MiB", param=param)
            return handle.read()
    except OSError:
        raise InvalidRequest(f"file does not exist or cannot be opened: {name[:200]}", param=param) from None


def _allowed_name(name: str) -> bool:
    """llama-server's ``fs_validate_filename(name, allow_subdirs=true)``: 1 to 255 UTF-8 bytes, no control or
    look-alike characters, no ``..`` anywhere, no space at either end and no ``.`` at the end (so not ``.``)."""
    if not 0 < len(name.encode("utf-8", "surrogatepass")) <= 255:
        return False
    for c in map(ord, name):
        if c <= 0x1F or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xDFFF or chr(c) in _FORBIDDEN_CHARACTERS:
            return False
    return not (name[0] == " " or name[-1] in " ." or ".." in name)


# -- http(s):// -------------------------------------------------------------------------------------


def _failed(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Failed to download image: {why}", param=param)


async def _fetch(url: str, policy: MediaPolicy, param: str) -> bytes:
    if not policy.fetch:
        raise InvalidRequest("remote media URLs are turned off on this server (--no-media-fetch)", param=param)
    import httpx  # here, not at the top: most servers never fetch media, and httpx costs megabytes to import

    try:
        async with httpx.AsyncClient(
            timeout=policy.timeout_s, follow_redirects=False, trust_env=False, verify=_ssl_context()
        ) as client:
            return await asyncio.wait_for(_follow(client, url, policy, param), policy.timeout_s)
    except TimeoutError:
        raise _failed(param, f"no complete answer within {policy.timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise _failed(param, f"{type(exc).__name__}: {exc}"[:300]) from None


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The SSL context of every media fetch, with certifi's CA bundle read into it once. A client builds its own
    context otherwise and reads the bundle again, on the event loop, where every other request waits for it."""
    import httpx

    return httpx.create_ssl_context(trust_env=False)


async def _follow(client: httpx.AsyncClient, url: str, policy: MediaPolicy, param: str) -> bytes:
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _failed(param, f"not an http(s) URL: {url[:200]}")
        address = await _checked_address(parts.hostname, parts.port, policy, param)
        port = f":{parts.port}" if parts.port else ""
        host = f"[{address}]" if ":" in address else address
        target = parts._replace(netloc=f"{host}{port}").geturl()
        request = client.build_request(
            "GET",
            target,
            headers={"Host": parts.netloc.rpartition("@")[2]},
            extensions={"sni_hostname": parts.hostname},
        )
        response = await client.send(request, stream=True)
        try:
            if response.is_redirect and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                continue
            if not response.is_success:
                raise _failed(param, f"HTTP {response.status_code}")
            return await _read_capped(response, policy.max_remote_bytes, param)
        finally:
            await response.aclose()
    raise _failed(param, f"more than {MAX_REDIRECTS} redirects")


async def _read_capped(response: httpx.Response, limit: int, param: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _failed(param, f"larger than {limit} bytes")
    data = bytearray()
    async for piece in response.aiter_bytes():
        data += piece
        if len(data) > limit:
            raise _failed(param, f"larger than {limit} bytes")
    return bytes(data)


async def _checked_address(host: str, port: int | None, policy: MediaPolicy, param: str) -> str:
    """The address to connect to for ``host``: every address it resolves to must be public (or allowed)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _failed(param, f"cannot resolve {host[:100]} ({exc.strerror or exc})") from None
    addresses = [str(info[4][0]) for info in infos]
    if not policy.fetch_private:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if not ip.is_global or ip.is_multicast:
                raise InvalidRequest(
                    f"media URL host {host[:100]} resolves to {address}, a loopback, private or link-local "
                    "address; this server does not fetch from its own network (--media-fetch-private allows it)",
                    param=param,
                )
    return addresses[0]
