"""Vocabularies for the test models that are not LFM2: BPE merges learnt from a fixed English text (Gemma 3's
SentencePiece pieces, a RoBERTa-style byte-level vocabulary) and that text's words (BERT's WordPiece).

The real checkpoints' vocabularies hold tens of thousands of pieces, so everyday English words are single
tokens in them. The text below holds everyday words, among them those of the English prompts whose tokens
llama.cpp's server tests count, so those prompts tokenize into whole words here too, and the counts follow the
words as with the real vocabularies (``"This is a test"`` is 4 WordPiece tokens, ``" hello" * 8`` is 8
SentencePiece tokens).

Example::

    merges = learn_merges(spm_words(), n_merges=2000)
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

#: SentencePiece's stand-in for a space; llama.cpp's WordPiece vocabularies mark a word's start with it too.
SPM_SPACE = "\u2581"

CORPUS = (
    "I believe the meaning of life is to learn. This is a test. This is another test. Hello world, hello there. "
    "Goodbye world. Write a joke about AI from a very long prompt which will not be truncated. What is this? "
    "The quick brown fox jumps over the lazy dog. A cat, a dog, a frog, a truck, a bird, a deer, a horse, a ship "
    "and an automobile. Machine learning is a field of study in artificial intelligence concerned with the "
    "development of statistical algorithms that can learn from data and generalize to unseen data. Learning is the "
    "process of acquiring new understanding, knowledge, behaviors, skills, values and preferences. A machine is a "
    "physical system that uses power to apply forces and control movement to perform an action. Which city is the "
    "capital of France? Paris is the capital of France, a large city of art, fashion and culture. You are a helpful "
    "assistant. What is the weather like today? It is sunny and warm. Tell me a story about the ocean and the "
    "river. Please answer in one sentence. Summarize the following text. Translate it to French. What is your "
    "name? My name is Ada. How are you? I am fine, thank you. Hi, can you help me with my code? Yes, of course. "
    "Test test, one two three four five six seven eight nine ten. The image shows a picture of an animal."
)


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def learn_merges(words: Iterable[tuple[str, ...]], n_merges: int) -> list[tuple[str, str]]:
    """BPE training over ``words`` (each a tuple of its first symbols): the most frequent pair wins, ties by the
    order pairs were first seen; stops after ``n_merges`` or when every word is one symbol."""
    counts = collections.Counter(words)
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges:
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for word, count in counts.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: item[1])[0]
        merges.append(best)
        counts = collections.Counter({_merge(word, best): count for word, count in counts.items()})
    return merges


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(word):
        if word[i : i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def spm_words() -> list[tuple[str, ...]]:
    """The corpus as SentencePiece sees it (no space prefix, as Gemma's): ``▁``-joined words, split before each
    ``▁``, in characters."""
    text = CORPUS.replace(" ", SPM_SPACE)
    return [tuple(piece) for piece in re.findall(f"{SPM_SPACE}?[^{SPM_SPACE}]+", text)]


def byte_level_words() -> list[tuple[str, ...]]:
    """The corpus split as GPT-2's pre-tokenizer splits ASCII text (letters, digits and other runs, each with the
    space before it), in GPT-2's printable byte alphabet (a space is ``Ġ``)."""
    alphabet = byte_alphabet()
    pieces = re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    return [tuple(alphabet[b] for b in piece.encode()) for piece in pieces]


def wordpiece_words() -> list[str]:
    """The corpus's words as BERT's uncased WordPiece sees them (lower case, punctuation apart), each once."""
    return list(dict.fromkeys(re.findall(r"[a-z0-9]+", CORPUS.lower())))
