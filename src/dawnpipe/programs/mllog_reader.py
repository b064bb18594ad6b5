"""A program's MLLOG lines, as they arrive, read one at a time and checked
against the contract (docs/programs.md). (The MLLOG dawnpipe writes of every
run, a program's included, is dawnpipe.train.mllog_writer's.)

    run_start; then per epoch N (1, 2, ...): epoch_start, epoch_stop, and, for an
    evaluated epoch, eval_start, eval_accuracy, eval_stop (all with
    metadata.epoch_num = N); finally run_stop with metadata.status.

A line is MLLOG when it holds ``:::MLLOG `` (as MLCommons' parser reads them:
anything before the marker, a logger's prefix say, is ignored). What follows
must be one JSON object with ``time_ms``, ``event_type`` and ``key``; other
keys than the contract's are kept as the program logged them (bounded). What
the program prints is untrusted: a line is cut at ``MAX_LINE`` characters,
its JSON is read with the caps of every file dawnpipe reads, and a problem is
a ``BrokenLog`` naming the line of the program's output and the reason.

``Timeline`` keeps, for each contract event, the time dawnpipe stamped on its
arrival (its own monotonic clock) beside the program's own ``time_ms``, so
both clocks of the run can be computed by one rule (dawnpipe.programs.clock).

An evaluation may come before any training: ``eval_start`` ... ``eval_stop``
with ``epoch_num`` 0 before the first ``epoch_start`` evaluates the model as
it starts (its training time is nil). A resumed run's timeline starts at the
epoch after the last one dawnpipe kept (``first_epoch``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import check_shape, reject_json_constant

TOKEN = ":::MLLOG "
MAX_LINE = 64 * 1024  # characters of one line of the program's output that are read
MAX_DEPTH = 16  # nesting of one MLLOG line's JSON
MAX_OTHER_KEYS = 64  # other keys kept for run.json (their first value each)
EVENT_TYPES = ("INTERVAL_START", "INTERVAL_END", "POINT_IN_TIME")
STATUSES = ("success", "aborted")
CONTRACT_KEYS = ("run_start", "run_stop", "epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy")


class BrokenLog(DawnpipeError):
    """The program's MLLOG breaks the contract: the message names the line and the reason."""


@dataclass(frozen=True)
class Event:
    key: str
    event_type: str
    time_ms: float
    value: Any
    metadata: dict[str, Any]
    line: int  # the line of the program's output (stdout and stderr together, from 1)


