"""Interrupted training runs: stopping cleanly on a signal, and counting the
training time an interruption cost.

A Slurm job that reaches its walltime (or is cancelled, preempted or
requeued) gets SIGTERM, then SIGKILL ``KillWait`` seconds later (30 s by
default). The trainer keeps a resumable state after every epoch, so what an
interruption loses is the part of the epoch in progress. That training time
was spent (and paid for): when the run resumes it is added to the training
clock, so the resumed run's log equals an uninterrupted run's except that
every later ``hours`` value is larger by exactly the lost time, which is also
recorded per epoch (``lost_seconds`` in the Parquet log) and per interruption
(``interruptions`` in run.json). Nothing is hidden.

How the lost time is known:
- on SIGTERM/SIGUSR1 the trainer stops at the next step, stops the clock and
  records the seconds of the unfinished epoch (``how: signal``);
- on a death without warning (SIGKILL alone, the OOM killer, a node failure)
  the epoch marker left in the work directory tells, on the next start, how
  long the epoch had trained: exactly, when its training loop had finished
  (``how: killed after training``), or up to its last heartbeat, a few
  seconds short (``how: killed, estimated from heartbeat``).

No torch here: every trainer (PyTorch images, SQuAD, TensorFlow) drives its
epoch loop through one ``EpochGuard``, so all of them stop, record and count
alike.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_json
from dawnpipe.runinfo import now_iso

# Signals that mean "stop soon": SIGTERM (walltime, scancel, requeue,
# preemption) and SIGUSR1 (what `sbatch --signal=USR1@<s>` sends before the walltime).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
HEARTBEAT_SECONDS = 1.0


class Interrupted(DawnpipeError):
    """Training stopped on a signal; the per-epoch state allows resuming."""


class StopRequest:
    """While active, STOP_SIGNALS set ``requested`` instead of killing the process."""

    def __init__(self):
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, _frame) -> None:
        self.signal_name = signal.Signals(signum).name

    @contextlib.contextmanager
    def active(self):
        previous = {}
        try:
            for sig in STOP_SIGNALS:
                previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: leave the default handlers
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class EpochJournal:
    """The interruptions of one run, kept in its work directory.

    ``epoch.json`` marks the epoch in progress (written before its clock starts,
    touched every few seconds while it trains, removed once its state is
    saved); ``interruptions.json`` lists what each interruption lost. Both
    carry the run's settings hash: a journal of another configuration is ignored.
    """

    def __init__(self, work_dir: Path, settings_hash: str):
        self.marker = Path(work_dir) / "epoch.json"
        self.path = Path(work_dir) / "interruptions.json"
        self.settings_hash = settings_hash
        self._last_beat = 0.0
        self.records: list[dict[str, Any]] = []
        if self.path.exists():
            doc = read_json(self.path)
            if doc.get("settings_hash") == settings_hash:
                self.records = list(doc.get("interruptions", []))

    def reset(self) -> None:
        """A fresh start: forget earlier attempts."""
        self.records = []
        for p in (self.marker, self.path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    # -- the epoch in progress
    def begin(self, epoch: int, clock_seconds: float) -> None:
        write_json(
            self.marker,
            {
                "settings_hash": self.settings_hash,
                "epoch": epoch,
                "clock_seconds": clock_seconds,
                "started_unix": time.time(),
                "trained_seconds": None,
                "pid": os.getpid(),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            },
        )
        self._last_beat = time.monotonic()

    def heartbeat(self) -> None:
        """Cheap enough to call every step: touches the marker every few seconds."""
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_SECONDS:
            self._last_beat = now
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.marker)

    def trained(self, epoch: int, seconds: float) -> None:
        """The epoch's training loop finished (evaluation and saving follow)."""
        doc = self._marker_doc()
        if doc and doc["epoch"] == epoch:
            write_json(self.marker, {**doc, "trained_seconds": seconds})

    def saved(self, epoch: int) -> None:
        """The epoch's state is on disk: nothing of it can be lost any more."""
        doc = self._marker_doc()
        if doc and doc["epoch"] <= epoch:
            self.marker.unlink()

    # -- interruptions
    def interrupted(self, epoch: int, lost_seconds: float, signal_name: str) -> dict[str, Any]:
        """Record a stop on a signal during ``epoch`` (1-based) after ``lost_seconds`` of its training."""
        record = self._record(epoch, lost_seconds, f"signal {signal_name}")
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        return record

    def recover(self, next_epoch: int) -> dict[str, Any] | None:
        """On start: turn the marker a killed process left for ``next_epoch``
        into a record (None if there is none). A marker of another epoch or
        configuration is stale (e.g. its state was discarded) and is dropped."""
        doc = self._marker_doc()
        if doc is None:
            return None
        record = None
        if doc.get("settings_hash") == self.settings_hash and doc.get("epoch") == next_epoch:
            if doc.get("trained_seconds") is not None:
                record = self._record(next_epoch, float(doc["trained_seconds"]), "killed after training, before the epoch was saved")
            else:
                beat = self.marker.stat().st_mtime
                record = self._record(
                    next_epoch,
                    max(0.0, beat - float(doc["started_unix"])),
                    f"killed, estimated from the last heartbeat (at most {HEARTBEAT_SECONDS:g} s short)",
                )
        self.marker.unlink()
        return record

    def lost_in(self, epoch: int) -> float:
        return sum(r["lost_seconds"] for r in self.records if r["epoch"] == epoch)

    @property
    def lost_total(self) -> float:
        return sum(r["lost_seconds"] for r in self.records)

    def _record(self, epoch: int, lost_seconds: float, how: str) -> dict[str, Any]:
        record = {
            "epoch": int(epoch),
            "lost_seconds": float(lost_seconds),
            "how": how,
            "at": now_iso(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
        }
        self.records.append(record)
        write_json(self.path, {"settings_hash": self.settings_hash, "interruptions": self.records})
        return record

    def _marker_doc(self) -> dict[str, Any] | None:
        try:
            return read_json(self.marker)
        except FileNotFoundError:
            return None
        except DawnpipeError:  # a marker cut short by a crash mid-write cannot happen (atomic writes), but never fatal
            return None


class EpochGuard:
    """A trainer's side of interruptions around its epoch loop, the same in
    every framework. The trainer calls, in order: ``lost_before`` once after
    restoring its last state, then per epoch ``stop_before``, ``begin``,
    ``heartbeat`` every step and ``stop_within`` when a stop is due mid-epoch,
    ``trained`` when its training loop ends, ``lost_in`` for its log row and
    ``saved`` once its state is on disk; ``interruptions`` go into run.json.

    Only the process that writes (rank 0) keeps the journal; on other ranks
    the bookkeeping does nothing, but stops raise alike. Whether a stop is
    due is the caller's to say (``requested``): data-parallel ranks must agree
    on it, which only the trainer can arrange.
    """

    def __init__(self, stop: StopRequest, work_dir: Path, settings_hash: str, *, resume: bool, keeps_journal: bool = True):
        self.stop = stop
        self.work_dir = Path(work_dir)
        self.journal = EpochJournal(work_dir, settings_hash) if keeps_journal else None
        if self.journal is not None and not resume:
            self.journal.reset()

    @property
    def _who(self) -> str:
        return f"stopped by {self.stop.signal_name or 'a signal to another process'}"

    def lost_before(self, next_epoch: int) -> float:
        """Seconds of ``next_epoch``'s training that earlier attempts lost
        (a kill found from its marker, or stops on a signal), to be added to the
        training clock and the wall clock; says what it finds."""
        if self.journal is None:
            return 0.0
        if (found := self.journal.recover(next_epoch)) is not None:
            print(terminal_safe(f"train: an earlier attempt died in epoch {found['epoch']} ({found['how']}): {found['lost_seconds']:.1f}s of training lost"))
        pending = self.journal.lost_in(next_epoch)
        if pending:
            print(f"train: counting {pending:.1f}s of training lost to interruptions of epoch {next_epoch} in the training time")
        return pending

    def stop_before(self, epoch: int, requested: bool) -> None:
        """Between epochs: raise Interrupted (nothing lost) if a stop is due before ``epoch`` (1-based) starts."""
        if requested:
            raise Interrupted(f"{self._who} before epoch {epoch}; nothing lost, the state after epoch {epoch - 1} is in {self.work_dir}")

    def begin(self, epoch: int, clock_seconds: float) -> None:
        if self.journal is not None:
            self.journal.begin(epoch, clock_seconds)

    def heartbeat(self) -> None:
        if self.journal is not None:
            self.journal.heartbeat()

    def stop_within(self, epoch: int, lost_seconds: float) -> None:
        """Mid-epoch, the clock stopped: record what the unfinished ``epoch`` lost and raise Interrupted."""
        if self.journal is not None:
            self.journal.interrupted(epoch, lost_seconds, self.stop.signal_name or "another process's signal")
        raise Interrupted(
            f"{self._who} in epoch {epoch} after {lost_seconds:.1f}s of its training; the state after epoch "
            f"{epoch - 1} is in {self.work_dir}. Rerun to resume: the lost time will count in the training time"
        )

    def trained(self, epoch: int, seconds: float) -> None:
        if self.journal is not None:
            self.journal.trained(epoch, seconds)

    def saved(self, epoch: int) -> None:
        if self.journal is not None:
            self.journal.saved(epoch)

    def lost_in(self, epoch: int) -> float:
        """The log's ``lost_seconds`` of ``epoch``: training time earlier attempts lost in it."""
        return self.journal.lost_in(epoch) if self.journal is not None else 0.0

    def interruptions(self) -> tuple[list[dict[str, Any]], float]:
        """The run's interruptions and the training time they lost, in all (run.json's ``result``)."""
        if self.journal is None:
            return [], 0.0
        return self.journal.records, self.journal.lost_total
