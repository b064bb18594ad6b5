"""Freezing a whole program while dawnpipe takes and scores its model
(docs/programs.md#the-freeze).

Only dawnpipe's freeze is off a program's clock, so the freeze must hold
everything the program runs, not only its process group (a child started with
``setsid`` leaves the group):

- **a cgroup freezer** where the system offers one (cgroup v2's
  ``cgroup.freeze`` in a cgroup dawnpipe may create, else cgroup v1's
  ``freezer`` hierarchy): the program is placed in a cgroup of its own before
  its first instruction (``launch_prefix``), every process it starts is born
  there, and freezing the cgroup stops them all at once;
- **signals** otherwise: SIGSTOP to every process of the program's tree.

Either way the tree is known: the train stage makes itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``), so a process the program orphans
(a double fork, a daemon) is re-parented to dawnpipe instead of to init and
stays in sight. After freezing, every process of the tree must be frozen, and
none may use CPU time until the thaw (``Frozen.check``): a process outside
the frozen set, or work done while frozen, is a violation the run is not
ranked for. GPU work already queued runs on through a freeze; where NVML
sees a GPU, activity of the program's processes during the freeze is a
violation too (``DeviceWatch``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
FREEZE_WAIT_S = 10.0  # a cgroup that takes longer to report frozen is a failure of the freeze
CPU_SLACK_S = 0.05  # CPU seconds the frozen set may account for during a freeze (the kernel's bookkeeping)
V1_FREEZER = Path("/sys/fs/cgroup/freezer")
V1_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class FreezeError(Exception):
    """The freeze failed or was broken by the program (the reason)."""


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); False where not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _v2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1's)."""
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1])
    except OSError:
        return None
    return None


def _own_cgroup_v2(mount: Path) -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return mount / line[3:].lstrip("/")
    except OSError:
        return None
    return None


def _try_make(parent: Path, control: str) -> Path | None:
    """A new cgroup under ``parent`` whose ``control`` file exists and can be written; None where not."""
    if not parent.is_dir():
        return None
    path = parent / f"dawnpipe-program-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        return None
    if (path / control).is_file() and os.access(path / control, os.W_OK) and os.access(path / "cgroup.procs", os.W_OK):
        return path
    try:
        path.rmdir()
    except OSError:
        pass
    return None


@dataclass
class Frozen:
    """One freeze: when it held, what it held, and the CPU time of that set then."""

    since: float
    pids: set[int]
    cpu_seconds: float


