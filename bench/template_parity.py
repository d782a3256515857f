"""Template parity: the prompts lfmserve's ``/apply-template`` renders, against llama-server's (built from the same
llama.cpp), conversation by conversation.

Both servers start with the same model and template flags (``-c 2048 -np 1 -t 1``; ``--no-repack`` on llama-server
where llama.cpp was built for AMX) and are asked to render the same chats:

* ``tool-loop``: a question, the assistant's call, the tool's result, an answer, a thank-you (the tool declared);
* ``thinking``: a question, an answer with ``reasoning_content``, another question (no tools);
* ``tool-thinking``: a question, a call with ``reasoning_content``, the tool's result (the tool declared).

The templates: each LFM fixture in ``../shared/fixtures/chat-templates/`` on the tiny LFM2 (``--chat-template-file``),
ChatML without tools (the tiny LFM2 with ``--chat-template chatml``), Gemma-3-270M's GGUF (it carries no
template: both fall back to ChatML), and Gemma 3's own template (``lfmserve.testing.GEMMA3_CHAT_TEMPLATE``) on it.

A case is ``identical`` when both answer 200 with the same prompt, BOS aside: llama-server's ``/apply-template``
leaves out the BOS text a template prints (common/chat.cpp, ``common_chat_template_direct_apply_impl``) and adds
the token back when it tokenizes; lfmserve's keeps it (docs/http-api.md). It is ``refused`` when both answer the
same error status (the messages differ: llama-server's carries its Jinja trace). Where the prompts differ,
docs/usage.md says why (``DOCUMENTED`` names the section); the diff is printed. Prints a markdown table, writes
JSON lines to ``--out`` and exits 1 when a case differs that ``DOCUMENTED`` does not list.

Example::

    python bench/template_parity.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import Server, bench_arguments, lfmserve_command, llama_server_binary, results_log

from lfmserve.testing import GEMMA3_CHAT_TEMPLATE, gemma3_270m_path, write_lfm2_gguf

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "chat-templates"
FLAGS = ["-c", "2048", "-np", "1", "-t", "1"]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
ASK = {"role": "user", "content": "Weather in Paris?"}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "tool-loop": {
        "messages": [
            ASK,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            RESULT,
            {"role": "assistant", "content": "It is 21 degrees."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [TOOL],
    },
    "thinking": {
        "messages": [
            {"role": "user", "content": "2 + 2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "add"},
            {"role": "user", "content": "And 3 + 3?"},
        ]
    },
    "tool-thinking": {
        "messages": [ASK, {"role": "assistant", "reasoning_content": "need the tool", "tool_calls": [CALL]}, RESULT],
        "tools": [TOOL],
    },
}
_WRITTEN = "docs/usage.md, Tool calls: a template that lists tools but drops tool_calls gets the calls written"
#: The differences docs/usage.md explains, by (template, conversation): the section that says why.
DOCUMENTED = {
    ("lfm2-tools", "tool-loop"): _WRITTEN,
    ("lfm2-tools", "tool-thinking"): _WRITTEN,
    ("lfm2.5-instruct", "tool-loop"): _WRITTEN,
    ("lfm2.5-instruct", "tool-thinking"): _WRITTEN,
    ("lfm2.5-8b-a1b", "tool-thinking"): "docs/usage.md, Reasoning: reasoning_content is also passed as thinking",
}


@dataclass(frozen=True, slots=True)
class Target:
    """A template both servers render: the model and the flags that choose it."""

    name: str
    model: Path
    flags: tuple[str, ...]


def _targets(folder: Path) -> list[Target]:
    tiny = write_lfm2_gguf(folder / "tiny.gguf")
    gemma = gemma3_270m_path()
    gemma_template = folder / "gemma3.jinja"
    gemma_template.write_text(GEMMA3_CHAT_TEMPLATE)
    fixtures = [
        Target(path.stem, tiny, ("--chat-template-file", str(path))) for path in sorted(FIXTURES.glob("*.jinja"))
    ]
    return [
        *fixtures,
        Target("chatml (tiny LFM2)", tiny, ("--chat-template", "chatml")),
        Target("gemma-3-270m gguf (chatml)", gemma, ()),
        Target("gemma 3 template", gemma, ("--chat-template-file", str(gemma_template))),
    ]


def _render(url: str, body: dict[str, Any]) -> tuple[int, str]:
    """The status and the prompt (or the error's message)."""
    response = httpx.post(url + "/apply-template", json=body, timeout=60)
    answer = response.json()
    if response.status_code == 200:
        return 200, str(answer["prompt"])
    return response.status_code, str(answer.get("error", {}).get("message", answer))


def _prompts(argv: list[str], name: str, *, bos_aside: bool = False) -> dict[str, tuple[int, str]]:
    """Each conversation's status and prompt; ``bos_aside``: without the BOS text it starts with."""
    with Server(name, argv) as url:
        bos = str(httpx.get(url + "/props", timeout=30).json()["bos_token"]) if bos_aside else ""
        rendered = {conversation: _render(url, body) for conversation, body in CONVERSATIONS.items()}
    return {key: (status, text.removeprefix(bos) if bos else text) for key, (status, text) in rendered.items()}


def _verdict(theirs: tuple[int, str], ours: tuple[int, str], documented: str | None) -> str:
    if theirs[0] == ours[0] != 200:
        return "refused"
    if theirs == ours:
        return "identical"
    return "documented" if documented else "unexplained"


def _diff(theirs: str, ours: str) -> str:
    lines = difflib.unified_diff(
        theirs.splitlines(keepends=True), ours.splitlines(keepends=True), "llama-server", "lfmserve", n=0
    )
    return "".join(lines)


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=2048, repeats=1)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    counts = {"identical": 0, "refused": 0, "documented": 0, "unexplained": 0}
    rows, diffs = [], []
    with tempfile.TemporaryDirectory() as folder, results_log(args, "template_parity") as out:
        for target in _targets(Path(folder)):
            common = ["-m", str(target.model), *FLAGS, *target.flags]
            theirs = _prompts([str(binary), *common], "llama-server")
            ours = _prompts([lfmserve_command(), *common], "lfmserve", bos_aside=True)
            for conversation in CONVERSATIONS:
                pair = theirs[conversation], ours[conversation]
                reason = DOCUMENTED.get((target.name, conversation))
                verdict = _verdict(*pair, reason)
                counts[verdict] += 1
                why = reason if verdict == "documented" else ""
                rows.append(f"| {target.name} | {conversation} | {pair[0][0]} / {pair[1][0]} | {verdict} | {why} |")
                if verdict in ("documented", "unexplained"):
                    diffs.append(f"--- {target.name}, {conversation}\n{_diff(pair[0][1], pair[1][1])}")
                row = {"template": target.name, "conversation": conversation, "verdict": verdict}
                out.write(json.dumps({**row, "llama_server": pair[0], "lfmserve": pair[1]}) + "\n")
    print("| template | conversation | status (llama-server / lfmserve) | prompts | why |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows) + "\n")
    print("\n".join(diffs))
    print("verdict: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + f" of {sum(counts.values())}")
    return 1 if counts["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())
