"""Resuming interrupted training: SIGTERM (what Slurm sends at the walltime)
and SIGKILL (what follows KillWait seconds later, or the OOM killer) in the
middle of an epoch, then a restart with the same command.

The resumed run's log must equal an uninterrupted run's except for the
training time the interruptions lost, which is counted in ``hours`` and
recorded (Parquet ``lost_seconds``, run.json ``result.interruptions``).
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch
from conftest import run_cli
from tiny_training import (
    TINY_ENTRY,
    assert_evaluation_off_the_clock,
    read_log,
    run_with_slow_evaluation,
    signal_mid_epoch,
    start_training,
    train_args,
    write_entry,
)

from dawnpipe.schemas.results import RunLog, validate
from dawnpipe.train.interruptions import EpochJournal, StopRequest

# ---------------------------------------------------------------- fast: the bookkeeping alone


def test_stop_request_turns_sigterm_into_a_flag_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest().active() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_journal_counts_a_signal_stop_per_epoch(tmp_path):
    journal = EpochJournal(tmp_path, "hash-a")
    journal.begin(2, clock_seconds=10.0)
    record = journal.interrupted(2, 3.5, "SIGTERM")
    assert record["how"] == "signal SIGTERM" and not (tmp_path / "epoch.json").exists()
    again = EpochJournal(tmp_path, "hash-a")  # what the restarted process reads
    assert again.lost_in(2) == 3.5 and again.lost_in(1) == 0 and again.lost_total == 3.5
    assert EpochJournal(tmp_path, "hash-b").records == []  # another configuration's journal is ignored


def test_journal_recovers_an_epoch_killed_after_its_training_loop(tmp_path):
    journal = EpochJournal(tmp_path, "h")
    journal.begin(3, clock_seconds=20.0)
    journal.trained(3, 7.25)  # killed during evaluation: the whole epoch's training is lost, exactly
    record = EpochJournal(tmp_path, "h").recover(next_epoch=3)
    assert record["lost_seconds"] == 7.25 and record["how"].startswith("killed after training")
    assert not (tmp_path / "epoch.json").exists()


def test_journal_estimates_a_kill_mid_epoch_from_the_heartbeat(tmp_path):
    journal = EpochJournal(tmp_path, "h")
    journal.begin(1, clock_seconds=0.0)
    marker = tmp_path / "epoch.json"
    started = json.loads(marker.read_text())["started_unix"]
    os.utime(marker, (started + 4.0, started + 4.0))  # the last heartbeat, 4 s into the epoch
    record = EpochJournal(tmp_path, "h").recover(next_epoch=1)
    assert record["lost_seconds"] == pytest.approx(4.0, abs=0.01) and "heartbeat" in record["how"]


def test_journal_drops_a_stale_marker(tmp_path):
    journal = EpochJournal(tmp_path, "h")
    journal.begin(5, clock_seconds=0.0)
    assert EpochJournal(tmp_path, "h").recover(next_epoch=2) is None  # epoch 5 is not the one resumed
    assert not (tmp_path / "epoch.json").exists()
    journal.begin(2, clock_seconds=0.0)
    journal.saved(2)  # saved: nothing can be lost any more
    assert EpochJournal(tmp_path, "h").recover(next_epoch=2) is None


# ---------------------------------------------------------------- slow: real training, real signals


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, prepared_fashion_mnist):
    root = tmp_path_factory.mktemp("resume")
    return {"data": prepared_fashion_mnist, "entry": write_entry(root / "entries" / "tiny.yaml"), "root": root}


@pytest.mark.slow
def test_sigterm_then_sigkill_mid_epoch_resume_to_the_uninterrupted_log(tiny, tmp_path):
    ref = tmp_path / "uninterrupted"
    run_cli(*train_args(tiny["entry"], tiny["data"], ref), check=True)

    out = tmp_path / "interrupted"
    work = out / "work"
    args = train_args(tiny["entry"], tiny["data"], out)

    # 1. SIGTERM while epoch 2 trains: the process stops at the next step and says what it lost
    proc = start_training(args)
    signal_mid_epoch(proc, work, 2, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "stopped by SIGTERM in epoch 2" in err
    assert not (out / "train.tsv").exists() and not (out / "run.json").exists()  # nothing that looks finished
    [first] = json.loads((work / "interruptions.json").read_text())["interruptions"]
    assert first["epoch"] == 2 and first["how"] == "signal SIGTERM" and first["lost_seconds"] > 0

    # 2. SIGKILL (no warning) while epoch 3 trains: estimated on the next start from its marker
    proc = start_training(args)
    signal_mid_epoch(proc, work, 3, signal.SIGKILL)
    proc.wait(timeout=60)

    # 3. the third start finishes the run
    done = run_cli(*args, check=True)
    assert "resuming after epoch 2" in done.stdout
    assert "died in epoch 3" in done.stdout

    ref_tsv, ref_log = read_log(ref)
    tsv, log = read_log(out)
    validate(RunLog, log, str(out / "train.parquet"))
    # the same training: every epoch, accuracy and loss equal to the uninterrupted run's
    assert tsv["epoch"].tolist() == ref_tsv["epoch"].tolist() == [1, 2, 3, 4]
    assert tsv["top1Accuracy"].tolist() == ref_tsv["top1Accuracy"].tolist()
    assert np.allclose(log["train_loss"], ref_log["train_loss"], rtol=0, atol=1e-12)
    # ... up to the lost time, which is counted in the cumulative training hours, epoch by epoch
    run = json.loads((out / "run.json").read_text())["result"]
    records = run["interruptions"]
    assert [r["epoch"] for r in records] == [2, 3]
    # up to its last heartbeat (every second; none yet when the epoch is young: 0 s, a lower bound)
    assert records[1]["how"].startswith("killed, estimated from the last heartbeat") and records[1]["lost_seconds"] >= 0
    lost = [0.0, records[0]["lost_seconds"], records[1]["lost_seconds"], 0.0]
    assert log["lost_seconds"].tolist() == pytest.approx(lost)
    expected_hours = np.cumsum(log["epoch_train_seconds"] + log["lost_seconds"]) / 3600
    assert np.allclose(tsv["hours"], expected_hours, rtol=1e-6, atol=1e-9)
    assert run["lost_training_seconds"] == pytest.approx(sum(lost))
    assert run["training_hours"] * 3600 == pytest.approx(log["epoch_train_seconds"].sum() + sum(lost))
    assert run["resumed_from_epoch"] == 2
    assert not work.exists()  # the resume state is gone once the run is complete


@pytest.mark.slow
def test_no_resume_starts_over_and_forgets_interruptions(tiny, tmp_path):
    out = tmp_path / "run"
    args = train_args(tiny["entry"], tiny["data"], out, extra=("--no-resume",))
    proc = start_training(args)
    signal_mid_epoch(proc, out / "work", 2, signal.SIGTERM)
    proc.communicate(timeout=120)
    assert (out / "work" / "interruptions.json").exists()
    done = run_cli(*args, check=True)
    assert "resuming" not in done.stdout
    result = json.loads((out / "run.json").read_text())["result"]
    assert result["interruptions"] == [] and result["lost_training_seconds"] == 0 and result["resumed_from_epoch"] is None


@pytest.mark.slow
def test_evaluation_stays_off_the_training_clock(tiny, tmp_path):
    """Evaluation slowed by 6 s per epoch: the training clock does not move, the wall clock does."""
    entry = write_entry(tiny["root"] / "entries" / "two.yaml", hyperparameters={**TINY_ENTRY["hyperparameters"], "epochs": 2})
    out = tmp_path / "slow-eval"
    run_with_slow_evaluation("dawnpipe.train.torch_trainer", 6.0, train_args(entry, tiny["data"], out))
    _, log = read_log(out)
    assert_evaluation_off_the_clock(log, 6.0)


@pytest.mark.slow
def test_a_run_that_dies_before_run_json_completes_when_retried(tiny, tmp_path):
    """The threshold checkpoint is copied out of the work directory, not moved:
    a job that fails after publishing it but before run.json (here: run.json's
    path is a directory) completes when retried instead of failing for ever.
    A retry that finds the resume state damaged (its optimizer part lacks a
    key; its training clock is not a number) stops with one line naming the
    file and what is wrong, and leaves the file as it was."""
    entry = write_entry(tiny["root"] / "entries" / "one.yaml", hyperparameters={**TINY_ENTRY["hyperparameters"], "epochs": 1})
    out = tmp_path / "run"
    (out / "run.json").mkdir(parents=True)
    args = train_args(entry, tiny["data"], out, extra=("--threshold", "1"))
    failed = run_cli(*args)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    (line,) = failed.stderr.splitlines()
    assert line.startswith("dawnpipe train: error: ") and f"{out / 'run.json'}" in line
    assert (out / "model.pt").is_file() and (out / "work" / "threshold.pt").is_file()
    (out / "run.json").rmdir()
    last = out / "work" / "last.pt"
    intact = last.read_bytes()
    for damage, what in [
        (lambda state: state["optimizer"].pop("param_groups"), "it lacks 'param_groups'"),
        (lambda state: state.update(clock_seconds="soon"), "its clock_seconds is 'soon', not a number of seconds"),
    ]:
        state = torch.load(last, weights_only=True)
        damage(state)
        torch.save(state, last)
        damaged_bytes = last.read_bytes()
        damaged = run_cli(*args)
        assert damaged.returncode == 1 and "Traceback" not in damaged.stderr, damaged.stderr
        assert damaged.stderr.splitlines()[-1] == f"dawnpipe train: error: {last}: cannot resume from it ({what}); remove it to train from the start"
        assert last.read_bytes() == damaged_bytes and not (out / "run.json").exists()
        last.write_bytes(intact)
    done = run_cli(*args, check=True)
    assert "resuming after epoch 1" in done.stdout
    assert json.loads((out / "run.json").read_text())["result"]["threshold_epoch"] == 1
    assert not (out / "work").exists()
