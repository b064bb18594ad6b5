"""The infer command end to end (real subprocess, real backends): the accuracy
gate, the result record and per-item table, cost, and clear errors; then the
report turning results into leaderboard rows and exclusions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from infer_fixtures import make_checkpoint, make_prepared, make_run_json, random_items

ITEMS = 120


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("infer")
    images, labels = random_items(ITEMS, seed=3)
    return {"root": root, "data": make_prepared(root / "prepared", images, labels), "checkpoint": make_checkpoint(root / "model.pt", epoch=4, reached=True)}


def infer(tiny, backend: str, threshold: float, extra: tuple[str, ...] = ()):
    out = tiny["root"] / f"{backend}-{threshold:g}-{len(extra)}"
    run_json = make_run_json(out / "run.json", threshold=threshold)
    proc = run_cli(
        "infer",
        "--backend",
        backend,
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--run-json",
        str(run_json),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(out / "latency" / f"{backend}.json"),
        "--items-parquet",
        str(out / "latency" / f"{backend}.parquet"),
        "--warmup",
        "7",
        "--throughput-seconds",
        "0.05",
        *extra,
    )
    return proc, out / "latency" / f"{backend}.json"


def reference_accuracy(tiny) -> float:
    from dawnpipe.infer import torch_model as tm

    images, labels = np.load(tiny["data"] / "test_images.npy"), np.load(tiny["data"] / "test_labels.npy")
    logits = tm.reference_logits(tm.load_checkpoint(tiny["checkpoint"]), images)
    return 100.0 * float((logits.argmax(1) == labels).mean())


@pytest.mark.parametrize("backend", ["eager", "onnxruntime"])
def test_result_below_threshold_is_measured_but_excluded(tiny, backend):
    accuracy = reference_accuracy(tiny)  # a random model: about 10%
    proc, path = infer(tiny, backend, threshold=accuracy + 0.5)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(path.read_text())
    assert result["accuracy"] == pytest.approx(accuracy)  # scored from the timed answers
    assert result["meets_threshold"] is False
    assert f"< threshold {accuracy + 0.5:.2f}%" in result["reason"] and backend in result["reason"]
    assert "excluded from the latency ranking" in proc.stdout
    per_item = pd.read_parquet(path.with_suffix(".parquet"))
    assert len(per_item) == result["items"] == ITEMS and list(per_item["item"]) == list(range(ITEMS))
    assert 100.0 * per_item["correct"].mean() == pytest.approx(accuracy)
    assert (per_item["answer"] == per_item["label"]).tolist() == per_item["correct"].tolist()


def test_result_at_threshold_is_ranked_with_its_facts(tiny):
    accuracy = reference_accuracy(tiny)
    proc, path = infer(tiny, "eager", accuracy, ("--threads", "2"))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(path.read_text())
    assert r["meets_threshold"] is True and r["reason"] is None  # at the threshold counts (>=)
    assert (r["backend"], r["threads"], r["device"], r["precision"]) == ("eager", 2, "cpu", "fp32")
    assert r["warmup_items"] == 7 == len(r["warmup_ms"]) and r["items"] == ITEMS and r["official_items"] == 10000
    assert r["full_inference_set"] is False
    assert r["checkpoint_epoch"] == 4 and r["checkpoint_reached_threshold"] is True
    per_item = pd.read_parquet(path.with_suffix(".parquet"))
    assert r["latency_mean_ms"] == pytest.approx(per_item["latency_ms"].mean())
    assert r["latency_p99_ms"] == pytest.approx(np.percentile(per_item["latency_ms"], 99))
    assert r["latency_max_ms"] == pytest.approx(per_item["latency_ms"].max())
    # cost per 10,000 items: mean latency in hours x price per hour x 10,000
    assert r["usd_per_hour"] == 0.10264
    assert r["cost_per_10k_usd"] == pytest.approx(r["latency_mean_ms"] / 3.6e6 * 0.10264 * 10_000)
    # what a DAWNBench v1 inference submission needs
    for field in ("model", "framework", "framework_version", "hardware", "cpu_model", "measured", "accuracy", "latency_mean_ms"):
        assert r[field] not in (None, ""), field
    # throughput beside latency: items/s at each batch size, from how many items in how long
    assert list(r["throughput_items_per_second"]) == ["1", "8", "64", "256"]
    for b, per_second in r["throughput_items_per_second"].items():
        d = r["throughput"][b]
        assert per_second == pytest.approx(d["items"] / d["seconds"]) and d["items"] == d["batches"] * int(b) and d["seconds"] >= 0.05
        assert 0 <= d["answers_differing"] <= min(int(b), ITEMS)
    assert "eager throughput: batch 1: " in proc.stdout and "batch 256: " in proc.stdout


def test_throughput_can_be_left_out_or_narrowed(tiny):
    accuracy = reference_accuracy(tiny)
    r = json.loads(infer(tiny, "onnxruntime", accuracy, ("--throughput-batches",))[1].read_text())
    assert "throughput_items_per_second" not in r and r["latency_mean_ms"] > 0
    r = json.loads(infer(tiny, "onnxruntime", accuracy, ("--throughput-batches", "3", "3"))[1].read_text())
    assert list(r["throughput_items_per_second"]) == ["3"]


def test_report_ranks_passing_results_and_excludes_the_rest_with_their_accuracy(tiny):
    from dawnpipe.infer.summary import headline
    from dawnpipe.report.rows import inference_rows

    accuracy = reference_accuracy(tiny)
    passing = json.loads(infer(tiny, "eager", threshold=accuracy)[1].read_text())
    failing = json.loads(infer(tiny, "eager", threshold=accuracy + 0.5)[1].read_text())
    common = {
        "task": "fashion-mnist",
        "threshold": accuracy,
        "demo_threshold": True,
        "model": "fastnet",
        "hardware": "local-cpu",
        "framework": "pytorch",
        "timestamp": "2026-01-01",
        "source": "runs/tiny/seed0",
        "entry": "tiny",
        "seed": 0,
    }
    rows, excluded = inference_rows(passing, common)
    assert [r["objective"] for r in rows] == ["inference_latency", "inference_cost"]
    assert rows[0]["value"] == passing["latency_mean_ms"] and rows[0]["backend"] == "eager" and rows[0]["threads"] == 1
    assert rows[0]["source"] == "runs/tiny/seed0" and excluded == []
    rows, excluded = inference_rows(failing, common)
    assert rows == [] and excluded[0]["objectives"] == ["inference_latency", "inference_cost"]
    assert f"{failing['accuracy']:.2f}%" in excluded[0]["reason"]
    assert headline([failing, passing]) is passing  # the fastest ranked result, not a faster excluded one
    assert headline([failing]) is failing and headline([]) is None


def test_bad_input_is_a_message_not_a_traceback(tiny, tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_text("garbage")
    run_json = make_run_json(tmp_path / "run.json", threshold=50.0)
    common = [
        "--run-json",
        str(run_json),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(tmp_path / "o.json"),
        "--items-parquet",
        str(tmp_path / "o.parquet"),
    ]
    proc = run_cli("infer", "--checkpoint", str(bad), *common)
    assert proc.returncode == 1 and "model.pt: not a readable PyTorch checkpoint" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("infer", "--backend", "tensorrt", "--checkpoint", str(tiny["checkpoint"]), *common)
    assert proc.returncode == 1 and "unknown inference backend 'tensorrt'" in proc.stderr
    proc = run_cli("infer", "--threads", "0", "--checkpoint", str(tiny["checkpoint"]), *common)
    assert proc.returncode == 2 and "--threads must be at least 1" in proc.stderr
    proc = run_cli("infer", "--throughput-batches", "8", "0", "--checkpoint", str(tiny["checkpoint"]), *common)
    assert proc.returncode == 2 and "--throughput-batches must be at least 1, not 0" in proc.stderr
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "o.parquet").exists()


def test_several_backends_in_one_job_skip_what_is_not_for_the_run(tiny):
    """The workflow's infer job: every backend of the config that reads the
    run's checkpoints, each its own result, and the run's headline."""
    out = tiny["root"] / "several"
    run_json = make_run_json(out / "run.json", threshold=0.0)
    proc = run_cli(
        "infer",
        "--backends",
        "tf-function",
        "onnxruntime",
        "eager",
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--run-json",
        str(run_json),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out-dir",
        str(out / "latency"),
        "--out",
        str(out / "latency.json"),
        "--items-parquet",
        str(out / "latency.parquet"),
        "--warmup",
        "2",
        "--throughput-seconds",
        "0.05",
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipping tf-function: not for pytorch checkpoints with image items" in proc.stdout
    assert sorted(p.name for p in (out / "latency").iterdir()) == ["eager.json", "eager.parquet", "onnxruntime.json", "onnxruntime.parquet"]
    results = {b: json.loads((out / f"latency/{b}.json").read_text()) for b in ("eager", "onnxruntime")}
    assert results["eager"]["accuracy"] == results["onnxruntime"]["accuracy"]
    headline = json.loads((out / "latency.json").read_text())
    fastest = min(results, key=lambda b: results[b]["latency_mean_ms"])
    assert headline["backend"] == fastest and headline["latency_mean_ms"] == results[fastest]["latency_mean_ms"]
    assert [t["backend"] for t in headline["backends_timed"]] == sorted(results, key=lambda b: results[b]["latency_mean_ms"])
    assert (out / "latency.parquet").read_bytes() == (out / f"latency/{fastest}.parquet").read_bytes()
    one = run_cli(
        "infer",
        "--backends",
        "eager",
        "onnxruntime",
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--run-json",
        str(run_json),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(out / "x.json"),
        "--items-parquet",
        str(out / "x.parquet"),
    )
    assert one.returncode == 2 and "2 backends need --out-dir" in one.stderr


def broken_onnxruntime_env(root: Path) -> dict[str, str]:
    """An environment in which ``import onnxruntime`` fails for real (a broken
    install, simulated by a package of that name first on PYTHONPATH that
    raises ImportError); PyTorch and everything else are the real ones."""
    from conftest import tool_env

    shadow = root / "broken-site" / "onnxruntime"
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "__init__.py").write_text('raise ImportError("libonnxruntime.so: cannot open shared object file (simulated broken install)")\n')
    env = tool_env()
    env["PYTHONPATH"] = str(root / "broken-site") + os.pathsep + env["PYTHONPATH"]
    env["TMPDIR"] = str(root / "tmp")  # the failure's traceback file lands here, not in the machine's /tmp
    (root / "tmp").mkdir(exist_ok=True)
    return env


def test_one_failing_backend_is_named_and_the_others_are_still_measured(tiny):
    """Real run of the infer job, two backends, onnxruntime broken (its import
    fails inside the backend): eager is timed and written, onnxruntime's failure
    is one line on stderr and an entry of the headline, exit 0; a stale
    onnxruntime result of an earlier job is removed. With only the broken
    backend, nothing is written and the exit status is 1."""
    out = tiny["root"] / "one-fails"
    env = broken_onnxruntime_env(tiny["root"])
    run_json = make_run_json(out / "run.json", threshold=0.0)  # a demo threshold (the official one is 93)
    (out / "latency").mkdir(parents=True)
    (out / "latency/onnxruntime.json").write_text('{"stale": true}')
    common = [
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--run-json",
        str(run_json),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--warmup",
        "2",
        "--throughput-seconds",
        "0.05",
    ]
    proc = run_cli(
        "infer",
        "--backends",
        "onnxruntime",
        "eager",
        *common,
        "--out-dir",
        str(out / "latency"),
        "--out",
        str(out / "latency.json"),
        "--items-parquet",
        str(out / "latency.parquet"),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    failure_lines = [line for line in proc.stderr.splitlines() if "failed" in line]
    assert len(failure_lines) == 1 and failure_lines[0].startswith("infer: backend onnxruntime failed: ImportError: libonnxruntime.so")
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (out / "latency").iterdir()) == ["eager.json", "eager.parquet"]
    eager = json.loads((out / "latency/eager.json").read_text())
    assert eager["backend"] == "eager" and eager["items"] == ITEMS
    headline = json.loads((out / "latency.json").read_text())
    assert headline["backend"] == "eager" and [t["backend"] for t in headline["backends_timed"]] == ["eager"]
    [failed] = headline["backends_failed"]
    assert failed["backend"] == "onnxruntime" and failed["error"] == "ImportError" and "libonnxruntime.so" in failed["reason"]
    [crash] = (tiny["root"] / "tmp").glob("dawnpipe-infer-crash-*.txt")  # the traceback is kept for a bug report
    assert str(crash) in failed["reason"] and "Traceback" in crash.read_text() and "simulated broken install" in crash.read_text()
    assert "failed: onnxruntime" in proc.stdout
    assert "(demo threshold 0; official 93)" in proc.stdout  # the log says the threshold is a demo one

    alone = run_cli("infer", "--backend", "onnxruntime", *common, "--out", str(out / "alone.json"), "--items-parquet", str(out / "alone.parquet"), env=env)
    assert alone.returncode == 1 and "every backend failed (onnxruntime: ImportError" in alone.stderr
    assert "Traceback" not in alone.stderr and not (out / "alone.json").exists()


def test_each_backend_result_exports_as_a_v1_inference_submission_that_passes_the_audit(tiny, tmp_path):
    """Real results of the infer command (two backends, and the run's headline
    latency.json beside them) in a run directory; `dawnpipe export` writes one
    DAWNBench v1 inference submission per backend, and `dawnpipe audit` accepts them."""
    from submission_factory import run_dir

    d = run_dir(tmp_path / "results", "fastnet", 0, threshold=0.0)  # train/extract files; its latency.json is replaced below
    proc = run_cli(
        "infer",
        "--backends",
        "eager",
        "onnxruntime",
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--run-json",
        str(d / "run.json"),
        "--data",
        str(tiny["data"]),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out-dir",
        str(d / "latency"),
        "--out",
        str(d / "latency.json"),
        "--items-parquet",
        str(d / "latency.parquet"),
        "--warmup",
        "2",
        "--throughput-seconds",
        "0.05",
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "submissions"
    proc = run_cli("export", "--runs", str(tmp_path / "results"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    subs = {p.name: json.loads(p.read_text()) for p in (out / "FashionMNIST/inference").glob("*.json")}
    assert len(subs) == 2  # one per backend: the headline latency.json is not a third
    for backend in ("eager", "onnxruntime"):
        result = json.loads((d / f"latency/{backend}.json").read_text())
        (sub,) = [s for s in subs.values() if s["misc"]["dawnpipe"]["backend"] == backend]
        assert sub["latency"] == result["latency_mean_ms"] and sub["top1Accuracy"] == result["accuracy"]
        assert sub["misc"]["dawnpipe"]["threads"] == result["threads"] == 1
        assert sub["cost"] == pytest.approx(result["latency_mean_ms"] / 3.6e6 * result["usd_per_hour"])  # USD per item
    proc = run_cli("audit", str(out), "--json", str(tmp_path / "audit.json"))
    assert proc.returncode == 0, proc.stdout
    audit = json.loads((tmp_path / "audit.json").read_text())
    inference = [f for f in audit["files"] if "/inference/" in f["path"]]
    assert len(inference) == 2 and all(f["status"] in ("ok", "warning") for f in inference), inference
