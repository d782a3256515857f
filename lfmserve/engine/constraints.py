"""Grammar-constrained sampling: JSON schemas, GBNF grammars and tool calls, enforced with llguidance.

Why llguidance rather than llama.cpp's GBNF sampler: its JSON-schema compiler enforces what llama.cpp's
converter drops (``minimum``/``maximum`` on ``number``, not just ``integer``), names the keywords it
does not implement (so the request gets a 400 that says which), and its token mask is computed in
Rust in tens of microseconds, so a constrained request costs the engine thread almost nothing.

A :class:`Grammars` object per model builds llguidance's tokenizer from the GGUF vocabulary once and
compiles request grammars on the serving side, where an invalid one becomes a 400 before anything
reaches the engine. The engine thread then drives a :class:`TokenMask`: before each sample it sets
the logits of every token the grammar forbids to minus infinity; after it, the grammar consumes the
chosen token. A lazy mask (``tool_choice: auto``) stays off until the model writes the trigger token
(``<|tool_call_start|>``), constrains the call, and switches off again after the release token.

llguidance is imported, and its tokenizer built, by the first constrained request, not with this module: a server
whose requests are never constrained never loads it. The tokenizer costs 0.2 s of CPU for 65,536 tokens, and 1.3 s
and about 110 MB held for Gemma 3's 262,144.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import EngineError, InvalidRequest

if TYPE_CHECKING:
    import llguidance
    from llguidance._lib import JsonCompileOptions

    from ..llama.model import NativeModel

#: JSON as models write it: no free whitespace (it would let a sampler wander), Python-style separators.
JSON_STYLE: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


#: Bounds like those llama.cpp's converter puts on numbers (it allows 16 digits): without them a model can
#: write ``10.5000000…`` until the token limit (seen with Gemma-3-270M at temperature 0).
MAX_DECIMALS_STEP = 1e-10
MAX_INTEGER = 10**15 - 1  # exact as a double (10**16 - 1 is not)


def bounded(schema: Any) -> Any:
    """The schema as llama.cpp's converter reads it, so the sampler cannot wander.

    - ``additionalProperties: false`` wherever an object lists properties and says nothing (JSON Schema
      allows extra keys by default; llama.cpp's converter and OpenAI's strict mode do not);
    - ``items`` (or ``properties``) without a ``type`` makes an array (an object), and draft 4's list of ``items``
      a tuple of exactly those, as llama.cpp's converter reads them;
    - numbers at most 10 decimals (``multipleOf: 1e-10`` unless one is given) and, like integers, at most
      15 digits before the point (unless the schema gives bounds).
    Anything the schema states explicitly is kept.
    """
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _bounded_value(key, value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if isinstance(out.get("items"), list):  # a tuple, in draft 4's spelling: those items and no more
        out["prefixItems"], out["items"] = out["items"], False
    untyped = not out.keys() & {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"}
    if untyped and ("items" in out or "prefixItems" in out):
        out["type"] = "array"  # llama.cpp's converter reads an untyped schema with items as an array
    elif untyped and "properties" in out:
        out["type"] = "object"
    types = out.get("type")
    types = types if isinstance(types, list) else [types]
    if "number" in types and "multipleOf" not in out:
        out["multipleOf"] = MAX_DECIMALS_STEP
    if "number" in types or "integer" in types:
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -MAX_INTEGER
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = MAX_INTEGER
    return out


#: Keywords whose value is a map of names to schemas: the names are keys, not keywords (a property may be called
#: ``items`` or ``properties``).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: Keywords whose value is data, not a schema.
_DATA = frozenset({"const", "enum", "default", "examples"})


def _bounded_value(key: str, value: Any) -> Any:
    if key in _DATA:
        return value
    if key in _SCHEMA_MAPS and isinstance(value, dict):
        return {name: bounded(subschema) for name, subschema in value.items()}
    return bounded(value)


def json_rule(schema: Any) -> str:
    """A Lark rule body (llguidance's ``%json``) for JSON that follows ``schema``, bounded and in the models' style."""
    body = bounded(schema)
    if isinstance(body, dict):
        body["x-guidance"] = JSON_STYLE
    return "%json " + json.dumps(body)


def checked_schema(schema: Any, *, param: str) -> dict[str, Any]:
    """A request's JSON schema once llguidance is known to compile it (``true``, any JSON value, is ``{}``), for a
    grammar that embeds it: a schema it cannot compile is a 400 naming ``param``, not the grammar around it."""
    import llguidance

    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(_schema_grammar(schema, param=param))
    if is_error:
        raise InvalidRequest(f"unsupported or invalid JSON schema: {messages[0]}", param=param)
    return {} if schema is True else dict(schema)


def _schema_grammar(schema: Any, *, param: str) -> str:
    """llguidance's grammar for JSON that follows ``schema``; ``false``, a schema that is no object, NaN or a schema
    llguidance cannot read is a 400 naming ``param``."""
    if schema is True:
        schema = {}
    if schema is False:
        raise InvalidRequest("the JSON schema false accepts no output", param=param)
    if not isinstance(schema, dict):
        raise InvalidRequest("a JSON schema must be an object", param=param)
    import llguidance

    try:
        text = json.dumps(bounded(schema), allow_nan=False)
        grammar: str = llguidance.LLMatcher.grammar_from_json_schema(text, overrides=JSON_STYLE)
    except ValueError as exc:  # NaN or infinity in the schema, or a schema llguidance cannot read
        raise InvalidRequest(f"unsupported or invalid JSON schema: {exc}", param=param) from None
    return grammar


class TokenMask:
    """One request's grammar state on the engine thread, a :class:`~lfmserve.engine.records.TokenConstraint`
    (not thread-safe; used by one sampler)."""

    def __init__(
        self, matcher: llguidance.LLMatcher, n_vocab: int, *, trigger: int | None = None, release: int | None = None
    ) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._trigger = trigger
        self._release = release
        self._active = trigger is None
        import llguidance.numpy

        self._fill_bitmask = llguidance.numpy.fill_next_token_bitmask  # looked up once, not for every token
        self._bits = llguidance.numpy.allocate_token_bitmask(1, n_vocab)

    @property
    def active(self) -> bool:
        return self._active

    @property
    def finished(self) -> bool:
        """A whole-output grammar is complete: nothing may follow (even under ``ignore_eos``)."""
        return self._trigger is None and (self._matcher.is_stopped() or self._matcher.is_error())

    def apply(self, logits: npt.NDArray[np.float32]) -> None:
        """Forbid, in place, every token the grammar does not allow next."""
        self._fill_bitmask(self._matcher, self._bits)
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little", count=self._n_vocab)
        logits[allowed == 0] = -np.inf

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        """Lazy grammars (waiting for or released at a trigger) are checked up to the next trigger or release
        token only: what follows it depends on a state this check does not advance."""
        items = list(tokens)
        if not self._active:
            return len(items) if self._trigger not in items else items.index(self._trigger) + 1
        if self._release is not None and self._release in items:
            items = items[: items.index(self._release) + 1]
        return int(self._matcher.validate_tokens(items))

    def accept(self, token: int) -> None:
        if not self._active:
            if token != self._trigger:
                return
            self._active = True
        self._matcher.consume_token(token)
        if token == self._release:
            self._matcher.reset()
            self._active = False


def _lltokenizer(model: NativeModel) -> llguidance.LLTokenizer:
    """llguidance's view of the vocabulary: every token's bytes, control tokens marked with a 0xFF prefix.

    Only control tokens are marked (llguidance's own helper also marks user-defined ``<...>`` tokens):
    user-defined tokens such as ``<think>`` are text that llama.cpp always prints, so a grammar's
    ``"<think>"`` must be able to match them, or the tokenizer's own forced tokens break the grammar.
    """
    import llguidance

    tokens = [(b"\xff" if model.is_control(t) else b"") + piece for t, piece in enumerate(model.all_pieces())]
    tokenizer: llguidance.LLTokenizer = llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
        tokens=tokens,
        vocab_ptr=model.vocab_handle,
        tokenize_fptr=model.tokenize_address,
        eos_token=sorted(model.eog_tokens) or model.eos_id,
        slices=None,
    )
    return tokenizer


class Grammars:
    """Compiles request grammars for one model into :class:`TokenMask` objects (thread-safe)."""

    def __init__(self, model: NativeModel) -> None:
        self._model = model
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._special: dict[str, int | None] = {}

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's tokenizer, built by the first constrained request (requests prepared on several threads
        wait for one build); an EngineError once closed."""
        with self._lock:
            if self._closed:
                raise EngineError("the model has been unloaded")
            if self._tokenizer is None:
                self._tokenizer = _lltokenizer(self._model)
            return self._tokenizer

    def close(self) -> None:
        """No tokenizer is built from the model after this (call before freeing the model: a build under way is
        waited for)."""
        with self._lock:
            self._closed = True

    def special_token(self, text: str) -> int | None:
        """The id of the control token written as ``text``, or None when the vocabulary has no such token."""
        if text not in self._special:  # asked on every chat request: looked up once
            token = self._model.token_for(text)
            self._special[text] = token if token is not None and self._model.is_control(token) else None
        return self._special[text]

    def json_schema(self, schema: Any, *, param: str) -> TokenMask:
        """A mask for output that validates against ``schema``; ``true`` (any JSON value) is the schema ``{}``."""
        return self._mask(_schema_grammar(schema, param=param), param=param, what="JSON schema")

    def gbnf(self, text: str, *, param: str) -> TokenMask:
        import llguidance

        try:
            grammar = llguidance.grammar_from("gbnf", text)
        except ValueError as exc:
            raise InvalidRequest(f"invalid grammar: {exc}", param=param) from None
        return self._mask(grammar, param=param, what="grammar")

    def lark(self, text: str, *, param: str, trigger: int | None = None, release: int | None = None) -> TokenMask:
        import llguidance

        return self._mask(
            llguidance.LLMatcher.grammar_from_lark(text), param=param, what="grammar", trigger=trigger, release=release
        )

    def _mask(
        self, grammar: str, *, param: str, what: str, trigger: int | None = None, release: int | None = None
    ) -> TokenMask:
        import llguidance

        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidRequest(f"unsupported or invalid {what}: {matcher.get_error()}", param=param)
        return TokenMask(matcher, self._model.n_vocab, trigger=trigger, release=release)
