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
