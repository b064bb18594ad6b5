"""A program run resumes after a kill (docs/programs.md#resuming-after-an-interruption):
the test program keeps its checkpoint in {state}; its run, through real
Snakemake, is killed with SIGKILL at random moments (the train job's whole
process group and the program's), resumed with --rerun-incomplete, and ends
with the same scores as a run nobody killed for the epochs it scored, its
clocks less the lost time it counted within the clocks' tolerance of that
run's. One kill lands after the program saved epoch 3's checkpoint and before
dawnpipe read its epoch_stop: the program goes on from epoch 4, and epoch 3,
never handed over, is not scored and its training stays lost time."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pandas as pd
import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake, tool_env
from program_entries import program_entry

pytestmark = pytest.mark.slow

ENTRY = "prog-resume"
TARGET = f"results/runs/{ENTRY}/seed0/run.json"
# four epochs of about two seconds each, a checkpoint in {state} before each epoch_stop, and 3 s between
# epoch 3's checkpoint and its epoch_stop (the program saying so in {state}/paused)
SKIPPED = 3
ARGS = ("--state", "{state}", "--epochs", "4", "--epoch-sleep", "2", "--checkpoint-pause-epoch", str(SKIPPED))


def project(root):
    work = copy_project(root)
    (work / f"config/entries/{ENTRY}.yaml").write_text(yaml.safe_dump(program_entry("resumable", contract=2, args=ARGS)))
    config = resolved_config(work, "config/test.yaml")
    # config/test.yaml's threshold, which its first epoch reaches: every epoch is verified; all four run
    config.update(name="resume-test", entries=[ENTRY], seeds=[0], stop_at_threshold=False)
    config["inference"] = {**config["inference"], "backends": ["onnxruntime"]}
    (work / "config/resume.yaml").write_text(yaml.safe_dump(config))
    return work


def snakemake(work, *more):
    return ["snakemake", TARGET, "--configfile", "config/resume.yaml", "--cores", "2", *more]


def _ledger(work) -> dict:
    path = work / f"results/.work/{ENTRY}/seed0/program_ledger.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not yet, or being replaced
        return {}


def _start(work) -> subprocess.Popen:
    return subprocess.Popen(
        snakemake(work, "--rerun-incomplete"), cwd=work, env=tool_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _kill(work, proc: subprocess.Popen) -> None:
    """SIGKILL Snakemake, the train stage and the program, then unlock the project, as after any killed Snakemake."""
    program = _ledger(work).get("attempt")
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the train stage
    if program and program.get("pid"):
        try:
            os.killpg(int(program["pid"]), signal.SIGKILL)  # the program, in its own session
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    subprocess.run(snakemake(work, "--unlock"), cwd=work, env=tool_env(), check=True, capture_output=True)


def kill_after(work, seconds: float, *, after: str = "heartbeat") -> bool:
    """Start the run and SIGKILL its job and the program ``seconds`` after dawnpipe's ledger first
    holds this attempt's ``after``: "heartbeat" (written each second once the program's clock runs:
    it is training, not starting up) or "attempt" (the program was started), not the one a killed
    attempt left there; False when the run finished first. Timed by the program's progress, not by
    the machine's speed: a loaded machine takes longer to start, not to be killed in training."""
    left = _ledger(work).get(after)
    proc = _start(work)
    deadline = time.monotonic() + 900
    while proc.poll() is None and _ledger(work).get(after) in (None, left) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        pass
    _kill(work, proc)
    return True


def kill_after_checkpoint(work, epoch: int = SKIPPED) -> bool:
    """Start the run and SIGKILL it while the program sleeps between ``epoch``'s checkpoint and its epoch_stop;
    False when the run finished first."""
    paused = work / f"results/.work/{ENTRY}/seed0/state/paused"
    proc = _start(work)
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        if paused.is_file() and paused.read_text() == str(epoch):
            _kill(work, proc)
            return True
        time.sleep(0.01)
    proc.wait(timeout=60)
    return False


def _handed_over_unscored(work) -> set[int]:
    """The epochs whose epoch_stop dawnpipe has read (noted in the run's announced.jsonl) and whose model
    it has not scored yet (no row in its ledger), once its heartbeat holds the attempt's clock."""
    ledger = _ledger(work)
    try:
        lines = (work / f"results/.work/{ENTRY}/seed0/announced.jsonl").read_text().splitlines()
        announced = {json.loads(line)["epoch"] for line in lines if line.endswith("}")}
    except (FileNotFoundError, json.JSONDecodeError):
        return set()
    return announced - {row["epoch"] for row in ledger.get("rows", [])} if ledger.get("heartbeat") else set()