@dataclass
class Freezer:
    """Freezes and thaws one program; ``method`` says how."""

    method: str
    cgroup: Path | None = None
    cpuacct: Path | None = None  # cgroup v1: a cpuacct cgroup beside the freezer's (v2 counts CPU in the same cgroup)
    root_pid: int | None = None
    own_children: set[int] = field(default_factory=set)  # dawnpipe's own helpers (never frozen, never the program's)
    reaped_cpu: float = 0.0  # CPU seconds of the program's orphans dawnpipe reaped
    root_started: float | None = None  # the root's start time, kept: the root may exit before its orphans

    @classmethod
    def create(cls, prefer: str = "auto") -> Freezer:
        """The best freezer this system offers: ``prefer`` = auto, cgroup or signals."""
        if prefer != "signals":
            mount = _v2_mount()
            candidates = []
            if mount is not None:  # v2 first (the kernel calls v1's freezer imperfect): the job's own cgroup, else the root
                candidates += [(_own_cgroup_v2(mount), "cgroup.freeze", "cgroup v2 freezer"), (mount, "cgroup.freeze", "cgroup v2 freezer")]
            candidates.append((V1_FREEZER, "freezer.state", "cgroup v1 freezer"))
            for parent, control, method in candidates:
                if parent is None:
                    continue
                made = _try_make(parent, control)
                if made is not None:
                    return cls(method, made, _try_make(V1_CPUACCT, "cpuacct.usage") if method.startswith("cgroup v1") else None)
        return cls("signals")

    def launch_prefix(self) -> list[str]:
        """Words before the program's command that place it in the cgroup before it runs (none for signals)."""
        if self.cgroup is None:
            return []
        procs = [str(self.cgroup / "cgroup.procs"), str((self.cpuacct or self.cgroup) / "cgroup.procs")]
        return ["/bin/sh", "-c", 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"', "sh", *procs]

    def started(self, pid: int) -> None:
        self.root_pid = pid
        try:
            self.root_started = psutil.Process(pid).create_time()
        except psutil.Error:  # gone already: its orphans, if any, are still the program's
            self.root_started = None

    # ------------------------------------------------------------ the program's processes
    def tree(self) -> dict[int, psutil.Process]:
        """Every process of the program: the root's descendants and the orphans re-parented to dawnpipe."""
        found: dict[int, psutil.Process] = {}
        try:
            me = psutil.Process(os.getpid())
            for child in me.children(recursive=False):
                if child.pid in self.own_children:
                    continue
                if child.pid != self.root_pid and self._is_dawnpipe_helper(child):
                    continue
                found[child.pid] = child
                try:
                    for grandchild in child.children(recursive=True):
                        found[grandchild.pid] = grandchild
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        return found

    def _is_dawnpipe_helper(self, proc: psutil.Process) -> bool:
        """A child of dawnpipe's that the program did not start (it began before the program)."""
        if self.root_pid is None:
            return True
        if self.root_started is None:
            return False
        try:
            return proc.create_time() < self.root_started
        except psutil.Error:
            return False

    def members(self) -> set[int]:
        if self.cgroup is None:
            return set(self.tree())
        try:
            return {int(x) for x in (self.cgroup / "cgroup.procs").read_text().split()}
        except OSError:
            return set()

    def cpu_seconds(self) -> float:
        """CPU seconds (user and system) the program has used so far, every process it started included:
        its cgroup's own count where there is one, else its tree's (and the orphans dawnpipe reaped)."""
        try:
            if self.cpuacct is not None:
                return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9
            if self.cgroup is not None and self.method.startswith("cgroup v2"):
                for line in (self.cgroup / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec"):
                        return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
        return self._cpu(self.tree().values()) + self.reaped_cpu

    @staticmethod
    def _cpu(procs) -> float:
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
            except psutil.Error:
                pass
        return total

    # ------------------------------------------------------------ freeze and thaw
    def freeze(self) -> Frozen:
        if self.cgroup is not None:
            self._write_state(True)
            deadline = time.perf_counter() + FREEZE_WAIT_S
            while not self._is_frozen():
                if time.perf_counter() > deadline:
                    raise FreezeError(f"its cgroup did not freeze within {FREEZE_WAIT_S:g} s ({self.method})")
                time.sleep(0.001)
        else:
            self._stop_all()
        procs = self.tree()
        return Frozen(time.perf_counter(), set(procs), self._cpu(procs.values()))

    def _stop_all(self) -> None:
        if self.root_pid is not None:
            try:
                os.killpg(os.getpgid(self.root_pid), signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.perf_counter() + FREEZE_WAIT_S
        while True:  # until the tree holds still: a process may fork, or sit in the kernel, while the others stop
            running = []
            for pid, p in self.tree().items():
                if not _held(p):
                    running.append(p)
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        pass
            if not running:
                return
            if time.perf_counter() > deadline:
                raise FreezeError(
                    f"{len(running)} of the program's processes did not stop within {FREEZE_WAIT_S:g} s (SIGSTOP; "
                    f"{_describe(running[0])}, {_status(running[0])})"
                )
            time.sleep(0.002)

    def check(self, frozen: Frozen) -> str | None:
        """Before thawing: the violation, if any, of this freeze (a process outside the frozen set, CPU work while frozen)."""
        procs = self.tree()
        if self.cgroup is not None:
            inside = self.members()
            outside = [pid for pid in procs if pid not in inside and _alive(procs[pid])]
        else:
            outside = [pid for pid, p in procs.items() if not _held(p)]
        if outside:
            return f"a process of the program ran outside the frozen set during dawnpipe's freeze ({_describe(procs[outside[0]])})"
        new = [pid for pid in procs if pid not in frozen.pids]
        if new:
            return f"a process of the program started during dawnpipe's freeze ({_describe(procs[new[0]])})"
        used = self._cpu([procs[pid] for pid in procs if pid in frozen.pids]) - frozen.cpu_seconds
        if used > CPU_SLACK_S:
            return f"the program used {used:.2f} s of CPU time while frozen (limit {CPU_SLACK_S:g} s)"
        return None

    def thaw(self) -> None:
        if self.cgroup is not None:
            self._write_state(False)
            return
        procs = self.tree()
        for pid in procs:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if self.root_pid is not None:
            try:
                os.killpg(os.getpgid(self.root_pid), signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass

    def _write_state(self, frozen: bool) -> None:
        assert self.cgroup is not None
        if self.method.startswith("cgroup v2"):
            (self.cgroup / "cgroup.freeze").write_text("1" if frozen else "0")
        else:
            (self.cgroup / "freezer.state").write_text("FROZEN" if frozen else "THAWED")

    def _is_frozen(self) -> bool:
        assert self.cgroup is not None
        if self.method.startswith("cgroup v2"):
            return "frozen 1" in (self.cgroup / "cgroup.events").read_text()
        return (self.cgroup / "freezer.state").read_text().strip() == "FROZEN"

    # ------------------------------------------------------------ the end
    def signal_all(self, sig: int) -> None:
        """``sig`` to every process of the program (its cgroup, its tree, its group)."""
        pids = set(self.tree()) | (self.members() if self.cgroup is not None else set())
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if self.root_pid is not None:
            try:
                os.killpg(self.root_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_all(self) -> None:
        """Whatever is left of the program, gone; its orphans reaped; its cgroup removed."""
        if self.cgroup is not None:
            try:
                self._write_state(False)
            except OSError:
                pass
        for _ in range(3):
            self.signal_all(signal.SIGCONT)
            self.signal_all(signal.SIGKILL)
            self.reap()
            if not self.tree() and not (self.cgroup is not None and self.members()):
                break
            time.sleep(0.05)
        for group in (self.cgroup, self.cpuacct):
            for _ in range(50 if group is not None else 0):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:  # removed already (the end of a run kills twice)
                    break
                except OSError:
                    time.sleep(0.02)

    def reap(self) -> None:
        """Collect the exit of orphans re-parented to dawnpipe (never the program's root: its Popen does)."""
        for pid in list(self.tree()):
            if pid == self.root_pid:
                continue
            try:
                done, _, usage = os.wait4(pid, os.WNOHANG)
                if done:
                    self.reaped_cpu += usage.ru_utime + usage.ru_stime
            except ChildProcessError:
                pass


def _alive(p: psutil.Process) -> bool:
    return _status(p) not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD, None)


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.Error:
        return None


def _held(p: psutil.Process) -> bool:
    """Runs none of its own code until thawed: stopped, gone, or in the kernel with a SIGSTOP waiting.

    The last is a process that cannot stop where it is: a parent in ``vfork`` waits, uninterruptibly, for a
    child that the stop caught before its ``exec``; the waiting SIGSTOP stops it as it leaves the kernel.
    """
    status = _status(p)
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD, None):
        return True
    return status == psutil.STATUS_DISK_SLEEP and _stop_pending(p.pid)


def _stop_pending(pid: int) -> bool:
    """A SIGSTOP waits for the process (its own pending set, or its thread group's)."""
    try:
        return stop_pending_in(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return False


def stop_pending_in(status: str) -> bool:
    """Whether a ``/proc/<pid>/status`` text shows a SIGSTOP pending (``SigPnd`` or ``ShdPnd``, hexadecimal masks)."""
    bit = 1 << (signal.SIGSTOP - 1)
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & bit:
            return True
    return False


def _describe(p: psutil.Process) -> str:
    """One printable line: the process id and the start of its command line."""
    try:
        words = " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        return f"pid {p.pid}"
    shown = "".join(c if c.isprintable() else " " for c in words)
    return f"pid {p.pid}: {shown[:80]}"


class DeviceWatch:
    """GPU activity of the program's processes between two moments, where NVML sees a GPU."""

    def __init__(self, nvml=None):
        self.nvml = nvml
        self.handles = []
        try:
            if self.nvml is None:
                import pynvml

                self.nvml = pynvml
            self.nvml.nvmlInit()
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        except Exception:  # no driver, no library: nothing to watch
            self.handles = []

    @property
    def active(self) -> bool:
        return bool(self.handles)

    def busy_since(self, since_unix_s: float, pids: set[int]) -> str | None:
        """A description of GPU work by ``pids`` sampled after ``since_unix_s``, or None."""
        for index, handle in enumerate(self.handles):
            try:
                samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, int(since_unix_s * 1e6))
            except Exception:  # no samples in the window (NVML_ERROR_NOT_FOUND) or not supported
                continue
            for s in samples:
                if s.pid in pids and s.timeStamp >= since_unix_s * 1e6 and (s.smUtil > 0 or s.memUtil > 0):
                    return f"GPU {index} ran work of process {s.pid} while the program was frozen ({s.smUtil}% SM)"
        return None
