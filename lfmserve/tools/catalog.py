"""The built-in tools by name, in llama-server's order, with what ``GET /tools`` says of each (its descriptions
verbatim: a model reads them to decide which tool to call)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NAMES = ("read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file", "edit_file", "get_info")


@dataclass(frozen=True, slots=True)
class ToolInfo:
    display_name: str
    writes: bool
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...] = ()

    def listing(self, name: str) -> dict[str, Any]:
        parameters: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            parameters["required"] = list(self.required)
        return {
            "display_name": self.display_name,
            "tool": name,
            "type": "server",
            "permissions": {"write": self.writes},
            "uses_cwd": True,
            "definition": {
                "type": "function",
                "function": {"name": name, "description": self.description, "parameters": parameters},
            },
        }


def _s(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _i(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}


def _b(description: str) -> dict[str, str]:
    return {"type": "boolean", "description": description}


_SKIPS = (
    "Automatically skips files ignored by .gitignore (when the directory is inside a git repo) and common junk "
    "directories (.git, node_modules, build, dist, etc.) otherwise."
)
TOOLS: dict[str, ToolInfo] = {
    "read_file": ToolInfo(
        "Read file",
        False,
        "Read the contents of a file. Optionally specify a 1-based line range. If append_loc is true, each line is "
        'prefixed with its line number (e.g. "1\u2192...").',
        {
            "path": _s("Path to the file"),
            "start_line": _i("First line to read, 1-based (default: 1)"),
            "end_line": _i("Last line to read, 1-based inclusive (default: end of file)"),
            "append_loc": _b("Prefix each line with its line number"),
        },
        ("path",),
    ),
    "file_glob_search": ToolInfo(
        "File search",
        False,
        f"Recursively search for files matching a glob pattern under a directory. {_SKIPS} A pattern with no '/' "
        "(e.g. \"*.cpp\") matches the file's basename at any depth. A pattern containing '/' matches the full "
        "relative path; unless already anchored with \"**/\" or a leading '/', it is automatically prefixed with "
        '"**/". Use type="dir" or "all" to also list directories; directory entries are suffixed with \'/\' in the '
        "output. Note: directory listings do not apply .gitignore filtering.",
        {
            "path": _s("Base directory to search in"),
            "include": _s('Glob pattern for files to include (e.g. "*.cpp" or "src/**/*.cpp"). Default: **'),
            "exclude": _s("Glob pattern for files to exclude"),
            "type": _s('Entry type to return: "file" (default), "dir" or "all"'),
            "max_depth": _i(
                "Maximum depth to descend into subdirectories (default: 0 = unlimited; 1 = direct children only)"
            ),
            "limit": _i("Maximum number of results to return, capped at 100 (default 100)"),
        },
        ("path",),
    ),
    "grep_search": ToolInfo(
        "Grep search",
        False,
        "Search for a pattern in files under a path. Returns matching lines with file paths (and, unless searching "
        f"a single file, paths relative to the given directory). {_SKIPS} include/exclude: a pattern with no '/' "
        "matches the basename at any depth; a pattern containing '/' matches the full relative path (auto-anchored "
        'with "**/" unless already anchored).',
        {
            "path": _s("File or directory to search in"),
            "pattern": _s("Pattern to search for (regular expression unless literal is true)"),
            "include": _s("Glob pattern to filter files (default: **)"),
            "exclude": _s("Glob pattern to exclude files"),
            "return_line_numbers": _b("If true, include line numbers in results"),
            "literal": _b("Treat pattern as a literal string instead of a regular expression (default: false)"),
            "ignore_case": _b("Case-insensitive search (default: false)"),
            "context_lines": _i("Number of lines of context to show before and after each match (default: 0)"),
        },
        ("path", "pattern"),
    ),
    "exec_shell_command": ToolInfo(
        "Execute shell command",
        True,
        "Execute a shell command and return its output (stdout and stderr combined).",
        {
            "command": _s("Shell command to execute"),
            "timeout": _i("Timeout in seconds (default 10, max 60)"),
            "max_output_size": _i("Maximum output size in bytes (default 16384)"),
        },
        ("command",),
    ),
    "write_file": ToolInfo(
        "Write file",
        True,
        "Write content to a file, creating it (including parent directories) if it does not exist. May use with "
        "edit_file for more complex edits.",
        {"path": _s("Path of the file to write"), "content": _s("Content to write")},
        ("path", "content"),
    ),
    "edit_file": ToolInfo(
        "Edit file",
        True,
        "Edit a file using exact text replacement. Each edits[].old_text must be unique in the file and is matched "
        "against the original content, not incrementally. Merge nearby changes into one edit instead of "
        "overlapping edits. Use write_file to replace the whole file.",
        {
            "path": _s("Path to the file to edit"),
            "edits": {
                "type": "array",
                "description": "One or more exact text replacements to apply",
                "items": {
                    "type": "object",
                    "properties": {
                        "old_text": _s(
                            "Exact text to find; must be unique in the file and must not overlap with other edits"
                        ),
                        "new_text": _s("Text to replace old_text with"),
                    },
                    "required": ["old_text", "new_text"],
                },
            },
        },
        ("path", "edits"),
    ),
    "get_info": ToolInfo(
        "Get Runtime Info", False, "Returns runtime info: the OS name/version and the current working directory", {}
    ),
}


def enabled_tools(asked: Sequence[str]) -> tuple[str, ...]:
    """The tools ``--tools`` names (``all``: every one), in llama-server's order; an unknown name is refused with
    llama-server's message (its list is split on commas, blanks kept: ``"read_file, grep_search"`` names
    ``" grep_search"``)."""
    for name in asked:
        if name != "all" and name not in TOOLS:
            raise ValueError(f'unknown tool "{name}". available tools: {", ".join(NAMES)}')
    return NAMES if "all" in asked else tuple(name for name in NAMES if name in asked)
