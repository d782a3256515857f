"""llama-server's built-in tools (``--tools``): files read, searched, written and edited, and shell commands run,
for agents that call them through ``POST /tools``.

:mod:`.catalog` names the tools and describes them (``GET /tools``); :mod:`.paths` resolves the paths a call
names (``x-tool-cwd``, and ``--tools-root``, which confines them); :mod:`.listing` and :mod:`.globs` walk and
match a folder; :mod:`.files`, :mod:`.search` and :mod:`.shell` are the tools themselves; :mod:`.calls` runs one
call. Nothing here is imported unless ``--tools`` is given.
"""
