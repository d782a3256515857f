"""The web chat UI: the files in ``lfmserve/webui/static`` served at ``/``, as llama-server serves its own.

The middleware answers a ``GET`` or ``HEAD`` of a shipped path and hands every other request on, so no API
route changes. It sits in front of the gate, which makes the UI what llama-server makes its assets: public
with ``--api-key`` (the page asks for the key when an API call is refused), served while the model loads
(the page shows "Loading model" from the 503s of ``/props``), and never a reason to wake a sleeping model.

The files are read and gzipped once, when the app is made (a few hundred KB), so a request is a lookup.
They have no hashed names, so every answer says ``Cache-Control: no-cache`` with an ``ETag``: a reload
costs a 304 per file and always sees a new version. ``_app/version.json`` (a path llama-server's UI
has, and its tests ask for) is made from lfmserve's version rather than kept as a file that could drift.

Example::

    app.add_middleware(WebUI, assets=load_assets())  # outside the gate; left out with --no-ui
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import MappingProxyType

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .ollama.lifecycle import is_probe

#: The UI's files, shipped as package data.
STATIC_DIR = Path(__file__).resolve().parents[1] / "webui" / "static"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".svg": "image/svg+xml",
    ".md": "text/markdown; charset=utf-8",
}
_TEXT = "text/plain; charset=utf-8"  # the LICENSE files, which have no extension
#: A second wall behind the sanitiser: no inline script or style and no other origin, so model output that
#: got through as HTML could neither run nor load anything (images and audio attached by the user are data:).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' data: blob:; object-src 'none'; base-uri 'self'; form-action 'self'"
)


@dataclass(frozen=True, slots=True)
class Asset:
    """One file as it is sent: its bytes, the same gzipped, its type, and a validator for conditional GETs."""

    body: bytes
    gzipped: bytes
    media_type: str
    etag: str

    @classmethod
    def of(cls, body: bytes, media_type: str) -> Asset:
        # mtime=0: the same file always compresses to the same bytes; a weak ETag covers both encodings
        digest = hashlib.sha256(body).hexdigest()[:20]
        return cls(body, gzip.compress(body, compresslevel=9, mtime=0), media_type, f'W/"{digest}"')


@functools.cache
def load_assets(root: Path = STATIC_DIR) -> Mapping[str, Asset]:
    """Every file under ``root`` by its URL path, ``index.html`` also at ``/``, and ``/_app/version.json``. The
    files are read and gzipped once per process, and every app the process builds (tests, in-process use through
    ``import lfmserve``) shares them."""
    assets = {
        "/" + path.relative_to(root).as_posix(): Asset.of(path.read_bytes(), _MEDIA_TYPES.get(path.suffix, _TEXT))
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }
    assets["/"] = assets["/index.html"]
    assets["/_app/version.json"] = Asset.of(json.dumps({"version": version("lfmserve")}).encode(), "application/json")
    return MappingProxyType(assets)


class WebUI:
    """ASGI middleware: the UI's files for ``GET`` and ``HEAD``; anything else goes on to ``app``."""

    def __init__(self, app: ASGIApp, assets: Mapping[str, Asset]) -> None:
        self.app = app
        self.assets = assets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        asset = self.assets.get(scope["path"]) if scope["type"] == "http" else None
        if asset is None or scope["method"] not in ("GET", "HEAD") or _probe_of_root(scope):
            await self.app(scope, receive, send)
            return
        await _response(asset, Headers(scope=scope))(scope, receive, send)


def _probe_of_root(scope: Scope) -> bool:
    """``/`` asked for by Ollama's clients (:func:`~lfmserve.api.ollama.lifecycle.is_probe`), which the app answers
    with "Ollama is running"."""
    return scope["path"] == "/" and is_probe(Headers(scope=scope).get("accept", ""))


def _response(asset: Asset, request: Headers) -> Response:
    """200 with the file (gzipped when the browser takes it), or 304 when the browser's copy is current."""
    headers = {"Cache-Control": "no-cache", "ETag": asset.etag, "Vary": "Accept-Encoding"}
    if asset.etag in (tag.strip() for tag in request.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers=headers)
    headers["X-Content-Type-Options"] = "nosniff"
    if asset.media_type.startswith("text/html"):
        headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    if "gzip" in request.get("accept-encoding", ""):  # the test Starlette's GZipMiddleware makes
        return Response(asset.gzipped, headers={**headers, "Content-Encoding": "gzip"}, media_type=asset.media_type)
    return Response(asset.body, headers=headers, media_type=asset.media_type)
