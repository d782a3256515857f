"""lfmserve as a Ray Serve application: an ingress that routes by conversation, and N model replicas, each one
lfmserve engine running the unchanged app in-process.

    client -> Serve's HTTP proxy -> Ingress (route key) -> ModelReplica (lfmserve's app) -> SSE back unchanged

``lfmserve serve-ray [lfmserve flags] --replicas N [--min-replicas A --max-replicas B] [--router NAME]``
(:func:`main`) connects to the Ray cluster in ``RAY_ADDRESS`` or starts a local one, listens on ``--host`` /
``--port`` and runs until SIGINT or SIGTERM. The same application, under Serve's own CLI::

    serve run lfmserve.scaleout.serve_app:build_app argv="-m model.gguf --replicas 2 -t 4"

Only this module and those it imports (``serve_*``, ``ray_*``) need Ray; the rest of lfmserve never imports it.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import ray
from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle
from starlette.types import ASGIApp

from ..api.handlers import CatchAll
from ..errors import LfmError
from ..llama.model import model_file_problem
from ..loading.engine_config import engine_config
from ..settings import Settings
from .serve_asgi import HttpRequest, HttpResponse, ResponsePart
from .serve_ingress import Forwarder
from .serve_options import ServeRayOptions
from .serve_replica import EngineReplica

logger = logging.getLogger(__name__)

#: The application's name in Serve (``serve status``, the replicas' actor names).
APP_NAME = "lfmserve"


class ModelReplica:
    """One lfmserve engine; Serve calls ``forward`` (a streamed request), ``respond`` (a whole one, for the
    merged routes), ``check_health`` and ``record_routing_stats``."""

    async def __init__(self, settings: Settings) -> None:  # type: ignore[misc]  # Serve awaits an async __init__
        name = serve.get_replica_context().replica_id.unique_id
        self._replica = EngineReplica(settings, name=name)
        await self._replica.start()  # Serve routes here only once this returns: the model is loaded
        logger.info("replica %s ready", name)

    async def forward(self, request: HttpRequest) -> AsyncIterator[ResponsePart]:
        async for part in self._replica.stream(request):
            yield part

    async def respond(self, request: HttpRequest) -> HttpResponse:
        return await self._replica.respond(request)

    def check_health(self) -> None:
        self._replica.check_health()

    def record_routing_stats(self) -> dict[str, int]:
        """What :class:`~lfmserve.scaleout.ray_router.AffinityRouter` reads as ``routing_stats``."""
        return asdict(self._replica.load())

    async def __del__(self) -> None:
        replica: EngineReplica | None = getattr(self, "_replica", None)  # None: its __init__ failed
        if replica is not None:
            await replica.stop()


class Ingress:
    """The HTTP-facing deployment: :class:`~lfmserve.scaleout.serve_ingress.Forwarder` over the model's handle."""

    def __init__(self, model: DeploymentHandle[Any]) -> None:
        self._app = CatchAll(Forwarder(model))  # anything unexpected: a 500 in the API's shape, logged once

    def __serve_build_asgi_app__(self) -> ASGIApp:
        return self._app


def build_app(args: Mapping[str, str] | Sequence[str]) -> Application:
    """The Serve application for serve-ray's command line: ``argv`` as a list, or (for ``serve run``) a
    mapping whose ``argv`` is that command line as one string."""
    argv = shlex.split(args.get("argv", "")) if isinstance(args, Mapping) else list(args)
    return application(ServeRayOptions.from_argv(argv))


def application(options: ServeRayOptions) -> Application:
    """The ingress bound to the model deployment that ``options`` shape."""
    engine_config(
        options.settings, options.settings.speculation.spec_draft_hf
    )  # a bad engine setting fails here, not N times
    model = serve.deployment(name="model", **options.model_deployment())(ModelReplica)
    ingress = serve.deployment(name="ingress", ray_actor_options={"num_cpus": 0})(serve.ingress()(Ingress))
    return ingress.bind(model.bind(options.replica_settings))


def main(options: ServeRayOptions) -> int:
    """``lfmserve serve-ray ...``: deploy, serve on ``--host`` / ``--port`` until SIGINT / SIGTERM, shut down."""
    settings = options.settings
    local = not os.environ.get("RAY_ADDRESS")
    try:
        problem = model_file_problem(settings.source.model) if local and settings.source.model else None
        if problem:  # a local cluster sees this machine's files: say so now, not after N failed replica starts
            raise LfmError(problem)
        app = application(options)
    except LfmError as exc:
        print(f"lfmserve: error: {exc}", file=sys.stderr)
        return 1
    # RAY_ADDRESS's cluster, else the one `ray start` left on this machine, else a new one (without a dashboard)
    ray.init(include_dashboard=False)
    stop = threading.Event()
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": settings.server.host, "port": settings.server.port})
        serve.run(app, name=APP_NAME, route_prefix="/")
        logger.info(
            "serving on http://%s:%d: %d replica(s), router %s",
            settings.server.host,
            settings.server.port,
            options.replicas,
            options.router,
        )
        stop.wait()
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call,unused-ignore]
        ray.shutdown()
    return 0
