"""The token list a slot file keeps beside the sequence state, in llama-server's packed form.

``llama_state_seq_save_file`` stores a list of 32-bit words after its header. llama-server writes there
not the plain token list but ``server_tokens::serialize()``: a marker (``LLAMA_TOKEN_NULL``), a version,
the token count, the tokens, then the media chunks' count (and chunks). Files are exchanged between the two
servers, so lfmserve writes the same form and reads both it and the plain list older servers wrote.

A media position holds lfmserve's own id for it (negative, derived from the media's content:
``engine.media.media_token_ids``), so no media chunk is ever written: the count is 0, and a restored id only
matches the same media again.

Example::

    words = pack_tokens([1, 15, 7])    # [-1, 1, 3, 1, 15, 7, 0]
    unpack_tokens(words)               # [1, 15, 7]
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidRequest

#: ``LLAMA_TOKEN_NULL``: a packed list starts with it, a plain one never does (its first word is a token).
TOKEN_NULL = -1
#: llama-server's ``SERVER_TOKENS_STATE_VERSION``.
VERSION = 1
#: Words the packed form adds to the tokens: marker, version, token count and media count.
PACKED_OVERHEAD = 4


def pack_tokens(tokens: Sequence[int]) -> list[int]:
    """The words llama-server's ``server_tokens::serialize`` writes for text-only tokens."""
    return [TOKEN_NULL, VERSION, len(tokens), *tokens, 0]


def unpack_tokens(words: Sequence[int]) -> list[int]:
    """The tokens of a file's word list, packed or plain; a malformed packed list is the client's mistake."""
    if not words or words[0] != TOKEN_NULL:
        return list(words)
    if len(words) < 3 or words[1] != VERSION:
        raise InvalidRequest("Unable to restore slot: Unsupported server tokens state version", param="filename")
    n_tokens = words[2]
    if n_tokens < 0 or len(words) != 3 + n_tokens + 1:
        raise InvalidRequest("Unable to restore slot: Malformed server tokens state", param="filename")
    if words[3 + n_tokens] != 0:
        raise InvalidRequest(
            "Unable to restore slot: Cannot restore media chunks saved by llama-server", param="filename"
        )
    return list(words[3 : 3 + n_tokens])
