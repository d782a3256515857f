"""llama.cpp's INI files, read into sections: the router's ``--models-preset`` and the config files every llama.cpp
program reads (:mod:`.config_files`) share one format and one reader, so the two cannot drift apart.

A key is a flag without its dashes or a variable (``ctx-size``, ``c``, ``LLAMA_ARG_CTX_SIZE``); what each stands for
is :func:`.argv.preset_argv`'s business, not this module's. Example::

    read_ini("models.ini")   # {"*": {"ctx-size": "8192"}, "vision": {"model": "/m/vl.gguf"}}
"""

from __future__ import annotations

import configparser

#: The section whose keys apply to every model of a preset (and, in a config file, to the program reading it).
GLOBAL_SECTION = "*"
#: The section the keys written before the first section form, as llama.cpp names it (``COMMON_PRESET_DEFAULT_NAME``).
DEFAULT_SECTION = "default"


def read_ini(path: str) -> dict[str, dict[str, str]]:
    """The sections of the INI file at ``path``, in file order, each key -> value with the blanks around it trimmed.
    Keys keep their case (``LLAMA_ARG_...``); keys before the first section form the section ``default`` and
    ``version`` (reserved by llama.cpp for later) is left out, as in llama.cpp's ``load_from_ini``. As in llama.cpp's
    grammar, only ``=`` separates a key from its value (``key: value`` is a malformed line) and a ``#`` or ``;``
    after a blank starts a comment. OSError when the file cannot be read, configparser.Error when it is not INI."""
    parser = configparser.ConfigParser(
        interpolation=None, default_section="\0", strict=True, delimiters=("=",), inline_comment_prefixes=("#", ";")
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case (LLAMA_ARG_...)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    parser.read_string(text if text.lstrip().startswith("[") else f"[{DEFAULT_SECTION}]\n" + text, source=path)
    return {
        name: {key: value.strip() for key, value in parser[name].items() if key != "version"}
        for name in parser.sections()
    }
