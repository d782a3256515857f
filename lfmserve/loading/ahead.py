"""A model load started before the web app is built, so the two overlap.

Importing and building the HTTP app (FastAPI, pydantic models, every route) takes about half a second of
Python, and loading a model as long again, mostly inside llama.cpp with the GIL released. Done one after the
other, they made a 270M model answer its first request 1.4 s after the process started, where llama-server took
1.0 s. The CLI starts the load on its own thread as soon as the command line has been checked and the port bound,
then builds the app; the app's first load takes the result.

Example::

    load = LoadAhead(lambda: first_load(settings, files))  # loading from now on
    app = create_app(settings, load)  # the first load() waits for it; a wake from sleep loads again
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..chat.serving import Serving
    from ..settings import Settings
    from .files import ModelFiles


class LoadAhead:
    """``load`` running on its own thread from now; calling this object hands over its result the first time and
    loads again each later time (waking from ``--sleep-idle-seconds``)."""

    def __init__(self, load: Callable[[], Serving]) -> None:
        self._load = load
        first: Future[Serving] = Future()
        #: The first load's result until it is taken (None once taken or discarded).
        self._first: Future[Serving] | None = first
        #: When the load began (``time.perf_counter``), for the line that says how long it took.
        self.started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, args=(first,), name="lfmserve-load", daemon=True)
        self._thread.start()

    def _run(self, first: Future[Serving]) -> None:
        try:
            first.set_result(self._load())
        except BaseException as exc:  # handed to whoever takes the result, as a load in its own thread raises it
            first.set_exception(exc)

    def __call__(self) -> Serving:
        first, self._first = self._first, None
        if first is None:
            self.started = time.perf_counter()
            return self._load()
        return first.result()

    def discard(self) -> None:
        """The start failed after the load began: wait for it and free what it loaded."""
        first, self._first = self._first, None
        if first is not None:
            self._thread.join()
            if first.exception() is None:
                first.result().close()


def first_load(settings: Settings, files: ModelFiles) -> Serving:
    """A start's load, on its own thread: the weights first, with only their own imports; the chat and engine
    layers' imports after them (the app's import on the main thread has made most of them by then; made before,
    the two threads would take turns with the GIL before llama.cpp even opens the file). What
    :func:`.loader.load_serving` does, in two steps."""
    from .model_load import load_weights

    fitted, model = load_weights(settings, files)
    from .loader import serving_of

    return serving_of(fitted, model, files)
