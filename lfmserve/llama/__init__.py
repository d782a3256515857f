"""Every llama.cpp handle and call: the only package that imports ``llama_cpp`` (the pinned low-level bindings).

The rest of lfmserve deals in Python ints, bytes, numpy arrays and dataclasses. Return codes become
:class:`~lfmserve.errors.EngineError`; handles are freed before the ones they depend on.
"""
