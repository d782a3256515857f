"""Scale-out: which replica should answer a request so that its prompt cache is reused.

:mod:`.routing` (the key and the ranking) and :mod:`.simulate` (an offline replay of a recorded trace) need no
Ray; the Ray Serve application lives in the ``serve_*`` / ``ray_*`` modules, imported only by
``lfmserve serve-ray`` (``pip install 'lfmserve[ray]'``).
"""