def kill_before_scoring(work) -> int | None:
    """Start the run and SIGKILL it after dawnpipe has read a hand-over (epoch_stop) and before it scored
    that epoch; the epoch, or None when the run finished first. The next attempt must score it (the
    program goes on after it, from its checkpoint), timed by the clock of the attempt that trained it.
    The moment is checked again with Snakemake and the train stage stopped (SIGSTOP to their process
    group), so the scoring cannot slip in between the check and the kill."""
    proc = _start(work)
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        if _handed_over_unscored(work):
            os.killpg(proc.pid, signal.SIGSTOP)
            unscored = _handed_over_unscored(work)
            if unscored:
                _kill(work, proc)
                return min(unscored)
            os.killpg(proc.pid, signal.SIGCONT)  # scored meanwhile: wait for the next hand-over
        time.sleep(0.01)
    proc.wait(timeout=60)
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory, fashion_mnist_source):
    whole = project(tmp_path_factory.mktemp("whole"))
    run_snakemake(whole, *snakemake(whole)[1:], timeout=1800)
    killed = project(tmp_path_factory.mktemp("killed"))
    handed_over = kill_before_scoring(killed)
    rng = random.Random(20261127)
    kills = int(handed_over is not None)
    assert kill_after_checkpoint(killed), f"the run ended before epoch {SKIPPED}'s checkpoint"
    kills += 1
    for _ in range(2):  # then at random moments of its training: in an epoch, in a freeze, in a hand-over
        if (killed / TARGET).is_file():
            break
        if kill_after(killed, rng.uniform(0.2, 7.0)):
            kills += 1
    run_snakemake(killed, *snakemake(killed, "--rerun-incomplete")[1:], timeout=1800)
    return whole, killed, kills, handed_over


def unscored(work) -> list[int]:
    """The epochs the interruptions of the run say were checkpointed by the program and never handed over, each once:
    SKIPPED, and any other a random kill happened to land in the same way (a window of milliseconds without the pause)."""
    named = [e for i in run_json(work)["result"]["interruptions"] for e in i.get("unscored_epochs", [])]
    assert len(named) == len(set(named)) and SKIPPED in named, named
    return named


def log_of(work):
    return pd.read_parquet(work / f"results/runs/{ENTRY}/seed0/train.parquet").set_index("epoch")


def run_json(work):
    return json.loads((work / TARGET).read_text())


def test_a_killed_program_run_resumes_to_the_same_epochs_and_scores(runs):
    whole, killed, kills, _ = runs
    assert kills >= 1, "the run ended before any kill landed"
    a, b = log_of(whole), log_of(killed)
    assert list(a.index) == [1, 2, 3, 4]
    assert list(b.index) == [e for e in (1, 2, 3, 4) if e not in unscored(killed)]  # epoch 3 went with the attempt killed in its pause
    assert (a["top1Accuracy"][b.index] == b["top1Accuracy"]).all()  # the same models: the program went on from its checkpoint
    assert (a["given_top1Accuracy"][b.index] == b["given_top1Accuracy"]).all()
    # the same claims, each verified (a claim the program would have logged after a kill's epoch_stop is lost with it)
    whole_claims = {c["epoch"]: c for c in run_json(whole)["program"]["claims"]}
    killed_claims = run_json(killed)["program"]["claims"]
    assert sorted(whole_claims) == [1, 2, 3, 4] and all(c["agrees"] for c in whole_claims.values())
    assert killed_claims and all(c == whole_claims[c["epoch"]] for c in killed_claims)
    assert not set(unscored(killed)) & {c["epoch"] for c in killed_claims}
    assert run_json(whole)["result"]["threshold_epoch"] == run_json(killed)["result"]["threshold_epoch"] == 1
    assert run_json(whole)["result"]["resumed_from_epoch"] is None  # one attempt: it resumed from nothing


