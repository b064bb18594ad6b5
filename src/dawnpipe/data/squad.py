"""SQuAD v1.1 data (``data.kind: squad``): fetch, prepare and read back.

    dawnpipe fetch squad --dest data/raw/squad            # official URLs, checked by sha256 + md5 + size
    dawnpipe prepare squad --raw data/raw/squad --out data/prepared/squad

fetch downloads ``train-v1.1.json`` and ``dev-v1.1.json`` (resumably, through
``dawnpipe.data.fetch``), verifies them and then checks that each is a SQuAD
v1.1 document; a file that is not is removed again, so only fetch.json (written
last) vouches for the directory.

prepare tokenises every paragraph once and every question (``dawnpipe.squad.text``)
and writes, per split, memory-mappable arrays: context and question word ids,
character ids and the *character span of every context token* (how a predicted
token span becomes answer text), the context of each question, per question
the exact-match features of its context tokens, and the token span of the first
answer (-1 where the answer cannot be aligned to tokens; such questions are not
trained on but are still evaluated). ``<split>_text.json`` keeps the texts and
all ground-truth answers for evaluation; ``vocab.json`` the words and characters
of the training set by descending count. manifest.json records shapes and the
sha256 of every array, like the image tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.data.arrays import load_array, save_array
from dawnpipe.data.files import fetch_files
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_json
from dawnpipe.progress import progress
from dawnpipe.squad.evaluate import EXPECTED_VERSION, iter_questions
from dawnpipe.squad.text import (
    MAX_CHARS,
    N_MATCH_FEATURES,
    SPECIALS,
    TOKENIZER,
    UNK,
    Vocabulary,
    answer_token_span,
    clamp_ids,
    count_words_and_chars,
    match_features,
    ordered,
    tokenize,
)
from dawnpipe.tasks.kind import DataKind

FORMAT = "squad-tokens-v1"


# ------------------------------------------------------------------ fetch
def read_squad(path: Path) -> dict[str, Any]:
    """Parse a SQuAD v1.1 JSON file; anything else is an error naming the file."""
    doc = read_json(path)
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != EXPECTED_VERSION:
        raise DawnpipeError(f"{path}: field 'version' is {version!r}, expected {EXPECTED_VERSION!r} (SQuAD v1.1)")
    return doc


def fetch_squad(spec_data: dict, dest: Path, cache: Path, source: str | None) -> dict[str, Any]:

    record = fetch_files(spec_data["files"], dest, cache, source, spec_data)
    for name in record:
        path = dest / name
        try:
            doc = read_squad(path)
            questions = sum(1 for _ in iter_questions(doc, str(path)))
        except DawnpipeError:
            path.unlink(missing_ok=True)  # verified bytes, but not data a later stage can use
            raise
        record[name].update(version=doc["version"], articles=len(doc["data"]), questions=questions)
        # the downloaded file's own text, shown escaped (a question id or version with an escape sequence)
        print(terminal_safe(f"fetch: {name}: SQuAD v{doc['version']}, {len(doc['data'])} articles, {questions} questions"))
    return record


# ------------------------------------------------------------------ prepare
def _flatten(parts: list[np.ndarray], dtype, width: int | None = None) -> np.ndarray:
    if parts:
        return np.concatenate(parts).astype(dtype, copy=False)
    return np.zeros((0,) if width is None else (0, width), dtype=dtype)


def _offsets(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def read_split(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Contexts (each paragraph once) and questions of one SQuAD file."""
    doc = read_squad(path)
    index: dict[str, int] = {}  # paragraph text -> context number (a paragraph is stored once)
    questions = []
    seen: set[str] = set()
    for qid, question, context, answers in iter_questions(doc, str(path)):
        if qid in seen:
            raise DawnpipeError(f"{path}: question id {qid} occurs twice")
        seen.add(qid)
        questions.append(
            {
                "id": qid,
                "question": question,
                "context": index.setdefault(context, len(index)),
                "answers": [a["text"] for a in answers],
                "answer_start": answers[0]["answer_start"],
            }
        )
    return list(index), questions


@dataclass
class TokenisedSplit:
    contexts: list[str]
    questions: list[dict[str, Any]]
    context_tokens: list[tuple[list[str], np.ndarray]]  # per context: tokens, character spans
    question_tokens: list[list[str]]


def tokenise_split(path: Path, split: str) -> TokenisedSplit:
    contexts, questions = read_split(path)
    if not questions:
        raise DawnpipeError(f"{path}: no questions")
    return TokenisedSplit(
        contexts,
        questions,
        [tokenize(c) for c in progress(contexts, desc=f"prepare {split}: contexts", unit="para")],
        [tokenize(q["question"])[0] for q in questions],
    )


