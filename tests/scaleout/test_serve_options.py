"""serve-ray's command line, without Ray: its own flags beside lfmserve's, and what each replica gets."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from lfmserve.scaleout.serve_options import ServeRayOptions
from lfmserve.settings import physical_cores


def test_the_flags_split_between_serve_ray_and_lfmserve() -> None:
    options = ServeRayOptions.from_argv(
        ["-m", "m.gguf", "--replicas", "2", "-t", "3", "-np", "6", "--router", "round-robin"]
    )
    assert (options.replicas, options.router, options.settings.source.model, options.settings.engine.parallel) == (
        2,
        "round-robin",
        "m.gguf",
        6,
    )
    deployment = options.model_deployment()
    assert deployment["num_replicas"] == 2 and "autoscaling_config" not in deployment
    assert deployment["ray_actor_options"] == {"num_cpus": 3}  # llama's threads are the replica's CPUs
    assert deployment["max_ongoing_requests"] == 6  # its slots
    assert deployment["request_router_config"]["request_router_class"].endswith(":RoundRobinRouter")


def test_cache_ram_and_default_threads_are_split_between_the_most_replicas() -> None:
    options = ServeRayOptions.from_argv(
        ["--replicas", "2", "--min-replicas", "1", "--max-replicas", "4", "-cram", "4096"]
    )
    settings = options.replica_settings
    assert settings.engine.cache_ram == 1024
    assert settings.threads.threads == max(1, physical_cores() // 4)
    scaling = options.model_deployment()["autoscaling_config"]
    assert scaling == {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 4, "target_ongoing_requests": 4}
    assert ServeRayOptions.from_argv(["-t", "5", "--replicas", "8"]).replica_settings.threads.threads == 5  # as given


def test_power_of_two_is_serves_default_router() -> None:
    config = ServeRayOptions.from_argv(["--router", "power-of-two"]).model_deployment()["request_router_config"]
    assert "request_router_class" not in config


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "0"], "must be positive"),
        (["--min-replicas", "1"], "go together"),
        (["--replicas", "5", "--min-replicas", "1", "--max-replicas", "4"], "between"),
        (["--router", "random"], "invalid choice"),
    ],
)
def test_bad_replica_counts_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        ServeRayOptions.from_argv(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--replicas", "0"], 2, "lfmserve serve-ray: error: replica counts must be positive"),
        (["-m", "/nonexistent/model.gguf"], 1, "lfmserve: error: model file not found: /nonexistent/model.gguf"),
    ],
)
def test_the_serve_ray_command_fails_before_starting_ray_with_one_line(
    argv: list[str], code: int, message: str
) -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("needs the ray extra")
    done = subprocess.run([sys.executable, "-m", "lfmserve", "serve-ray", *argv], capture_output=True, text=True)
    assert done.returncode == code and done.stderr.strip().splitlines()[-1].startswith(message)


def test_lfmserve_and_the_ray_free_serve_modules_never_import_ray() -> None:
    modules = "lfmserve.cli, lfmserve.api.app, lfmserve.scaleout.serve_options, lfmserve.scaleout.serve_replica"
    code = f"import sys, {modules}, lfmserve.scaleout.serve_merge; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
