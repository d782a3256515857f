"""What a server imports: only what its configuration and its requests use.

A text model served with ``-m FILE`` and no projector loads no media decoders, no Hugging Face client, no Ray, no
HTTP client, no websockets and none of the agent tools; llguidance comes with the first constrained request.
Checked in a real ``lfmserve`` process (this test's own process has imported everything), which answers a plain
chat and then a constrained one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lfmserve.testing import free_port

#: Packages a text model's server must not import until a request or a flag calls for them.
OPTIONAL = frozenset(
    {
        "PIL",  # Pillow, soundfile and soxr: media decoding, with a projector and media in a request
        "soundfile",
        "soxr",
        "llguidance",  # constrained sampling, at the first constrained request
        "huggingface_hub",  # -hf and the router's catalog
        "ray",  # serve-ray
        "httpx",  # media URLs (and the client, the router's proxy)
        "rich",  # the terminal chat
        "prompt_toolkit",
        "websockets",  # uvicorn's websocket support: llama-server's API has none
        "gguf",  # a projector's metadata, Ollama's model cards
        "openai",
        "anthropic",
        "lfmserve.tools",  # the built-in tools, with --tools
    }
)

#: Runs in the server's process: serves with the CLI's own entry point, sends a plain chat and then a constrained
#: one (over http.client, which imports none of the packages above), and prints the optional packages loaded
#: after each; then stops the server as SIGTERM does.
_PROBE = """
import http.client, json, os, signal, sys, threading, time
from lfmserve.cli import main

model, port, optional = sys.argv[1], int(sys.argv[2]), set(json.loads(sys.argv[3]))

def loaded():
    return sorted(name for name in optional if name in sys.modules)

def request(method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read()

def probe():
    try:
        for _ in range(1200):
            try:
                if request("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        report = {"started": loaded(), "plain": request("POST", "/v1/chat/completions", chat)[0]}
        report["after_plain"] = loaded()
        schema = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}
        report["constrained"] = request("POST", "/v1/chat/completions", {**chat, "response_format": schema})[0]
        report["after_constrained"] = loaded()
        print("REPORT " + json.dumps(report), flush=True)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=probe, daemon=True).start()
sys.exit(main(["-m", model, "--port", str(port), "-c", "512", "-np", "1", "-t", "1", "--no-ui"]))
"""


@pytest.fixture(scope="module")
def report(tiny_gguf: Path) -> dict[str, Any]:
    """What a text model's server had imported when it started, after a plain chat and after a constrained one."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tiny_gguf), str(free_port()), json.dumps(sorted(OPTIONAL))],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(lines[0].removeprefix("REPORT "))
    assert result["plain"] == result["constrained"] == 200
    return result


def test_a_text_model_server_imports_no_optional_package(report: dict[str, Any]) -> None:
    assert report["started"] == report["after_plain"] == []


def test_the_first_constrained_request_imports_llguidance_and_nothing_else(report: dict[str, Any]) -> None:
    assert report["after_constrained"] == ["llguidance"]


def test_llama_cpp_python_s_high_level_api_waits_for_a_name_read_from_its_package(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    probe = (
        "import sys, lfmserve.llama.mtmd\n"
        "from lfmserve.errors import EngineError\n"
        "from lfmserve.llama.backend import init_backend\n"
        "from lfmserve.llama.model import NativeModel\n"
        "init_backend()  # lfmserve's log set up before the high-level API's import takes it\n"
        "before = sorted(m for m in sys.modules if m.startswith('llama_cpp'))\n"
        "from llama_cpp import Llama\n"
        "print(before, Llama.__module__)\n"
        "try:\n"
        f"    NativeModel({str(junk)!r})\n"
        "except EngineError as error:\n"
        "    print(error)  # llama.cpp's reason, read from its log: the log is still lfmserve's\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == [
        "['llama_cpp', 'llama_cpp._ctypes_extensions', 'llama_cpp.llama_cpp', 'llama_cpp.mtmd_cpp'] llama_cpp.llama",
        f"failed to load model from {junk}: invalid magic characters: 'not ', expected 'GGUF'",
    ]
