"""A program entry's process: started in a session of its own, in a cgroup of
its own where the system offers a freezer (dawnpipe.programs.freezer), and
without network where the system allows; its output read line by line and
stamped with dawnpipe's monotonic clock the moment each line arrives, frozen
and thawed while dawnpipe takes and scores its models, and stopped as a
whole.

The reading threads stamp each line and parse its MLLOG on arrival. Under
program contract 2 the thread that reads an ``epoch_stop`` freezes the
program at once (``freeze_on``), before the line waits in any queue, so a
busy harness or a flood of output never lets the program run on past the
moment its model is taken.

Everything the program prints is untrusted. A line is cut at
``mllog_reader.MAX_LINE`` characters, decoded leniently, and echoed to the stage's
log terminal-safe (``program| ...``) until ``MAX_ECHO_BYTES`` have been shown;
the last ``TAIL_LINES`` lines are kept for the error of a failed run.
"""

from __future__ import annotations

import collections
import functools
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dawnpipe.display import terminal_safe
from dawnpipe.programs import mllog_reader
from dawnpipe.programs.freezer import FreezeError, Freezer, Frozen
from dawnpipe.programs.mllog_reader import MAX_LINE

MAX_ECHO_BYTES = 4 << 20  # of the program's output shown in the stage's log
TAIL_LINES = 30  # last lines of output kept for a failure's report
PREFIX = "program| "
ENFORCE_EVERY_S = 1.0  # how often the main loop walks the process tree to collect orphans, at most: each walk reads
# every process of the system, on the clock, on cores the program may be using
STOPPING_ENFORCE_EVERY_S = 0.1  # ... and while a stop's grace period runs, so that its SIGKILL comes on time


@dataclass(frozen=True)
class Line:
    stamp: float  # dawnpipe's clock (time.perf_counter) when the line arrived
    wall_ns: int  # the system's clock (time.time_ns) at the same moment: against file times
    stream: str  # "stdout" or "stderr"
    text: str  # decoded, without its newline; cut at MAX_LINE characters
    number: int  # line of the output, both streams together, from 1
    cut: bool = False
    event: mllog_reader.Event | None = None  # its MLLOG event, parsed on arrival
    broken: str | None = None  # why its MLLOG is broken, if it is
    frozen: Frozen | None = None  # the freeze this line started (freeze_on)
    cpu_seconds: float | None = None  # the program's CPU seconds so far, read on arrival of a run_start