def parse(text: str, line: int) -> Event | None:
    """The MLLOG event of one line of output, or None when it holds no MLLOG; BrokenLog when it is MLLOG but broken."""
    at = text.find(TOKEN)
    if at < 0:
        return None
    where = f"line {line} of the program's output"
    body = text[at + len(TOKEN) :].strip()
    if len(text) >= MAX_LINE:
        raise BrokenLog(f"{where}: an MLLOG line of {MAX_LINE:,} characters or more (cut there); not read")
    try:
        doc = json.loads(body, parse_constant=reject_json_constant)
    except json.JSONDecodeError as e:
        raise BrokenLog(f"{where}: MLLOG that is not JSON ({e.msg} at column {e.colno + at + len(TOKEN)})") from None
    except (ValueError, RecursionError) as e:
        raise BrokenLog(f"{where}: MLLOG that is not JSON dawnpipe reads ({str(e)[:120] or 'nested too deeply'})") from None
    try:
        check_shape(doc, where, max_depth=MAX_DEPTH, max_nodes=10_000)
    except DawnpipeError as e:
        raise BrokenLog(str(e)) from None
    if not isinstance(doc, dict):
        raise BrokenLog(f"{where}: MLLOG must be one JSON object, got {type(doc).__name__}")
    key, kind, time_ms, metadata = doc.get("key"), doc.get("event_type"), doc.get("time_ms"), doc.get("metadata", {})
    if not isinstance(key, str) or not key or len(key) > 200:
        raise BrokenLog(f"{where}: field 'key': expected a name (1-200 characters), got {_show(key)}")
    if kind not in EVENT_TYPES:
        raise BrokenLog(f"{where}: {_name(key)}: field 'event_type': expected one of {', '.join(EVENT_TYPES)}, got {_show(kind)}")
    if isinstance(time_ms, bool) or not isinstance(time_ms, int | float) or not math.isfinite(time_ms) or time_ms < 0:
        raise BrokenLog(f"{where}: {_name(key)}: field 'time_ms': expected milliseconds since 1970, got {_show(time_ms)}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise BrokenLog(f"{where}: {_name(key)}: field 'metadata': expected an object, got {_show(metadata)}")
    return Event(key, kind, float(time_ms), doc.get("value"), metadata, line)


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(key: str) -> str:
    return key if key.isidentifier() else repr(key)


@dataclass
class Epoch:
    """The contract's events of one epoch: (dawnpipe's stamp in seconds, the program's time_ms) each."""

    number: int  # 0: an evaluation before any training
    start: tuple[float, float] | None = None
    stop: tuple[float, float] | None = None
    eval_start: tuple[float, float] | None = None
    eval_stop: tuple[float, float] | None = None
    accuracy: float | None = None

    @property
    def evaluated(self) -> bool:
        return self.eval_stop is not None and self.accuracy is not None


@dataclass
class Timeline:
    """The run as its MLLOG tells it, checked event by event (``add``)."""

    run_start: tuple[float, float] | None = None
    run_stop: tuple[float, float] | None = None
    status: str | None = None
    epochs: dict[int, Epoch] = field(default_factory=dict)
    other: dict[str, Any] = field(default_factory=dict)  # the first value of each other key (bounded)
    mllog_lines: int = 0
    first_epoch: int = 1  # the epoch after the last one a resumed run kept
    resuming: bool = False  # after an interruption: the program may go on from a later epoch (one it trained but dawnpipe did not keep)
    last_started: int | None = None  # resuming: the last epoch an earlier attempt logged epoch_start for (None: not known)
    _open_epoch: int | None = None
    _open_eval: int | None = None

    def add(self, event: Event, stamp: float) -> int | None:
        """Take one event stamped ``stamp`` (dawnpipe's clock, seconds); the
        epoch whose evaluation it completes (both eval_stop and eval_accuracy
        in), if any; BrokenLog when it breaks the contract."""
        self.mllog_lines += 1
        key, when = event.key, (stamp, event.time_ms)
        if key not in CONTRACT_KEYS:
            if key not in self.other and len(self.other) < MAX_OTHER_KEYS:
                self.other[key] = event.value if not isinstance(event.value, str) else event.value[:200]
            return None
        where = f"line {event.line} of the program's output: {key}"
        if self.run_stop is not None:
            raise BrokenLog(f"{where} after run_stop")
        if key == "run_start":
            if self.run_start is not None:
                raise BrokenLog(f"{where}: a second run_start")
            self.run_start = when
            return None
        if self.run_start is None:
            raise BrokenLog(f"{where} before run_start")
        if key == "run_stop":
            status = event.metadata.get("status")
            if status not in STATUSES:
                raise BrokenLog(f"{where}: field 'metadata.status': expected one of {', '.join(STATUSES)}, got {_show(status)}")
            if self._open_epoch is not None or self._open_eval is not None:
                open_epoch = self._open_epoch if self._open_epoch is not None else self._open_eval
                raise BrokenLog(f"{where} while epoch {open_epoch}'s {'training' if self._open_epoch is not None else 'evaluation'} is open")
            self._check_last_evaluation(where)
            self.run_stop, self.status = when, status
            return None
        n = _epoch_num(event, where)
        if n == 0:
            if key not in ("eval_start", "eval_stop", "eval_accuracy") or any(e > 0 for e in self.epochs) or self.first_epoch > 1:
                raise BrokenLog(f"{where}: epoch_num 0 is only for an evaluation before the first epoch_start")
            if key == "eval_start" and 0 not in self.epochs:
                self.epochs[0] = Epoch(0, start=self.run_start, stop=self.run_start)
        if key == "epoch_start":
            expected = max(self.epochs, default=self.first_epoch - 1) + 1 if self.epochs.keys() - {0} else self.first_epoch
            if self.resuming and not self.epochs.keys() - {0} and n > expected:
                # it checkpointed an epoch whose model dawnpipe had not taken yet: that epoch's time is lost time;
                # never one that no attempt started
                if self.last_started is not None and n > max(self.last_started + 1, expected):
                    raise BrokenLog(f"{where}: epoch_num {n}, but no attempt of this run started an epoch after epoch {self.last_started}")
                expected = n
            if n != expected:
                resumed = f" (the run resumes after epoch {self.first_epoch - 1}: the program continues from its {{state}})" if self.first_epoch > 1 else ""
                raise BrokenLog(f"{where}: epoch_num {n}, expected {expected} (epochs count from 1, one at a time){resumed}")
            if self._open_eval is not None:
                raise BrokenLog(f"{where} during epoch {self._open_eval}'s evaluation")
            self._check_last_evaluation(where)
            self.epochs[n] = Epoch(n, start=when)
            self._open_epoch = n
            return None
        epoch = self.epochs.get(n)
        if epoch is None:
            raise BrokenLog(f"{where}: epoch {n} never started")
        if key == "epoch_stop":
            if self._open_epoch != n:
                raise BrokenLog(f"{where}: epoch {n} is not the one training")
            epoch.stop, self._open_epoch = when, None
            return None
        if self._open_epoch is not None:
            raise BrokenLog(f"{where} while epoch {self._open_epoch} is training")
        if n != max(self.epochs):
            raise BrokenLog(f"{where}: epoch_num {n}, but the last epoch trained is {max(self.epochs)}")
        if key == "eval_start":
            if epoch.eval_start is not None:
                raise BrokenLog(f"{where}: a second evaluation of epoch {n}")
            epoch.eval_start, self._open_eval = when, n
            return None
        if key == "eval_stop":
            if self._open_eval != n:
                raise BrokenLog(f"{where}: no evaluation of epoch {n} started")
            epoch.eval_stop, self._open_eval = when, None
            return n if epoch.evaluated else None
        # eval_accuracy: inside the evaluation window, or after eval_stop (as some MLPerf programs log it)
        if epoch.eval_start is None:
            raise BrokenLog(f"{where}: no evaluation of epoch {n} started")
        if epoch.accuracy is not None:
            raise BrokenLog(f"{where}: a second eval_accuracy for epoch {n}")
        value = event.value
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise BrokenLog(f"{where}: field 'value': expected a number, got {_show(value)}")
        epoch.accuracy = float(value)
        return n if epoch.evaluated else None

    def _check_last_evaluation(self, where: str) -> None:
        last = self.epochs.get(max(self.epochs, default=0))
        if last is not None and last.eval_start is not None and last.accuracy is None:
            raise BrokenLog(f"{where}: epoch {last.number}'s evaluation logged no eval_accuracy")

    @property
    def evaluated(self) -> list[Epoch]:
        return [e for e in self.epochs.values() if e.evaluated]


def _epoch_num(event: Event, where: str) -> int:
    n = event.metadata.get("epoch_num")
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise BrokenLog(f"{where}: field 'metadata.epoch_num': expected a whole number from 0, got {_show(n)}")
    return n
