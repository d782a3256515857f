"""Fill-in-the-middle prompts (``/infill``), built as llama-server builds them (``format_prompt_infill``).

Repo-level pattern (arXiv 2409.12186): with the vocabulary's ``FIM_REP`` and ``FIM_SEP``, the extra files come
first, each after ``FIM_SEP`` and its name, then ``FIM_PRE`` prefix, ``FIM_SUF`` suffix, ``FIM_MID``; without
``FIM_SEP`` the extra chunks are separated by a plain-text snippet line. The prefix and suffix are cut to fit a
batch (3:1), and the extra files fill what the context leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.records import EngineRequest
from ..errors import NotSupported
from ..llama.model import NativeModel
from .request import GenerationOptions, InfillRequest
from .serving import Serving

#: The separator between extra chunks for a vocabulary without ``FIM_SEP`` (llama-server's, as text).
_CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
#: The FIM tokens /infill cannot do without, and how llama-server names them when they are missing.
_REQUIRED = (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle"))


def check_infill(model: NativeModel) -> dict[str, int]:
    """The vocabulary's FIM tokens, or llama-server's 501 naming the ones a model lacks."""
    fim = model.fim_tokens()
    missing = "".join(f"{what} token is missing. " for role, what in _REQUIRED if role not in fim)
    if missing:
        raise NotSupported(f"Infill is not supported by this model: {missing}")
    return fim


def prepare_infill(serving: Serving, request: InfillRequest, options: GenerationOptions) -> EngineRequest:
    """The engine request of ``/infill``: the fill-in-the-middle prompt around the request's code."""
    tokens = infill_tokens(
        serving.model,
        request.prefix,
        request.suffix,
        request.extra,
        request.prompt,
        n_batch=serving.engine.config.n_batch,
        n_predict=serving.options.default_max_tokens,
        n_ctx=serving.engine.n_ctx_slot,
    )
    return serving.engine_request(options, tokens)


def infill_tokens(
    model: NativeModel,
    prefix: str | Sequence[int | str],
    suffix: str | Sequence[int | str],
    extra: Sequence[tuple[str, str]],
    prompt: str,
    *,
    n_batch: int,
    n_predict: int,
    n_ctx: int,
) -> list[int]:
    """The prompt's tokens: extra files, then prefix, the prompt and suffix around the FIM markers."""
    fim = check_infill(model)
    extra_tokens = _extra(model, fim, extra)
    tokens_prompt = model.tokenize(prompt, add_special=False, parse_special=True)
    tokens_prefix, tokens_suffix = _plain(model, prefix), _plain(model, suffix)
    n_prefix_take = min(len(tokens_prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(tokens_suffix), max(0, n_batch // 4 - (2 + len(tokens_prompt))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    head = [fim["pre"], *tokens_prefix[len(tokens_prefix) - n_prefix_take :], *tokens_prompt]
    tail = [fim["suf"], *tokens_suffix[:n_suffix_take]]
    bos = [model.bos_id] if model.info.add_bos else []
    kept_extra = extra_tokens[len(extra_tokens) - n_extra_take :] if n_extra_take else []
    return [*kept_extra, *bos, *head, *tail, fim["mid"]]


def _extra(model: NativeModel, fim: dict[str, int], extra: Sequence[tuple[str, str]]) -> list[int]:
    tokens: list[int] = []
    if "rep" in fim:
        tokens += [fim["rep"], *_text(model, "myproject\n")]
    for filename, text in extra:
        if "sep" in fim:
            tokens += [fim["sep"], *_text(model, filename + "\n")]
        else:
            tokens += _text(model, _CHUNK_SEPARATOR)
        tokens += _text(model, text)
    if "sep" in fim:
        tokens += [fim["sep"], *_text(model, "filename\n")]
    return tokens


def _text(model: NativeModel, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def _plain(model: NativeModel, value: str | Sequence[int | str]) -> list[int]:
    """Text or a mix of token ids and text, without special tokens (llama-server's ``tokenize_mixed``)."""
    if isinstance(value, str):
        return _text(model, value)
    tokens: list[int] = []
    for piece in value:
        tokens += [piece] if isinstance(piece, int) else _text(model, piece)
    return tokens