@functools.cache
def network_isolation() -> tuple[tuple[str, ...], str]:
    """Words that run a command without network, and what they give: ``unshare --net``
    (root), else in a user namespace of its own, else nothing (the network stays)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return (), "available (no unshare command on this system)"
    for words, how in (
        ((unshare, "--net", "--"), "none (a network namespace of its own: unshare --net)"),
        ((unshare, "--user", "--map-root-user", "--net", "--"), "none (user and network namespaces of its own: unshare --user --net)"),
    ):
        try:
            if subprocess.run([*words, "true"], capture_output=True, timeout=30).returncode == 0:
                # loopback up inside (a program's own processes may talk to each other), where `ip` exists
                return (*words, "/bin/sh", "-c", 'ip link set lo up 2>/dev/null; exec "$@"', "sh"), how
        except (OSError, subprocess.TimeoutExpired):
            continue
    return (), "available (this system does not let dawnpipe make a network namespace)"


class ProgramProcess:
    """One run of the program: ``lines()`` yields its output as it comes; ``freeze``, ``thaw`` and ``stop`` act on all of it."""

    def __init__(
        self,
        command: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        freezer: Freezer | None = None,
        isolate_network: bool = True,
        freeze_on: Callable[[mllog_reader.Event, float], bool] | None = None,
    ):
        self.command = command
        self.freezer = freezer or Freezer("signals")
        self.network = "available (not isolated)"
        prefix: tuple[str, ...] = ()
        if isolate_network:
            prefix, self.network = network_isolation()
        self.freeze_on = freeze_on
        self._freeze_lock = threading.Lock()
        self.frozen: Frozen | None = None
        self.freeze_error: str | None = None
        self.started = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                [*self.freezer.launch_prefix(), *prefix, *command],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            raise ProgramFailed(f"could not be started: {terminal_safe(command[0])}: {e.strerror or e}") from None
        self.freezer.started(self.proc.pid)
        self.pgid = self.proc.pid  # a new session: the group's id is the leader's pid
        self._queue: queue.Queue = queue.Queue()
        self._count = 0
        self._count_lock = threading.Lock()
        self._open = 2
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.echoed_bytes = 0
        self.dropped_lines = 0
        self._enforced = 0.0  # when enforce last looked
        self.stopped_by: str | None = None  # why dawnpipe stopped it, if it did
        self.stop_started: float | None = None
        self.grace = 10.0
        for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            threading.Thread(target=self._read, args=(name, stream), name=f"program-{name}", daemon=True).start()

    # ------------------------------------------------------------ output
    def _read(self, name: str, stream) -> None:
        """Put each line of ``stream`` on the queue, stamped and parsed on arrival; a line longer than MAX_LINE is cut and the rest skipped."""
        skipping = False
        while True:
            raw = stream.readline(MAX_LINE)
            stamp, wall_ns = time.perf_counter(), time.time_ns()
            if not raw:
                break
            whole = raw.endswith(b"\n")
            if skipping:
                skipping = not whole
                continue
            skipping = not whole and len(raw) >= MAX_LINE
            with self._count_lock:
                self._count += 1
                number = self._count
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            event, broken, frozen = None, None, None
            if mllog_reader.TOKEN in text:
                try:
                    event = mllog_reader.parse(text, number)
                except mllog_reader.BrokenLog as e:
                    broken = str(e)
                if event is not None and self.freeze_on is not None and self.freeze_on(event, stamp):
                    frozen = self.freeze()
            cpu = self.freezer.cpu_seconds() if event is not None and event.key == "run_start" else None
            self._queue.put(Line(stamp, wall_ns, name, text, number, cut=skipping, event=event, broken=broken, frozen=frozen, cpu_seconds=cpu))
        self._queue.put(None)

    def lines(self, poll: float = 0.25) -> Iterator[Line | None]:
        """The output's lines as they arrive; None every ``poll`` seconds without one (so the caller can look at the clock), until both streams end."""
        while self._open:
            try:
                item = self._queue.get(timeout=poll)
            except queue.Empty:
                yield None
                continue
            if item is None:
                self._open -= 1
                continue
            self._echo(item)
            yield item

    def _echo(self, line: Line) -> None:
        shown = terminal_safe(line.text) + (" [cut: longer than the line limit]" if line.cut else "")
        self.tail.append(shown)
        if self.echoed_bytes >= MAX_ECHO_BYTES:
            self.dropped_lines += 1
            return
        self.echoed_bytes += len(shown) + len(PREFIX) + 1
        if self.echoed_bytes >= MAX_ECHO_BYTES:
            print(
                f"train: the program's output passed {MAX_ECHO_BYTES:,} bytes; the rest is not shown (its last {TAIL_LINES} lines are, at the end)", flush=True
            )
        print(PREFIX + shown, flush=True)

    def print_tail(self) -> None:
        """The last lines of the program's output, into the stage's log (they may not have been echoed)."""
        if not self.tail:
            print("train: the program printed nothing", flush=True)
            return
        print(f"train: the program's last {len(self.tail)} lines of output:", flush=True)
        for text in self.tail:
            print(PREFIX + text, flush=True)

    # ------------------------------------------------------------ freezing
    def freeze(self) -> Frozen | None:
        """Freeze the whole program (from any thread); None when it is frozen already or the freeze failed (``freeze_error``)."""
        with self._freeze_lock:
            if self.frozen is not None or self.stopped_by is not None:
                return None
            try:
                self.frozen = self.freezer.freeze()
            except (FreezeError, OSError) as e:
                self.freeze_error = str(e)
                return None
            return self.frozen

    def thaw(self) -> tuple[float, float, str | None]:
        """Check the freeze, then thaw: (frozen since, thawed at, the violation found, if any)."""
        with self._freeze_lock:
            frozen = self.frozen
            if frozen is None:
                now = time.perf_counter()
                return now, now, None
            violation = self.freezer.check(frozen)
            end = time.perf_counter()
            self.freezer.thaw()
            self.frozen = None
            return frozen.since, end, violation

    # ------------------------------------------------------------ control
    def stop(self, why: str, grace: float) -> None:
        """SIGTERM to all of the program now, SIGKILL once ``grace`` seconds have passed (``enforce``)."""
        if self.stop_started is None:
            self.stopped_by, self.stop_started, self.grace = why, time.perf_counter(), grace
            with self._freeze_lock:
                if self.frozen is not None:
                    self.freezer.thaw()
                    self.frozen = None
            self.freezer.signal_all(signal.SIGTERM)
            self.freezer.signal_all(signal.SIGCONT)  # a stopped process acts on SIGTERM only once running

    def enforce(self) -> None:
        """SIGKILL all of it when a stop's grace period is over; collect orphans. At most every ENFORCE_EVERY_S seconds
        (STOPPING_ENFORCE_EVERY_S during a stop), however many lines arrive between: walking the process tree per line
        would let a flood of output slow the harness."""
        now = time.perf_counter()
        if now - self._enforced < (ENFORCE_EVERY_S if self.stop_started is None else STOPPING_ENFORCE_EVERY_S):
            return
        self._enforced = now
        if self.stop_started is not None and now - self.stop_started >= self.grace:
            self.freezer.signal_all(signal.SIGKILL)
        self.freezer.reap()

    def kill(self) -> None:
        """Whatever is left of the program, gone (the end of every run, however it ended)."""
        self.freezer.kill_all()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()


class ProgramFailed(Exception):
    """The program failed the contract (the reason, for the entry's one error line)."""


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def environment(threads: int, extra: dict[str, str]) -> dict[str, str]:
    """The program's environment: the job's, its thread counts, unbuffered Python output, then the entry's own."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **extra}
