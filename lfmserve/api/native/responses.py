"""llama-server's native response bodies: ``/completion`` (whole and streamed), ``/props``, ``/tokenize``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from ...chat.logprobs import native_probabilities
from ...chat.serving import Collected, Serving
from ...engine.records import EngineOutput, EngineRequest, TokenLogprob
from ..body import SamplingFields
from ..monitoring import memory_json


def props(serving: Serving, *, is_sleeping: bool, ui_settings: dict[str, Any]) -> dict[str, Any]:
    """``GET /props``: the generation defaults, slots, template and model, as llama-server reports them, and the
    web UI's defaults (``--ui-config``); lfmserve adds ``memory`` (:func:`~..monitoring.memory_json`) and how drafts
    are verified (``speculative.exact``, ``speculative.exact_batch``, ``speculative.drafting``)."""
    info, verification = serving.model.info, serving.engine.verification
    return {
        "default_generation_settings": {
            "n_ctx": serving.engine.n_ctx_slot,
            "params": {
                **serving.defaults.params.to_json(serving.model.eog_tokens),
                "stop": list(dict.fromkeys(serving.options.default_stop + serving.options.reverse_prompts)),
                "n_predict": serving.options.default_max_tokens,
                "max_tokens": serving.options.default_max_tokens,
                "n_keep": serving.options.n_keep,
                "n_discard": 0,
                "n_probs": 0,
                "backend_sampling": serving.options.backend_sampling,
                "speculative.types": serving.engine.config.speculation.type_names,
                "speculative.exact": verification.exact,
                "speculative.exact_batch": verification.exact_batch,
                "speculative.drafting": verification.drafting,
            },
        },
        "sampling_sources": serving.defaults.sources,
        "lfm_family": serving.defaults.family,
        "total_slots": serving.engine.n_slots,
        "model_alias": serving.model_name,
        "model_path": info.path,
        "modalities": serving.media.modalities,
        "media_marker": serving.media_marker,
        "chat_template": serving.template.source,
        "chat_template_caps": serving.template.caps.to_json(),
        "bos_token": info.bos_token,
        "eos_token": info.eos_token,
        "build_info": serving.options.fingerprint,
        "is_sleeping": is_sleeping,
        "ui_settings": ui_settings,
        "model": info.to_json(),
        "memory": memory_json(serving.engine),
    }


def tokens(serving: Serving, ids: Sequence[int], *, with_pieces: bool) -> dict[str, Any]:
    """``/tokenize``'s answer: the ids, or ids with their text (bytes as a list when not UTF-8)."""
    if not with_pieces:
        return {"tokens": list(ids)}
    pieces: list[dict[str, Any]] = []
    for token in ids:
        raw = serving.model.token_to_piece(token, special=True)
        try:
            piece: Any = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        pieces.append({"id": token, "piece": piece})
    return {"tokens": pieces}


def completion_result(
    serving: Serving,
    body: SamplingFields,
    request: EngineRequest,
    done: Collected | None,
    out: EngineOutput,
    *,
    index: int = 0,
) -> dict[str, Any]:
    """llama-server's final /completion object (``content`` and ``tokens`` are empty after a stream); a chat's
    ``__verbose``. Cut down to the ``response_fields`` asked for."""
    result = {
        "index": index,
        "content": done.text if done else "",
        "tokens": done.tokens if done and body.return_tokens else [],
        "id_slot": out.id_slot,
        "stop": True,
        "model": serving.model_name,
        "tokens_predicted": out.n_decoded,
        "tokens_evaluated": out.n_prompt_tokens,
        "generation_settings": _generation_settings(serving, body, request),
        "prompt": serving.prompt_text(request),
        "has_new_line": "\n" in done.text if done else False,
        "truncated": out.truncated,
        "stop_type": out.stop_type,
        "stopping_word": out.stopping_word,
        "tokens_cached": out.n_prompt_tokens + max(out.n_decoded - 1, 0),
        "timings": out.timings.to_json(),
        **_probabilities(serving, body, request, done.logprobs if done else ()),
    }
    return selected_fields(result, body.response_fields)


def selected_fields(result: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """llama-server's ``response_fields``: only the fields named, a path ``a/b`` taking ``b`` out of ``a`` under
    that name; a path that leads nowhere is left out. No paths: the whole object."""
    if not paths:
        return result
    selected = {}
    for path in paths:
        value: Any = result
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            selected[path] = value
    return selected


def _generation_settings(serving: Serving, body: SamplingFields, request: EngineRequest) -> dict[str, Any]:
    """The request's settings as llama-server shows them (``ignore_eos``'s bans among the biases)."""
    backend = serving.options.backend_sampling if body.backend_sampling is None else body.backend_sampling
    return {
        **request.sampling.to_json(serving.model.eog_tokens),
        "n_predict": request.max_tokens,
        "max_tokens": request.max_tokens,
        "n_keep": request.n_keep,
        "n_discard": request.n_discard,
        "stop": list(request.stop),
        "stream": body.stream,
        "cache_prompt": request.cache_prompt,
        "n_probs": request.n_probs,
        "post_sampling_probs": request.post_sampling_probs,
        "backend_sampling": backend,
        "timings_per_token": body.timings_per_token,
    }


async def completion_chunks(
    serving: Serving, body: SamplingFields, request: EngineRequest, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    """A partial chunk per output, then the final object (llama-server's stream has no ``[DONE]``); a prefill
    report (``return_progress``) is an empty partial chunk with ``prompt_progress`` (and, with ``timings_per_token``,
    the timings so far)."""
    async for out in outputs:
        if out.progress is not None:
            yield {**_partial(serving, body, request, out), "prompt_progress": out.progress.to_json()}
            continue
        if not out.finished or out.text:
            yield _partial(serving, body, request, out)
        if out.finished:
            yield completion_result(serving, body, request, None, out)


def _partial(serving: Serving, body: SamplingFields, request: EngineRequest, out: EngineOutput) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "index": 0,
        "content": out.text,
        "tokens": list(out.token_ids),
        "stop": False,
        "id_slot": out.id_slot,
        "tokens_predicted": out.n_decoded,
        "tokens_evaluated": out.n_prompt_tokens,
        **_probabilities(serving, body, request, out.logprobs),
    }
    if body.timings_per_token:
        chunk["timings"] = out.timings.to_json()
    return chunk


def _probabilities(
    serving: Serving, body: SamplingFields, request: EngineRequest, steps: Sequence[TokenLogprob]
) -> dict[str, Any]:
    """``completion_probabilities`` when asked for and there are steps (a stream's final object has none)."""
    if body.n_probs <= 0 or not steps:
        return {}
    shown = native_probabilities(steps, serving.piece, body.n_probs, post_sampling=request.post_sampling_probs)
    return {"completion_probabilities": shown}
