"""The leaderboard of audited submissions and our own runs: ranking, the
exclusions and their reasons, a run and its own export shown once, several
inference backends per run, and HTML that escapes whatever a submission says."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli, without_own_script
from submission_factory import CIFAR_TSV, inference_meta, run_dir, train_pair, write

from dawnpipe import leaderboard
from dawnpipe.audit.core import audit
from dawnpipe.audit.rows import submission_rows


def board_of(*args):
    proc = run_cli("leaderboard", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def table(board, task, objective, demo=False):
    (t,) = [t for t in board["objectives"] if t["task"] == task and t["objective"] == objective and t["demo_threshold"] == demo]
    return t


def test_ranks_by_unrounded_value_and_ties_share_a_rank(tmp_path):
    # 0.0025 h = 9.0 s and 0.00251 h = 9.04 s both display as 0:00:09; the faster is first
    train_pair(tmp_path, name="slow", tsv="epoch\thours\ttop1Accuracy\n1\t0.00251\t95\n")
    train_pair(tmp_path, name="fast", tsv="epoch\thours\ttop1Accuracy\n1\t0.0025\t95\n")
    train_pair(tmp_path, name="tie", tsv="epoch\thours\ttop1Accuracy\n0\t0.0001\t10\n1\t0.0025\t95\n")
    report = audit([str(tmp_path)])
    rows, excluded = submission_rows(report)
    board = leaderboard.build(rows, excluded)
    got = [(r["rank"], r["source"].split("/")[-1], r["display"]) for r in table(board, "cifar10", "train_time")["rows"]]
    assert got == [(1, "fast.json", "0:00:09"), (1, "tie.json", "0:00:09"), (3, "slow.json", "0:00:10")]


def test_invalid_and_unconverged_submissions_are_excluded_with_the_reason(tmp_path):
    train_pair(tmp_path, name="broken", costPerHour="cheap")
    train_pair(tmp_path, name="dnc", tsv=CIFAR_TSV.replace("94.2", "93.1").replace("94.5", "93.5"))
    write(tmp_path, "CIFAR10/inference/weak.json", inference_meta(top1Accuracy=92.0))
    report = audit([str(tmp_path)])
    rows, excluded = submission_rows(report)
    assert rows == []
    reasons = {e["source"]: e["reason"] for e in excluded}
    assert reasons["CIFAR10/train/broken.json"].startswith("audit error: CIFAR10/train/broken.json: field costPerHour: expected a number")
    assert "never reaches the threshold: best top1Accuracy 93.50% < 94.00%" in reasons["CIFAR10/train/dnc.json"]
    assert "92.00% is below the threshold 94.00%" in reasons["CIFAR10/inference/weak.json"]
    assert all(e["audit_anchor"].startswith("audit-") for e in excluded)


def test_a_run_and_its_own_export_are_ranked_once(tmp_path):
    results = tmp_path / "results"
    run_dir(results, "fastnet", 0, threshold=93.0, tsv="epoch\thours\ttop1Accuracy\n1\t0.002\t90\n2\t0.004\t93.5\n")
    run_dir(
        results,
        "fastnet",
        1,
        threshold=93.0,
        tsv="epoch\thours\ttop1Accuracy\n1\t0.002\t91\n2\t0.005\t93.2\n",
        latencies=[
            {},
            {
                "backend": "onnxruntime",
                "latency_mean_ms": 0.5,
                "latency_p50_ms": 0.4,
                "latency_p90_ms": 0.6,
                "latency_p99_ms": 0.9,
                "latency_max_ms": 1.0,
                "cost_per_10k_usd": 0.5 / 3.6e6 * 0.10264 * 1e4,
            },
        ],
    )
    export = tmp_path / "submissions"
    assert run_cli("export", "--runs", str(results), "--out", str(export)).returncode == 0
    out = tmp_path / "lb.json"
    board_of("--submissions", str(export), "--runs", str(results), "--json", str(out), "--html", str(tmp_path / "lb.html"))
    board = json.loads(out.read_text())
    # our runs: one row per entry (and inference backend) over its seeds, each seed once
    train = table(board, "fashion-mnist", "train_time")["rows"]
    assert [(r["source"], r["seed_sources"]) for r in train] == [("runs/fastnet", ["runs/fastnet/seed0", "runs/fastnet/seed1"])]
    latency = table(board, "fashion-mnist", "inference_latency")["rows"]
    assert [(r["source"], r["backend"], r["seeds"]) for r in latency] == [("runs/fastnet", "onnxruntime", [1]), ("runs/fastnet", "eager", [0, 1])]
    assert board["audit"]["error"] == 0
    html = (tmp_path / "lb.html").read_text()
    assert html.count("the export of runs/fastnet/seed0, which is also given as a run: ranked once, from the run") == 2  # train + inference


def test_an_export_whose_log_was_changed_is_not_the_run(tmp_path):
    results = tmp_path / "results"
    run_dir(results, "fastnet", 0, threshold=93.0, tsv="epoch\thours\ttop1Accuracy\n1\t0.002\t90\n2\t0.004\t93.5\n")
    export = tmp_path / "submissions"
    run_cli("export", "--runs", str(results), "--out", str(export), check=True)
    (tsv,) = export.glob("FashionMNIST/train/*.tsv")
    tsv.write_text(tsv.read_text().replace("0.004", "0.003"))  # faster than the run was
    out = tmp_path / "lb.json"
    board_of("--submissions", str(export), "--runs", str(results), "--json", str(out))
    board = json.loads(out.read_text())
    sources = [r["source"] for r in table(board, "fashion-mnist", "train_time")["rows"]]
    assert sources == ["runs/fastnet"]
    # the tampered file claims the run's time in misc.dawnpipe.timeToAccuracyHours: an audit error, excluded
    (excl,) = [e for e in board["excluded"] if e["source"].startswith("FashionMNIST/train/")]
    assert "claims 0.004, but the log gives 0.003" in excl["reason"]


def test_demo_threshold_runs_get_their_own_labelled_tables(tmp_path):
    results = tmp_path / "results"
    run_dir(results, "fastnet", 0, threshold=70.0)
    train_pair(tmp_path / "subs")
    out = tmp_path / "lb.json"
    board_of("--submissions", str(tmp_path / "subs"), "--runs", str(results), "--json", str(out), "--html", str(tmp_path / "lb.html"))
    board = json.loads(out.read_text())
    assert table(board, "fashion-mnist", "train_time", demo=True)["threshold"] == 70.0
    assert table(board, "fashion-mnist", "train_time")["rows"] == []  # 70% is not the official 93%
    assert "demo threshold (official 93.0)" in (tmp_path / "lb.html").read_text()


def test_html_escapes_everything_a_submission_says(tmp_path):
    evil = "<script>alert(1)</script>"
    train_pair(tmp_path, name='x"><img src=y onerror=alert(2)>', author=evil, model='ResNet "9" <b>', hardware="<i>V100</i>")
    write(tmp_path, "CIFAR10/inference/z.json", inference_meta(author=evil, framework="</td><td>"))
    board_of("--submissions", str(tmp_path), "--json", str(tmp_path / "lb.json"), "--html", str(tmp_path / "lb.html"))
    html = (tmp_path / "lb.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    html = without_own_script(html)
    assert "<script" not in html and "<img" not in html and "<i>V100" not in html and "<b>" not in html
    assert "<td>&lt;/td&gt;&lt;td&gt;</td>" in html  # a framework named "</td><td>" stays in its cell
    for anchor in re.findall(r'id="([^"]*)"', html):
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", anchor), anchor


def test_tasks_with_results_come_first_and_the_others_collapse_into_a_line_each(tmp_path):
    write(tmp_path, "SQuAD/inference/q.json", inference_meta("SQuAD"))
    board_of("--submissions", str(tmp_path), "--json", str(tmp_path / "lb.json"), "--html", str(tmp_path / "lb.html"))
    html = (tmp_path / "lb.html").read_text()
    board = json.loads((tmp_path / "lb.json").read_text())
    # every task's four official tables are still in the JSON, empty or not
    assert len([t for t in board["objectives"] if not t["demo_threshold"]]) >= 16
    # the page: a summary first, then SQuAD (the one task with results) in full, then one line per other task
    assert html.index('id="summary"') < html.index('id="task-squad"') < html.index('id="no-results"')
    assert re.findall(r'<h2 id="task-([a-z0-9-]+)">', html) == ["squad"]
    assert re.findall(r'<li id="task-([a-z0-9-]+)">', html) == ["imagenet", "cifar10", "fashion-mnist"]
    line = re.search(r'<li id="task-cifar10">(.*?)</li>', html).group(1)
    assert "no ranked result at 94.0" in line and "<code>cifar10</code>" in line and "<code>CIFAR10/</code>" in line
    sections = re.findall(r'<section id="([a-z0-9_.-]+)">', html)
    assert sections and all(s.startswith("squad-inference_") for s in sections)
    assert "No ranked result (none reaches the threshold, or none was submitted) for: training time" in html
    summary = html[html.index('id="summary"') : html.index('id="task-squad"')]
    assert summary.count("<tr><td>") == len(sections)  # the best row of every ranked table


def test_leaderboard_usage_errors(tmp_path):
    proc = run_cli("leaderboard", "--submissions", str(tmp_path / "missing"), "--json", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and "missing: no such directory" in proc.stderr
    proc = run_cli("leaderboard", "--json", str(tmp_path / "x.json"))
    assert proc.returncode == 2
    proc = run_cli("leaderboard", "--submissions", str(tmp_path), "--runs", str(tmp_path / "gone"), "--json", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and "gone: no such run directory" in proc.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_the_workflow_exports_audits_and_ranks_its_runs_once(test_workflow):
    """A real Snakemake run of config/test.yaml: the export exists, passes the
    audit without errors, and each run appears once in the leaderboard."""
    export = test_workflow / "results" / "submissions"
    assert sorted(p.parent.name for p in export.glob("FashionMNIST/*/*.json")).count("train") == 4
    proc = run_cli("audit", str(export))
    assert proc.returncode == 0, proc.stdout
    board = json.loads((test_workflow / "results" / "leaderboard.json").read_text())
    train = [r["source"] for t in board["objectives"] if t["objective"] == "train_time" for r in t["rows"]]
    assert len(train) == len(set(train)) and all(s.startswith("runs/") for s in train)
    html = (test_workflow / "results" / "leaderboard.html").read_text()
    assert 'id="audit"' in html and "ranked once, from the run" in html


def test_the_report_audits_submissions_under_the_configs_audit_rules(tmp_path):
    """`dawnpipe report --rules FILE` (config: audit_rules) applies the same
    rules as `dawnpipe audit --rules FILE`: a price cap below the submission's
    costPerHour excludes it; without the file it is ranked."""
    subs = tmp_path / "subs"
    train_pair(subs, name="pricey")
    runs = tmp_path / "results"
    run_dir(runs, "fastnet", 0)
    rules = tmp_path / "rules.yaml"
    rules.write_text("plausible:\n  max_cost_per_hour_usd: 0.5\n")

    def report(*extra):
        out = tmp_path / ("strict" if extra else "default")
        run_cli(
            "report",
            "--runs",
            str(runs / "runs"),
            "--submissions",
            str(subs),
            *extra,
            "--json",
            str(out / "lb.json"),
            "--html",
            str(out / "lb.html"),
            "--table",
            str(out / "runs.parquet"),
            "--csv",
            str(out / "runs.csv"),
            check=True,
        )
        return json.loads((out / "lb.json").read_text())

    ranked = [r["source"] for t in report()["objectives"] for r in t["rows"]]
    assert "CIFAR10/train/pricey.json" in ranked
    strict = report("--rules", str(rules))
    assert "CIFAR10/train/pricey.json" not in [r["source"] for t in strict["objectives"] for r in t["rows"]]
    [reason] = [e["reason"] for e in strict["excluded"] if e["source"] == "CIFAR10/train/pricey.json"]
    assert "costPerHour" in reason, reason
    bad = run_cli(
        "report",
        "--runs",
        str(runs / "runs"),
        "--submissions",
        str(subs),
        "--rules",
        str(tmp_path / "nope.yaml"),
        "--json",
        str(tmp_path / "x.json"),
        "--html",
        str(tmp_path / "x.html"),
        "--table",
        str(tmp_path / "x.parquet"),
        "--csv",
        str(tmp_path / "x.csv"),
    )
    assert bad.returncode == 2 and f"--rules {tmp_path / 'nope.yaml'}: no such file" in bad.stderr
