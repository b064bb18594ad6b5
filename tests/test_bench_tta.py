"""bench/tta.py with a tiny budget, in a copy of the project without data/:
the pipeline's fetch and prepare stages make its data, then the real train
stage runs both entries, seeds alternating, every seed's time is printed,
the last line's ratio is the ratio of the medians recomputed here from the
runs' own logs (its correctness, not its value), and --record writes it."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT, copy_project, tool_env

from dawnpipe.telemetry.peaks import PROBE_SECONDS

spec = importlib.util.spec_from_file_location("bench_tta", ROOT / "bench/tta.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def first_time_at(tsv, threshold: float) -> float | None:
    """Seconds on the training clock at the first epoch at the threshold, read straight off the TSV."""
    log = pd.read_csv(tsv, sep="\t")
    at = log[log["top1Accuracy"] >= threshold]
    return None if at.empty else float(at["hours"].iloc[0]) * 3600


@pytest.mark.slow
def test_bench_tta_ratio_is_the_ratio_of_the_medians(tmp_path, fashion_mnist_source):
    work = copy_project(tmp_path / "clone")
    shutil.copytree(ROOT / "bench", work / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    # 600 items and a few steps an epoch: 20% is what every seed of both recipes reaches (25% was missed by one under torch 2.14)
    out = tmp_path / "runs"
    args = ["--seeds", "3", "--threshold", "20", "--train-limit", "600", "--test-limit", "300", "--threads", "1", "--out-dir", str(out)]
    proc = subprocess.run(
        [sys.executable, str(work / "bench/tta.py"), *args, "--record", "--record-dir", str(tmp_path / "records")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # no --data and none prepared in the copy: the pipeline's own stages made it
    assert "making it with the pipeline's fetch and prepare stages: snakemake --cores all data/prepared/fashion-mnist" in proc.stdout
    assert (work / "data/prepared/fashion-mnist/manifest.json").is_file()
    lines = proc.stdout.strip().splitlines()
    # alternating: seed 0 fast entry first, seed 1 the seed recipe first, seed 2 the fast entry first
    started = re.findall(r"^train: (\S+) seed (\d+) ", proc.stdout, flags=re.M)
    assert started == [("fastnet", "0"), ("resnet20-dawn", "0"), ("resnet20-dawn", "1"), ("fastnet", "1"), ("fastnet", "2"), ("resnet20-dawn", "2")]
    times = {e: [first_time_at(out / e / f"seed{k}" / "train.tsv", 20.0) for k in range(3)] for e in ("fastnet", "resnet20-dawn")}
    assert all(t is not None for ts in times.values() for t in ts)
    for e, ts in times.items():  # every seed's time is printed
        printed = next(line for line in lines if line.startswith(f"{e}: seed 0 "))
        assert [float(x) for x in re.findall(r"seed \d+ ([\d.]+) s", printed)] == pytest.approx(ts, abs=0.051)
        cov = statistics.stdev(ts) / statistics.mean(ts)
        assert f"coefficient of variation {100 * cov:.1f}%" in next(line for line in lines if line.startswith(f"{e}: median"))
    ratio = statistics.median(times["resnet20-dawn"]) / statistics.median(times["fastnet"])
    # the bench leaves the CPU peak probe at the train stage's default length
    probe = json.loads((out / "fastnet" / "seed0" / "run.json").read_text())["telemetry"]["cpu_peak"]["method"]
    assert f"best of repeated runs in {PROBE_SECONDS:g} s" in probe
    assert lines[-1] == f"fast entry speed-up over the seed recipe: {ratio:.2f}x"  # the record's path went to stderr
    rec = json.loads((tmp_path / "records" / "tta.json").read_text())
    assert rec["command"] == shlex.join(["python", "bench/tta.py", *args])
    assert rec["result"]["fast"]["entry"] == "fastnet" and rec["result"]["seed_recipe"]["reached_runs"] == 3


def test_no_median_means_no_ratio_and_a_partial_median_is_flagged():
    def s(entry, median, reached=3, runs=3):
        return {"entry": entry, "tta_median_hours": median, "reached_runs": reached, "runs": runs}

    assert bench.speedup_line(s("fast", 0.01), s("seed", 0.05)) == ("fast entry speed-up over the seed recipe: 5.00x", True)
    line, ok = bench.speedup_line(s("fast", 0.01), s("seed", None, 0))
    assert not ok and line == "fast entry speed-up over the seed recipe: none (seed reached the threshold in no seed)"
    line, ok = bench.speedup_line(s("fast", 0.01, 2), s("seed", 0.03))
    assert ok and line.endswith("3.00x (medians of the seeds at the threshold only: fast missed it in some)")
    assert bench.order(0, "f", "s") == ["f", "s"] and bench.order(1, "f", "s") == ["s", "f"]
