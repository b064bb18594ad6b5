"""End to end: the real Snakemake workflow on config/test.yaml (real training
on real Fashion-MNIST), then what users rely on: the leaderboard's content, a
second run that does nothing, comment edits that retrain nothing, a changed
value that retrains only its entry, and a clean lint."""

from __future__ import annotations

import json
import re
import statistics
import time

import pandas as pd
import pytest
from conftest import copy_project, job_resources, resolved_config, run_snakemake

from dawnpipe import verdict
from dawnpipe.display import format_hours

pytestmark = pytest.mark.slow

TARGET = ["results/leaderboard.html", "--configfile", "config/test.yaml"]


def planned_jobs(workdir, *extra) -> dict[str, int]:
    """Jobs a dry run would execute, by rule (empty when there is nothing to do)."""
    # the target first: --quiet and --configfile each take several values
    proc = run_snakemake(workdir, TARGET[0], "-n", *TARGET[1:], *extra, "--quiet", "rules")
    counts = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) not in ("total", "job", "count"):
            counts[m.group(1)] = int(m.group(2))
    return counts


def demo_threshold(workdir) -> float:
    """The Fashion-MNIST threshold of the run's own config/test.yaml."""
    return resolved_config(workdir, "config/test.yaml")["thresholds"]["fashion-mnist"]


def test_leaderboard_json_has_every_run(test_workflow):
    board = json.loads((test_workflow / "results/leaderboard.json").read_text())
    demo = [t for t in board["objectives"] if t["task"] == "fashion-mnist" and t["demo_threshold"]]
    assert {t["objective"] for t in demo} == {"train_time", "train_cost", "inference_latency", "inference_cost"}
    assert all(t["threshold"] == demo_threshold(test_workflow) and t["official_threshold"] == 93.0 for t in demo)
    runs = {f"runs/{e}/seed{s}" for e in ("fastnet", "resnet20-dawn") for s in (0, 1)}
    for table in demo:
        # one row per entry (and inference backend) over its seeds; every run is a seed of one or excluded
        ranked = {s for r in table["rows"] for s in r["seed_sources"]}
        excluded = {e["source"] for e in board["excluded"] if table["objective"] in e["objectives"]}
        assert runs <= ranked | excluded and ranked <= runs
        # each rank is 1 + the rows the rule says are faster (two seeds against two: none, so all tie)
        samples = [[verdict.from_json_number(v) for v in r["seed_values"]] for r in table["rows"]]
        for r, mine in zip(table["rows"], samples, strict=True):
            assert r["rank"] == 1 + sum(verdict.faster(other, mine) for other in samples if other is not mine)
    official = [t for t in board["objectives"] if t["task"] == "fashion-mnist" and not t["demo_threshold"]]
    assert official and all(not t["rows"] for t in official)  # nothing measured at 93% is claimed


def test_leaderboard_values_agree_with_the_logs(test_workflow):
    board = json.loads((test_workflow / "results/leaderboard.json").read_text())
    train_time = next(t for t in board["objectives"] if t["objective"] == "train_time" and t["demo_threshold"])
    threshold = demo_threshold(test_workflow)
    for row in train_time["rows"]:
        hours = []
        for source in row["seed_sources"]:
            log = pd.read_csv(test_workflow / "results" / source / "train.tsv", sep="\t")
            hours.append(log[log["top1Accuracy"] >= threshold].iloc[0]["hours"])
            run = json.loads((test_workflow / "results" / source / "run.json").read_text())
            assert run["environment"]["threads"] >= 1 and run["config_hash"] and run["demo_threshold"] is True
        assert row["value"] == pytest.approx(statistics.median(hours), rel=1e-9) and row["seed_values"] == pytest.approx(hours, rel=1e-9)
        assert row["display"] == format_hours(row["value"])


def test_every_run_has_its_files_and_logs(test_workflow):
    for entry in ("fastnet", "resnet20-dawn"):
        for seed in (0, 1):
            run_dir = test_workflow / f"results/runs/{entry}/seed{seed}"
            for name in ("train.tsv", "train.parquet", "model.pt", "run.json", "time_to_accuracy.json", "latency.json", "latency.parquet"):
                assert (run_dir / name).is_file(), run_dir / name
            log = (test_workflow / f"results/logs/train/{entry}/seed{seed}.log").read_text()
            assert re.search(r"^epoch +1/\d+ ", log, re.M), "one progress line per epoch"
            latency = json.loads((run_dir / "latency.json").read_text())
            assert latency["items"] == 500 and latency["latency_p50_ms"] <= latency["latency_p99_ms"]
            assert not (test_workflow / f"results/.work/{entry}/seed{seed}").exists()
    for stage in ("fetch/fashion-mnist", "prepare/fashion-mnist", "extract/fastnet/seed0", "infer/fastnet/seed0", "stability/fastnet"):
        assert (test_workflow / f"results/logs/{stage}.log").is_file(), stage
    assert (test_workflow / "results/runs.parquet").is_file() and (test_workflow / "results/runs.csv").is_file()
    stability = json.loads((test_workflow / "results/stability/fastnet.json").read_text())
    assert stability["runs"] == 2 and 0 <= stability["reached_fraction"] <= 1


