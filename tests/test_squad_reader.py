"""The DrQA-style reader's parts: span decoding worked out by hand, padding that
changes nothing, and the hook for local pretrained embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dawnpipe.errors import DawnpipeError
from dawnpipe.models.squad_reader import DrQAReader, best_spans, build_reader
from dawnpipe.squad.text import pad_batch
from dawnpipe.train.squad_trainer import load_pretrained

NEG = -1e30


def test_best_span_respects_order_and_length():
    # Scores s_i + e_j by hand (each row's log-softmax constants are shared by all pairs):
    start = torch.tensor(
        [
            [0.0, 5.0, 0.0, 0.0, NEG],  # (1, 3) = 11: best start and end, 3 tokens long
            [1.0, 0.0, 0.0, 0.0, 0.0],  # (0, 4) = 10 is 5 tokens long; (2, 4) = 9 wins
            [0.0, 0.0, 0.0, 4.0, 0.0],
        ]
    )  # (3, 1) = 7 ends before it starts; (3, 3) = 5 wins
    end = torch.tensor([[0.0, 0.0, 0.0, 6.0, NEG], [0.0, 0.0, 0.0, 0.0, 9.0], [0.0, 3.0, 0.0, 1.0, 0.0]])
    first, last = best_spans(start, end, 3)
    assert first.tolist() == [1, 2, 3] and last.tolist() == [3, 4, 3]
    first, last = best_spans(start, end, 5)
    assert first.tolist() == [1, 0, 3] and last.tolist() == [3, 4, 3]


def tiny_reader(seed=0) -> DrQAReader:
    torch.manual_seed(seed)
    return DrQAReader(30, 12, embedding_dim=8, char_dim=4, char_filters=6, char_kernel=3, hidden=5, layers=2, dropout=0.2).eval()


def example(rng, c_len, q_len):
    return {
        "c_words": rng.integers(2, 30, c_len),
        "c_chars": rng.integers(0, 12, (c_len, 16)),
        "c_feat": rng.integers(0, 2, (c_len, 2)).astype(np.uint8),
        "q_words": rng.integers(2, 30, q_len),
        "q_chars": rng.integers(0, 12, (q_len, 16)),
    }


def run(model, examples):
    t = {k: torch.from_numpy(v) for k, v in pad_batch(examples).items()}
    with torch.inference_mode():
        return model(t["c_words"], t["c_chars"], t["c_feat"], t["c_mask"], t["q_words"], t["q_chars"], t["q_mask"])


def test_padding_changes_nothing():
    """A question answered alone scores its tokens as in a padded batch (packed
    LSTMs, masked attention), and padding never gets probability."""
    rng = np.random.default_rng(0)
    short, long = example(rng, 6, 3), example(rng, 11, 5)
    model = tiny_reader()
    alone_start, alone_end = run(model, [short])
    batch_start, batch_end = run(model, [short, long])
    assert torch.allclose(alone_start[0], batch_start[0, :6], atol=1e-5)
    assert torch.allclose(alone_end[0], batch_end[0, :6], atol=1e-5)
    assert (batch_start[0, 6:] == NEG).all()
    first, last = best_spans(batch_start, batch_end, 15)
    assert last[0] < 6


def test_unknown_model_args_are_an_error():
    with pytest.raises(DawnpipeError, match="bad model_args"):
        build_reader("drqa", 10, 10, hiden=4)
    with pytest.raises(DawnpipeError, match="unknown SQuAD reader model 'bidaff'"):
        build_reader("bidaff", 10, 10)


def test_pretrained_embeddings_from_a_local_glove_file(tmp_path):
    glove = tmp_path / "vectors.txt"
    glove.write_text(
        "3 4\n"  # word2vec-style header: skipped
        "The 1 2 3 4\n"  # matched lower-cased
        "cat 0.5 0.5 0.5 0.5\n"
        "zebra 9 9 9 9\n"  # not in the vocabulary
        "cat 7 7 7 7\n",
        encoding="utf-8",
    )  # a second vector of a word: the first wins
    embedding = torch.nn.Embedding(4, 4)
    before = embedding.weight[3].detach().clone()
    info = load_pretrained(str(glove), ("<pad>", "<unk>", "the", "cat"), embedding)
    assert embedding.weight[2].tolist() == [1, 2, 3, 4] and embedding.weight[3].tolist() == [0.5] * 4
    assert not torch.equal(before, embedding.weight[3])
    assert info["words_found"] == 2 and info["vocabulary_words"] == 2 and len(info["sha256"]) == 64

    glove.write_text("the 1 2 3\n", encoding="utf-8")
    with pytest.raises(DawnpipeError, match=r"vectors.txt: line 1: 3 numbers, but embedding_dim is 4"):
        load_pretrained(str(glove), ("<pad>", "<unk>", "the"), embedding)
    with pytest.raises(DawnpipeError, match="no such file"):
        load_pretrained(str(tmp_path / "missing.txt"), ("<pad>", "<unk>"), embedding)
