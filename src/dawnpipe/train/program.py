"""The trainer of program entries: somebody's own training program run, timed
and verified by dawnpipe (docs/programs.md, program contracts 1 and 2).

    python -m dawnpipe train --entry config/entries/torch-fmnist.yaml --seed 0 --data data/prepared/fashion-mnist ...

What is measured, and how (the rules the program entries' numbers rest on;
docs/rules.md, "Program entries"):

- The clock is dawnpipe's: each line of the program's output is stamped when
  it arrives. The training clock of an epoch runs from ``run_start`` to its
  ``epoch_stop``, less what is off the clock, counted once
  (dawnpipe.programs.clock): dawnpipe's freezes while it takes and scores a
  model and, under contract 1 only, the program's evaluation windows cut to
  their bound. Start-up (process start to ``run_start``) beyond the
  configuration's allowance is added. The program's own ``time_ms`` gives the
  same clock computed from its times; where the two differ by more than
  ``CLOCK_TOLERANCE`` x dawnpipe's plus ``CLOCK_SLACK_S`` seconds, run.json and
  the page say so. The ranked time is always dawnpipe's.
- The program is handed only part of the test split: a class-stratified share
  is kept back (dawnpipe.programs.heldback). Every model is scored by dawnpipe
  on the whole split (ONNX Runtime, or TensorFlow for a SavedModel; weights
  are first exported by the program's own factory in a separate process,
  dawnpipe.programs.weights), with the whole program frozen. The log's metric
  is that score; the program's claims are compared with its score on the part
  it was given. The run's time is that of the first epoch whose score is at or
  above the threshold.
- Contract 2: the program hands each epoch's model over by its ``epoch_stop``;
  the reading thread freezes the program on that line. Contract 1: the model is
  written during the evaluation window and taken once the evaluation is
  complete.
- A run is not ranked (run.json ``program.excluded``, with every reason) when a
  claim at or above the threshold is contradicted, its model at the ranked
  epoch is better on the given test items than on the kept ones by more than
  sampling allows, it broke a freeze (a process outside the frozen set, work
  while frozen, an epoch's model written after it was taken), it placed work
  off the clock beyond the tolerance, or it reached the threshold with no
  training time at all.
- With stop_at_threshold, the program is stopped (SIGTERM, then SIGKILL after
  program.grace_seconds) once an epoch is verified.
- Failure, one line naming the entry and the reason, the program's last lines
  in the stage's log, no run files: a non-zero exit, no ``run_start``, broken
  MLLOG, its budget (program.budget_seconds) exceeded, no model file at all, or
  an end without ``run_stop``.
- A program whose command names ``{state}`` resumes after an interruption from
  outside (a kill, a preemption): dawnpipe keeps its side in the work
  directory (``ProgramLedger``: the epochs it scored, their clocks) and counts
  the training time the interruption lost. Any other program starts again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.display import terminal_safe
from dawnpipe.entries import config_hash
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path, read_json, write_json
from dawnpipe.programs import clock, contract, heldback, mllog_reader
from dawnpipe.programs import model_files as models
from dawnpipe.programs.freezer import DeviceWatch, Freezer, become_subreaper
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train import EntryError
from dawnpipe.train.finish import Ending, FinishedRun, finish
from dawnpipe.train.interruptions import HEARTBEAT_SECONDS, StopRequest
from dawnpipe.train.logbook import UNKNOWN, Logbook, epoch_row
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.program_process import Line, ProgramFailed, ProgramProcess, describe_exit, environment
from dawnpipe.train.settings import Entry, RunSettings

CLOCK_TOLERANCE = 0.02  # the program's clock may differ from dawnpipe's by 2% ...
CLOCK_SLACK_S = 1.0  # ... plus one second over the run, before the difference is flagged
AFTER_RUN_STOP_S = 60.0  # seconds a program may take to exit after logging run_stop
# dawnpipe's reasons to stop a program that do not make the run a failure
FINE_STOPS = ("threshold", "after run_stop", "violation")
THRESHOLD_FILE = "threshold.npz"
FILE_CLOCK_SLACK_NS = 50_000_000  # a model file's change time may read this much after its hand-over line (a file clock's granularity)
LEDGER_FILE = "program_ledger.json"
ANNOUNCED_FILE = "announced.jsonl"  # the epoch_stop lines of the attempt that runs, as they arrive


def check_entry(entry: Entry) -> None:
    """What the loader has not checked already: the workdir and the command's program exist."""
    program = entry.program
    if program.get("source"):
        return  # fetched by the fetch_program stage; checked when it runs
    workdir = program_dir(entry)
    if not workdir.is_dir():
        raise EntryError(f"field 'program.workdir': {workdir} is not a directory")


def default_tolerance(task) -> float:
    return 0.1 if task.metric_scale == "percent" else 0.001


def program_dir(entry: Entry) -> Path:
    """Where the command runs: the workdir below the project root (where the pipeline runs: the current
    directory), an absolute workdir, or the workdir below the fetched checkout (data/programs/<entry>)."""
    program = entry.program
    base = Path("data", "programs", entry.id) if program.get("source") else Path()
    return (base / program["workdir"]).resolve()


def visible_device(wanted: str) -> str:
    """What {device} says: cuda when asked for, or (auto) when NVML sees a GPU this process may use; else cpu."""
    if wanted != "auto":
        return wanted
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return "cuda" if pynvml.nvmlDeviceGetCount() > 0 else "cpu"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU to use
        return "cpu"


# ------------------------------------------------------------------ the data a program is given
@dataclass
class GivenData:
    """The test split dawnpipe scores on, the part kept back from the program, and the program's copy of what it is given."""

    test: Any  # the whole (limited) test split: dawnpipe.data.loader.Split
    kept: np.ndarray  # indices of the test split never handed to the program
    given: np.ndarray  # the others
    directory: Path  # {data}: manifest.json and arrays of the given items
    fraction: float

    @classmethod
    def make(cls, prepared: Path, settings: RunSettings, work: Path) -> GivenData:
        """``{data}`` under ``work``: the training split (under train_limit) and the given part of the
        test split (under test_limit, less the kept items), written to a temporary directory and renamed."""
        from dawnpipe.data.arrays import save_array
        from dawnpipe.data.loader import load_split

        fraction = float(settings.programs.held_back_fraction)
        test = load_split(prepared, "test", settings.test_limit)
        if isinstance(test.images, np.ndarray):
            # scored from dawnpipe's own copy: the prepared files are the program's user's too, and a
            # program could rewrite them before an epoch_stop and put them back before the run ends
            test = dataclasses.replace(test, images=np.array(test.images), labels=np.array(test.labels))
        key = f"{settings.entry.id}/seed{settings.seed}"
        kept = heldback.draw(np.asarray(test.labels), fraction, key)
        given = heldback.given_indices(len(test.labels), kept)
        out, tmp = work / "data", work / "data.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        manifest = read_json(prepared / "manifest.json")
        train = load_split(prepared, "train", settings.train_limit)
        for split, images, labels in (
            ("train", np.asarray(train.images), np.asarray(train.labels)),
            ("test", np.asarray(test.images)[given], np.asarray(test.labels)[given]),
        ):
            entry = dict(manifest["splits"][split])
            if "class_counts" in entry:  # of what it is given
                counts = np.bincount(labels.astype(np.int64), minlength=len(manifest["classes"]))
                entry["class_counts"] = {name: int(counts[i]) for i, name in enumerate(manifest["classes"])}
            entry |= {
                "items": int(len(labels)),
                "images": save_array(tmp / f"{split}_images.npy", np.ascontiguousarray(images)),
                "labels": save_array(tmp / f"{split}_labels.npy", np.ascontiguousarray(labels)),
            }
            manifest["splits"][split] = entry
        manifest["splits"] = {k: v for k, v in manifest["splits"].items() if k in ("train", "test")}
        limits = {k: v for k, v in (("train", settings.train_limit), ("test", settings.test_limit)) if v is not None}
        if limits:
            manifest["limited"] = limits
        manifest["kept_back"] = {"test_items": int(len(kept)), "fraction": fraction}
        write_json(tmp / "manifest.json", manifest)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        return cls(test, kept, given, out.resolve(), fraction)

    def layout(self, kind: str, work: Path, task: str, field: str | None = None) -> Path:
        """The given items, no others, in a layout the ecosystem's loaders read (``{torchvision}``, ``{npz}``)."""
        from dawnpipe.data.layouts import write_layout

        n = {split: int(read_json(self.directory / "manifest.json")["splits"][split]["items"]) for split in ("train", "test")}
        path = write_layout(kind, self.directory, work / f"layout-{kind}", np.arange(n["train"]), np.arange(n["test"]), task, field=field)
        return Path(path).resolve()


