"""Router mode: several models behind one URL, each served by its own child process, as llama-server's router and
llama-swap serve them.

``catalog`` lists the models (Hugging Face cache, ``--models-dir``, ``--models-preset``) with each one's settings;
``spawn`` forks children from a pre-imported fork server; ``child`` and ``link`` are the two ends of a child's
control line; ``pool`` decides which children run (autoload, the load queue, least-recently-used eviction, the
time-to-live and the memory budget); ``proxy`` carries requests to a child and its answers back; ``listing`` and
``events`` are the router's own answers; ``app`` and ``serve`` put it on HTTP.
"""
