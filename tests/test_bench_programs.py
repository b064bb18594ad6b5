"""bench/program_overhead.py and bench/stability.py with tiny budgets: the
real program and the real train stage, and printed figures that are what the
scripts' own records and the runs' logs say (their correctness, not their
speed; docs/programs.md). The records go to a temporary directory."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, tool_env

pytestmark = pytest.mark.slow


def bench(script: str, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True, env=tool_env(), timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_program_overhead_prints_the_median_of_the_pairs_ratios_it_recorded(prepared_fashion_mnist, tmp_path):
    args = ["--items", "600", "--test-items", "200", "--epochs", "1", "--min-repeats", "2", "--max-repeats", "2", "--threads", "1"]
    proc = bench("program_overhead.py", *args, "--data", str(prepared_fashion_mnist), "--record", "--record-dir", str(tmp_path))
    lines = proc.stdout.strip().splitlines()
    bare = [float(x) for x in re.findall(r"^pair \d+  bare\s+([\d.]+) s", proc.stdout, re.M)]
    harness = [float(x) for x in re.findall(r"^pair \d+  harness\s+([\d.]+) s", proc.stdout, re.M)]
    assert len(bare) == len(harness) == 2
    record = json.loads((tmp_path / "program_overhead.json").read_text())["result"]
    assert record["bare_seconds"] == pytest.approx(bare, abs=0.006) and record["harness_training_seconds"] == pytest.approx(harness, abs=0.006)
    # the harness side's training is its clock less the export of its weights (torch-fmnist hands over a state_dict)
    assert all(x > 0 for x in record["harness_export_seconds"])
    trained = [c - x for c, x in zip(record["harness_seconds"], record["harness_export_seconds"], strict=True)]
    assert record["harness_training_seconds"] == pytest.approx(trained)
    assert record["pair_ratios"] == pytest.approx([h / b for b, h in zip(record["bare_seconds"], trained, strict=True)])
    with_export = statistics.median([c / b for b, c in zip(record["bare_seconds"], record["harness_seconds"], strict=True)])
    assert record["overhead_with_export"] == pytest.approx(with_export) and record["interval_with_export"] == [None, None]
    assert record["overhead"] == pytest.approx(statistics.median(record["pair_ratios"])) and record["interval"] == [None, None]
    assert record["goal"] == 1.03 and record["goal_verdict"] == "undecided"  # two pairs: no interval to decide by
    assert lines[-1] == f"program harness overhead: {record['overhead']:.3f}x (too few pairs for an interval)"
    assert all(d > 0 for d in record["harness_dawnpipe_seconds"]) and record["epochs"] == 1 and record["repeats"] == 2


def test_stability_of_a_program_entry_is_the_stability_stages(prepared_fashion_mnist, tmp_path):
    entry = yaml.safe_load((ROOT / "config/entries/torch-fmnist.yaml").read_text())
    entry["hyperparameters"].update(epochs=1, precision="fp32")
    path = tmp_path / "tiny-program.yaml"
    path.write_text(yaml.safe_dump(entry))
    out = tmp_path / "runs"
    args = ["--seeds", "2", "--threshold", "40", "--train-limit", "3000", "--test-limit", "200", "--threads", "1", "--out-dir", str(out)]
    proc = bench("stability.py", str(path), *args, "--data", str(prepared_fashion_mnist), "--record", "--record-dir", str(tmp_path))
    record = json.loads((tmp_path / "stability-tiny-program.json").read_text())["result"]
    assert record["framework"] == "program" and record["runs_total"] == 2
    for run in record["runs"]:  # each time is dawnpipe's clock of the program's first verified epoch
        program = json.loads((out / "tiny-program" / f"seed{run['seed']}" / "run.json").read_text())["program"]
        assert run["reached"] == (program["verified_epoch"] is not None)
        if run["reached"]:
            assert run["time_to_accuracy_seconds"] == pytest.approx(program["clock"]["dawnpipe_seconds"], abs=1e-5)  # the log keeps hours to 10 decimals
    reached = [r["time_to_accuracy_seconds"] for r in record["runs"] if r["reached"]]
    assert record["reached_runs"] == len(reached)
    if reached:
        assert record["median_seconds"] == pytest.approx(statistics.median(reached))
    assert proc.stdout.strip().splitlines()[-1].startswith("tiny-program: ")


def test_program_clock_prints_the_largest_error_it_recorded(prepared_fashion_mnist, tmp_path):
    args = ["--items", "600", "--epochs", "2", "--hidden", "16", "--repeats", "1", "--threads", "1"]
    proc = bench("program_clock.py", *args, "--data", str(prepared_fashion_mnist), "--record", "--record-dir", str(tmp_path))
    record = json.loads((tmp_path / "program_clock.json").read_text())["result"]
    assert [run["contract"] for run in record["runs"]] == [2] and all(len(run["epochs"]) == 2 for run in record["runs"])
    epochs = [e for run in record["runs"] for e in run["epochs"]]
    assert all(e["error_seconds"] == pytest.approx(e["dawnpipe_seconds"] - e["self_seconds"]) for e in epochs)
    worst = max(abs(e["error_seconds"]) for e in epochs)
    assert record["max_error_seconds"] == pytest.approx(worst)
    assert proc.stdout.strip().splitlines()[-1].startswith(f"program clock error: {worst:.3f} s at most")


def test_overhead_prints_the_median_of_the_pairs_ratios_it_recorded(prepared_fashion_mnist, tmp_path):
    """bench/overhead.py: its bare side is the train stage's own trainer's epochs; each pair a ratio."""
    args = ["--items", "600", "--epochs", "1", "--min-repeats", "2", "--max-repeats", "2", "--threads", "1"]
    proc = bench("overhead.py", *args, "--data", str(prepared_fashion_mnist), "--record", "--record-dir", str(tmp_path))
    record = json.loads((tmp_path / "overhead.json").read_text())["result"]
    assert record["repeats"] == 2 and len(record["bare_seconds"]) == len(record["pipeline_seconds"]) == 2
    assert record["pair_ratios"] == pytest.approx([p / b for b, p in zip(record["bare_seconds"], record["pipeline_seconds"], strict=True)])
    assert record["overhead"] == pytest.approx(statistics.median(record["pair_ratios"])) and record["interval"] == [None, None]
    assert proc.stdout.strip().splitlines()[-1] == f"harness overhead: {record['overhead']:.3f}x (too few pairs for an interval)"
