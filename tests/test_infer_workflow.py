"""Inference through the real workflow: one result per (run, backend) with
predictable file names, their logs, and the report's tables and plots."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake

BACKENDS = ["eager", "onnxruntime"]  # of config/test.yaml inference.backends, those for PyTorch entries


@pytest.mark.slow
def test_each_backend_of_each_run_is_its_own_result(test_workflow):
    from dawnpipe.infer.backends import backends_for

    cfg = resolved_config(test_workflow, "config/test.yaml")
    assert backends_for("pytorch", "image", cfg["inference"]["backends"]) == BACKENDS
    for entry in cfg["entries"]:
        for seed in cfg["seeds"]:
            run = test_workflow / f"results/runs/{entry}/seed{seed}"
            means = {}
            for backend in BACKENDS:
                result = json.loads((run / f"latency/{backend}.json").read_text())
                assert (result["entry"], result["seed"], result["backend"]) == (entry, seed, backend)
                assert result["items"] == cfg["test_limit"] and result["threads"] == cfg["inference"]["threads"]
                assert result["warmup_items"] == cfg["inference"]["warmup"]
                assert result["export_check"]["max_abs_diff"] <= result["export_check"]["atol"]
                assert (run / f"latency/{backend}.parquet").is_file()
                means[backend] = (result["latency_mean_ms"], result["meets_threshold"])
            headline = json.loads((run / "latency.json").read_text())
            ranked = {b: m for b, (m, ok) in means.items() if ok} or {b: m for b, (m, _) in means.items()}
            assert headline["backend"] == min(ranked, key=ranked.get)  # the fastest at the threshold
            assert [t["backend"] for t in headline["backends_timed"]] == sorted(means, key=lambda b: means[b][0])
            log = (test_workflow / f"results/logs/infer/{entry}/seed{seed}.log").read_text()
            assert all(f"{entry} seed {seed} {b}: mean" in log for b in BACKENDS) and "skipping tf-function" in log
            assert (run / "inference_telemetry.parquet").is_file()
            assert all((run / f"latency/{b}.telemetry.parquet").is_file() for b in BACKENDS)
    board = json.loads((test_workflow / "results/leaderboard.json").read_text())
    inference = [row for t in board["objectives"] if t["objective"].startswith("inference") for row in t["rows"]]
    assert inference and all(row["backend"] in BACKENDS and row["threads"] == 1 for row in inference)
    html = (test_workflow / "results/leaderboard.html").read_text()
    n_results = len(cfg["entries"]) * len(cfg["seeds"]) * len(BACKENDS)
    assert html.count("latency per item (ms, log scale)") == n_results
    assert "inference latency against training time" in html


@pytest.mark.slow
def test_unknown_backend_is_refused_before_anything_runs(tmp_path):
    work = copy_project(tmp_path / "wf")
    cfg = resolved_config(work, "config/test.yaml")
    cfg["inference"]["backends"] = ["eager", "tensorrt"]
    (work / "config/bad.yaml").write_text(yaml.safe_dump(cfg))
    proc = run_snakemake(work, "-n", "results/leaderboard.html", "--configfile", "config/bad.yaml", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "config/bad.yaml: field 'inference.backends': unknown inference backend 'tensorrt'" in proc.stderr
