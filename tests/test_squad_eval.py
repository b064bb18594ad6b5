"""The official SQuAD v1.1 metric, against values worked out by hand, and the
`dawnpipe squad-eval` command that prints it like the official script."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from dawnpipe.squad.evaluate import evaluate, exact_match_score, f1_score, normalize_answer, score_answer


@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The  Quick, brown-fox!", "quick brownfox"),  # article, punctuation (hyphen joins), double space
        ("an apple a day", "apple day"),  # every article, wherever it stands
        ("Theater of anagrams", "theater of anagrams"),  # articles only as whole words
        ("A", ""),  # nothing left
        ("  \tDenver\n Broncos ", "denver broncos"),  # any whitespace collapses
        ("São Paulo—Brazil", "são paulo—brazil"),  # non-ASCII punctuation is kept (official quirk)
        ("the.the", "thethe"),  # punctuation goes first, then articles
        ("", ""),
    ],
)
def test_normalize_answer(text, normalised):
    assert normalize_answer(text) == normalised


@pytest.mark.parametrize(
    "prediction, truth, em, f1",
    [
        ("the cat sat", "cat sat on mat", 0.0, 2 / 3),  # P = 2/2, R = 2/4
        ("cat cat cat", "cat", 0.0, 0.5),  # overlap counts repeats once: P = 1/3, R = 1
        ("Denver Broncos!", "the denver broncos", 1.0, 1.0),
        ("", "Paris", 0.0, 0.0),  # empty prediction
        ("the", "a", 1.0, 0.0),  # both normalise to "": exact match yet F1 0 (official)
        ("Paris France", "France, Paris", 0.0, 1.0),  # F1 ignores order
    ],
)
def test_exact_match_and_f1(prediction, truth, em, f1):
    assert exact_match_score(prediction, truth) == em
    assert f1_score(prediction, truth) == pytest.approx(f1, abs=1e-12)


def test_best_over_several_ground_truths():
    # vs "Denver Broncos": P = 1/2, R = 1/2 -> 0.5; vs "Broncos": P = 1/2, R = 1 -> 2/3
    assert score_answer("Broncos team", ["Denver Broncos", "Broncos"]) == (0.0, pytest.approx(2 / 3))
    assert score_answer("broncos", ["Denver Broncos", "The Broncos"]) == (1.0, 1.0)


def squad_doc(*questions) -> dict:
    """A v1.1 document: one article, one paragraph per question (id, [answers])."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {"context": " ".join(answers), "qas": [{"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0} for a in answers]}]}
                    for qid, answers in questions
                ],
            }
        ],
    }


DOC = squad_doc(("q1", ["Denver Broncos", "The Denver Broncos"]), ("q2", ["cat sat on mat"]), ("q3", ["a"]), ("q4", ["x"]))
PREDICTIONS = {"q1": "the denver broncos!", "q2": "The cat sat", "q3": "the"}  # q4 unanswered
# EM: 1 + 0 + 1 + 0 of 4 = 50%; F1: 1 + 2/3 + 0 + 0 of 4 = 41.67%
EXPECTED = {"exact_match": 50.0, "f1": 100 * (1 + 2 / 3) / 4}


def test_evaluate_averages_over_all_questions():
    notes = []
    result = evaluate(DOC, PREDICTIONS, warn=notes.append)
    assert result == {"exact_match": 50.0, "f1": pytest.approx(EXPECTED["f1"], rel=1e-12)}
    assert notes == ["Unanswered question q4 will receive score 0."]


def test_squad_eval_command_prints_the_official_json(tmp_path):
    data, preds = tmp_path / "dev.json", tmp_path / "predictions.json"
    data.write_text(json.dumps(DOC))
    preds.write_text(json.dumps(PREDICTIONS))
    proc = run_cli("squad-eval", str(data), str(preds), check=True)
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith('{"exact_match": 50.0, "f1": 41.66')
    result = json.loads(proc.stdout)
    assert list(result) == ["exact_match", "f1"] and result["f1"] == pytest.approx(EXPECTED["f1"], rel=1e-12)
    assert "Unanswered question q4 will receive score 0." in proc.stderr


def test_squad_eval_notes_another_version_but_still_scores(tmp_path):
    data, preds = tmp_path / "dev.json", tmp_path / "predictions.json"
    data.write_text(json.dumps({**DOC, "version": "2.0"}))
    preds.write_text(json.dumps({"q1": "Denver Broncos", "q2": "", "q3": "", "q4": "x"}))
    proc = run_cli("squad-eval", str(data), str(preds), check=True)
    assert "expects v-1.1, but got dataset with v-2.0" in proc.stderr
    assert json.loads(proc.stdout) == {"exact_match": 75.0, "f1": 50.0}  # q3: "" vs "a" is an exact match, F1 0


@pytest.mark.parametrize(
    "data, predictions, message",
    [
        (DOC, ["not", "a", "mapping"], "predictions.json: expected an object mapping question id -> answer text, got list"),
        (DOC, {"q1": 3}, "predictions.json: question q1: the answer must be a string, got int"),
        ({"version": "1.1", "articles": []}, {}, "dev.json: not a SQuAD file"),
        (squad_doc(("q1", [])), {}, "dev.json: data[0].paragraphs[0].qas[0] (id q1): 'answers' must be a non-empty list"),
    ],
)
def test_squad_eval_bad_input_is_a_clear_error(tmp_path, data, predictions, message):
    (tmp_path / "dev.json").write_text(json.dumps(data))
    (tmp_path / "predictions.json").write_text(json.dumps(predictions))
    proc = run_cli("squad-eval", str(tmp_path / "dev.json"), str(tmp_path / "predictions.json"))
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
