"""Checkpoints are read with weights_only=True (dawnpipe.checkpoint): tensors
and plain values load; a file that needs pickle is refused in one line naming
it, and nothing in it runs, through the library and through the commands
that take a checkpoint."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, run_cli, tool_env

from dawnpipe.checkpoint import load_checkpoint, save_checkpoint
from dawnpipe.errors import DawnpipeError


class Payload:
    """Runs a shell command when unpickled: what a hostile checkpoint would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (subprocess.call, (["touch", str(self.marker)],))


def hostile(path, marker) -> None:
    with open(path, "wb") as f:
        pickle.dump({"state_dict": {}, "threshold": 70.0, "payload": Payload(marker)}, f, protocol=2)  # torch.save's own protocol


def test_tensors_and_plain_values_round_trip(tmp_path):
    payload = {"state_dict": {"w": torch.ones(2, 3)}, "mean": [0.5], "rows": [{"epoch": 1, "hours": 0.1}], "name": "x", "none": None}
    save_checkpoint(tmp_path / "model.pt", payload)
    back = load_checkpoint(tmp_path / "model.pt")
    assert torch.equal(back["state_dict"]["w"], torch.ones(2, 3)) and back["rows"] == payload["rows"] and back["none"] is None


def test_a_file_that_needs_pickle_is_refused_and_runs_nothing(tmp_path):
    evil, marker = tmp_path / "evil.pt", tmp_path / "ran"
    hostile(evil, marker)
    with pytest.raises(DawnpipeError) as raised:
        load_checkpoint(evil)
    assert str(raised.value).startswith(f"{evil}: needs pickle to load") and "runs no code from a file" in str(raised.value)
    assert not marker.exists()


