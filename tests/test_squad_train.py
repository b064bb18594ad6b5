"""Train the small SQuAD reader for real on a generated SQuAD v1.1 pair, then
measure it one question at a time: the logs follow the DAWNBench v1 format (F1
as a 0..1 fraction), the checkpoint is the first epoch at the threshold, and
inference, training-time evaluation and `dawnpipe squad-eval` agree on F1."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from conftest import ROOT, run_cli, train_command
from squad_synth import write_expect, write_squad_files

from dawnpipe.pipeline.values import train_settings

pytestmark = pytest.mark.slow
ENTRY = ROOT / "config" / "entries" / "drqa-small.yaml"
THRESHOLD = 0.7


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("squad-train")
    paths = write_squad_files(work / "generated")
    expect = write_expect(paths, work / "expect.yaml")
    run_cli("fetch", "squad", "--dest", str(work / "raw"), "--source", str(work / "generated"), "--expect", str(expect), check=True)
    run_cli("prepare", "squad", "--raw", str(work / "raw"), "--out", str(work / "prepared"), check=True)
    run = work / "run"
    settings = train_settings(THRESHOLD, stop_at_threshold=True)
    proc = run_cli(*train_command(ENTRY, work / "prepared", run, settings=settings, threads=1), check=True)
    return work, run, proc


def test_training_log_and_checkpoint(trained):
    work, run, proc = trained
    tsv = (run / "train.tsv").read_text()
    assert tsv.splitlines()[0] == "epoch\thours\tf1Score"
    log = pd.read_csv(run / "train.tsv", sep="\t")
    assert log["f1Score"].between(0, 1).all() and log["hours"].is_monotonic_increasing
    reached = log.index[log["f1Score"] >= THRESHOLD]
    assert len(reached) == 1 and reached[0] == len(log) - 1, "stops at the first epoch at the threshold"

    full = pd.read_parquet(run / "train.parquet")
    assert full["exact_match"].between(0, 1).all() and (full["exact_match"] <= full["f1Score"] + 1e-12).all()
    assert (full["hours"] <= full["wall_hours"]).all() and (full["eval_seconds"] > 0).all()
    assert full["f1Score"].tolist() == pytest.approx(log["f1Score"].tolist(), abs=1e-9)

    info = json.loads((run / "run.json").read_text())
    assert info["task"] == "squad" and info["demo_threshold"] is True and info["official_threshold"] == 0.75
    assert info["result"]["reached"] and info["result"]["threshold_epoch"] == len(log)
    assert info["result"]["train_items"] == 240 and info["result"]["test_items"] == 48
    assert info["environment"]["framework"] == "pytorch" and info["environment"]["threads"] == 1
    if len(log) < info["settings"]["entry"]["hyperparameters"]["epochs"]:
        assert info["result"]["stopped_at_threshold"] and "stopping at the threshold" in proc.stdout

    ckpt = torch.load(run / "model.pt", map_location="cpu", weights_only=True)  # plain values and tensors only
    assert ckpt["reached_threshold"] and ckpt["epoch"] == len(log)
    assert ckpt["metric_value"] == pytest.approx(log["f1Score"].iloc[-1], abs=1e-9)
    assert not (run / ".work").exists()


def test_inference_one_question_at_a_time_agrees_with_training_and_squad_eval(trained, tmp_path):
    work, run, _ = trained
    out = tmp_path / "latency.json"
    run_cli(
        "infer",
        "--checkpoint",
        str(run / "model.pt"),
        "--run-json",
        str(run / "run.json"),
        "--data",
        str(work / "prepared"),
        "--prices",
        str(ROOT / "config" / "prices.yaml"),
        "--out",
        str(out),
        "--items-parquet",
        str(tmp_path / "latency.parquet"),
        "--threads",
        "1",
        "--warmup",
        "3",
        "--throughput-batches",
        "1",
        "8",
        "64",
        "--throughput-seconds",
        "0.1",
        check=True,
    )
    latency = json.loads(out.read_text())
    # questions answered a batch at a time (padded): throughput, and whether padding changed any answer
    assert list(latency["throughput_items_per_second"]) == ["1", "8", "64"] and latency["throughput"]["1"]["answers_differing"] == 0
    assert all(0 <= d["answers_differing"] <= 48 for d in latency["throughput"].values())
    ckpt_f1 = pd.read_csv(run / "train.tsv", sep="\t")["f1Score"].iloc[-1]
    # from raw text (tokenised per question) the model answers exactly as in its training-time evaluation
    assert latency["accuracy"] == pytest.approx(ckpt_f1, abs=1e-9)
    assert latency["items"] == 48 and latency["warmup_items"] == 3 and latency["meets_threshold"]
    assert 0 < latency["latency_p50_ms"] <= latency["latency_p99_ms"] <= latency["latency_max_ms"]

    items = pd.read_parquet(tmp_path / "latency.parquet")
    assert len(items) == 48 and (items["latency_ms"] > 0).all()
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(dict(zip(items["id"], items["answer"]))))
    official = json.loads(run_cli("squad-eval", str(work / "raw" / "dev-v1.1.json"), str(predictions), check=True).stdout)
    assert official["f1"] == pytest.approx(100 * latency["accuracy"], abs=1e-9)
    assert official["exact_match"] == pytest.approx(100 * latency["exact_match"], abs=1e-9)


def test_extract_handles_f1_as_a_fraction(trained, tmp_path):
    _, run, _ = trained
    prices = str(ROOT / "config" / "prices.yaml")
    args = ["--tsv", str(run / "train.tsv"), "--log-parquet", str(run / "train.parquet"), "--prices", prices]
    run_cli("extract", *args, "--run-json", str(run / "run.json"), "--out", str(tmp_path / "tta.json"), check=True)
    tta = json.loads((tmp_path / "tta.json").read_text())
    log = pd.read_csv(run / "train.tsv", sep="\t")
    assert tta["reached"] and tta["epochs_to_accuracy"] == len(log) and tta["metric"] == "f1Score"
    assert tta["time_to_accuracy_hours"] == pytest.approx(log["hours"].iloc[-1])

    harder = json.loads((run / "run.json").read_text()) | {"threshold": 0.99}  # a threshold the log never reaches
    (tmp_path / "run.json").write_text(json.dumps(harder))
    shutil.copy(run / "train.tsv", tmp_path / "train.tsv")
    run_cli("extract", *args, "--run-json", str(tmp_path / "run.json"), "--out", str(tmp_path / "dnc.json"), check=True)
    dnc = json.loads((tmp_path / "dnc.json").read_text())
    assert not dnc["reached"] and dnc["time_to_accuracy_hours"] is None
    assert f"best f1Score {log['f1Score'].max():.4f} < 0.9900" in dnc["reason"]
