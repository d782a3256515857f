"""From a neutral chat or completion request to an engine request, and from generated text back to a message.

Templates, prompt rendering, the per-request plan (tools, response formats, reasoning), tool-call
parsing and grammars, splitting the output into reasoning / content / calls, and log-probabilities.
Every API family (OpenAI, llama-server's native routes, and those to come) adapts its wire body into
:class:`~lfmserve.chat.request.ChatRequest` or :class:`~lfmserve.chat.request.GenerationOptions`.
"""
