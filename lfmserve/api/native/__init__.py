"""llama-server's own routes: ``/health``, ``/props``, ``/completion``, ``/tokenize``, ``/detokenize``,
``/apply-template``."""
