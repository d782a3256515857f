"""OpenAI's Responses API: ``/v1/responses``, ``/responses`` and their ``/input_tokens``, adapted into the chat
layer."""