# ------------------------------------------------------------------ dawnpipe's score of a model
@dataclass(frozen=True)
class Score:
    whole: dict[str, float]  # the log's metrics: the whole test split
    given: dict[str, float]  # on the items the program was given: what its claims are compared with
    correct: np.ndarray  # per item of the whole split, for the task's metric
    seconds: float  # how long scoring took


class Scorer:
    """dawnpipe's score of a program's model files on the whole test split."""

    def __init__(self, given: GivenData, task, threads: int | None):
        self.task, self.given = task, given
        self.classes = len(given.test.classes)
        self.item_shape = tuple(given.test.images.shape[1:])
        self.threads = threads or len(os.sched_getaffinity(0))
        self.topk = 5 if "top5Accuracy" in task.log_columns else 1
        self.labels = np.asarray(given.test.labels)

    def score(self, model: models.ModelFile) -> Score:
        began = time.perf_counter()
        if model.format == models.ONNX:
            loaded = models.load_onnx(model, threads=self.threads, item_shape=self.item_shape)
            correct = models.correct_items(loaded.logits, self.given.test.images, self.labels, classes=self.classes, topk=self.topk, source=model.source)
        else:
            with models.savedmodel_dir(model) as root:
                loaded = models.load_savedmodel(model, root, threads=self.threads, item_shape=self.item_shape)
                correct = models.correct_items(loaded.logits, self.given.test.images, self.labels, classes=self.classes, topk=self.topk, source=model.source)
        whole = {column: 100.0 * float(hits.mean()) for column, hits in correct.items()}
        given = {column: 100.0 * float(hits[self.given.given].mean()) for column, hits in correct.items()}
        return Score(whole, given, correct[self.task.metric_column], time.perf_counter() - began)


# ------------------------------------------------------------------ resuming
@dataclass
class ProgramLedger:
    """dawnpipe's side of a program run, kept in the work directory so that an interrupted run resumes:
    the rows it scored (their clocks included), the interruptions, the attempts' processes."""

    path: Path
    settings_hash: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    interruptions: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # per-attempt facts, summed: start-up, freezes, ...
    heartbeat: dict[str, Any] | None = None  # the last clock reading of the attempt that is running
    attempt: dict[str, Any] | None = None  # the process of the attempt that is running
    started_epoch: int | None = 0  # the last epoch an attempt logged epoch_start for (resumable runs; None: not kept)

    @classmethod
    def load(cls, path: Path, settings_hash: str, resume: bool) -> ProgramLedger:
        if resume and path.is_file():
            try:
                doc = read_json(path)
            except DawnpipeError:
                doc = None
            if isinstance(doc, dict) and doc.get("settings_hash") == settings_hash:
                kept = {k: doc[k] for k in ("rows", "claims", "interruptions", "reasons", "facts", "heartbeat", "attempt")}
                started = doc.get("started_epoch")  # absent from a ledger an older dawnpipe wrote: not known
                return cls(path, settings_hash, **kept, started_epoch=started if isinstance(started, int) else None)
        return cls(path, settings_hash)

    def save(self) -> None:
        doc = {
            "settings_hash": self.settings_hash,
            **{k: getattr(self, k) for k in ("rows", "claims", "interruptions", "reasons", "facts", "heartbeat", "attempt", "started_epoch")},
            "rows": [{k: None if isinstance(v, float) and v != v else v for k, v in row.items()} for row in self.rows],  # NaN: null in JSON
        }
        write_json(self.path, doc)

    def log_rows(self) -> list[dict[str, Any]]:
        """The rows as the log takes them (a null of the JSON file is NaN again)."""
        return [{k: float("nan") if v is None and k != "held_back" else v for k, v in row.items()} for row in self.rows]

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    @property
    def last_epoch(self) -> int:
        return int(self.rows[-1]["epoch"]) if self.rows else 0

    @property
    def wall_seconds(self) -> float:
        """The wall time of the earlier attempts: to the last row kept, and what the interruptions after it lost."""
        lost = sum(i["lost_seconds"] for i in self.interruptions if i["epoch"] > self.last_epoch)
        return (self.rows[-1]["wall_hours"] * 3600.0 if self.rows else 0.0) + lost

    @property
    def clock_seconds(self) -> tuple[float, float]:
        """The clocks (dawnpipe's, the program's) at the last row kept, interruptions included."""
        lost = sum(i["lost_seconds"] for i in self.interruptions if i["epoch"] > self.last_epoch)
        if not self.rows:
            return lost, lost
        return self.rows[-1]["hours"] * 3600.0 + lost, self.rows[-1]["program_hours"] * 3600.0 + lost


