"""The trainer of program entries: somebody's own training program run, timed
and verified by dawnpipe (docs/programs.md, program contract 1).

    python -m dawnpipe train --entry config/entries/torch-fmnist.yaml --seed 0 --data data/prepared/fashion-mnist ...

What is measured, and how (the rules the program entries' numbers rest on):

- The clock is dawnpipe's: each MLLOG line is stamped when it arrives. The
  training clock runs from ``run_start`` to the ``epoch_stop`` of the
  threshold epoch, less the evaluation windows (``eval_start`` to
  ``eval_stop``) and the time the program was paused while dawnpipe scored
  its models: the DAWNBench rule dawnpipe's own trainers follow. Start-up
  (process start to ``run_start``) is recorded beside it. The program's own
  ``time_ms`` gives the same clock computed from its times; where the two
  differ by more than ``CLOCK_TOLERANCE`` x dawnpipe's plus ``CLOCK_SLACK_S``
  seconds, run.json and the page say so. The ranked time is always dawnpipe's.
- Every evaluated epoch's model file is scored by dawnpipe on the test set
  (ONNX Runtime, or TensorFlow for a SavedModel), with the program paused
  (SIGSTOP to its group) so that scoring never lands on its clock. The log's
  metric is that score; the program's claim is kept beside it. The run's
  time is that of the first epoch whose score is at or above the threshold.
- A claim at or above the threshold that the score contradicts (by more than
  the entry's tolerance) makes the run unranked: run.json's
  ``program.excluded`` names the epoch, the claimed and the measured value,
  and the extract stage reports the run as excluded with that reason.
- With stop_at_threshold, the program is stopped (SIGTERM to its group, then
  SIGKILL after program.grace_seconds) once an epoch is verified.
- Failure, one line naming the entry and the reason, the program's last lines
  in the stage's log, no run files: a non-zero exit, no ``run_start``, broken
  MLLOG, its budget (program.budget_seconds) exceeded, a missing or unreadable
  model file, or an end without ``run_stop``.

A program run cannot resume: an interrupted one runs again from the start.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.display import terminal_safe
from dawnpipe.entries import config_hash
from dawnpipe.errors import DawnpipeError
from dawnpipe.programs import contract, mllog, models
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train import EntryError
from dawnpipe.train.interruptions import StopRequest
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import Outputs, publish_checkpoint
from dawnpipe.train.program_process import ProgramFailed, ProgramProcess, describe_exit

CLOCK_TOLERANCE = 0.02  # the program's clock may differ from dawnpipe's by 2% ...
CLOCK_SLACK_S = 1.0  # ... plus one second over the run, before the difference is flagged
AFTER_RUN_STOP_S = 60.0  # seconds a program may take to exit after logging run_stop
# dawnpipe's reasons to stop a program that do not make the run a failure
FINE_STOPS = ("threshold", "after run_stop")
THRESHOLD_FILE = "threshold.npz"


def check_entry(entry: dict[str, Any]) -> None:
    """What the loader has not checked already: the workdir and the command's program exist."""
    program = entry["program"]
    if program.get("source"):
        return  # fetched by the fetch_program stage; checked when it runs
    workdir = Path(program["workdir"])
    if not workdir.is_dir():
        raise EntryError(f"field 'program.workdir': {workdir} is not a directory")


def default_tolerance(task) -> float:
    return 0.1 if task.metric_scale == "percent" else 0.001


def program_dir(entry: dict[str, Any]) -> Path:
    """Where the command runs: the workdir below the project root (where the pipeline runs: the current
    directory), or below the fetched checkout (data/programs/<entry>)."""
    program = entry["program"]
    base = Path("data", "programs", entry["id"]) if program.get("source") else Path()
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


