"""Text processing of the SQuAD reader, shared by prepare (whole data set),
the trainer and the one-question-at-a-time predictor, so that the three can
never tokenise differently.

- ``tokenize``: runs of word characters, and every other non-space character
  on its own; each token keeps its character span in the text, which is how a
  predicted token span becomes the answer *text* again (``context[start:end]``).
- ``Vocabulary``: words (lower-cased) and characters by descending count in
  the training set; id 0 pads, id 1 is unknown. Because ids are ordered by
  count, keeping the N most frequent words is clamping ids >= N to unknown.
- ``match_features``: per context token, whether it occurs in the question
  exactly and lower-cased (DrQA's exact-match features).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

TOKENIZER = "regex-words-v1"  # recorded in the manifest and checkpoints; change it when TOKEN_RE changes
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
PAD, UNK = 0, 1
SPECIALS = ["<pad>", "<unk>"]
MAX_CHARS = 16  # characters kept per token for the character CNN (longer words are cut)
N_MATCH_FEATURES = 2


def tokenize(text: str) -> tuple[list[str], np.ndarray]:
    """Tokens and their character spans (int32, n x 2: start, end exclusive)."""
    tokens, spans = [], []
    for m in TOKEN_RE.finditer(text):
        tokens.append(m.group())
        spans.append(m.span())
    return tokens, np.asarray(spans, dtype=np.int32).reshape(-1, 2)


def answer_token_span(spans: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Tokens covering characters [start, end) of the text: (first, last), or None."""
    if end <= start or len(spans) == 0:
        return None
    inside = np.nonzero((spans[:, 1] > start) & (spans[:, 0] < end))[0]
    if inside.size == 0:
        return None
    return int(inside[0]), int(inside[-1])


def count_words_and_chars(token_lists: Iterable[Sequence[str]]) -> tuple[Counter, Counter]:
    words, chars = Counter(), Counter()
    for tokens in token_lists:
        for token in tokens:
            words[token.lower()] += 1
            chars.update(token[:MAX_CHARS])
    return words, chars


def ordered(counts: Counter) -> list[tuple[str, int]]:
    """Most frequent first; ties in code-point order, so the ids are reproducible."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def kept_size(counts: Sequence[int], max_size: int | None, min_count: int) -> int:
    """How many ids (specials included) remain when keeping at most ``max_size``
    and only entries seen at least ``min_count`` times (``counts`` in id order,
    specials first with count 0)."""
    n = len(SPECIALS) + sum(1 for c in counts[len(SPECIALS) :] if c >= min_count)
    return min(n, max_size) if max_size else n


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]  # id -> lower-cased word
    chars: tuple[str, ...]  # id -> character

    def __post_init__(self):
        object.__setattr__(self, "_word_ids", {w: i for i, w in enumerate(self.words)})
        object.__setattr__(self, "_char_ids", {c: i for i, c in enumerate(self.chars)})

    def word_ids(self, tokens: Sequence[str]) -> np.ndarray:
        get = self._word_ids.get
        return np.fromiter((get(t.lower(), UNK) for t in tokens), dtype=np.int32, count=len(tokens))

    def char_ids(self, tokens: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(tokens), MAX_CHARS), dtype=np.int32)
        get = self._char_ids.get
        for i, token in enumerate(tokens):
            ids = [get(c, UNK) for c in token[:MAX_CHARS]]
            out[i, : len(ids)] = ids
        return out


def match_features(context_tokens: Sequence[str], question_tokens: Sequence[str]) -> np.ndarray:
    """uint8, n_context x 2: [token occurs in the question as is, ... lower-cased]."""
    exact = set(question_tokens)
    lower = {t.lower() for t in question_tokens}
    out = np.zeros((len(context_tokens), N_MATCH_FEATURES), dtype=np.uint8)
    for i, token in enumerate(context_tokens):
        if token in exact:
            out[i, 0] = 1
        if token.lower() in lower:
            out[i, 1] = 1
    return out


def clamp_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """Ids outside the kept vocabulary become unknown."""
    return np.where(ids >= size, UNK, ids)


def encode(vocab: Vocabulary, question: str, context: str) -> dict[str, np.ndarray]:
    """One (question, context) pair as the reader's inputs, straight from text
    (the predictor's path; prepare stores the same arrays for the whole set)."""
    c_tokens, c_spans = tokenize(context)
    q_tokens, _ = tokenize(question)
    return {
        "c_words": vocab.word_ids(c_tokens),
        "c_chars": vocab.char_ids(c_tokens),
        "c_feat": match_features(c_tokens, q_tokens),
        "c_spans": c_spans,
        "q_words": vocab.word_ids(q_tokens),
        "q_chars": vocab.char_ids(q_tokens),
    }


def pad_batch(examples: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Right-pad a list of encoded examples into batch arrays; masks are True at padding.
    An empty question or context gets one padding position (the model masks it)."""
    n = len(examples)
    lc = max(1, max(len(e["c_words"]) for e in examples))
    lq = max(1, max(len(e["q_words"]) for e in examples))
    batch = {
        "c_words": np.zeros((n, lc), dtype=np.int64),
        "c_chars": np.zeros((n, lc, MAX_CHARS), dtype=np.int64),
        "c_feat": np.zeros((n, lc, N_MATCH_FEATURES), dtype=np.float32),
        "c_mask": np.ones((n, lc), dtype=bool),
        "q_words": np.zeros((n, lq), dtype=np.int64),
        "q_chars": np.zeros((n, lq, MAX_CHARS), dtype=np.int64),
        "q_mask": np.ones((n, lq), dtype=bool),
    }
    for i, e in enumerate(examples):
        c, q = len(e["c_words"]), len(e["q_words"])
        batch["c_words"][i, :c] = e["c_words"]
        batch["c_chars"][i, :c] = e["c_chars"]
        batch["c_feat"][i, :c] = e["c_feat"]
        batch["c_mask"][i, :c] = False
        batch["q_words"][i, :q] = e["q_words"]
        batch["q_chars"][i, :q] = e["q_chars"]
        batch["q_mask"][i, :q] = False
    if all("start" in e for e in examples):
        batch["start"] = np.array([e["start"] for e in examples], dtype=np.int64)
        batch["end"] = np.array([e["end"] for e in examples], dtype=np.int64)
    return batch