def data_fingerprint(prepared: Path) -> dict[str, str]:
    """sha256 of every file of dawnpipe's prepared data directory (a program must not write there)."""
    import hashlib

    found = {}
    for path in sorted(p for p in Path(prepared).rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        found[str(path.relative_to(prepared))] = digest.hexdigest()
    return found


def _stop_leftover(attempt: dict[str, Any] | None) -> None:
    """An earlier attempt's program still running (its harness was killed, the program was in its own session): gone."""
    if not attempt:
        return
    import psutil

    try:
        proc = psutil.Process(int(attempt["pid"]))
        if abs(proc.create_time() - float(attempt["create_time"])) < 0.01:
            for p in [*proc.children(recursive=True), proc]:
                try:
                    p.kill()
                except psutil.Error:
                    pass
    except (psutil.Error, KeyError, ValueError, TypeError):
        pass
    cgroup = attempt.get("cgroup")
    if cgroup and Path(cgroup).is_dir():
        freezer = Freezer("cgroup v2 freezer" if (Path(cgroup) / "cgroup.freeze").exists() else "cgroup v1 freezer", Path(cgroup))
        freezer.kill_all()


# ------------------------------------------------------------------ the run
def train(settings: RunSettings, data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> FinishedRun:
    """Run the program of ``settings``' entry once (or on from where an interrupted run left it); what it did."""
    label = settings.label
    become_subreaper()  # orphans of the program stay in sight (dawnpipe.programs.freezer)
    run = ProgramRun(settings, data_dir, out, threads, resume)
    try:
        with StopRequest().active() as stop:
            return run.execute(stop)
    except ProgramFailed as e:
        if run.process is not None:
            run.process.print_tail()
        if not run.interrupted:
            run.ledger.clear()  # a failed run starts again from nothing
        raise DawnpipeError(f"program entry {label}: {e}; the program's last lines are in the stage's log") from None
    finally:
        run.close()


@dataclass
class Taken:
    """A model file dawnpipe took: where, and what it was then (a later write is a violation)."""

    path: Path
    signature: tuple[int, int]  # (size or file count, newest change time in ns)


def _file_clock_offset(directory: Path) -> int:
    """How far the clock that stamps files in ``directory`` runs ahead of this process's (ns): a file system on another
    machine (NFS, a cluster's shared storage) stamps change times with its server's clock."""
    probe = directory / ".dawnpipe-clock"
    before = time.time_ns()
    probe.write_bytes(b"")
    offset = os.lstat(probe).st_ctime_ns - before
    probe.unlink()
    return offset


def _signature(path: Path) -> tuple[int, int]:
    """(size, or the number of entries of a directory; the newest status change time in ns). The change time
    (ctime), not the modification time: a write, a rename into place and a reset of the modification time
    (os.utime) all set it to the moment they happen, and nothing but the system's clock can set it back."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, st.st_ctime_ns
    count, newest = 0, st.st_ctime_ns
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in [*dirnames, *filenames]:
            s = os.lstat(Path(dirpath) / name)
            count += 1
            newest = max(newest, s.st_ctime_ns)
    return count, newest


class ProgramRun:
    def __init__(self, settings: RunSettings, data_dir: Path, out: Outputs, threads: int | None, resume: bool):
        self.settings, self.out = settings, out
        self.entry = settings.entry
        self.program = self.entry.program
        self.contract = int(self.program.get("contract", 1))
        self.rules = settings.programs
        self.task = get_task(self.entry.task)
        self.threshold = settings.threshold
        self.tolerance = self.program.get("tolerance", default_tolerance(self.task))
        self.threads = threads
        self.work = out.work_dir
        self.models_dir = self.work / "models"
        self.exported_dir = self.work / "exported"
        self.state_dir = self.work / "state"
        self.uses = contract.named_placeholders(self.program)
        self.resumable = "state" in self.uses
        self.ledger = ProgramLedger.load(self.work / LEDGER_FILE, settings.config_hash, resume and self.resumable)
        _stop_leftover(self.ledger.attempt)
        self.prepared = Path(data_dir)
        self.fingerprint = data_fingerprint(self.prepared)  # checked again when the program has ended
        self.given = GivenData.make(self.prepared, settings, self.work)
        self.process: ProgramProcess | None = None
        self.freezer: Freezer | None = None
        self.rule = clock.ClockRule(self.contract)
        self.scores: dict[int, Score] = {}
        self.taken: dict[int, Taken] = {}
        self.model_format: str | None = None
        self.weights_framework: str | None = None
        self._scorer: Scorer | None = None
        self._exporter = None
        self._exports: dict[int, clock.Span] = {}  # epoch -> when the program's factory exported its weights (dawnpipe's clock)
        self._exporter_waiting = None  # the thread waiting for the export worker's first answer
        self._exporter_error: DawnpipeError | None = None
        self.program_env: dict[str, str] = {}  # the entry's program.env, filled
        self.file_clock_offset_ns = 0  # the model directory's file clock against this process's (_file_clock_offset)
        self._arrival_lock = threading.Lock()  # the reader threads' (stdout's, stderr's) view of contract 1 evaluations
        self._evaluation_lines: dict[str, set[str]] = {}  # epoch -> the lines of its evaluation read so far
        self._epoch_starts: dict[Any, tuple[float, float]] = {}  # epoch_num -> (stamp, time_ms) of its epoch_start, as read (contract 2)
        self.device_watch: DeviceWatch | None = None
        self.values: dict[str, str] = {}
        self.command_words: list[str] = []
        self.interrupted = False
        self._stop_at_threshold = False
        self.startup_cpu = 0.0  # CPU seconds of the program's processes by its run_start
        self._last_heartbeat = 0.0
        self._epoch_started = False  # this attempt's first epoch_start read
        self.fresh = not (self.ledger.rows or self.ledger.interruptions or self.ledger.heartbeat)
        self.resumed_from = self.ledger.last_epoch if self.ledger.rows else None  # the epoch this attempt continues after
        self.timeline = mllog_reader.Timeline()
        self.base, self.wall_base = (0.0, 0.0), 0.0
        self._threshold_kept = _read_bytes(self.work / THRESHOLD_FILE)  # the model dawnpipe last wrote there, as written

    # ------------------------------------------------------------ the command
    def command(self) -> tuple[list[str], dict[str, str], Path]:
        for d in (self.models_dir, self.exported_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        self.file_clock_offset_ns = _file_clock_offset(self.models_dir)
        if self.fresh:
            shutil.rmtree(self.state_dir, ignore_errors=True)  # a run that starts from nothing: no state of an older one
        (self.work / ANNOUNCED_FILE).unlink(missing_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        threads = self.threads or len(os.sched_getaffinity(0))
        values = {
            "data": str(self.given.directory),
            "out": str(self.models_dir.resolve()),
            "state": str(self.state_dir.resolve()),
            "seed": str(self.settings.seed),
            "threshold": contract.format_value(self.threshold),
            "device": visible_device(self.entry.device),
            "threads": str(threads),
        }
        for kind in contract.DATA_LAYOUTS:
            if kind in self.uses:
                field = next((f"program.command[{i}]" for i, w in enumerate(self.program["command"]) if "{" + kind + "}" in w), "program.env")
                values[kind] = str(self.given.layout(kind, self.work, self.entry.task, field))
        self.values = values
        command, extra = contract.fill(self.program, values, self.entry.hyperparameters)
        self.command_words, self.program_env = command, dict(extra)
        cwd = program_dir(self.entry)
        if not cwd.is_dir():
            raise ProgramFailed(f"its workdir {cwd} is not a directory" + (" (run the fetch_program stage first)" if self.program.get("source") else ""))
        return command, environment(threads, extra), cwd

    def resume_point(self) -> None:
        """Where this attempt takes over: after the epochs kept (and those an attempt killed without a word handed over)."""
        self.recover_kill()
        if self._exporter is not None:  # one that exported a killed attempt's weights, before the entry's env was filled in
            self._exporter.close()
            self._exporter, self._exports = None, {}
        self.timeline = mllog_reader.Timeline(first_epoch=self.ledger.last_epoch + 1, resuming=not self.fresh, last_started=self.ledger.started_epoch)
        self.base = self.ledger.clock_seconds  # the clocks where this attempt takes over (interruptions included)
        self.wall_base = self.ledger.wall_seconds  # the wall time earlier attempts took, to their last kept row and their loss

    def execute(self, stop: StopRequest) -> FinishedRun:
        self.resume_point()
        command, env, cwd = self.command()
        resumed = f", resuming after epoch {self.ledger.last_epoch}" if self.ledger.rows else ""
        print(
            terminal_safe(
                f"train: {self.settings.label}: program {self.entry.model} (contract {self.contract}), "
                f"{self.task.metric_column} >= {self.threshold:g}{' (demo threshold)' if self.settings.demo_threshold else ''}, "
                f"device {self.values['device']}, {self.values['threads']} threads, budget {self.program['budget_seconds']:g} s, "
                f"{len(self.given.kept):,} of {len(self.given.test.labels):,} test items kept back{resumed}; in {cwd}: {' '.join(command)}"
            ),
            flush=True,
        )
        self.freezer = Freezer.create()
        self.device_watch = DeviceWatch()
        declared = (self.program.get("model") or {}).get("framework")
        if declared is not None and self._exporter is None:  # before the program: the worker is never one of its processes
            self._spawn_exporter(declared)
        proc = self.process = ProgramProcess(command, cwd=cwd, env=env, freezer=self.freezer, freeze_on=self._on_arrival)
        self._record_attempt(proc)
        print(f"train: the program runs with network {proc.network}; frozen while dawnpipe scores by {self.freezer.method}", flush=True)
        budget_end = proc.started + float(self.program["budget_seconds"])
        grace = float(self.program["grace_seconds"])
        failure: str | None = None
        try:
            for line in proc.lines():
                now = time.perf_counter()
                if stop.requested and proc.stopped_by is None:
                    proc.stop(f"dawnpipe got {stop.signal_name}", grace)
                    self.interrupted = self.resumable
                    failure = failure or (
                        f"interrupted: the train stage got {stop.signal_name}; "
                        + (
                            f"it resumes after epoch {self.ledger.last_epoch} when run again"
                            if self.resumable
                            else "it runs again from the start ({state} not used)"
                        )
                    )
                if now > budget_end and proc.stopped_by is None:
                    proc.stop("budget", grace)
                    failure = failure or f"ran past its budget of {self.program['budget_seconds']:g} s (program.budget_seconds)"
                if self.timeline.run_stop is not None and proc.stopped_by is None and now - self.timeline.run_stop[0] > AFTER_RUN_STOP_S:
                    proc.stop("after run_stop", grace)
                proc.enforce()
                self._heartbeat(now)
                if line is None or failure is not None or proc.stopped_by in ("broken", "threshold", "violation"):
                    if line is not None and line.frozen is not None:
                        proc.thaw()
                    continue  # after a stop, only drain what is left
                try:
                    self.take(line)
                except mllog_reader.BrokenLog as e:
                    failure = f"broken MLLOG: {e}"
                    proc.stop("broken", grace)
                except DawnpipeError as e:
                    failure = str(e)
                    proc.stop("broken", grace)
            code = proc.wait(timeout=max(1.0, grace))
            if code is None:
                proc.kill()
                code = proc.returncode
        finally:
            proc.kill()
        self._check_taken_models()
        now = data_fingerprint(self.prepared)
        changed = sorted(name for name in now.keys() | self.fingerprint.keys() if now.get(name) != self.fingerprint.get(name))
        if changed:
            self._violation(f"dawnpipe's prepared data changed while the program ran ({self.prepared / changed[0]})")
        if failure is not None:
            if self.interrupted:
                self._record_interruption("signal", stop.signal_name or "signal")
            raise ProgramFailed(failure)
        return self.finish(code)

    def _on_arrival(self, event: mllog_reader.Event, stamp: float) -> bool:
        """In the thread that reads the program's output, whether a line hands a model over and freezes the program at
        once: under contract 2 an epoch_stop (for a resumable run also noted, its stamp, so that an attempt killed
        before scoring it can still do so); under contract 1 the line that completes an epoch's evaluation (the later
        of its eval_stop and eval_accuracy), so that a flood of output read behind it buys the program no time."""
        if self.contract < 2:
            if event.key not in ("eval_stop", "eval_accuracy"):
                return False
            with self._arrival_lock:
                seen = self._evaluation_lines.setdefault(str(event.metadata.get("epoch_num")), set())
                seen.add(event.key)
                return seen == {"eval_stop", "eval_accuracy"}
        if event.key == "epoch_start":
            self._epoch_starts[event.metadata.get("epoch_num")] = (stamp, event.time_ms)
            return False
        if event.key != "epoch_stop":
            return False
        if self.resumable:
            epoch = event.metadata.get("epoch_num")
            doc = {"epoch": epoch, "stamp": stamp, "time_ms": event.time_ms, "start": self._epoch_starts.get(epoch)}
            with open(self.work / ANNOUNCED_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(doc) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return True

    def close(self) -> None:
        if self._exporter is not None:
            self._exporter.close()
            if self._exporter_waiting is not None:
                self._exporter_waiting.join(timeout=5)
        if self.process is not None:
            self.process.kill()

    # ------------------------------------------------------------ one line
    def take(self, line: Line) -> None:
        """One line of the program's output: its MLLOG event, if any, into the timeline; a model it hands over taken and scored
        while the program is frozen (the freeze, off the clock, ends here)."""
        epoch: int | None = None
        # this line's freeze: the reader thread's on its arrival, or one taken here; a freeze the reader
        # thread took for a later line, still queued, is that line's to end
        froze = line.frozen is not None
        try:
            if line.broken is not None:
                raise mllog_reader.BrokenLog(line.broken)
            event = line.event
            if event is None:
                return
            done = self.timeline.add(event, line.stamp)
            if event.key == "run_start":
                mark_training_clock(self.process.started - self.wall_base)  # the log's wall_hours on the telemetry samples (energy per epoch)
                self._startup_checked(line)
                self._exporter_ready(block=False)  # a factory that cannot build the network: said before the program trains on
            elif self.contract >= 2 and event.key == "epoch_stop":
                epoch = int(event.metadata["epoch_num"])
                if not froze and self.process.frozen is None:  # frozen already: for a later line, which thaws it
                    froze = self.process.freeze() is not None
                    if not froze:
                        self._freeze_failed()
                self._take_and_score(epoch, line, required=False)
            elif self.contract >= 2 and event.key == "eval_accuracy":
                self._claim(int(event.metadata["epoch_num"]))
            elif self.resumable and event.key == "epoch_start":
                self._epoch_start(int(event.metadata["epoch_num"]))
            elif self.contract < 2 and done is not None:  # the evaluation is complete, the model written
                epoch = done
                e = self.timeline.epochs[done]
                self.rule.windows.append(clock.Window(done, e.eval_start, e.eval_stop))
                if self.process.frozen is None:
                    froze = self.process.freeze() is not None
                    if not froze:
                        self._freeze_failed()
                self._take_and_score(done, line)
        finally:
            if froze and self.process.frozen is not None and self.process.stopped_by is None:
                self._thaw(line, epoch)
            if self._stop_at_threshold and self.process.stopped_by is None:
                print("train: stopping the program at the verified threshold (stop_at_threshold): SIGTERM to all of it", flush=True)
                self.process.stop("threshold", float(self.program["grace_seconds"]))

    def _epoch_start(self, epoch: int) -> None:
        """An epoch_start of a resumable run: the ledger keeps the last epoch any attempt started (a resumed attempt
        goes on after no other: mllog_reader.Timeline), and a resumed attempt's first says which epochs it skipped."""
        if not self._epoch_started:
            self._epoch_started = True
            if self.contract >= 2:
                self._note_skipped_epochs(epoch, f"goes on from epoch {epoch}")
        if self.ledger.started_epoch is not None and epoch > self.ledger.started_epoch:
            self.ledger.started_epoch = epoch
            self.ledger.save()

    def _note_skipped_epochs(self, first: int, what: str) -> None:
        """A resumed program that goes on after epochs dawnpipe never kept, or ends without them (``first``: the epoch
        after them; ``what`` the program does, for the line): an attempt died after the program saved its checkpoint and
        before dawnpipe read that epoch's epoch_stop. Those epochs are not scored (their models went with the attempt) and
        their training stays counted as lost time, on the interruption that lost them; said so."""
        if not self.ledger.interruptions:
            return
        noted = {e for i in self.ledger.interruptions for e in i.get("unscored_epochs", [])}  # by an attempt killed since
        skipped = [e for e in range(self.ledger.last_epoch + 1, first) if e not in noted]
        if not skipped:
            return
        self.ledger.interruptions[-1]["unscored_epochs"] = skipped
        self.ledger.save()
        words = ", ".join(map(str, skipped))
        print(
            f"train: the program {what}: epoch {words}, kept in its checkpoint, was never handed over to dawnpipe "
            "(the attempt died before its epoch_stop was read); not scored, its training counted as lost time",
            flush=True,
        )

    def _startup_checked(self, line: Line) -> None:
        self.startup_cpu = line.cpu_seconds if line.cpu_seconds is not None else 0.0
        startup = line.stamp - self.process.started
        allowance = float(self.rules.startup_allowance_cpu_seconds)
        words = f"train: start-up (process start to run_start): {startup:.1f} s, {self.startup_cpu:.1f} CPU seconds"
        if self.startup_cpu > allowance:
            words += (
                f", over the configuration's allowance of {allowance:g} CPU seconds (programs.startup_allowance_cpu_seconds): "
                f"{self._startup_excess():.1f} s of it are counted on the clock"
            )
        print(words, flush=True)

    def _freeze_failed(self) -> None:
        raise DawnpipeError(f"dawnpipe could not freeze the program ({self.process.freeze_error or 'unknown reason'})")

    def _thaw(self, line: Line, epoch: int | None) -> None:
        """Thaw the program; the freeze is off the clock; a violation found in it unranks the run and stops the program."""
        proc = self.process
        frozen_pids = set(self.freezer.tree()) if self.device_watch is not None and self.device_watch.active else set()
        start, end, violation = proc.thaw()
        if frozen_pids:
            violation = violation or self.device_watch.busy_since(time.time() - (time.perf_counter() - start), frozen_pids)
        if line.event is not None:
            exports = tuple(self._exports.values())  # the program's factory at work in this freeze (its epochs'): on the clock
            self._exports.clear()
            self.rule.freezes.append(clock.Freeze(start, end, line.stamp, line.event.time_ms, epoch if epoch is not None else -1, exports))
        if violation:
            self._violation(violation)

    def _violation(self, reason: str) -> None:
        """The program broke a rule that cannot be undone by counting: the run is not ranked, and a program still running is stopped."""
        running = self.process is not None and self.process.stopped_by is None and self.process.returncode is None
        if reason not in self.ledger.reasons:
            self.ledger.reasons.append(reason)
            print(terminal_safe(f"train: VIOLATION: {reason}: the run will not be ranked" + ("; the program is stopped" if running else "")), flush=True)
        if running:
            self.process.stop("violation", float(self.program["grace_seconds"]))

    # ------------------------------------------------------------ models
    def _find_model(self, epoch: int) -> Path | None:
        from dawnpipe.programs import weights

        names = [*models.expected_names(epoch), *weights.weights_names(epoch)]
        have = [self.models_dir / n for n in names if os.path.lexists(self.models_dir / n)]
        if len(have) > 1:
            raise DawnpipeError(f"epoch {epoch}: the program wrote {' and '.join(p.name for p in have)}; one model per epoch")
        return have[0] if have else None

    def _take_and_score(self, epoch: int, line: Line, required: bool = True) -> None:
        """Take epoch ``epoch``'s model (the program frozen), score it, and keep its row in the ledger."""
        path = self._find_model(epoch)
        if path is None:
            if required:
                raise DawnpipeError(
                    f"epoch {epoch}: the program wrote no model file ({self.models_dir}/epoch{epoch}.onnx, .savedmodel/, .pt or .weights.h5) "
                    "by the end of its evaluation"
                )
            return
        self._check_taken_models()
        signature = _signature(path)
        # a model trained on after the hand-over (contract 1: while dawnpipe read a burst of output), by the file system's clock
        late = signature[1] - self.file_clock_offset_ns > line.wall_ns + FILE_CLOCK_SLACK_NS
        model = self._read_model(epoch, path)  # read (and scored) while the program is frozen, late or not: its row is shown
        if self.model_format is not None and model.format != self.model_format:
            raise DawnpipeError(f"epoch {epoch}: a {model.format} model after {self.model_format} ones; one format per run")
        self.model_format = model.format
        self.taken[epoch] = Taken(path, signature)
        if self._scorer is None:
            self._scorer = Scorer(self.given, self.task, self.threads)
        first_before = self._first_reached()
        score = self._scorer.score(model)
        self.scores[epoch] = score
        if self.contract < 2:
            self.rule.bounds[epoch] = clock.evaluation_bound(float(self.rules.evaluation_factor), score.seconds)
        measured = score.whole[self.task.metric_column]
        reached = measured >= self.threshold
        if reached or first_before is None:
            self._save_threshold(model, {"measured": measured, "reached": bool(reached), "contract": self.contract})
        row = self.row(epoch, line)
        self.ledger.rows.append(row)
        self.ledger.save()
        fmt = self.task.format_metric
        words = (
            f"train: epoch {epoch}: dawnpipe measures {fmt(measured)} on the whole test split "
            f"({fmt(score.given[self.task.metric_column])} on the {len(self.given.given):,} items the program was given; "
            f"scored in {score.seconds:.1f} s, the program frozen), clock {row['hours'] * 3600.0:.1f} s"
        )
        first = first_before is None and reached
        if first:
            words += f"  <- {'demo threshold' if self.settings.demo_threshold else 'threshold'} {self.threshold:g} reached"
        print(terminal_safe(words), flush=True)
        if self.contract < 2:
            self._claim(epoch)
        if late:  # the run is not ranked and the program is stopped, once its model is taken
            handover = "its epoch_stop" if self.contract >= 2 else "the end of its evaluation"
            self._violation(f"epoch {epoch}'s model ({path.name}) was written after the program logged {handover}")
        if first and self.settings.stop_at_threshold:
            self._stop_at_threshold = True  # once the freeze has been checked and ended (take)

    def _save_threshold(self, model: models.ModelFile, facts: dict[str, Any]) -> None:
        """The model the run will publish as model.pt, and its bytes, which finish checks it against."""
        self._threshold_kept = models.save_archive(self.work / THRESHOLD_FILE, model, facts)

    def _read_model(self, epoch: int, path: Path) -> models.ModelFile:
        from dawnpipe.programs import weights

        framework = weights.framework_of(path)
        if framework is None:
            return models.read_model(self.models_dir, epoch)
        declared = (self.program.get("model") or {}).get("framework")
        if declared is not None and framework != declared:
            raise DawnpipeError(f"epoch {epoch}: the program wrote {path.name}, {framework} weights, but its entry's program.model.framework is {declared}")
        if self._exporter is None:
            self._spawn_exporter(framework)
        self._exporter_ready()
        began = time.perf_counter()  # the program's factory at work from here: its time is the program's (clock.Freeze.export)
        try:
            return self._exporter.export(path, self.exported_dir)
        finally:
            self._exports[epoch] = (began, time.perf_counter())

    def _spawn_exporter(self, framework: str) -> None:
        """Start the export worker of the program's weights (dawnpipe.programs.weights): it imports the program's factory
        and builds the network once, while this process goes on; ``_exporter_ready`` waits for its answer."""
        from dawnpipe.programs import weights

        self.weights_framework = framework
        self._exporter = weights.ExportWorker(
            self.program,
            program_dir(self.entry),
            framework,
            item_shape=tuple(self.given.test.images.shape[1:]),
            threads=int(self.values["threads"]),
            env=self.program_env,
            log=self.work / "export_worker.log",
        )
        self._exporter.spawn()
        if self.freezer is not None and self._exporter.pid is not None:
            self.freezer.own_children.add(self._exporter.pid)

        def wait() -> None:
            try:
                self._exporter.wait_ready()
            except DawnpipeError as e:
                self._exporter_error = e
            except Exception as e:  # the worker closed under it (the run ended first): what it was doing, not a traceback
                self._exporter_error = DawnpipeError(f"the export worker did not start: {type(e).__name__}: {e}")

        self._exporter_waiting = threading.Thread(target=wait, name="export-worker-start", daemon=True)
        self._exporter_waiting.start()

    def _exporter_ready(self, block: bool = True) -> None:
        """The export worker has answered its setup (``block``: wait for it; else only if it has); its refusal raised here."""
        waiting = self._exporter_waiting
        if waiting is None or (not block and waiting.is_alive()):
            return
        waiting.join()
        self._exporter_waiting = None
        if self._exporter_error is not None:
            raise self._exporter_error

    def _check_taken_models(self) -> None:
        """Every model taken so far is still as it was taken: a later write of an epoch's model is a violation."""
        for epoch, taken in self.taken.items():
            if not os.path.lexists(taken.path):
                continue  # removed: the program may clean up after itself
            if _signature(taken.path) != taken.signature:
                self._violation(f"epoch {epoch}'s model ({taken.path.name}) was written again after dawnpipe took it")

    def _claim(self, epoch: int) -> None:
        """The program's claim for ``epoch``, once both it and dawnpipe's score are in; kept beside the epoch's row."""
        tl_epoch = self.timeline.epochs.get(epoch)
        claimed = tl_epoch.accuracy if tl_epoch is not None else None
        if claimed is None or any(c["epoch"] == epoch for c in self.ledger.claims):
            return
        score = self.scores.get(epoch)
        fmt = self.task.format_metric
        metric = self.task.metric_column
        if score is None:
            self.ledger.claims.append({"epoch": epoch, "claimed": claimed, "measured": None, "agrees": None})
            print(terminal_safe(f"train: epoch {epoch}: the program claims {fmt(claimed)}; it handed over no model of that epoch to check it"), flush=True)
            return
        measured = score.given[metric]
        agrees = abs(claimed - measured) <= self.tolerance
        self.ledger.claims.append({"epoch": epoch, "claimed": claimed, "measured": measured, "agrees": agrees})
        for row in self.ledger.rows:
            if row["epoch"] == epoch:
                row[f"claimed_{metric}"] = claimed
        words = f"train: epoch {epoch}: the program claims {fmt(claimed)}, dawnpipe measures {fmt(measured)} on the same items"
        if claimed >= self.threshold and not agrees:
            words += f"  <- CONTRADICTED (tolerance {self.tolerance:g}): the run will not be ranked"
            reason = (
                f"claims contradicted: epoch {epoch} claimed {fmt(claimed)}, dawnpipe measured {fmt(measured)} "
                f"on the model file it wrote (tolerance {self.tolerance:g})"
            )
            if not any(r.startswith("claims contradicted") for r in self.ledger.reasons):
                self.ledger.reasons.append(reason)
        self.ledger.save()
        print(terminal_safe(words), flush=True)

    def _first_reached(self) -> int | None:
        reached = [int(r["epoch"]) for r in self.ledger.rows if r[self.task.metric_column] >= self.threshold]
        return min(reached) if reached else None

    # ------------------------------------------------------------ resuming
    def _record_attempt(self, proc: ProgramProcess) -> None:
        import psutil

        try:
            created = psutil.Process(proc.proc.pid).create_time()
        except psutil.Error:
            created = None
        self.ledger.attempt = {"pid": proc.proc.pid, "create_time": created, "cgroup": str(self.freezer.cgroup) if self.freezer.cgroup else None}
        self.ledger.heartbeat = None
        self.ledger.save()

    def _clock_now(self, now: float) -> tuple[float, float] | None:
        """dawnpipe's training clock of this attempt right now (resumed base included), for the heartbeat."""
        tl = self.timeline
        if tl.run_start is None:
            return None
        seconds, _ = self.rule.training_seconds(tl.run_start, (now, now))
        return self.base[0] + seconds + self._startup_excess(), now

    def _heartbeat(self, now: float) -> None:
        if not self.resumable or now - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        self._last_heartbeat = now
        reading = self._clock_now(now)
        if reading is not None:
            tl = self.timeline
            self.ledger.heartbeat = {
                "clock_seconds": reading[0],
                "base_seconds": self.ledger.clock_seconds[0],
                # what this attempt's clock is made of, so that an epoch it handed over but had not scored is timed when the run resumes
                "run_start": list(tl.run_start),
                "freezes": [[f.start, f.end, f.cause_stamp, f.cause_time_ms, f.epoch, f.exports] for f in self.rule.freezes],
                "base": list(self.base),
                "startup_excess": self._startup_excess(),
                "wall_base": self.wall_base,
                "started": self.process.started,
                "startup_seconds": tl.run_start[0] - self.process.started,
                "startup_cpu_seconds": self.startup_cpu,
                "train_samples": tl.other.get("train_samples"),
            }
            self.ledger.save()

    def _record_interruption(self, how: str, signal_name: str) -> None:
        """The training this attempt did after its last kept epoch is lost: counted, as for dawnpipe's own runs."""
        reading = self._clock_now(time.perf_counter())
        lost = max(0.0, reading[0] - self.ledger.clock_seconds[0]) if reading is not None else 0.0
        self.ledger.interruptions.append({"epoch": self.ledger.last_epoch + 1, "lost_seconds": lost, "how": f"{how} ({signal_name})"})
        self.ledger.heartbeat, self.ledger.attempt = None, None
        self.ledger.save()

    def recover_kill(self) -> None:
        """An attempt that died without a word (SIGKILL, a node failure): the epochs it handed over but had not scored are
        scored now, timed by its own clock context; what it trained after the last of them, up to its last heartbeat, is lost."""
        beat = self.ledger.heartbeat
        if beat is None:
            return
        announced = []
        path = self.work / ANNOUNCED_FILE
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line the kill cut short: its epoch was not announced
                if isinstance(doc.get("epoch"), int) and doc["epoch"] > self.ledger.last_epoch:
                    announced.append(doc)
        kept = float(beat["base_seconds"])  # the clock where the killed attempt took over
        for doc in announced:
            if not self._score_announced(doc, beat):
                break
            kept = self.ledger.rows[-1]["hours"] * 3600.0
        lost = max(0.0, float(beat["clock_seconds"]) - kept)
        self.ledger.interruptions.append({"epoch": self.ledger.last_epoch + 1, "lost_seconds": lost, "how": "killed, estimated from heartbeat"})
        self.ledger.heartbeat = None
        self.ledger.save()
        path.unlink(missing_ok=True)

    def _score_announced(self, doc: dict[str, Any], beat: dict[str, Any]) -> bool:
        """Score epoch ``doc['epoch']``, whose epoch_stop the killed attempt read but did not live to score; False when its model is gone."""
        epoch = int(doc["epoch"])
        path = self._find_model(epoch)
        if path is None or not isinstance(doc.get("start"), list):  # no model, or an epoch_stop without its epoch_start: nothing to time
            return False
        self.values.setdefault("threads", str(self.threads or len(os.sched_getaffinity(0))))
        model = self._read_model(epoch, path)
        self._exports.pop(epoch, None)  # no freeze to place it in: the attempt that handed it over is gone
        self.model_format = model.format
        if self._scorer is None:
            self._scorer = Scorer(self.given, self.task, self.threads)
        first_before = self._first_reached()
        score = self._scorer.score(model)
        rule = clock.ClockRule(self.contract, freezes=[clock.Freeze(*f[:5], tuple(tuple(x) for x in f[5]) if len(f) > 5 else ()) for f in beat["freezes"]])
        measured = score.whole[self.task.metric_column]
        if measured >= self.threshold or first_before is None:
            self._save_threshold(model, {"measured": measured, "reached": bool(measured >= self.threshold), "contract": self.contract})
        stop = (float(doc["stamp"]), float(doc["time_ms"]))
        self.ledger.rows.append(
            self._timed_row(
                epoch,
                score,
                rule,
                run_start=tuple(beat["run_start"]),
                epoch_span=(float(doc["start"][0]), stop[0]),
                handed=stop,
                exported=0.0,  # no freeze to place its export in: the attempt that handed it over is gone
                base=tuple(beat["base"]),
                excess=float(beat["startup_excess"]),
                wall_seconds=float(beat["wall_base"]) + stop[0] - float(beat["started"]),
                startup=(float(beat["startup_seconds"]), float(beat["startup_cpu_seconds"])),
                train_samples=beat.get("train_samples"),
            )
        )
        self.ledger.save()
        print(
            terminal_safe(f"train: epoch {epoch}: handed over before the interruption; dawnpipe measures {self.task.format_metric(measured)} now"), flush=True
        )
        return True

    # ------------------------------------------------------------ the outcome
    def _startup_excess(self) -> float:
        tl = self.timeline
        if tl.run_start is None or self.process is None:
            return 0.0
        return clock.startup_excess(tl.run_start[0] - self.process.started, self.startup_cpu, float(self.rules.startup_allowance_cpu_seconds))

    def finish(self, code: int | None) -> FinishedRun:
        proc, tl = self.process, self.timeline
        assert proc is not None
        stopped = proc.stopped_by in FINE_STOPS
        if tl.run_start is None:
            raise ProgramFailed(("it " + describe_exit(code) + " and " if code else "it ") + "never logged run_start")
        if not stopped and code != 0:
            raise ProgramFailed(f"it {describe_exit(code)}")
        if not stopped and tl.run_stop is None:
            raise ProgramFailed("it ended without logging run_stop")
        done_by_itself = proc.stopped_by in (None, "after run_stop") and tl.status == "success"
        if self.contract >= 2 and self.resumable and done_by_itself and not self._epoch_started and self.ledger.started_epoch:
            # done without starting an epoch: every epoch an earlier attempt started is in its checkpoint
            self._note_skipped_epochs(self.ledger.started_epoch + 1, "ends without training another epoch")
        self._check_taken_models()
        threshold_file = self.work / THRESHOLD_FILE
        if _read_bytes(threshold_file) != self._threshold_kept:
            self._violation(f"the model dawnpipe scored and kept ({THRESHOLD_FILE}) was changed after dawnpipe wrote it")
            if self._threshold_kept is not None:  # what is published as model.pt is what dawnpipe scored
                threshold_file.unlink(missing_ok=True)  # whatever stands there now, a link included
                with atomic_path(threshold_file) as tmp:
                    tmp.write_bytes(self._threshold_kept)
        rows = self.ledger.log_rows()
        if not rows:
            what = "handed over no model" if self.contract >= 2 else "logged no evaluation (eval_start, eval_accuracy, eval_stop) of any epoch"
            raise ProgramFailed(f"it {what}")
        logbook = Logbook(
            self.task.log_columns,
            self.task.metric_column,
            self.threshold,
            rows,
            demo=self.settings.demo_threshold,
            extra_columns=(f"claimed_{self.task.metric_column}", f"given_{self.task.metric_column}", "program_hours", "verify_seconds"),
            format_metric=self.task.format_metric,
        )
        last = rows[-1]
        ending = Ending(
            clock_seconds=last["hours"] * 3600.0,
            wall_start=tl.run_start[0],
            wall_end=tl.run_stop[0] if tl.run_stop is not None else None,
            stopped_early=proc.stopped_by in ("threshold",),
            resumed_from=self.resumed_from,
            interruptions=self.ledger.interruptions,
            lost_seconds=sum(i["lost_seconds"] for i in self.ledger.interruptions),
        )
        result = finish(
            logbook,
            self.out,
            self.settings,
            ending,
            threshold_checkpoint=self.work / THRESHOLD_FILE,
            own={"train_items": self.train_items()},
            mllog_keys=self.recipe_keys(),
        )
        at = logbook.reached_row or last
        ranked_s, program_s = at["hours"] * 3600.0, at["program_hours"] * 3600.0
        clock_record = {
            "epoch": int(at["epoch"]),
            "dawnpipe_seconds": ranked_s,
            "program_seconds": program_s,
            "agrees": abs(program_s - ranked_s) <= CLOCK_TOLERANCE * ranked_s + CLOCK_SLACK_S,
            "rule": f"|program - dawnpipe| <= {CLOCK_TOLERANCE:g} x dawnpipe + {CLOCK_SLACK_S:g} s",
        }
        if not clock_record["agrees"]:
            print(
                f"train: the program's own clock says {program_s:.1f} s to epoch {clock_record['epoch']}, dawnpipe's {ranked_s:.1f} s: "
                "they disagree (flagged); the ranked time is dawnpipe's",
                flush=True,
            )
        self._judge(at, ranked_s)
        program = self.record(clock_record, code, at)
        self.ledger.clear()
        return FinishedRun(result, self.environment(), program)

    def _judge(self, at: dict[str, Any], ranked_s: float) -> None:
        """The reasons found at the end (the ranked epoch's memorisation test, work off the clock, no training time)."""
        epoch = int(at["epoch"])
        test = at.get("held_back")
        if test is not None and test["memorised"]:
            fmt = self.task.format_metric
            self.ledger.reasons.append(
                f"test items learnt: at epoch {epoch} the model scores {fmt(test['given_accuracy'])} on the {test['given_items']:,} test items "
                f"the program was given and {fmt(test['kept_accuracy'])} on the {test['kept_items']:,} kept back, a gap sampling explains "
                f"with probability {test['p_value']:.2g} (not ranked below {test['alpha']:g})"
            )
        excess = at["startup_counted_seconds"] + at["evaluation_counted_seconds"]
        if clock.excess_unranks(excess, ranked_s):
            parts = []
            if at["startup_counted_seconds"] > 0:
                parts.append(
                    f"start-up {at['startup_seconds']:.1f} s with {at['startup_cpu_seconds']:.1f} CPU seconds of work, over the allowance of "
                    f"{float(self.rules.startup_allowance_cpu_seconds):g} (programs.startup_allowance_cpu_seconds): {at['startup_counted_seconds']:.1f} s counted"
                )
            if at["evaluation_counted_seconds"] > 0:
                parts.append(f"evaluation windows {at['evaluation_counted_seconds']:.1f} s longer than dawnpipe's scoring of the same models allows")
            self.ledger.reasons.append(f"work off the clock: {'; '.join(parts)} (counted on the clock, and not ranked)")
        if at[self.task.metric_column] >= self.threshold and epoch < 1:
            self.ledger.reasons.append(f"no training: the threshold was reached by a model of epoch {epoch}, before any epoch of training")
        elif at[self.task.metric_column] >= self.threshold and ranked_s <= 0.0:
            self.ledger.reasons.append(f"no training time: epoch {epoch} reached the threshold with nothing on dawnpipe's clock")

    def recipe_keys(self) -> dict[str, Any]:
        """The recipe keys the program logged itself, as MLPerf names them (batch size, optimizer, ...): scalars only."""
        wanted = ("global_batch_size", "gradient_accumulation_steps")
        return {k: v for k, v in self.timeline.other.items() if (k in wanted or k.startswith("opt_")) and isinstance(v, int | float | str | bool)}

    def row(self, n: int, line: Line) -> dict[str, Any]:
        """Epoch ``n``'s row, once its model is scored: dawnpipe's score, both clocks, and what the clocks left out.
        Everything it depends on (run_start, the freezes and evaluation windows before its epoch_stop) is known by then."""
        tl = self.timeline
        e = tl.epochs[n]
        # the clock runs to the moment the model is handed over: epoch_stop (contract 2); under contract 1 the line that
        # completed the evaluation (its eval_stop, or an eval_accuracy logged after it: what the program did in between is on the clock)
        handed = e.stop if self.contract >= 2 else (line.stamp, line.event.time_ms)
        # this epoch's own export (the program's factory, in the freeze after its hand-over) belongs to this epoch, as a
        # program's own export of ONNX before its epoch_stop does; an earlier epoch's lies on the clock before handed
        export = self._exports.get(n)
        return self._timed_row(
            n,
            self.scores[n],
            self.rule,
            run_start=tl.run_start,
            epoch_span=(e.start[0], e.stop[0]),
            handed=handed,
            exported=export[1] - export[0] if export is not None else 0.0,
            base=self.base,
            excess=self._startup_excess(),
            # from starting the program (earlier attempts included) to handing the model over (weights: to the end of
            # their export, which is on the clock): the clock never exceeds it
            wall_seconds=self.wall_base + (export[1] if export is not None else handed[0]) - self.process.started,
            startup=(tl.run_start[0] - self.process.started, self.startup_cpu),
            train_samples=tl.other.get("train_samples"),
        )

    def _timed_row(
        self,
        epoch: int,
        score: Score,
        rule: clock.ClockRule,
        *,
        run_start: tuple[float, float],
        epoch_span: tuple[float, float],
        handed: tuple[float, float],
        exported: float,
        base: tuple[float, float],
        excess: float,
        wall_seconds: float,
        startup: tuple[float, float],
        train_samples: Any,
    ) -> dict[str, Any]:
        """Epoch ``epoch``'s row, timed by ``rule`` (the clock of the attempt that trained it): the log's columns
        as every run has them (its training loss, evaluation loss and learning rate are inside the program:
        unknown), dawnpipe's score on the given items, the program's claim (unknown until it arrives), and both
        clocks from ``run_start`` to the hand-over ``handed`` plus its own ``exported`` seconds and the earlier
        attempts' ``base``; the epoch's training is ``epoch_span`` less what was off the clock. Then what the
        clock left out or counted up to this epoch (run.json's program.time, for the ranked epoch);
        ``startup``: (seconds, CPU seconds) before run_start."""
        ours, theirs = rule.training_seconds(run_start, handed)
        parts = rule.parts(run_start[0], handed[0])
        start, stop = epoch_span
        samples = train_samples if _positive(train_samples) else self.train_items()  # items per epoch
        metric = self.task.metric_column
        test = heldback.memorisation_test(score.correct, self.given.test.labels, self.given.kept)
        return {
            **epoch_row(
                epoch,
                base[0] + ours + exported + excess,
                {c: score.whole[c] for c in self.task.log_columns},
                train_loss=None,
                eval_loss=None,
                eval_seconds=float(parts["evaluation_seconds"]),
                wall_seconds=wall_seconds,
                epoch_seconds=max(0.0, stop - start - clock.covered(rule.off_clock(0), start, stop)) if epoch > 0 else 0.0,
                lr=None,
                items=float(samples) if _positive(samples) else None,
                # what the attempts lost since the last row kept (an epoch never handed over has no row of its own)
                lost_seconds=float(sum(i["lost_seconds"] for i in self.ledger.interruptions if self.ledger.last_epoch < i["epoch"] <= epoch)),
            ),
            f"claimed_{metric}": UNKNOWN,  # filled in when the claim arrives (contract 2: after the epoch_stop)
            f"given_{metric}": score.given[metric],
            "program_hours": (base[1] + theirs + exported + excess) / 3600.0,
            "verify_seconds": score.seconds,
            "startup_seconds": startup[0],
            "startup_cpu_seconds": startup[1],
            "startup_counted_seconds": excess,
            "freeze_seconds": parts["freeze_seconds"],
            "export_seconds": clock.covered(rule.exports(), run_start[0], handed[0]) + exported,
            "evaluation_off_clock_seconds": parts["evaluation_off_clock_seconds"],
            "evaluation_counted_seconds": parts["evaluation_counted_seconds"],
            "held_back": test.as_dict() if test is not None else None,
        }

    def train_items(self) -> int:
        """Items of one epoch as the program was given them (the training split, under train_limit)."""
        return int(np.load(self.given.directory / "train_labels.npy", mmap_mode="r", allow_pickle=False).shape[0])

    def record(self, clock_record: dict[str, Any], code: int | None, at: dict[str, Any]) -> dict[str, Any]:
        """run.json's ``program``: what ran, the claims and what dawnpipe measured, both clocks, what was off the clock, and why it is not ranked."""
        proc, tl = self.process, self.timeline
        reasons = list(self.ledger.reasons)
        return {
            "contract": self.contract,
            "command": self.command_words,
            "workdir": str(program_dir(self.entry)),
            "source": self.program.get("source"),
            "model_format": self.model_format,
            "weights": self.weights_framework,
            "claims": self.ledger.claims,
            "tolerance": self.tolerance,
            "verified_epoch": int(at["epoch"]) if at[self.task.metric_column] >= self.threshold else None,
            "excluded": "; ".join(reasons) if reasons else None,
            "reasons": reasons,
            "clock": clock_record,
            "time": {
                "ranked_seconds": clock_record["dawnpipe_seconds"],
                "wall_seconds": at["wall_hours"] * 3600.0,
                "startup_seconds": at["startup_seconds"],
                "startup_cpu_seconds": at["startup_cpu_seconds"],
                "startup_allowance_cpu_seconds": float(self.rules.startup_allowance_cpu_seconds),
                "startup_counted_seconds": at["startup_counted_seconds"],
                "freeze_seconds": at["freeze_seconds"],
                "export_seconds": at["export_seconds"],
                "evaluation_off_clock_seconds": at["evaluation_off_clock_seconds"],
                "evaluation_counted_seconds": at["evaluation_counted_seconds"],
                "lost_seconds": sum(i["lost_seconds"] for i in self.ledger.interruptions),
                "scoring_seconds": sum(s.seconds for s in self.scores.values()),
            },
            "items_given": {"train": self.train_items(), "test": int(len(self.given.given))},
            "held_back": {
                "fraction": self.given.fraction,
                "kept_items": int(len(self.given.kept)),
                "given_items": int(len(self.given.given)),
                "test_at_ranked_epoch": at.get("held_back"),
            },
            "isolation": {"network": proc.network, "freezer": self.freezer.method if self.freezer else None},
            "startup_seconds": at["startup_seconds"],
            "verify_seconds": at["freeze_seconds"],
            "exit": {"code": code, "stopped_by_dawnpipe": proc.stopped_by, "run_stop_status": tl.status},
            "mllog_lines": tl.mllog_lines,
            "logged": tl.other,
            "output_lines_not_shown": proc.dropped_lines,
            "entry_hash": config_hash(self.entry.document),
        }

    def environment(self) -> dict[str, Any]:
        return {
            "framework": "program",
            "framework_version": f"program contract {self.contract}",
            "device": self.values["device"],
            "threads": int(self.values["threads"]),
        }  # the GPUs are the machine's (dawnpipe.runinfo): the program decides what it uses of them


def _read_bytes(path: Path) -> bytes | None:
    """A file's bytes, None when there is none."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
