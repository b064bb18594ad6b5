"""A program entry's process: started in a session of its own (its own
process group), its output read line by line and stamped with dawnpipe's
monotonic clock the moment each line arrives, paused and resumed while
dawnpipe scores its models, and stopped as a whole group.

Everything the program prints is untrusted. A line is cut at
``mllog.MAX_LINE`` characters, decoded leniently, and echoed to the stage's
log terminal-safe (``program| ...``) until ``MAX_ECHO_BYTES`` have been shown;
the last ``TAIL_LINES`` lines are kept for the error of a failed run.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dawnpipe.display import terminal_safe
from dawnpipe.programs.mllog import MAX_LINE

MAX_ECHO_BYTES = 4 << 20  # of the program's output shown in the stage's log
TAIL_LINES = 30  # last lines of output kept for a failure's report
PREFIX = "program| "


@dataclass(frozen=True)
class Line:
    stamp: float  # dawnpipe's clock (time.perf_counter) when the line arrived
    stream: str  # "stdout" or "stderr"
    text: str  # decoded, without its newline; cut at MAX_LINE characters
    number: int  # line of the output, both streams together, from 1
    cut: bool = False


class ProgramProcess:
    """One run of the program: ``lines()`` yields its output as it comes; ``pause``, ``resume`` and ``stop`` act on its whole group."""

    def __init__(self, command: list[str], *, cwd: Path, env: dict[str, str]):
        self.command = command
        self.started = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as e:
            raise ProgramFailed(f"could not be started: {terminal_safe(command[0])}: {e.strerror or e}") from None
        self.pgid = self.proc.pid  # a new session: the group's id is the leader's pid
        self._queue: queue.Queue = queue.Queue()
        self._count = 0
        self._count_lock = threading.Lock()
        self._open = 2
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.echoed_bytes = 0
        self.dropped_lines = 0
        self.paused_spans: list[tuple[float, float]] = []
        self.stopped_by: str | None = None  # why dawnpipe stopped it, if it did
        self.stop_started: float | None = None
        self.grace = 10.0
        for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            threading.Thread(target=self._read, args=(name, stream), name=f"program-{name}", daemon=True).start()

    # ------------------------------------------------------------ output
    def _read(self, name: str, stream) -> None:
        """Put each line of ``stream`` on the queue, stamped on arrival; a line longer than MAX_LINE is cut and the rest skipped."""
        skipping = False
        while True:
            raw = stream.readline(MAX_LINE)
            stamp = time.perf_counter()
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
            self._queue.put(Line(stamp, name, text, number, cut=skipping))
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

    # ------------------------------------------------------------ control
    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> float:
        """Stop the whole group (SIGSTOP); returns when it was paused."""
        self._signal(signal.SIGSTOP)
        return time.perf_counter()

    def resume(self, paused_at: float) -> None:
        self._signal(signal.SIGCONT)
        self.paused_spans.append((paused_at, time.perf_counter()))

    def stop(self, why: str, grace: float) -> None:
        """SIGTERM to the group now, SIGKILL once ``grace`` seconds have passed (``enforce``)."""
        if self.stop_started is None:
            self.stopped_by, self.stop_started, self.grace = why, time.perf_counter(), grace
            self._signal(signal.SIGTERM)
            self._signal(signal.SIGCONT)  # a paused group acts on SIGTERM only once running

    def enforce(self) -> None:
        """SIGKILL the group when a stop's grace period is over."""
        if self.stop_started is not None and time.perf_counter() - self.stop_started >= self.grace:
            self._signal(signal.SIGKILL)

    def kill(self) -> None:
        """Whatever is left of the group, gone (the end of every run, however it ended)."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
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

    def paused_seconds(self) -> float:
        return sum(b - a for a, b in self.paused_spans)


class ProgramFailed(Exception):
    """The program failed the contract (the reason, for the entry's one error line)."""


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
