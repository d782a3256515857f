"""The engine thread and what it owns: slots and their memory, the batch step, sampling, per-request output.

Three verbs (:class:`~lfmserve.engine.core.Engine`'s ``submit``, ``cancel``, ``close``); everything
else here runs on the engine thread or is a plain record passed to and from it
(:mod:`~lfmserve.engine.records`). Pure planning (slot choice, reuse, checkpoint positions) lives in
:mod:`~lfmserve.engine.scheduler`, testable without a model.
"""
