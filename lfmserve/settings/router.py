"""Router mode: where the models are listed, how many run at once, when an idle one stops.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import OnOffAction, flag, parse_count, parse_size, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterSettings:
    """Router mode (started with no ``-m`` / ``-hf``): where the models are listed, how many run at once, and when
    an idle one stops. llama-server's router flags, plus the time-to-live and memory budget its users ask for."""

    TITLE: ClassVar[str] = "router (no -m / -hf: several models behind one URL)"

    models_dir: str | None = field(
        default=None,
        metadata=flag(
            "--models-dir",
            help="folder of models: a .gguf file is a model, a sub-folder is one (with mmproj, shards), and so is each "
            "PUBLISHER/REPO folder, as LM Studio keeps them",
        ),
    )
    models_preset: str | None = field(
        default=None,
        metadata=flag(
            "--models-preset", help="INI file of models: [*] for every model, then one [name] section per model"
        ),
    )
    models_max: int = field(
        default=4,
        metadata=flag(
            "--models-max",
            help="models loaded at once; loading one more unloads the least recently used idle one (0 = no limit)",
            type=parse_count,
        ),
    )
    models_autoload: bool = switch(
        "--models-autoload",
        help="load a model when a request names it (default; --no-models-autoload: only POST /models/load does)",
        default=True,
    )
    models_ttl: int = field(
        default=0,
        metadata=flag(
            "--models-ttl",
            help="unload a model idle for this many seconds (0 = never; a preset's ttl key sets it per model)",
            type=parse_count,
        ),
    )
    models_memory_max: int | None = field(
        default=None,
        metadata=flag(
            "--models-memory-max",
            help="memory the loaded models may use together, in bytes or with a K/M/G suffix (6G); a load that "
            "would pass it first unloads idle models",
            type=parse_size,
        ),
    )
    models_ollama: str | None = field(
        default=None,
        metadata=flag(
            "--models-ollama",
            help="Ollama's model store (its manifests and blobs) whose models to serve in place (default: "
            "OLLAMA_MODELS, else ~/.ollama/models or /usr/share/ollama/.ollama/models when there)",
            environment=("OLLAMA_MODELS",),
            metavar="DIR",
        ),
    )
    models_ollama_enabled: bool = switch(
        "--no-models-ollama",
        help="list no models of Ollama's store, wherever it is",
        default=True,
        action=OnOffAction,
    )
    models_lmstudio: str | None = field(
        default=None,
        metadata=flag(
            "--models-lmstudio",
            help="LM Studio's models folder (PUBLISHER/REPO/FILE.gguf) whose models to serve in place "
            "(default: ~/.lmstudio/models, else ~/.cache/lm-studio/models when there)",
            metavar="DIR",
        ),
    )
    models_lmstudio_enabled: bool = switch(
        "--no-models-lmstudio",
        help="list no models of LM Studio's models folder, wherever it is",
        default=True,
        action=OnOffAction,
    )
