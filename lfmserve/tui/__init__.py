"""``lfmserve chat``: a terminal chat with a running server or with a model loaded in this process.

:mod:`.main` turns the flags into a :class:`~.conversation.Conversation`; :mod:`.app` reads lines with
prompt_toolkit; :mod:`.session` answers them (messages and ``/commands``); :mod:`.view` draws each reply with
rich. Nothing is imported here, so ``lfmserve chat --help`` loads neither httpx nor llama.cpp.
"""
