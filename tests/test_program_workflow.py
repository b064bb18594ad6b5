"""Program entries end to end through real Snakemake (docs/programs.md): a
program dawnpipe did not write (tests/programs/fmnist_program.py, imports
nothing of dawnpipe), run with each of its behaviours on config/test.yaml's
data. Each gets its verdict:

- honest: ranked, its time dawnpipe's clock, its model through inference;
- overclaim (claims 15 points it does not have): not ranked, the reason
  naming the epoch, the claimed and the measured value;
- slow-clock (its time_ms at half speed): ranked on dawnpipe's clock, the
  disagreement flagged in run.json and on the page;
- escapes (terminal escapes and markup in its output and its MLLOG): nothing
  of it reaches the terminal or the page unescaped;
- crash, silent-death (never flushes, dies), no-model, broken (MLLOG that is
  not JSON), hang (its budget ends it): the job fails with one line naming
  the entry and the reason, the program's last lines in the stage's log, and
  no run files.

A study varies the honest program's hyperparameter like a zoo entry's."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake
from program_entries import fetched_entry, program_entry, program_repository

pytestmark = pytest.mark.slow

RANKED = ["prog-honest", "prog-overclaim", "prog-slow-clock", "prog-escapes", "prog-fetched"]
FAILING = {
    "prog-crash": "it exited with status 1",
    "prog-silent-death": "it exited with status 3 and never logged run_start",
    "prog-no-model": "epoch 1: the program wrote no model file",
    "prog-broken": "broken MLLOG: line ",
    "prog-hang": "ran past its budget of 20 s (program.budget_seconds)",
}


def write_entries(work):
    for name in [*RANKED, *FAILING]:
        behaviour = name.removeprefix("prog-")
        extra = {"budget_seconds": 20, "grace_seconds": 2} if behaviour == "hang" else {}
        entry = fetched_entry(*program_repository(work.parent / "their-repo.git")) if behaviour == "fetched" else program_entry(behaviour, **extra)
        (work / f"config/entries/{name}.yaml").write_text(yaml.safe_dump(entry))


@pytest.fixture(scope="module")
def programs(tmp_path_factory, fashion_mnist_source):
    work = copy_project(tmp_path_factory.mktemp("programs"))
    write_entries(work)
    config = resolved_config(work, "config/test.yaml")
    config.update(name="programs-test", entries=RANKED, seeds=[0], inference={**config["inference"], "backends": ["onnxruntime", "onnxruntime-int8"]})
    (work / "config/programs.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(work, "results/leaderboard.html", "--configfile", "config/programs.yaml", "--cores", "2", timeout=1800)
    return work, proc


@pytest.fixture(scope="module")
def failures(programs):
    work, _ = programs
    config = yaml.safe_load((work / "config/programs.yaml").read_text())
    # the whole budget: each misbehaves after its first epoch, which already reaches the demo threshold
    config.update(name="programs-failing", entries=list(FAILING), stop_at_threshold=False)
    (work / "config/failing.yaml").write_text(yaml.safe_dump(config))
    targets = [f"results/runs/{e}/seed0/run.json" for e in FAILING]
    proc = run_snakemake(work, *targets, "--configfile", "config/failing.yaml", "--cores", "2", "--keep-going", timeout=1800, check=False)
    return work, proc


def run_json(work, entry):
    return json.loads((work / f"results/runs/{entry}/seed0/run.json").read_text())


def test_an_honest_program_is_ranked_on_dawnpipes_clock(programs):
    work, _ = programs
    run = run_json(work, "prog-honest")
    program = run["program"]
    assert run["framework"] == "program" and run["model"] == "fmnist_program.py" and program["model_format"] == "onnx"
    assert program["excluded"] is None and program["clock"]["agrees"], program
    first = program["verified_epoch"]
    assert first is not None and all(c["agrees"] for c in program["claims"])
    assert program["exit"]["stopped_by_dawnpipe"] == "threshold"  # stop_at_threshold: SIGTERM once verified
    tta = json.loads((work / "results/runs/prog-honest/seed0/time_to_accuracy.json").read_text())
    assert tta["reached"] and tta["epochs_to_accuracy"] == first
    assert tta["time_to_accuracy_hours"] * 3600 == pytest.approx(program["clock"]["dawnpipe_seconds"], abs=1e-5)  # the log keeps hours to 10 decimals
    # the measured accuracy is dawnpipe's own score, the same one inference finds with the same model
    latency = json.loads((work / "results/runs/prog-honest/seed0/latency/onnxruntime.json").read_text())
    measured = next(c["measured"] for c in program["claims"] if c["epoch"] == first)
    assert latency["accuracy"] == pytest.approx(measured) and latency["checkpoint_epoch"] == first
    assert json.loads((work / "results/runs/prog-honest/seed0/latency/onnxruntime-int8.json").read_text())["precision"] == "int8"
    board = json.loads((work / "results/leaderboard.json").read_text())
    ranked = {r["entry"] for t in board["objectives"] if t["objective"] == "train_time" for r in t["rows"]}
    assert "prog-honest" in ranked
    log = (work / "results/logs/train/prog-honest/seed0.log").read_text()
    assert f"train: epoch {first}: the program claims" in log and "verified" in log
    mllog_text = (work / "results/runs/prog-honest/seed0/train.mllog").read_text()  # dawnpipe's view, for MLCommons' tools
    assert '"key": "run_start"' in mllog_text and '"global_batch_size"' in mllog_text


def test_a_program_fetched_at_its_pinned_commit_runs_from_its_checkout(programs):
    work, _ = programs
    run = run_json(work, "prog-fetched")
    assert run["program"]["source"]["url"].endswith("their-repo.git") and run["program"]["workdir"] == str(work / "data/programs/prog-fetched")
    assert run["model"] == "train.py" and run["program"]["verified_epoch"] is not None
    assert (work / "data/programs/prog-fetched/train.py").is_file() and not (work / "data/programs/prog-fetched/.git").exists()
    assert "fetch-program: " in (work / "results/logs/fetch_program/prog-fetched.log").read_text()


def test_a_program_whose_claims_are_contradicted_is_not_ranked(programs):
    work, _ = programs
    program = run_json(work, "prog-overclaim")["program"]
    bad = next(c for c in program["claims"] if not c["agrees"])
    assert bad["claimed"] == pytest.approx(min(100.0, bad["measured"] + 15.0), abs=0.01)
    reason = program["excluded"]
    assert reason.startswith(f"claims contradicted: epoch {bad['epoch']} claimed {bad['claimed']:.2f}%, dawnpipe measured {bad['measured']:.2f}%")
    board = json.loads((work / "results/leaderboard.json").read_text())
    assert not [r for t in board["objectives"] for r in t["rows"] if r.get("entry") == "prog-overclaim"]
    excluded = [e for e in board["excluded"] if e["source"] == "runs/prog-overclaim/seed0"]
    assert {o for e in excluded for o in e["objectives"]} >= {"train_time", "inference_latency"} and all(e["reason"] == reason for e in excluded)
    # exported as a DAWNBench submission, it says so too
    (exported,) = (work / "results/submissions/FashionMNIST/train").glob("*prog-overclaim-seed0*.json")
    assert json.loads(exported.read_text())["misc"]["program"]["excluded"] == reason


def test_a_program_clock_that_disagrees_is_flagged_and_dawnpipes_ranks(programs):
    work, _ = programs
    run = run_json(work, "prog-slow-clock")
    clock = run["program"]["clock"]
    assert not clock["agrees"] and clock["program_seconds"] < clock["dawnpipe_seconds"]
    tta = json.loads((work / "results/runs/prog-slow-clock/seed0/time_to_accuracy.json").read_text())
    assert tta["reached"] and tta["time_to_accuracy_hours"] * 3600 == pytest.approx(clock["dawnpipe_seconds"], abs=1e-5)
    html = (work / "results/leaderboard.html").read_text()
    row = re.search(r'<tr id="program-prog-slow-clock-0">.*?</tr>', html, re.S).group(0)
    assert "<strong>disagree</strong>" in row


def test_nothing_a_program_prints_reaches_the_terminal_or_the_page_unescaped(programs):
    work, proc = programs
    assert "\x1b" not in proc.stdout + proc.stderr and "\u202e" not in proc.stdout + proc.stderr
    log = (work / "results/logs/train/prog-escapes/seed0.log").read_text()
    assert "\x1b" not in log and "\\x1b[31mred alert" in log and "\\u202eevil" in log
    html = (work / "results/leaderboard.html").read_text()
    assert "<script>alert(1)</script>" not in html and "\x1b" not in html
    assert run_json(work, "prog-escapes")["program"]["logged"]["note"] == "\x1b]0;owned\x07<b>bold</b>"  # kept as it was, escaped where shown


def test_a_failing_program_is_one_line_naming_the_entry_and_the_reason(failures):
    work, proc = failures
    assert proc.returncode != 0
    for entry, reason in FAILING.items():
        head = f"dawnpipe train: error: program entry {entry} seed 0: "
        log = (work / f"results/logs/train/{entry}/seed0.log").read_text()
        lines = [ln for ln in log.splitlines() if ln.startswith(head)]
        assert len(lines) == 1 and reason in lines[0] and lines[0] == log.splitlines()[-1], (entry, lines)
        assert lines[0] in proc.stdout + proc.stderr  # on the terminal too (scripts/stage: the log and the terminal)
        assert not any(ln.startswith("Traceback") for ln in log.splitlines())  # the program's own traceback is its output ("program| ..."), never ours
        assert not (work / f"results/runs/{entry}/seed0/run.json").exists()
        assert "the program's last" in log or "the program printed nothing" in log
    crash_log = (work / "results/logs/train/prog-crash/seed0.log").read_text()
    assert "RuntimeError: something went wrong inside the program" in crash_log  # its own traceback, as its output
    silent = (work / "results/logs/train/prog-silent-death/seed0.log").read_text()
    assert "program| :::MLLOG" not in silent and "program| epoch 1" not in silent  # never flushed: none of its stdout arrived


def test_a_study_varies_a_program_entrys_hyperparameter(programs):
    work, _ = programs
    study = {
        "description": "the test program's hidden width",
        "claim": "a wider hidden layer is no slower to the demo threshold",
        "base": "prog-honest",
        "design": "one-at-a-time",
        "factors": {"hidden": {"32": {"hyperparameters.hidden": 32}}},
        "seeds": [0],
        "ladder": [60.0, 70.0],
    }
    (work / "config/studies/prog-hidden.yaml").write_text(yaml.safe_dump(study))
    run_snakemake(
        work, "results/studies/prog-hidden.html", "--configfile", "config/programs.yaml", "--config", "studies=[prog-hidden]", "--cores", "2", timeout=1800
    )
    summary = json.loads((work / "results/studies/prog-hidden.json").read_text())
    variants = {v["id"]: v for v in summary["variants"]}
    assert set(variants) == {"prog-honest", "prog-honest+hidden=32"}
    run = run_json(work, "prog-honest+hidden=32")
    assert "--hidden" in run["program"]["command"] and run["program"]["command"][run["program"]["command"].index("--hidden") + 1] == "32"
    assert all(v["runs"] for v in variants.values())
