"""squad-eval: exact match and F1 of SQuAD v1.1 predictions, as the official
script ``evaluate-v1.1.py`` computes and prints them.

    dawnpipe squad-eval dev-v1.1.json predictions.json
    {"exact_match": 81.2, "f1": 88.5}

``predictions.json`` maps question id -> answer text. Answers are normalised
as the official script does (in this order: lower case, ASCII punctuation
removed, the articles a/an/the removed, whitespace collapsed); a prediction
scores the maximum over the question's ground-truth answers; scores are
averaged over *all* questions of the data set (an unanswered question scores
0, with a note on stderr, like the official script) and printed in percent.
The training log and the leaderboard use F1 as a 0..1 fraction
(docs/rules.md#tasks-and-thresholds).

The official quirks are kept on purpose, so numbers agree with published
ones: an answer that normalises to nothing (say "the") is an exact match for
another such answer but has F1 0; punctuation outside ASCII is kept.
"""

from __future__ import annotations

import json
import re
import string
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json

EXPECTED_VERSION = "1.1"
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, remove punctuation, articles and extra whitespace (official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1_score(prediction: str, ground_truth: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    truth_tokens = normalize_answer(ground_truth).split()
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def best_over_ground_truths(metric, prediction: str, ground_truths: Iterable[str]) -> float:
    return max(metric(prediction, truth) for truth in ground_truths)


def score_answer(prediction: str, ground_truths: list[str]) -> tuple[float, float]:
    """(exact match, F1) of one answer, each 0 or 1 / in 0..1."""
    return (best_over_ground_truths(exact_match_score, prediction, ground_truths), best_over_ground_truths(f1_score, prediction, ground_truths))


def iter_questions(dataset: dict[str, Any], source: str) -> Iterator[tuple[str, str, str, list[dict[str, Any]]]]:
    """(id, question, context, answers) of every question of a SQuAD v1.1 JSON
    document, checking the structure on the way (errors name the JSON path)."""
    articles = dataset.get("data") if isinstance(dataset, dict) else None
    if not isinstance(articles, list):
        raise DawnpipeError(f"{source}: not a SQuAD file (expected an object with a 'data' list)")
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DawnpipeError(f"{source}: data[{a}]: expected an object with a 'paragraphs' list")
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str) or not isinstance(paragraph.get("qas"), list):
                raise DawnpipeError(f"{source}: {where}: expected an object with a 'context' string and a 'qas' list")
            for q, qa in enumerate(paragraph["qas"]):
                qwhere = f"{where}.qas[{q}]"
                if not isinstance(qa, dict) or not isinstance(qa.get("id"), str) or not isinstance(qa.get("question"), str):
                    raise DawnpipeError(f"{source}: {qwhere}: expected an object with 'id' and 'question' strings")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not answers:
                    raise DawnpipeError(f"{source}: {qwhere} (id {qa['id']}): 'answers' must be a non-empty list (SQuAD v1.1 has no unanswerable questions)")
                for n, answer in enumerate(answers):
                    if (
                        not isinstance(answer, dict)
                        or not isinstance(answer.get("text"), str)
                        or not isinstance(answer.get("answer_start"), int)
                        or isinstance(answer.get("answer_start"), bool)
                    ):
                        raise DawnpipeError(f"{source}: {qwhere}.answers[{n}] (id {qa['id']}): expected 'text' (string) and 'answer_start' (integer)")
                yield qa["id"], qa["question"], paragraph["context"], answers


def check_version(dataset: dict[str, Any], source: str) -> str | None:
    """A note (like the official script's) when the file is not SQuAD v1.1; None if it is."""
    version = dataset.get("version") if isinstance(dataset, dict) else None
    if version != EXPECTED_VERSION:
        return f"{source}: evaluation expects v-{EXPECTED_VERSION}, but got dataset with v-{version}"
    return None


def evaluate(dataset: dict[str, Any], predictions: dict[str, str], *, source: str = "dataset", warn=None) -> dict[str, float]:
    """The official v1.1 evaluation: {"exact_match": percent, "f1": percent}."""
    exact = f1 = 0.0
    total = 0
    for qid, _, _, answers in iter_questions(dataset, source):
        total += 1
        if qid not in predictions:
            if warn is not None:
                warn(f"Unanswered question {qid} will receive score 0.")
            continue
        em, f = score_answer(predictions[qid], [a["text"] for a in answers])
        exact += em
        f1 += f
    if total == 0:
        raise DawnpipeError(f"{source}: no questions to evaluate")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def read_predictions(path: Path) -> dict[str, str]:
    predictions = read_json(path)
    if not isinstance(predictions, dict):
        raise DawnpipeError(f"{path}: expected an object mapping question id -> answer text, got {type(predictions).__name__}")
    for qid, answer in predictions.items():
        if not isinstance(answer, str):
            raise DawnpipeError(f"{path}: question {qid}: the answer must be a string, got {type(answer).__name__}")
    return predictions


def configure(p) -> None:
    p.add_argument("data", type=Path, help="SQuAD v1.1 data file, e.g. dev-v1.1.json")
    p.add_argument("predictions", type=Path, help="JSON object: question id -> predicted answer text")


def run(args) -> int:
    dataset = read_json(args.data)
    note = check_version(dataset, str(args.data))
    if note:
        print(terminal_safe(note), file=sys.stderr)
    predictions = read_predictions(args.predictions)
    result = evaluate(dataset, predictions, source=str(args.data), warn=lambda m: print(terminal_safe(m), file=sys.stderr))
    print(json.dumps(result))
    return 0