def encode_split(path: Path, data: TokenisedSplit, vocab: Vocabulary, split: str) -> tuple[dict[str, np.ndarray], dict]:
    contexts, questions, c_tok, q_tok = data.contexts, data.questions, data.context_tokens, data.question_tokens
    answer_tokens = np.full((len(questions), 2), -1, dtype=np.int32)
    matches, unaligned, mismatched = [], [], []
    for i, q in enumerate(progress(questions, desc=f"prepare {split}: questions", unit="q")):
        context = contexts[q["context"]]
        tokens, spans = c_tok[q["context"]]
        matches.append(match_features(tokens, q_tok[i]))
        first, start = q["answers"][0], q["answer_start"]
        if context[start : start + len(first)] != first:
            mismatched.append(q["id"])
            continue
        span = answer_token_span(spans, start, start + len(first))
        if span is None:
            unaligned.append(q["id"])
        else:
            answer_tokens[i] = span
    c_lens = [len(t) for t, _ in c_tok]
    arrays = {
        "context_words": _flatten([vocab.word_ids(t) for t, _ in c_tok], np.int32),
        "context_chars": _flatten([vocab.char_ids(t) for t, _ in c_tok], np.uint16, MAX_CHARS),
        "context_spans": _flatten([s for _, s in c_tok], np.int32, 2),
        "context_offsets": _offsets(c_lens),
        "question_words": _flatten([vocab.word_ids(t) for t in q_tok], np.int32),
        "question_chars": _flatten([vocab.char_ids(t) for t in q_tok], np.uint16, MAX_CHARS),
        "question_offsets": _offsets([len(t) for t in q_tok]),
        "question_context": np.array([q["context"] for q in questions], dtype=np.int32),
        "answer_tokens": answer_tokens,
        "match": _flatten(matches, np.uint8, N_MATCH_FEATURES),
        "match_offsets": _offsets([c_lens[q["context"]] for q in questions]),
    }
    notes = {"answer_start_mismatch": mismatched[:20], "answer_start_mismatches": len(mismatched), "unaligned_answers": len(unaligned) + len(mismatched)}
    if mismatched:
        print(
            terminal_safe(
                f"prepare: note: {path}: {len(mismatched)} questions whose first answer is not at its answer_start "
                f"(e.g. id {mismatched[0]}); they are evaluated but not trained on"
            )
        )
    if unaligned:
        print(terminal_safe(f"prepare: note: {path}: {len(unaligned)} answers cover no token (e.g. id {unaligned[0]})"))
    return arrays, notes


def prepare_squad(task, raw: Path, out: Path) -> dict:

    splits_spec = task.data["splits"]
    data = {split: tokenise_split(raw / spec["file"], split) for split, spec in splits_spec.items()}
    for split, spec in splits_spec.items():
        if spec.get("questions") is not None and len(data[split].questions) != spec["questions"]:
            print(f"prepare: note: {split} has {len(data[split].questions)} questions (the official set has {spec['questions']})")

    # The vocabulary comes from the training split only.
    words, chars = count_words_and_chars([t for t, _ in data["train"].context_tokens] + data["train"].question_tokens)
    word_list, char_list = ordered(words), ordered(chars)[: np.iinfo(np.uint16).max + 1 - len(SPECIALS)]
    vocab = Vocabulary(tuple(SPECIALS + [w for w, _ in word_list]), tuple(SPECIALS + [c for c, _ in char_list]))
    write_json(
        out / "vocab.json",
        {
            "tokenizer": TOKENIZER,
            "built_from": "train",
            "lower_case_words": True,
            "max_chars": MAX_CHARS,
            "words": list(vocab.words),
            "word_counts": [0, 0] + [n for _, n in word_list],
            "chars": list(vocab.chars),
            "char_counts": [0, 0] + [n for _, n in char_list],
        },
    )

    manifest_splits = {}
    for split, tokenised in data.items():
        contexts, questions = tokenised.contexts, tokenised.questions
        arrays, notes = encode_split(raw / splits_spec[split]["file"], tokenised, vocab, split)
        unknown = float(np.mean(arrays["context_words"] == UNK)) if arrays["context_words"].size else 0.0
        write_json(
            out / f"{split}_text.json", {"contexts": contexts, "questions": [{k: q[k] for k in ("id", "question", "context", "answers")} for q in questions]}
        )
        manifest_splits[split] = {
            "questions": len(questions),
            "contexts": len(contexts),
            "context_tokens": int(arrays["context_words"].size),
            "unknown_word_fraction": unknown,
            **notes,
            "text": f"{split}_text.json",
            "arrays": {name: save_array(out / f"{split}_{name}.npy", a) for name, a in arrays.items()},
        }
        print(
            f"prepare: {split}: {len(questions)} questions on {len(contexts)} paragraphs, "
            f"{arrays['context_words'].size} context tokens ({100 * unknown:.1f}% outside the training vocabulary)"
        )
    return {
        "format": FORMAT,
        "tokenizer": TOKENIZER,
        "vocab": "vocab.json",
        "vocab_words": len(vocab.words),
        "vocab_chars": len(vocab.chars),
        "splits": manifest_splits,
    }


