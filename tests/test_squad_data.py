"""SQuAD data: tokenisation with character offsets, fetch from a real HTTP
server on 127.0.0.1 (verified, a checksum mismatch refused, a file that is not
SQuAD v1.1 refused), and prepare (answers map back to their text, the
vocabulary comes from train only, the predictor's encoding equals the stored one)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import yaml
from conftest import run_cli
from local_http import serve
from squad_synth import squad_document, write_expect, write_squad_files

from dawnpipe.data.fetch import fetch
from dawnpipe.data.prepare import prepare
from dawnpipe.data.squad import load_squad, load_vocab
from dawnpipe.errors import DawnpipeError
from dawnpipe.squad.text import UNK, Vocabulary, answer_token_span, encode, kept_size, match_features, tokenize


def test_tokens_keep_their_character_spans():
    text = "In 1871, São Paulo's mayor—Ada Moreau—paid $1,000."
    tokens, spans = tokenize(text)
    assert tokens == ["In", "1871", ",", "São", "Paulo", "'", "s", "mayor", "—", "Ada", "Moreau", "—", "paid", "$", "1", ",", "000", "."]
    assert [text[s:e] for s, e in spans] == tokens
    # the characters of "$1,000" are tokens 13..16; a span inside a token still selects it
    assert answer_token_span(spans, text.index("$"), text.index("$") + 6) == (13, 16)
    assert answer_token_span(spans, text.index("Paulo") + 1, text.index("Paulo") + 3) == (4, 4)
    assert answer_token_span(spans, 2, 3) is None  # only the space between "In" and "1871"


def test_match_features_and_vocabulary():
    assert match_features(["The", "cat", "the", "Dog"], ["the", "dog", "?"]).tolist() == [[0, 1], [0, 0], [1, 1], [0, 1]]
    vocab = Vocabulary(("<pad>", "<unk>", "the", "cat"), ("<pad>", "<unk>", "t", "a"))
    assert vocab.word_ids(["The", "CAT", "dog"]).tolist() == [2, 3, UNK]
    assert vocab.char_ids(["ta", "x"])[:, :3].tolist() == [[2, 3, 0], [UNK, 0, 0]]
    # ids are ordered by count: keeping the frequent words is a prefix
    assert kept_size([0, 0, 9, 5, 2, 1], max_size=None, min_count=2) == 5
    assert kept_size([0, 0, 9, 5, 2, 1], max_size=4, min_count=1) == 4


@pytest.fixture()
def squad_files(tmp_path):
    paths = write_squad_files(tmp_path / "generated")
    return {name: p.read_bytes() for name, p in paths.items()}, write_expect(paths, tmp_path / "expect.yaml")


def test_fetch_over_http_and_prepare(tmp_path, squad_files):
    files, expect = squad_files
    dest = tmp_path / "raw"
    with serve(files) as (url, log):
        fetch("squad", dest, source=url, cache=tmp_path / "cache", expect=expect)
    assert sorted(n for n, _ in log) == ["dev-v1.1.json", "train-v1.1.json"]
    record = json.loads((dest / "fetch.json").read_text())["files"]
    assert record["train-v1.1.json"]["questions"] == 240 and record["dev-v1.1.json"]["questions"] == 48
    assert record["dev-v1.1.json"]["version"] == "1.1" and record["dev-v1.1.json"]["origin"] == url + "dev-v1.1.json"

    out = prepare("squad", dest, tmp_path / "prepared")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "squad-tokens-v1" and manifest["splits"]["train"]["unaligned_answers"] == 0
    vocab = load_vocab(out)
    n_words, n_chars = len(vocab["words"]), len(vocab["chars"])

    train = load_squad(out, "train")
    raw_train = json.loads(files["train-v1.1.json"])
    firsts = {qa["id"]: qa["answers"][0]["text"] for art in raw_train["data"] for par in art["paragraphs"] for qa in par["qas"]}
    for i, q in enumerate(train.questions):  # every token span maps back to the exact answer text
        start, end = train.arrays["answer_tokens"][i]
        assert train.answer_text(i, int(start), int(end)) == firsts[q["id"]]

    # the vocabulary is built from train only: dev-only words are unknown in the dev arrays
    train_words = {t.lower() for c in train.contexts for t in tokenize(c)[0]} | {t.lower() for q in train.questions for t in tokenize(q["question"])[0]}
    assert set(vocab["words"][2:]) == train_words
    dev = load_squad(out, "dev")
    dev_only = {t.lower() for c in dev.contexts for t in tokenize(c)[0]} - train_words
    assert dev_only, "the generated dev set should contain words the training set lacks"
    assert float(np.mean(dev.arrays["context_words"] == UNK)) > 0

    # several ground truths per dev question are kept for the metric
    assert any(len(q["answers"]) == 2 for q in dev.questions)
    # the predictor's encoding of raw text equals what prepare stored
    voc = Vocabulary(tuple(vocab["words"]), tuple(vocab["chars"]))
    for i in (0, 7, len(dev) - 1):
        q = dev.questions[i]
        live, stored = encode(voc, q["question"], dev.contexts[q["context"]]), dev.example(i, n_words, n_chars)
        for key in ("c_words", "c_chars", "c_feat", "c_spans", "q_words", "q_chars"):
            assert np.array_equal(live[key], stored[key]), key

    assert len(load_squad(out, "dev", limit=5)) == 5  # a prefix of the questions


def test_checksum_mismatch_is_refused_and_leaves_nothing(tmp_path, squad_files):
    files, expect = squad_files
    spec = yaml.safe_load(expect.read_text())
    wrong = "0" * 64
    spec["files"]["dev-v1.1.json"]["sha256"] = wrong
    bad_expect = tmp_path / "bad-expect.yaml"
    bad_expect.write_text(yaml.safe_dump(spec))
    dest = tmp_path / "raw"
    with serve(files) as (url, log):
        proc = run_cli("fetch", "squad", "--dest", str(dest), "--source", url, "--cache", str(tmp_path / "cache"), "--expect", str(bad_expect))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    actual = hashlib.sha256(files["dev-v1.1.json"]).hexdigest()
    assert "dev-v1.1.json" in proc.stderr and wrong in proc.stderr and actual in proc.stderr
    assert [n for n, _ in log].count("dev-v1.1.json") == 2  # downloaded again once before giving up
    assert not (dest / "dev-v1.1.json").exists() and not (dest / "fetch.json").exists()
    assert not (tmp_path / "cache").exists()  # no partial left to resume from, so no empty directory either
    with pytest.raises(DawnpipeError, match="fetch.json"):
        prepare("squad", dest, tmp_path / "prepared")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda doc: doc.update(version="2.0"), "field 'version' is '2.0', expected '1.1'"),
        (lambda doc: doc["data"][1]["paragraphs"][0]["qas"][2]["answers"][0].pop("answer_start"), "data[1].paragraphs[0].qas[2].answers[0]"),
        (lambda doc: doc["data"][0]["paragraphs"][1].pop("context"), "data[0].paragraphs[1]: expected an object with a 'context' string"),
    ],
)
def test_a_file_that_is_not_squad_v1_1_is_refused(tmp_path, mutate, message):
    """Checksums can vouch for a wrong file (a mirror's --expect): fetch checks the format too."""
    src = tmp_path / "src"
    paths = write_squad_files(src, train_articles=3, dev_articles=2)
    doc = squad_document(3, 2, seed=1)
    mutate(doc)
    paths["train-v1.1.json"].write_text(json.dumps(doc))
    expect = write_expect(paths, tmp_path / "expect.yaml")
    dest = tmp_path / "raw"
    proc = run_cli("fetch", "squad", "--dest", str(dest), "--source", str(src), "--expect", str(expect))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "train-v1.1.json" in proc.stderr and message in proc.stderr
    assert not (dest / "train-v1.1.json").exists() and not (dest / "fetch.json").exists()
