"""A program run resumes after a kill (docs/programs.md#resuming-after-an-interruption):
the test program keeps its checkpoint in {state}; its run, through real
Snakemake, is killed with SIGKILL at random moments (the train job's whole
process group and the program's), resumed with --rerun-incomplete, and ends
with the same scored epochs and the same scores as a run nobody killed, its
clocks less the lost time it counted within the clocks' tolerance of that
run's."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake, tool_env
from program_entries import program_entry

pytestmark = pytest.mark.slow

ENTRY = "prog-resume"
TARGET = f"results/runs/{ENTRY}/seed0/run.json"
# four epochs of about two seconds each, a checkpoint in {state} before each epoch_stop; a threshold it never reaches
ARGS = ("--state", "{state}", "--epochs", "4", "--epoch-sleep", "2")


def project(root):
    work = copy_project(root)
    (work / f"config/entries/{ENTRY}.yaml").write_text(yaml.safe_dump(program_entry("resumable", contract=2, args=ARGS)))
    config = resolved_config(work, "config/test.yaml")
    config.update(name="resume-test", entries=[ENTRY], seeds=[0], thresholds={"fashion-mnist": 99.9}, stop_at_threshold=False)
    config["inference"] = {**config["inference"], "backends": ["onnxruntime"]}
    (work / "config/resume.yaml").write_text(yaml.safe_dump(config))
    return work


def snakemake(work, *more):
    return ["snakemake", TARGET, "--configfile", "config/resume.yaml", "--cores", "2", *more]


def kill_after(work, seconds: float) -> bool:
    """Start the run, SIGKILL its job and the program ``seconds`` later; False when it finished first."""
    proc = subprocess.Popen(
        snakemake(work, "--rerun-incomplete"), cwd=work, env=tool_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        pass
    ledger = work / f"results/.work/{ENTRY}/seed0/program_ledger.json"
    program = json.loads(ledger.read_text()).get("attempt") if ledger.is_file() else None
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the train stage
    if program and program.get("pid"):
        try:
            os.killpg(int(program["pid"]), signal.SIGKILL)  # the program, in its own session
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    subprocess.run(snakemake(work, "--unlock"), cwd=work, env=tool_env(), check=True, capture_output=True)  # as after any killed Snakemake
    return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory, fashion_mnist_source):
    whole = project(tmp_path_factory.mktemp("whole"))
    run_snakemake(whole, *snakemake(whole)[1:], timeout=1800)
    killed = project(tmp_path_factory.mktemp("killed"))
    rng = random.Random(20261127)
    kills = 0
    for _ in range(3):  # at random moments: in start-up, in an epoch, in a freeze
        if kill_after(killed, rng.uniform(6.0, 24.0)):
            kills += 1
        if (killed / TARGET).is_file():
            break
    run_snakemake(killed, *snakemake(killed, "--rerun-incomplete")[1:], timeout=1800)
    return whole, killed, kills


def log(work):
    return pd.read_parquet(work / f"results/runs/{ENTRY}/seed0/train.parquet").set_index("epoch")


def run_json(work):
    return json.loads((work / TARGET).read_text())


def test_a_killed_program_run_resumes_to_the_same_epochs_and_scores(runs):
    whole, killed, kills = runs
    assert kills >= 1, "the run ended before any kill landed"
    a, b = log(whole), log(killed)
    assert list(a.index) == list(b.index) == [1, 2, 3, 4]
    assert (a["top1Accuracy"] == b["top1Accuracy"]).all()  # the same models: the program went on from its checkpoint
    assert (a["given_top1Accuracy"] == b["given_top1Accuracy"]).all()


def test_the_lost_time_is_counted_and_the_clocks_agree_with_an_uninterrupted_run(runs):
    whole, killed, _ = runs
    result = run_json(killed)["result"]
    interruptions = result["interruptions"]
    assert interruptions and all(i["lost_seconds"] >= 0 for i in interruptions)
    a, b = log(whole), log(killed)
    for epoch in a.index:
        lost = sum(i["lost_seconds"] for i in interruptions if i["epoch"] <= epoch)
        ours = b["hours"][epoch] * 3600.0 - lost
        # the clocks' tolerance (docs/rules.md#the-clock): 2% plus one second; each epoch also sleeps 2 s of the program's own
        assert ours == pytest.approx(a["hours"][epoch] * 3600.0, rel=0.02, abs=1.0 + 0.5 * epoch), (epoch, ours, a["hours"][epoch] * 3600.0)
        assert b["hours"][epoch] <= b["wall_hours"][epoch] + 1e-9
    assert run_json(killed)["program"]["excluded"] is None


def test_a_program_without_state_starts_again(tmp_path, fashion_mnist_source):
    work = project(tmp_path / "p")
    entry = program_entry("honest", contract=2, args=("--epochs", "3", "--epoch-sleep", "2"))
    (work / f"config/entries/{ENTRY}.yaml").write_text(yaml.safe_dump(entry))
    assert kill_after(work, 12.0)
    run_snakemake(work, *snakemake(work, "--rerun-incomplete")[1:], timeout=1800)
    assert run_json(work)["result"]["interruptions"] == []  # it started again: nothing of the killed attempt counted
    assert list(log(work).index) == [1, 2, 3]
