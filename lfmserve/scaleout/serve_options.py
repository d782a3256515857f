"""``lfmserve serve-ray`` flags: lfmserve's own, plus how many replicas and which router; and what they make of
each replica (its threads, its share of ``--cache-ram``) and of the Serve deployments.

No Ray here, so ``--help`` and bad flags answer at once, and the sizing is tested without a cluster.

Example::

    options = ServeRayOptions.from_argv(["-m", "model.gguf", "--replicas", "2", "-t", "4"])
    options.replica_settings.threads.threads        # 4: also the replica's num_cpus
    options.model_deployment()["max_ongoing_requests"]   # 4: --parallel's default
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..settings import Settings, physical_cores

#: ``--router`` names and the request router class each one means (``None``: Serve's default, power of two).
ROUTERS: dict[str, str | None] = {
    "ours": "lfmserve.scaleout.ray_router:AffinityRouter",
    "consistent-hash": "ray.serve.experimental.consistent_hash_router:ConsistentHashRouter",
    "power-of-two": None,
    "round-robin": "ray.serve.experimental.round_robin_router:RoundRobinRouter",
}
#: How often Serve asks each replica for its engine's load (``record_routing_stats``), in seconds.
ROUTING_STATS_PERIOD_S = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeRayOptions:
    """The parsed command line: ``settings`` as given, and the deployment's shape."""

    settings: Settings
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    router: str = "ours"

    @staticmethod
    def from_argv(argv: Sequence[str]) -> ServeRayOptions:
        """serve-ray's flags, then the rest as lfmserve's (``Settings.from_argv``); a bad value exits 2."""
        parser = argparse.ArgumentParser(
            prog="lfmserve serve-ray",
            usage="lfmserve serve-ray [lfmserve options] [--replicas N] [--min-replicas A --max-replicas B] "
            "[--router NAME]",
            description="Serve the model from N lfmserve replicas on a Ray cluster (RAY_ADDRESS, else a local one). "
            "Every other flag is lfmserve's (lfmserve --help). -t is each replica's llama threads and Ray CPUs "
            "(default: the physical cores split between the replicas); --cache-ram is for all replicas together, "
            "split evenly; -np is each replica's slots, and the most requests Serve sends it at once.",
            allow_abbrev=False,
        )
        parser.add_argument("--replicas", type=int, default=1, help="replicas to start with (default 1)")
        parser.add_argument("--min-replicas", type=int, help="autoscale: fewest replicas")
        parser.add_argument("--max-replicas", type=int, help="autoscale: most replicas")
        parser.add_argument("--router", choices=tuple(ROUTERS), default="ours", help="request router (default ours)")
        own, rest = parser.parse_known_args(argv)
        options = ServeRayOptions(
            settings=Settings.from_argv(rest),
            replicas=own.replicas,
            min_replicas=own.min_replicas,
            max_replicas=own.max_replicas,
            router=own.router,
        )
        problem = options.problem()
        if problem:
            parser.error(problem)
        return options

    def problem(self) -> str | None:
        """What is wrong with the replica counts, if anything."""
        low, high = self.min_replicas, self.max_replicas
        if self.replicas < 1 or (low is not None and low < 0) or (high is not None and high < 1):
            return "replica counts must be positive (--min-replicas may be 0)"
        if (low is None) != (high is None):
            return "--min-replicas and --max-replicas go together"
        if low is not None and high is not None and not low <= self.replicas <= high:
            return f"--replicas {self.replicas} must be between --min-replicas {low} and --max-replicas {high}"
        return None

    @property
    def most_replicas(self) -> int:
        return self.max_replicas or self.replicas

    @property
    def replica_settings(self) -> Settings:
        """One replica's settings: ``--cache-ram`` split evenly between the most replicas there can be, and,
        when ``-t`` is left at its default (every physical core), the cores split the same way."""
        n = self.most_replicas
        threads = self.settings.threads.threads
        if threads == physical_cores():
            threads = max(1, threads // n)
        return self.settings.replace(threads=threads, cache_ram=self.settings.engine.cache_ram // n)

    def model_deployment(self) -> dict[str, Any]:
        """The model deployment's options (``serve.deployment(...).options(**these)``).

        A replica asks Ray for as many CPUs as its llama threads, takes at most ``--parallel`` requests (its
        slots: the rest wait in the caller's router, which can then send them elsewhere), and lets
        ``--max-queue`` wait in all.
        """
        settings = self.replica_settings
        router = ROUTERS[self.router]
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": settings.threads.threads},
            "max_ongoing_requests": settings.engine.parallel,
            "max_queued_requests": settings.engine.max_queue,
            "graceful_shutdown_timeout_s": settings.server.shutdown_timeout,
            "request_router_config": {
                "request_routing_stats_period_s": ROUTING_STATS_PERIOD_S,
                **({"request_router_class": router} if router else {}),
            },
        }
        if self.min_replicas is None:
            options["num_replicas"] = self.replicas
        else:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas,
                "initial_replicas": self.replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": settings.engine.parallel,  # one replica's slots in use: add another
            }
        return options