# ------------------------------------------------------------------ read back
@dataclass
class SquadSplit:
    """The first ``len(questions)`` questions of a prepared split (memory-mapped arrays)."""

    arrays: dict[str, np.ndarray]
    contexts: list[str]
    questions: list[dict[str, Any]]  # id, question, context (index), answers (texts)

    def __len__(self) -> int:
        return len(self.questions)

    def context_length(self, i: int) -> int:
        c = int(self.arrays["question_context"][i])
        return int(self.arrays["context_offsets"][c + 1] - self.arrays["context_offsets"][c])

    def example(self, i: int, n_words: int, n_chars: int) -> dict[str, np.ndarray]:
        """Question ``i`` as the reader's inputs (ids outside the kept vocabulary -> unknown)."""
        a = self.arrays
        c = int(a["question_context"][i])
        cs, ce = a["context_offsets"][c], a["context_offsets"][c + 1]
        qs, qe = a["question_offsets"][i], a["question_offsets"][i + 1]
        ms, me = a["match_offsets"][i], a["match_offsets"][i + 1]
        start, end = (int(x) for x in a["answer_tokens"][i])
        return {
            "c_words": clamp_ids(a["context_words"][cs:ce], n_words),
            "c_chars": clamp_ids(a["context_chars"][cs:ce], n_chars),
            "c_feat": a["match"][ms:me],
            "c_spans": a["context_spans"][cs:ce],
            "q_words": clamp_ids(a["question_words"][qs:qe], n_words),
            "q_chars": clamp_ids(a["question_chars"][qs:qe], n_chars),
            "start": start,
            "end": end,
        }

    def answer_text(self, i: int, first: int, last: int) -> str:
        """The context text of tokens first..last of question ``i``'s context."""
        a = self.arrays
        c = int(a["question_context"][i])
        spans = a["context_spans"][a["context_offsets"][c] : a["context_offsets"][c + 1]]
        if not (0 <= first <= last < len(spans)):
            return ""
        return self.contexts[c][spans[first, 0] : spans[last, 1]]


def load_vocab(prepared: Path) -> dict[str, Any]:
    return read_json(Path(prepared) / "vocab.json")


def load_squad(prepared: Path, split: str, limit: int | None = None) -> SquadSplit:
    """A prepared split, checked against manifest.json; ``limit`` keeps the first N questions
    (a prefix, so every seed and stage sees the same questions)."""
    prepared = Path(prepared)
    manifest = read_json(prepared / "manifest.json")
    if manifest.get("format") != FORMAT:
        raise DawnpipeError(f"{prepared / 'manifest.json'}: format {manifest.get('format')!r}, expected {FORMAT!r} (prepared SQuAD data)")
    if manifest.get("tokenizer") != TOKENIZER:
        raise DawnpipeError(f"{prepared / 'manifest.json'}: tokenised with {manifest.get('tokenizer')!r}, this dawnpipe uses {TOKENIZER!r}; prepare again")
    entry = manifest["splits"].get(split)
    if entry is None:
        raise DawnpipeError(f"{prepared / 'manifest.json'}: no split {split!r}")
    arrays = {}
    for name, meta in entry["arrays"].items():
        arr = load_array(prepared / meta["file"])
        if list(arr.shape) != meta["shape"]:
            raise DawnpipeError(f"{prepared / meta['file']}: shape {list(arr.shape)} disagrees with manifest.json ({meta['shape']})")
        arrays[name] = arr
    text = read_json(prepared / entry["text"])
    questions = text["questions"][:limit] if limit is not None else text["questions"]
    return SquadSplit(arrays=arrays, contexts=text["contexts"], questions=questions)


KIND = DataKind("squad", items="question", fetch=fetch_squad, prepare=prepare_squad)
