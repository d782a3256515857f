"""Run by tests/scaleout/test_ray_serve.py inside a fresh network namespace: a local Ray cluster serving the tiny
model from two replicas, the test's requests against it, and what they saw as one JSON line on stdout.

    unshare -n sh -c 'ip link set lo up && exec python tests/scaleout/ray_serve_run.py MODEL [ROUTER]'
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import httpx

from lfmserve.testing import free_port

SYSTEM = {"role": "system", "content": "You are a camera assistant. Describe what the snapshot shows, briefly."}
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 16}
REPLICA = "x-lfmserve-replica"


def stream(client: httpx.Client, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A streamed chat: status, replica, and the content deltas in order."""
    deltas = []
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    deltas.append(choice["delta"].get("content") or "")
        return {"status": response.status_code, "replica": response.headers.get(REPLICA), "deltas": deltas}


def chat(client: httpx.Client, messages: list[dict[str, str]]) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json={"messages": messages, **GREEDY})
    body = response.json()
    return {
        "status": response.status_code,
        "replica": response.headers.get(REPLICA),
        "content": body["choices"][0]["message"]["content"] if response.status_code == 200 else None,
        "cache_n": body.get("timings", {}).get("cache_n"),
    }


def saturate(client: httpx.Client, n: int) -> list[dict[str, Any]]:
    """``n`` long streams at once, all with one session id (more than one replica's slots)."""
    results: list[dict[str, Any]] = [{} for _ in range(n)]
    body = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 300, "ignore_eos": True}

    def one(i: int) -> None:
        results[i] = stream(client, body, headers={"x-session-id": "hot"})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [{"status": r["status"], "replica": r["replica"], "n_deltas": len(r["deltas"])} for r in results]


def kill(replica: str) -> None:
    """End the replica's actor, as a crash would (Serve's controller starts another)."""
    import ray

    for actor in ray.util.list_named_actors(all_namespaces=True):
        if replica in actor["name"]:
            ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
            return
    raise LookupError(replica)


def replicas(client: httpx.Client) -> set[str]:
    """The replicas that answer the merged ``/slots`` now."""
    response = client.get("/slots")
    return {slot["replica"] for slot in response.json()} if response.status_code == 200 else set()


def main(model: str, router: str) -> dict[str, Any]:
    import ray  # here, not at the top: the test imports this module's helpers without Ray's import-time warnings
    from ray import serve

    from lfmserve.scaleout.serve_app import APP_NAME, build_app

    t0 = time.monotonic()
    # a new cluster, whatever another left behind on the machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=128 << 20)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    argv = ["-m", model, "-t", "1", "-np", "2", "-c", "2048", "--metrics", "--replicas", "2", "--router", router]
    serve.run(build_app(argv), name=APP_NAME, route_prefix="/")
    out: dict[str, Any] = {"deploy_s": time.monotonic() - t0}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        out["greedy"] = stream(client, {"messages": [{"role": "user", "content": "Tell me about cats."}], **GREEDY})
        first = [SYSTEM, {"role": "user", "content": "What is at the door?"}]
        turn1 = chat(client, first)
        turn2 = chat(
            client,
            [*first, {"role": "assistant", "content": turn1["content"]}, {"role": "user", "content": "And now?"}],
        )
        out["turns"] = [turn1, turn2]
        out["saturated"] = saturate(client, 6)
        out["slots"] = client.get("/slots").json()
        out["metrics"] = client.get("/metrics").text
        before = replicas(client)
        t_kill = time.monotonic()
        kill(turn1["replica"])
        out["after_kill"] = [chat(client, first) for _ in range(6)]
        while len(replicas(client) - before) < 1 and time.monotonic() - t_kill < 90:
            time.sleep(0.5)
        out["restart_s"] = time.monotonic() - t_kill
        out["replicas_before"], out["replicas_after"] = sorted(before), sorted(replicas(client))
        out["after_restart"] = [chat(client, [SYSTEM, {"role": "user", "content": f"Question {i}?"}]) for i in range(8)]
    serve.shutdown()
    ray.shutdown()
    out["total_s"] = time.monotonic() - t0
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ours")), flush=True)
