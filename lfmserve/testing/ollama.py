"""An Ollama model store written as Ollama writes it, for tests of the router's Ollama source.

A model is a manifest at ``manifests/<host>/<namespace>/<model>/<tag>`` (schema version 2) whose ``config`` and
``layers`` name blobs at ``blobs/sha256-<hex>`` by their content's sha256, as ``ollama pull`` and ``ollama create``
leave them (``server/images.go``, ``manifest/``).

Example::

    store = OllamaStore(tmp_path / "ollama")
    store.add(
        "registry.ollama.ai/library/lfm2/latest",
        [(MODEL, gguf_bytes), (PARAMS, json.dumps({"temperature": 0.3}).encode())],
        config={"model_format": "gguf", "model_family": "lfm2", "model_type": "350M", "file_type": "Q4_K_M"},
    )
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_PREFIX = "application/vnd.ollama.image."
MODEL, PROJECTOR, ADAPTER, PARAMS = (_PREFIX + kind for kind in ("model", "projector", "adapter", "params"))
SYSTEM, MESSAGES, LICENSE, TEMPLATE = (_PREFIX + kind for kind in ("system", "messages", "license", "template"))
TENSOR = _PREFIX + "tensor"
CONFIG = "application/vnd.docker.container.image.v1+json"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


class OllamaStore:
    """A store folder (its ``manifests`` and ``blobs``) that tests add models to."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "manifests").mkdir(parents=True, exist_ok=True)
        (root / "blobs").mkdir(parents=True, exist_ok=True)

    def blob(self, data: bytes) -> tuple[str, Path]:
        """Store ``data`` as a blob: its digest (``sha256:<hex>``) and path."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / "blobs" / f"sha256-{digest}"
        path.write_bytes(data)
        return f"sha256:{digest}", path

    def add(
        self, path: str, layers: list[tuple[str, bytes]], config: dict[str, Any] | None = None
    ) -> tuple[Path, list[Path]]:
        """Write the manifest at ``manifests/<path>`` (``host/namespace/model/tag``) and its blobs: the manifest's
        path and each layer's blob path, in order."""
        config_digest, config_path = self.blob(json.dumps(config or {}).encode())
        entries, paths = [], []
        for media_type, data in layers:
            digest, blob = self.blob(data)
            entries.append({"mediaType": media_type, "digest": digest, "size": len(data)})
            paths.append(blob)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": config_digest, "size": config_path.stat().st_size},
            "layers": entries,
        }
        file = self.root / "manifests" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(manifest))
        return file, paths