def test_the_lost_time_is_counted_and_the_clock_agrees_with_the_programs_own(runs):
    """The training an interrupted attempt did after the last epoch dawnpipe kept is lost time, counted on the
    clock; less that, dawnpipe's clock of every epoch agrees with the training time the program measured itself
    (carried across attempts in its checkpoint) within the clocks' tolerance (docs/rules.md#the-clock: 2% plus
    one second). Both clocks are of the same run, so a machine busy with other work shifts neither against the other."""
    _, killed, *_ = runs
    run = run_json(killed)
    interruptions = run["result"]["interruptions"]
    assert interruptions and all(i["lost_seconds"] >= 0 for i in interruptions) and sum(i["lost_seconds"] for i in interruptions) > 0, interruptions
    assert run["result"]["lost_training_seconds"] == pytest.approx(sum(i["lost_seconds"] for i in interruptions))
    own = run["program"]["logged"]["self_training_seconds"]  # cumulative, per epoch, as the program measured it
    log = log_of(killed)
    skipped = unscored(killed)
    assert len(own) == 4 and list(log.index) == [e for e in (1, 2, 3, 4) if e not in skipped]
    # an unscored epoch's training is in the program's own measure (its checkpoint carried it) and in dawnpipe's lost time
    trained = {e: own[e - 1] - (own[e - 2] if e > 1 else 0.0) for e in skipped}
    for epoch in log.index:
        theirs = own[epoch - 1] - sum(t for e, t in trained.items() if e < epoch)
        ours = log["hours"][epoch] * 3600.0 - sum(i["lost_seconds"] for i in interruptions if i["epoch"] <= epoch)
        assert ours == pytest.approx(theirs, rel=0.02, abs=1.0), (epoch, ours, theirs, interruptions)
        # each row's lost_seconds: what was lost since the row before, an epoch never handed over included
        assert log["lost_seconds"][:epoch].sum() == pytest.approx(sum(i["lost_seconds"] for i in interruptions if i["epoch"] <= epoch))
        assert log["hours"][epoch] <= log["wall_hours"][epoch] + 1e-9
    assert run["program"]["excluded"] is None


def test_an_epoch_handed_over_before_a_kill_is_scored_on_the_clock_that_trained_it(runs):
    """The attempt killed between reading an epoch_stop and scoring its model: the next attempt scores that
    model, and times the epoch as if it had been scored at once: its training, its items, its clocks from
    the killed attempt's own run_start, freezes and hand-over (its heartbeat and announced.jsonl)."""
    whole, killed, _, epoch = runs
    assert epoch is not None, "the run ended before a hand-over could be caught unscored"
    row, fresh = log_of(killed).loc[epoch], log_of(whole).loc[epoch]  # scored: not lost with the attempt
    assert row["items_per_second"] > 0 and row["epoch_train_seconds"] >= 2.0  # the program sleeps 2 s in each epoch
    assert row["epoch_train_seconds"] == pytest.approx(fresh["epoch_train_seconds"], rel=0.5)
    assert row["items_per_second"] * row["epoch_train_seconds"] == pytest.approx(fresh["items_per_second"] * fresh["epoch_train_seconds"])


def test_a_program_without_state_starts_again(tmp_path, fashion_mnist_source):
    work = project(tmp_path / "p")
    entry = program_entry("honest", contract=2, args=("--epochs", "3", "--epoch-sleep", "2"))
    (work / f"config/entries/{ENTRY}.yaml").write_text(yaml.safe_dump(entry))
    assert kill_after(work, 8.0, after="attempt")  # in its second or third epoch
    run_snakemake(work, *snakemake(work, "--rerun-incomplete")[1:], timeout=1800)
    assert run_json(work)["result"]["interruptions"] == []  # it started again: nothing of the killed attempt counted
    assert run_json(work)["result"]["resumed_from_epoch"] is None
    assert list(log_of(work).index) == [1, 2, 3]


def test_a_last_epoch_never_handed_over_is_named_when_the_program_ends_without_it(tmp_path, fashion_mnist_source):
    """The same window at the program's last epoch: the next attempt finds that epoch in its checkpoint, trains
    nothing and logs run_stop. No epoch_start of it says what it skipped; dawnpipe's ledger, which keeps the last
    epoch any attempt started, does: that epoch is named unscored, and the run ends with the epochs before it."""
    work = project(tmp_path / "p")
    args = ("--state", "{state}", "--epochs", "2", "--epoch-sleep", "1", "--checkpoint-pause-epoch", "2")
    (work / f"config/entries/{ENTRY}.yaml").write_text(yaml.safe_dump(program_entry("resumable", contract=2, args=args)))
    assert kill_after_checkpoint(work, epoch=2), "the run ended before epoch 2's checkpoint"
    run_snakemake(work, *snakemake(work, "--rerun-incomplete")[1:], timeout=1800)
    result = run_json(work)["result"]
    [interruption] = result["interruptions"]
    assert interruption["epoch"] == 2 and interruption["unscored_epochs"] == [2], interruption
    assert interruption["lost_seconds"] > 0 and result["lost_training_seconds"] == interruption["lost_seconds"]
    assert list(log_of(work).index) == [1] and result["resumed_from_epoch"] == 1
    log = (work / f"results/logs/train/{ENTRY}/seed0.log").read_text()
    assert "the program ends without training another epoch: epoch 2, kept in its checkpoint" in log