def test_a_file_that_is_no_checkpoint_is_named(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a zip, not a pickle")
    with pytest.raises(DawnpipeError, match=r"junk.pt: "):
        load_checkpoint(junk)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(DawnpipeError, match=r"list.pt: a checkpoint holds a mapping, not a list"):
        load_checkpoint(tmp_path / "list.pt")


def test_infer_refuses_a_hostile_checkpoint_in_one_line(tmp_path, prepared_fashion_mnist):
    evil, marker = tmp_path / "model.pt", tmp_path / "ran"
    hostile(evil, marker)
    (tmp_path / "run.json").write_text(
        '{"entry": "x", "seed": 0, "task": "fashion-mnist", "framework": "pytorch", "model": "m", "hardware": "local-cpu", '
        '"threshold": 70.0, "official_threshold": 93.0, "demo_threshold": true}'
    )
    proc = run_cli(
        "infer",
        "--checkpoint",
        str(evil),
        "--run-json",
        str(tmp_path / "run.json"),
        "--data",
        str(prepared_fashion_mnist),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(tmp_path / "latency.json"),
        "--items-parquet",
        str(tmp_path / "latency.parquet"),
        "--backends",
        "eager",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and not marker.exists()
    assert f"{evil}: needs pickle to load" in proc.stderr


def test_bench_latency_refuses_a_hostile_checkpoint(tmp_path):
    evil, marker = tmp_path / "model.pt", tmp_path / "ran"
    hostile(evil, marker)
    proc = subprocess.run([sys.executable, str(ROOT / "bench/latency.py"), str(evil)], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert proc.returncode == 1 and not marker.exists() and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("bench/latency: error: ") and f"{evil}: needs pickle to load" in line


@pytest.mark.parametrize(
    "change, field, says",
    [
        ({"model_args": [8, 16]}, "model_args", "expected a mapping, got list [8, 16]"),
        ({"model_args": {"widths": "abc"}}, "model_args.widths", "expected a list, got str 'abc'"),
        ({"in_channels": "1"}, "in_channels", "expected a whole number, got str '1'"),
        ({"mean": "zz"}, "mean", "expected a list, got str 'zz'"),
        ({"mean": [0.29, 0.29]}, "mean", "2 values for 1 input channel"),
        ({"tta_flip": 1}, "tta_flip", "expected true or false, got int 1"),
        ({"model": "nosuch"}, "model", "unknown PyTorch model 'nosuch'"),
        ({"model": "resnet21", "model_args": {}}, "model", "a basic CIFAR ResNet needs depth = 6n + 2, not 21"),
        ({"state_dict": {"w": torch.zeros(1)}}, "state_dict", "missing features.0.weight"),
        ({"state_dict": [1]}, "state_dict", "expected a mapping of names to tensors"),
        ({"threshold": None}, "threshold", "expected a number, got null"),
    ],
)
def test_a_checkpoint_with_a_bad_field_is_named_before_a_model_is_built(tmp_path, change, field, says):
    """A checkpoint from elsewhere (dvc pull, bench/latency.py CHECKPOINT)
    whose plain values or weights do not make the model they describe: one
    line naming the file and the field, through the library and the bench
    script (which used to stop with exit 70 on a TypeError or KeyError)."""
    from infer_fixtures import make_checkpoint

    from dawnpipe.infer import torch_model as tm

    good = make_checkpoint(tmp_path / "good.pt")
    bad = tmp_path / "bad.pt"
    torch.save(torch.load(good, weights_only=True) | change, bad)
    with pytest.raises(DawnpipeError) as raised:
        tm.load_checkpoint(bad)
    assert str(raised.value).startswith(f"{bad}: field '{field}': {says}"), str(raised.value)
    proc = subprocess.run([sys.executable, str(ROOT / "bench/latency.py"), str(bad)], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"bench/latency: error: {bad}: field '{field}': {says}"), line
    tm.load_checkpoint(good)  # the same file unchanged loads: the check is of the change


def reader_checkpoint(path, **change):
    """A SQuAD reader checkpoint as the trainer writes it (random weights, a tiny vocabulary)."""
    from dawnpipe.models.squad_reader import build_reader
    from dawnpipe.squad.text import TOKENIZER

    words, chars = ["<pad>", "<unk>", "the", "a"], ["<pad>", "<unk>", "t", "h", "e"]
    args = {"embedding_dim": 8, "char_dim": 4, "char_filters": 4, "hidden": 6, "layers": 1}
    ckpt = {
        "model": "drqa",
        "model_args": args,
        "reader": {"max_answer_tokens": 15},
        "tokenizer": TOKENIZER,
        "vocab_words": words,
        "vocab_chars": chars,
        "precision": "fp32",
        "threshold": 0.75,
        "state_dict": build_reader("drqa", len(words), len(chars), **args).state_dict(),
    }
    torch.save(ckpt | change, path)
    return path


@pytest.mark.parametrize(
    "change, field, says",
    [
        ({"vocab_words": "the a"}, "vocab_words", "expected a list, got str 'the a'"),
        ({"reader": {}}, "reader.max_answer_tokens", "missing"),
        ({"precision": "fp8"}, "precision", "expected one of fp32, bf16, fp16, got str 'fp8'"),
        ({"model_args": {"hiden": 6}}, "model_args", "model drqa: bad model_args (DrQAReader.__init__() got an unexpected keyword argument 'hiden')"),
        ({"model_args": {"hidden": -6}}, "model_args", "model drqa: "),
        ({"vocab_words": ["<pad>", "<unk>", "the"]}, "state_dict", "embedding.weight has shape (4, 8), not (3, 8)"),
    ],
)
def test_a_reader_checkpoint_with_a_bad_field_is_named(tmp_path, change, field, says):
    from dawnpipe.infer.squad_predictor import load_reader_checkpoint

    bad = reader_checkpoint(tmp_path / "bad.pt", **change)
    with pytest.raises(DawnpipeError) as raised:
        load_reader_checkpoint(bad)
    assert str(raised.value).startswith(f"{bad}: field '{field}': {says}"), str(raised.value)
    assert load_reader_checkpoint(reader_checkpoint(tmp_path / "good.pt"))["model"] == "drqa"