def limited_data(data: Path, settings: dict[str, Any], work: Path) -> Path:
    """The prepared data the program sees: ``data`` itself, or, under a config's
    train_limit/test_limit, a copy of their first items (so the program trains
    and evaluates on exactly what dawnpipe scores)."""
    from dawnpipe.data.arrays import save_array
    from dawnpipe.data.loader import load_split
    from dawnpipe.fileio import read_json, write_json

    limits = {"train": settings["train_limit"], "test": settings["test_limit"]}
    if all(v is None for v in limits.values()):
        return data.resolve()
    out = work / "data"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    manifest = read_json(data / "manifest.json")
    for split, limit in limits.items():
        part = load_split(data, split, limit)
        images, labels = np.ascontiguousarray(np.asarray(part.images)), np.ascontiguousarray(part.labels)
        entry = dict(manifest["splits"][split])
        entry |= {
            "items": int(len(labels)),
            "images": save_array(out / f"{split}_images.npy", images),
            "labels": save_array(out / f"{split}_labels.npy", labels),
        }
        manifest["splits"][split] = entry
    manifest["splits"] = {k: v for k, v in manifest["splits"].items() if k in limits}
    manifest["limited"] = {k: v for k, v in limits.items() if v is not None}
    write_json(out / "manifest.json", manifest)
    return out.resolve()


class Verifier:
    """dawnpipe's score of the program's model files on the test set (the same items the program was given)."""

    def __init__(self, data: Path, task, threads: int | None):
        from dawnpipe.data.loader import load_split

        self.task = task
        self.test = load_split(data, "test")
        self.classes = len(self.test.classes)
        self.item_shape = tuple(self.test.images.shape[1:])
        self.threads = threads or len(os.sched_getaffinity(0))
        self.topk = 5 if "top5Accuracy" in task.log_columns else 1

    def score(self, model: models.ModelFile) -> dict[str, float]:
        if model.format == models.ONNX:
            loaded = models.load_onnx(model, threads=self.threads, item_shape=self.item_shape)
            return models.score(loaded.logits, self.test.images, self.test.labels, classes=self.classes, topk=self.topk, source=model.source)
        with models.savedmodel_dir(model) as root:
            loaded = models.load_savedmodel(model, root, threads=self.threads, item_shape=self.item_shape)
            return models.score(loaded.logits, self.test.images, self.test.labels, classes=self.classes, topk=self.topk, source=model.source)


