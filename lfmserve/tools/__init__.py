"""llama-server's built-in tools (``--tools``): files read, searched, written and edited, and shell commands run,
for agents that call them through ``POST /tools``, on this machine or in a container or over ssh.

:mod:`.catalog` names the tools and describes them (``GET /tools``); :mod:`.paths` resolves the paths a call
names (``x-tool-cwd``, and ``--tools-root``, which confines them); :mod:`.listing` and :mod:`.globs` walk and
match a folder; :mod:`.toolio` is the seam every tool reaches its files and commands through, this machine's
(:mod:`.process` runs a command), and :mod:`.isolates` a container's or an ssh host's; :mod:`.runtime` picks one
(``--tools-runtime``, ``x-tool-runtime``); :mod:`.files`, :mod:`.search` and :mod:`.shell` are the tools
themselves; :mod:`.calls` runs one call. Nothing here is imported unless ``--tools`` (or ``--tools-runtime``,
checked when parsed) is given.
"""
