"""In-process chat and embeddings, for apps that cannot spawn a server: what the server does, without HTTP.

A :class:`Model` is the server's own serving logic (:class:`~lfmserve.chat.serving.Serving`, loaded by
:func:`~lfmserve.loading.loader.load_serving`) with its engine thread, so a turn is rendered, planned
(tools, ``tool_choice``, ``response_format``), tokenized with its media, sampled and parsed (reasoning,
LFM tool calls) exactly as ``/v1/chat/completions`` does, and replies come back as the same
:mod:`lfmserve.results` records the HTTP client returns.

Each turn renders the whole history with the chat template, prefills only the suffix the cache does not
hold yet, streams the reply until end of generation, then prefills the end-of-turn tokens so the cache
equals the next turn's render exactly. :meth:`Chat.reset` forgets the conversation without reloading.

Example::

    with lfmserve.Model("LFM2.5-1.2B-Instruct-Q4_K_M.gguf") as model:
        chat = model.chat(system="You are a helpful assistant.")
        print(chat.send("My name is Ada."))
        for piece in chat.stream("What is my name?", temperature=0.1):
            print(piece, end="", flush=True)

Tools: a call is parsed into :class:`~lfmserve.results.ToolCall` (arguments as a dict); answer it with
:meth:`Chat.add_tool_result`, then :meth:`Chat.reply` with no text lets the model go on::

    chat = model.chat(tools=[WEATHER_TOOL])        # OpenAI function tools, for every turn
    result = chat.reply("Weather in Paris?", tool_choice="required")
    for call in result.tool_calls:
        chat.add_tool_result(call, {"temp_c": 21})
    print(chat.reply().content)

Images and audio (with a projector), structured output, thinking::

    with lfmserve.Model("LFM2-VL-450M-Q8_0.gguf", mmproj="mmproj-LFM2-VL-450M-Q8_0.gguf") as model:
        print(model.chat().send("Describe it.", images=["photo.jpg"]))
        review = model.chat().reply("Review it.", images=[png_bytes], response_format=Review).parsed
        why = model.chat().reply("Why is the sky blue?", thinking=True).reasoning   # the <think> text

Embeddings, normalised as the server's ``--embd-normalize 2``::

    with lfmserve.Model("embedder.gguf", embeddings=True) as model:
        vectors = model.embed(texts=["a cat", "a dog"])    # float32, shape (2, n_embd)

Why synchronous without an event loop: :class:`Serving`'s preparation (plan, render, tokenize, media
decode) is plain code, and only its waiting is async; the engine thread already decouples the caller, so
the in-process API waits on a :class:`~lfmserve.engine.stream.SyncStream` (or ``SyncResult``) instead of
running a private loop on another thread, which would add a thread hop per token and make ``break``
reach the engine through that loop. Media come as bytes, paths or PIL images, never URLs, so nothing is
fetched.
"""

from .chat import Chat
from .model import Model
from .turn import TurnStats

__all__ = ["Chat", "Model", "TurnStats"]