def train(settings: dict[str, Any], data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> dict[str, Any]:
    """Run the program of ``settings``' entry once; the summary for run.json (with ``program`` and ``environment``)."""
    del resume  # a program cannot resume: it runs again from the start
    entry = settings["entry"]
    label = f"{entry['id']} seed {settings['seed']}"
    run = ProgramRun(settings, data_dir, out, threads)
    try:
        with StopRequest().active() as stop:
            return run.execute(stop)
    except ProgramFailed as e:
        if run.process is not None:
            run.process.print_tail()
        raise DawnpipeError(f"program entry {label}: {e}; the program's last lines are in the stage's log") from None


class ProgramRun:
    def __init__(self, settings: dict[str, Any], data_dir: Path, out: Outputs, threads: int | None):
        self.settings, self.out = settings, out
        self.entry = settings["entry"]
        self.program = self.entry["program"]
        self.task = get_task(self.entry["task"])
        self.threshold = settings["threshold"]
        self.tolerance = self.program.get("tolerance", default_tolerance(self.task))
        self.threads = threads
        self.work = out.work_dir
        self.models_dir = self.work / "models"
        self.data = limited_data(Path(data_dir), settings, self.work)
        self.process: ProgramProcess | None = None
        self.timeline = mllog.Timeline()
        self.claims: list[dict[str, Any]] = []
        self.scores: dict[int, dict[str, float]] = {}
        self.verify_seconds: dict[int, float] = {}
        self.first_verified: int | None = None
        self.contradiction: dict[str, Any] | None = None
        self.model_format: str | None = None
        self._verifier: Verifier | None = None
        self.values: dict[str, str] = {}
        self.command_words: list[str] = []

    # ------------------------------------------------------------ the run
    def command(self) -> tuple[list[str], dict[str, str], Path]:
        shutil.rmtree(self.models_dir, ignore_errors=True)
        self.models_dir.mkdir(parents=True)
        threads = self.threads or len(os.sched_getaffinity(0))
        values = {
            "data": str(self.data),
            "out": str(self.models_dir.resolve()),
            "seed": str(self.settings["seed"]),
            "threshold": contract.format_value(self.threshold),
            "device": visible_device(self.entry["device"]),
            "threads": str(threads),
        }
        self.values = values
        command, extra = contract.fill(self.program, values, self.entry["hyperparameters"])
        self.command_words = command
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **extra}
        cwd = program_dir(self.entry)
        if not cwd.is_dir():
            raise ProgramFailed(f"its workdir {cwd} is not a directory" + (" (run the fetch_program stage first)" if self.program.get("source") else ""))
        return command, env, cwd

    def execute(self, stop: StopRequest) -> dict[str, Any]:
        command, env, cwd = self.command()
        print(
            terminal_safe(
                f"train: {self.entry['id']} seed {self.settings['seed']}: program {self.entry['model']} (contract {contract.CONTRACT}), "
                f"{self.task.metric_column} >= {self.threshold:g}{' (demo threshold)' if self.settings['demo_threshold'] else ''}, "
                f"device {self.values['device']}, {self.values['threads']} threads, budget {self.program['budget_seconds']:g} s; in {cwd}: {' '.join(command)}"
            ),
            flush=True,
        )
        proc = self.process = ProgramProcess(command, cwd=cwd, env=env)
        budget_end = proc.started + float(self.program["budget_seconds"])
        failure: str | None = None
        try:
            for line in proc.lines():
                now = time.perf_counter()
                if stop.requested and proc.stopped_by is None:
                    proc.stop(f"dawnpipe got {stop.signal_name}", float(self.program["grace_seconds"]))
                    failure = failure or f"stopped: the train stage got {stop.signal_name} (a program run cannot resume; it runs again from the start)"
                if now > budget_end and proc.stopped_by is None:
                    proc.stop("budget", float(self.program["grace_seconds"]))
                    failure = failure or f"ran past its budget of {self.program['budget_seconds']:g} s (program.budget_seconds)"
                if self.timeline.run_stop is not None and proc.stopped_by is None and now - self.timeline.run_stop[0] > AFTER_RUN_STOP_S:
                    proc.stop("after run_stop", float(self.program["grace_seconds"]))
                proc.enforce()
                if line is None or failure is not None or proc.stopped_by in ("broken", "threshold"):
                    continue  # after a stop, only drain what is left
                try:
                    self.take(line)
                except mllog.BrokenLog as e:
                    failure = f"broken MLLOG: {e}"
                    proc.stop("broken", float(self.program["grace_seconds"]))
                except DawnpipeError as e:
                    failure = str(e)
                    proc.stop("broken", float(self.program["grace_seconds"]))
            code = proc.wait(timeout=max(1.0, float(self.program["grace_seconds"])))
            if code is None:
                proc.kill()
                code = proc.returncode
        finally:
            proc.kill()
        if failure is not None:
            raise ProgramFailed(failure)
        return self.finish(code)

    def take(self, line) -> None:
        """One line of the program's output: its MLLOG event, if any, into the timeline; an evaluation it completes verified."""
        event = mllog.parse(line.text, line.number)
        if event is None:
            return
        done = self.timeline.add(event, line.stamp)
        if event.key == "run_start":
            mark_training_clock(line.stamp)  # places the log's wall_hours on the telemetry samples (energy per epoch)
        if done is not None:
            self.verify(done)

    def verify(self, epoch: int) -> None:
        """Score epoch ``epoch``'s model with the program paused; record the claim and what was measured."""
        proc = self.process
        assert proc is not None
        paused = proc.pause()
        try:
            model = models.read_model(self.models_dir, epoch)
            if self.model_format is not None and model.format != self.model_format:
                raise DawnpipeError(f"epoch {epoch}: a {model.format} model after {self.model_format} ones; one format per run")
            self.model_format = model.format
            if self._verifier is None:
                self._verifier = Verifier(self.data, self.task, self.threads)
            scores = self._verifier.score(model)
        finally:
            proc.resume(paused)
        self.verify_seconds[epoch] = proc.paused_spans[-1][1] - proc.paused_spans[-1][0]
        self.scores[epoch] = scores
        claimed = self.timeline.epochs[epoch].accuracy
        measured = scores[self.task.metric_column]
        agrees = abs(claimed - measured) <= self.tolerance
        self.claims.append({"epoch": epoch, "claimed": claimed, "measured": measured, "agrees": agrees})
        reached = measured >= self.threshold
        fmt = self.task.format_metric
        line = f"train: epoch {epoch}: the program claims {fmt(claimed)}, dawnpipe measures {fmt(measured)} (scored in {self.verify_seconds[epoch]:.1f} s, program paused)"
        if claimed >= self.threshold and not agrees and self.contradiction is None:
            self.contradiction = {"epoch": epoch, "claimed": claimed, "measured": measured}
            line += f"  <- CONTRADICTED (tolerance {self.tolerance:g}): the run will not be ranked"
        if reached and self.first_verified is None:
            self.first_verified = epoch
            models.save_archive(self.work / THRESHOLD_FILE, model, {"measured": measured, "claimed": claimed, "reached": True})
            line += f"  <- {'demo threshold' if self.settings['demo_threshold'] else 'threshold'} {self.threshold:g} verified"
        elif self.first_verified is None:
            models.save_archive(self.work / THRESHOLD_FILE, model, {"measured": measured, "claimed": claimed, "reached": False})
        print(terminal_safe(line), flush=True)
        if reached and self.settings["stop_at_threshold"] and proc.stopped_by is None:
            print("train: stopping the program at the verified threshold (stop_at_threshold), SIGTERM to its process group", flush=True)
            proc.stop("threshold", float(self.program["grace_seconds"]))

    # ------------------------------------------------------------ the outcome
    def finish(self, code: int | None) -> dict[str, Any]:
        proc, tl = self.process, self.timeline
        assert proc is not None
        stopped = proc.stopped_by in FINE_STOPS
        if tl.run_start is None:
            raise ProgramFailed(("it " + describe_exit(code) + " and " if code else "it ") + "never logged run_start")
        if not stopped and code != 0:
            raise ProgramFailed(f"it {describe_exit(code)}")
        if not stopped and tl.run_stop is None:
            raise ProgramFailed("it ended without logging run_stop")
        if not tl.evaluated:
            raise ProgramFailed("it logged no evaluation (eval_start, eval_accuracy, eval_stop) of any epoch")
        rows = self.rows()
        logbook = Logbook(
            self.task.log_columns,
            self.task.metric_column,
            self.threshold,
            rows,
            demo=self.settings["demo_threshold"],
            extra_columns=(f"claimed_{self.task.metric_column}", "program_hours", "verify_seconds"),
            format_metric=self.task.format_metric,
        )
        logbook.write(self.out.tsv, self.out.parquet)
        publish_checkpoint(self.work / THRESHOLD_FILE, self.out.checkpoint)
        reached = logbook.reached_row
        if reached is None:
            print(logbook.not_converged_message(), flush=True)
        last = rows[-1]
        at = reached or last
        dawnpipe_s, program_s = at["hours"] * 3600.0, at["program_hours"] * 3600.0
        clock = {
            "epoch": int(at["epoch"]),
            "dawnpipe_seconds": dawnpipe_s,
            "program_seconds": program_s,
            "agrees": abs(program_s - dawnpipe_s) <= CLOCK_TOLERANCE * dawnpipe_s + CLOCK_SLACK_S,
            "rule": f"|program - dawnpipe| <= {CLOCK_TOLERANCE:g} x dawnpipe + {CLOCK_SLACK_S:g} s",
        }
        if not clock["agrees"]:
            print(
                f"train: the program's own clock says {program_s:.1f} s to epoch {clock['epoch']}, dawnpipe's {dawnpipe_s:.1f} s: "
                "they disagree (flagged); the ranked time is dawnpipe's",
                flush=True,
            )
        wall_end = tl.run_stop[0] if tl.run_stop is not None else time.perf_counter()
        summary = {
            **logbook.summary(clock_seconds=last["hours"] * 3600.0, wall_seconds=wall_end - tl.run_start[0], stopped_early=stopped, resumed_from=None),
            "interruptions": [],
            "lost_seconds": 0.0,
            "train_items": self.train_items(),
        }
        summary["program"] = self.record(clock, code)
        summary["environment"] = self.environment()
        if self.out.mllog is not None:
            from dawnpipe.train import mllog as run_mllog

            run_mllog.write(
                self.out.mllog,
                settings=self.settings,
                rows=rows,
                metric=self.task.metric_column,
                run_start_unix=run_mllog.run_start_unix(tl.run_start[0]),
                train_samples=summary["train_items"],
                keys=self.recipe_keys(),
            )
        return summary

    def recipe_keys(self) -> dict[str, Any]:
        """The recipe keys the program logged itself, as MLPerf names them (batch size, optimizer, ...): scalars only."""
        wanted = ("global_batch_size", "gradient_accumulation_steps")
        return {k: v for k, v in self.timeline.other.items() if (k in wanted or k.startswith("opt_")) and isinstance(v, int | float | str | bool)}

    def rows(self) -> list[dict[str, Any]]:
        tl, pauses = self.timeline, self.process.paused_spans
        metric = self.task.metric_column
        samples = tl.other.get("train_samples")
        rows = []
        for e in tl.evaluated:
            ours, theirs = tl.training_seconds(e.number, pauses)
            start, stop = e.start[0], e.stop[0]
            within = sum(max(0.0, min(b, stop) - max(a, start)) for a, b in pauses)
            epoch_seconds = max(stop - start - within, 1e-9)
            rows.append(
                {
                    "epoch": e.number,
                    "hours": ours / 3600.0,
                    **{c: self.scores[e.number][c] for c in self.task.log_columns},
                    f"claimed_{metric}": e.accuracy,
                    "program_hours": theirs / 3600.0,
                    "verify_seconds": self.verify_seconds[e.number],
                    "wall_hours": (e.eval_stop[0] - tl.run_start[0]) / 3600.0,
                    "train_loss": float("nan"),
                    "eval_loss": float("nan"),
                    "eval_seconds": e.eval_stop[0] - e.eval_start[0],
                    "checkpoint_seconds": 0.0,
                    "epoch_train_seconds": epoch_seconds,
                    "lost_seconds": 0.0,
                    "lr": float("nan"),
                    "items_per_second": float(samples) / epoch_seconds if _positive(samples) else float("nan"),
                }
            )
        return rows

    def train_items(self) -> int:
        samples = self.timeline.other.get("train_samples")
        if _positive(samples):
            return int(samples)
        from dawnpipe.data.loader import load_split

        return len(load_split(self.data, "train").labels)

    def record(self, clock: dict[str, Any], code: int | None) -> dict[str, Any]:
        """run.json's ``program``: what ran, the claims and what dawnpipe measured, both clocks, and why it is not ranked, if it is not."""
        proc, tl = self.process, self.timeline
        excluded = None
        if self.contradiction is not None:
            c, fmt = self.contradiction, self.task.format_metric
            excluded = (
                f"claims contradicted: epoch {c['epoch']} claimed {fmt(c['claimed'])}, dawnpipe measured {fmt(c['measured'])} "
                f"on the model file it wrote (tolerance {self.tolerance:g})"
            )
        return {
            "contract": contract.CONTRACT,
            "command": self.command_words,
            "workdir": str(program_dir(self.entry)),
            "source": self.program.get("source"),
            "model_format": self.model_format,
            "claims": self.claims,
            "tolerance": self.tolerance,
            "verified_epoch": self.first_verified,
            "excluded": excluded,
            "clock": clock,
            "startup_seconds": tl.run_start[0] - proc.started,
            "verify_seconds": proc.paused_seconds(),
            "exit": {"code": code, "stopped_by_dawnpipe": proc.stopped_by, "run_stop_status": tl.status},
            "mllog_lines": tl.mllog_lines,
            "logged": tl.other,
            "output_lines_not_shown": proc.dropped_lines,
            "entry_hash": config_hash(self.entry),
        }

    def environment(self) -> dict[str, Any]:
        return {
            "framework": "program",
            "framework_version": f"program contract {contract.CONTRACT}",
            "device": self.values["device"],
            "threads": int(self.values["threads"]),
            "gpus": [],
        }


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
