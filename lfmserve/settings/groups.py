"""The groups of :class:`~lfmserve.settings.Settings`: one frozen record per concern, each field with its flags.

A group is what one part of the server needs: the loader reads :class:`SourceSettings` to find the files, the
engine is built from :class:`EngineSettings`, the HTTP layer reads :class:`ServerSettings`, and so on. Each
group's ``TITLE`` is its ``--help`` section. Field names are unique across the groups: a field's name is also its
environment variable (``LFMSERVE_<NAME>``) and its keyword in :meth:`Settings.of
<lfmserve.settings.Settings.of>`.
"""

from __future__ import annotations

from typing import Any

from .agent import AgentSettings
from .chat import ChatSettings
from .engine import EngineSettings
from .log_output import LoggingSettings
from .media import EmbeddingSettings, MediaSettings
from .placement import DeviceSettings, ThreadSettings
from .router import RouterSettings
from .sampling import SamplingSettings
from .server import ServerSettings
from .source import SourceSettings
from .speculation import SpeculationSettings
from .weights import WeightSettings

#: The groups, as :class:`~lfmserve.settings.Settings` names them, in ``--help`` order.
GROUPS: dict[str, type[Any]] = {
    "source": SourceSettings,
    "chat": ChatSettings,
    "media": MediaSettings,
    "embedding": EmbeddingSettings,
    "weights": WeightSettings,
    "engine": EngineSettings,
    "threads": ThreadSettings,
    "devices": DeviceSettings,
    "speculation": SpeculationSettings,
    "server": ServerSettings,
    "agent": AgentSettings,
    "router": RouterSettings,
    "sampling": SamplingSettings,
    "logging": LoggingSettings,
}
