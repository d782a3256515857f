"""Settings: every knob of the server and library, in groups, and its command line.

Flag names, short forms and meanings follow llama-server (``-m``, ``-hf``, ``-c``, ``-np``, ``-ngl``,
``--jinja``...). A :class:`Settings` holds one record per group (:mod:`.groups`): ``source`` (which model), ``chat``
(template and reasoning), ``media``, ``embedding``, ``weights`` (:mod:`.weights`), ``engine`` (context, batching,
prompt cache), ``threads`` and ``devices`` (:mod:`.placement`), ``speculation``, ``server``, ``router`` (several
models), ``sampling`` (defaults) and ``logging``. Each field's flags and help live in its metadata, so the parser,
``--help`` (a section per group), ``docs/cli.md`` and :meth:`Settings.to_argv` are built from the classes and
nothing is written twice. Environment variables ``LFMSERVE_<FIELD>`` (for example ``LFMSERVE_PORT=9000``, and
llama-server's ``LLAMA_API_KEY`` and ``HF_TOKEN``) give what flags do not, llama.cpp's config files
(``/etc/llama.cpp/config.ini``, then ``~/.config/llama.cpp/config.ini``, :mod:`.config_files`) what neither does,
and Ollama's server variables (``OLLAMA_HOST``, ``OLLAMA_NUM_PARALLEL``..., :mod:`.ollama_env`) what none of these
does; :mod:`.argv` reads the variables and nothing else does. Secret fields (API keys, their files, the Hugging Face
token) are left out of ``repr`` and of :meth:`Settings.without_secrets`.

Example::

    settings = Settings.from_argv(["-m", "model.gguf", "-c", "4096", "--port", "8080"])
    settings.engine.ctx_size                      # 4096
    Settings.of(model="model.gguf", ctx_size=4096) == settings.replace(port=8080)   # True
    settings.to_argv()                            # ["--model", "model.gguf", "--ctx-size", "4096"]
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .agent import AgentSettings
from .argv import all_fields, parse_groups, to_argv
from .chat import ChatSettings
from .config_files import config_argv, config_paths
from .engine import EngineSettings
from .fields import DEFAULT_HF_REPO, flag_spec, physical_cores
from .groups import GROUPS
from .log_output import LoggingSettings
from .media import EmbeddingSettings, MediaSettings
from .ollama_env import OllamaVariable
from .placement import DeviceSettings, ThreadSettings
from .router import RouterSettings
from .sampling import SamplingSettings, sampling_fields
from .server import ServerSettings
from .source import SourceSettings
from .speculation import SpeculationSettings
from .weights import WeightSettings

__all__ = [
    "DEFAULT_HF_REPO",
    "AgentSettings",
    "ChatSettings",
    "DeviceSettings",
    "EmbeddingSettings",
    "EngineSettings",
    "LoggingSettings",
    "MediaSettings",
    "RouterSettings",
    "SamplingSettings",
    "ServerSettings",
    "Settings",
    "SourceSettings",
    "SpeculationSettings",
    "ThreadSettings",
    "WeightSettings",
    "physical_cores",
    "sampling_fields",
]

#: Each field's name -> the group that holds it (names are unique across the groups).
_GROUP_OF = {f.name: group for group, kind in GROUPS.items() for f in dataclasses.fields(kind) if f.init}


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the CLI can set, one record per group. Tests build one with :meth:`of`:
    ``Settings.of(model="tiny.gguf", ctx_size=512)``."""

    source: SourceSettings = field(default_factory=SourceSettings)
    chat: ChatSettings = field(default_factory=ChatSettings)
    media: MediaSettings = field(default_factory=MediaSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    weights: WeightSettings = field(default_factory=WeightSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    threads: ThreadSettings = field(default_factory=ThreadSettings)
    devices: DeviceSettings = field(default_factory=DeviceSettings)
    speculation: SpeculationSettings = field(default_factory=SpeculationSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    router: RouterSettings = field(default_factory=RouterSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    #: llama-server options given that this build ignores (flags, or variables without their flag), for the one
    #: warning line at start.
    ignored: tuple[str, ...] = ()
    #: Ollama's server variables that are set, each with what it became, for its line at start.
    ollama: tuple[OllamaVariable, ...] = ()
    #: The fields llama.cpp's config files gave (no flag or variable did): a router passes them to its models as
    #: their weakest defaults, under its preset's sections.
    configured: tuple[str, ...] = ()
    logging: LoggingSettings = field(default_factory=LoggingSettings)

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from fields named as the flags' fields (``ctx_size=4096``), each put in its group."""
        return cls().replace(**values)

    def value(self, name: str) -> Any:
        """The field named ``name``, whatever its group; an unknown name is a KeyError."""
        return getattr(getattr(self, _GROUP_OF[name]), name)

    def replace(self, **values: Any) -> Settings:
        """A copy with the named fields changed, whatever their group; an unknown name is a TypeError."""
        unknown = sorted(set(values) - set(_GROUP_OF))
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        changed: dict[str, Any] = {}
        for group in {_GROUP_OF[name] for name in values}:
            mine = {name: value for name, value in values.items() if _GROUP_OF[name] == group}
            changed[group] = dataclasses.replace(getattr(self, group), **mine)
        return dataclasses.replace(self, **changed)

    @classmethod
    def from_argv(
        cls,
        argv: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        config_files: Sequence[str] | None = None,
    ) -> Settings:
        """Parse llama-server style arguments, with ``environ`` (default: the process's environment) giving what
        they do not, and llama.cpp's config files (:mod:`.config_files`) what neither does: ``config_files``, by
        default those llama.cpp reads when ``environ`` is the process's and none when the caller passes its own.
        An unknown or refused flag exits with status 1 (llama-server's) and one line. ``environ={}``: the flags
        alone."""
        if config_files is None:
            config_files = config_paths(os.environ) if environ is None else ()
        return cls(
            **parse_groups(
                sys.argv[1:] if argv is None else argv,
                os.environ if environ is None else environ,
                config_argv(config_files),
            )
        )

    def without_secrets(self) -> Settings:
        """A copy without API keys, key files or tokens: what may be listed, logged or put on a child's command
        line."""
        return self.replace(**{f.name: f.default for _, f in all_fields() if flag_spec(f).secret})

    def to_argv(self) -> list[str]:
        """The flags that reproduce these settings: ``Settings.from_argv(s.to_argv()) == s`` (with no
        ``LFMSERVE_*`` variables set)."""
        return to_argv({group: getattr(self, group) for group in GROUPS})
