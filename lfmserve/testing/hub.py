"""A fake Hugging Face hub for tests and the llama-server suite: one repo on loopback (``HF_ENDPOINT``, llama.cpp's
``MODEL_ENDPOINT``), with the routes huggingface_hub and llama.cpp's downloader use: the repo's branches
(``refs``), its file tree (every file in LFS, as a GGUF is on the hub) and ``resolve`` (HEAD and GET).

Example::

    app = fake_hub("LiquidAI/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": weights})  # an ASGI app: serve it with uvicorn
"""

from __future__ import annotations

import hashlib

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

#: The one commit the fake repo has.
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub(repo: str, files: dict[str, bytes], token: str | None = None) -> Starlette:
    """The hub of ``repo`` holding ``files`` (name: bytes); with ``token``, a gated repo that answers 401 to a
    request without it. Any other repo is a 404."""

    def refusal(request: Request) -> Response | None:
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "Invalid credentials in Authorization header"}, status_code=401)
        if f"{request.path_params['owner']}/{request.path_params['name']}" != repo:
            return JSONResponse({"error": "Repository not found"}, status_code=404)
        return None

    async def tree(request: Request) -> Response:
        refused = refusal(request)
        if refused is not None:
            return refused
        return JSONResponse(
            [
                {
                    "type": "file",
                    "path": name,
                    "size": len(data),
                    "oid": hashlib.sha1(data).hexdigest(),
                    "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134},
                }
                for name, data in files.items()
            ]
        )

    async def resolve(request: Request) -> Response:
        name = request.path_params["filename"]
        refused = refusal(request)
        if refused is not None:
            return refused
        if name not in files:
            return JSONResponse({"error": "Entry not found"}, status_code=404)
        data = files[name]
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Content-Length": str(len(data)),
        }
        return Response(
            b"" if request.method == "HEAD" else data, headers=headers, media_type="application/octet-stream"
        )

    async def refs(request: Request) -> Response:
        refused = refusal(request)
        if refused is not None:
            return refused
        return JSONResponse({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": COMMIT}]})

    return Starlette(
        routes=[
            Route("/api/models/{owner}/{name}/refs", refs),
            Route("/api/models/{owner}/{name}/tree/{revision}", tree),
            Route("/{owner}/{name}/resolve/{revision}/{filename:path}", resolve, methods=["GET", "HEAD"]),
        ]
    )