def test_timed_jobs_take_the_one_timing_slot_of_the_local_profile(test_workflow):
    """profiles/default's `timing=1` keeps two measurements off the CPU at once (tests/test_slurm.py: not on a cluster)."""
    (log,) = [t for f in (test_workflow / ".snakemake/log").glob("*.snakemake.log") if "localrule train:" in (t := f.read_text())]
    timed = job_resources(log, "train") + job_resources(log, "infer")
    assert "Provided resources: timing=" in log and len(timed) == 8 and all(", timing=1," in r for r in timed), timed


def test_html_is_self_contained_and_labelled(test_workflow):
    html = (test_workflow / "results/leaderboard.html").read_text()
    assert "Demo threshold" in html and 'class="chart-data"' in html
    # the markup, not the text of the embedded scripts (plotly.js holds its own
    # home page as a string; the real-browser test sees no request leave the page)
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", html, flags=re.S)
    assert markup.count("<script") == html.count("<script") >= 2
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup), "no external resources"
    assert "Stability over seeds" in html and "fastnet" in html and "resnet20-dawn" in html


def test_second_run_has_nothing_to_do(test_workflow):
    assert planned_jobs(test_workflow) == {}


def test_comment_edits_retrain_nothing(test_workflow):
    config = test_workflow / "config/test.yaml"
    entry = test_workflow / "config/entries/fastnet.yaml"
    old_config, old_entry = config.read_text(), entry.read_text()
    try:
        config.write_text("# a new comment at the top\n" + old_config.replace("# demo threshold", "# still the demo threshold"))
        entry.write_text(old_entry + "\n# a trailing comment\n")
        assert planned_jobs(test_workflow) == {}
    finally:
        config.write_text(old_config)
        entry.write_text(old_entry)


def test_changed_value_retrains_only_that_entry(test_workflow):
    entry = test_workflow / "config/entries/fastnet.yaml"
    old = entry.read_text()
    try:
        entry.write_text(old.replace("momentum: 0.9 ", "momentum: 0.8 "))
        assert "momentum: 0.8 " in entry.read_text()
        jobs = planned_jobs(test_workflow)
        assert jobs.get("train") == 2 and jobs.get("infer") == 2  # fastnet's two seeds, not resnet20-dawn's
        assert "fetch" not in jobs and "prepare" not in jobs
    finally:
        entry.write_text(old)


def test_audit_rules_rerun_only_the_report_with_them(test_workflow):
    """config audit_rules: the report audits the submissions under that file
    (the same --rules as `dawnpipe audit`); setting it reruns the report alone."""
    rules = test_workflow / "audit-rules.yaml"
    rules.write_text("plausible:\n  max_cost_per_hour_usd: 50.0\n")
    assert planned_jobs(test_workflow, "--config", f"audit_rules=[{rules}]") == {"report": 1}
    shell = run_snakemake(test_workflow, TARGET[0], "-n", "-p", *TARGET[1:], "--config", f"audit_rules=[{rules}]").stdout
    assert f"--rules {rules}" in shell


def test_changed_value_retrains_a_run_whose_files_a_failed_retraining_removed(test_workflow):
    """Snakemake deletes the outputs of a job that fails or is interrupted; the
    run's later results from the old settings (time to accuracy, latency, ...)
    must not then pass for up to date with the new ones."""
    entry = test_workflow / "config/entries/fastnet.yaml"
    run_dir = test_workflow / "results/runs/fastnet/seed0"
    aside = test_workflow.parent / "train-outputs-aside"
    aside.mkdir(exist_ok=True)
    names = ["train.tsv", "train.parquet", "model.pt", "run.json", "telemetry.parquet"]
    old = entry.read_text()
    try:
        for name in names:
            (run_dir / name).rename(aside / name)  # a rename keeps the modification times for the restore
        entry.write_text(old.replace("momentum: 0.9 ", "momentum: 0.8 "))
        jobs = planned_jobs(test_workflow)
        assert jobs.get("train") == 2 and jobs.get("extract") == 2 and jobs.get("infer") == 2, jobs
    finally:
        entry.write_text(old)
        for name in names:
            if (aside / name).exists():
                (aside / name).rename(run_dir / name)


def test_lint_is_clean(test_workflow):
    proc = run_snakemake(test_workflow, "--lint")
    assert "Congratulations" in proc.stdout + proc.stderr


def test_a_run_ends_when_its_last_job_does(tmp_path, fashion_mnist_source):
    """profiles/default counts job starts over a minute (max-jobs-per-timespan),
    so Snakemake re-checks its queue once a minute, not every second; the
    re-check still pending when the run ends would hold the process for up to
    that minute, and the Snakefile cancels it. A one-job run is over in seconds."""
    work = copy_project(tmp_path / "wf")
    start = time.monotonic()
    proc = run_snakemake(
        work, "data/raw/fashion-mnist", "--configfile", "config/test.yaml", "--config", f"data_sources={{fashion-mnist: {fashion_mnist_source}}}"
    )
    seconds = time.monotonic() - start
    assert "1 of 1 steps (100%) done" in proc.stderr + proc.stdout
    assert seconds < 40, f"snakemake took {seconds:.0f} s for one job of a second or two"
