"""The background sampler: one thread, one sample per interval, one Parquet file.

    with sampling(run_dir / "telemetry.parquet", interval_s=1.0) as sampler:
        train(...)                    # the trainer calls mark_training_clock(wall_start)
    run_json["telemetry"] = sampler.summary()

Each tick adds one row per source: the process (psutil: CPU utilisation in
percent of one core, so 200 = two busy cores; resident memory), every visible
GPU (NVML) and every readable RAPL zone. Times are seconds since the sampler
started on ``time.perf_counter`` (the clock the trainers use), so a trainer's
wall-clock origin maps onto them exactly.

What it costs: the thread sleeps on an Event between ticks and a tick reads
/proc and, with GPUs, a few NVML counters (micro- to milliseconds a second).
It never fails the run: an error inside a tick ends sampling and is recorded
in the summary. When the run raises, the ``with`` block stops the thread,
keeps the samples taken so far in ``partial_path`` (the run's work
directory), never as the declared output, and lets the exception through.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from dawnpipe.telemetry import rapl
from dawnpipe.telemetry.nvml import NvmlGpus

COLUMNS = [
    "t_s",
    "unix_time",
    "device",
    "kind",
    "name",
    "utilization_pct",
    "memory_utilization_pct",
    "memory_used_mb",
    "power_w",
    "energy_j",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "temperature_c",
]
_ACTIVE: Sampler | None = None


class Sampler:
    def __init__(
        self,
        path: str | os.PathLike | None,
        interval_s: float = 1.0,
        *,
        partial_path: str | os.PathLike | None = None,
        nvml=None,
        powercap: Path = rapl.POWERCAP,
        pid: int | None = None,
        visible_gpus: str | None = None,
        tree: bool = False,
    ):
        """``tree``: the process row sums the process and all its descendants
        (a program entry's work runs in processes dawnpipe starts)."""
        if not interval_s > 0:
            raise ValueError(f"telemetry interval must be > 0 seconds, got {interval_s}")
        self.path = Path(path) if path is not None else None
        if partial_path is not None:
            self.partial_path: Path | None = Path(partial_path)
        else:
            self.partial_path = self.path.with_name(self.path.name + ".partial") if self.path is not None else None
        self.interval_s = float(interval_s)
        self._nvml_module, self._powercap, self._visible = nvml, powercap, visible_gpus
        self._process = psutil.Process(pid or os.getpid())
        self._tree = tree
        self._children: dict[int, psutil.Process] = {}
        self.rows: list[dict[str, Any]] = []
        self.ticks = 0
        self.error: str | None = None
        self.sources: dict[str, str] = {}
        self.training_clock_origin_s: float | None = None
        self.t0: float | None = None
        self.stopped_at: float | None = None
        self.outcome = "not started"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._gpus: NvmlGpus | None = None
        self._zones: list[rapl.RaplZone] = []

    # ------------------------------------------------------------- lifecycle
    def start(self) -> Sampler:
        self._gpus = NvmlGpus(self._nvml_module, self._visible)
        self._zones, rapl_status = rapl.discover(self._powercap)
        self.sources = {"process": f"psutil: pid {self._process.pid}", "gpu": self._gpus.status, "rapl": rapl_status}
        self._process.cpu_percent(None)  # the first call only sets psutil's reference point
        self.t0 = time.perf_counter()
        self.outcome = "running"
        self._tick()
        self._thread = threading.Thread(target=self._loop, name="dawnpipe-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self, failed: bool = False) -> None:
        """Stop the thread, take a last sample (so the samples span the whole
        run), release NVML and write the file: the output when the run
        succeeded, ``partial_path`` (default ``<output>.partial``) when it failed."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=max(5.0, 2 * self.interval_s))
        self._thread = None
        if self.error is None:
            self._tick()
        self.stopped_at = time.perf_counter()
        if self._gpus is not None:
            self._gpus.close()
        self.outcome = "failed" if failed else "completed"
        target = self.partial_path if failed else self.path
        if target is not None:
            self._write(target)

    def _loop(self) -> None:
        next_at = self.t0 + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.perf_counter())):
            self._tick()
            if self.error is not None:
                return
            next_at += self.interval_s
            now = time.perf_counter()
            if next_at < now:  # the machine stalled us: skip missed ticks, keep the grid
                next_at += math.ceil((now - next_at) / self.interval_s) * self.interval_s

    def _tick(self) -> None:
        try:
            t = time.perf_counter() - self.t0
            unix = time.time()
            rows = [self._process_row()]
            if self._gpus is not None:
                rows += self._gpus.sample()
            rows += [self._rapl_row(z) for z in self._zones]
        except Exception as e:
            self.error = f"sampling stopped after {self.ticks} samples: {type(e).__name__}: {e}"
            return
        with self._lock:
            for r in rows:
                self.rows.append({"t_s": t, "unix_time": unix, **r})
            self.ticks += 1

    # --------------------------------------------------------------- sources
    def _process_row(self) -> dict[str, Any]:
        p = self._process
        with p.oneshot():
            cpu = p.cpu_percent(None)
            rss = p.memory_info().rss
        name = f"pid {p.pid}"
        if self._tree:
            more_cpu, more_rss, alive = self._descendants()
            cpu, rss, name = cpu + more_cpu, rss + more_rss, f"pid {p.pid} and {alive} descendants"
        return {"device": "process", "kind": "process", "name": name, "utilization_pct": float(cpu), "memory_used_mb": rss / 2**20}

    def _descendants(self) -> tuple[float, int, int]:
        """CPU percent and resident bytes of the process's descendants now alive, and how many there are.
        A child's first reading only sets psutil's reference point, so a process is counted from its second sample on."""
        try:
            now = {c.pid: c for c in self._process.children(recursive=True)}
        except psutil.Error:
            return 0.0, 0, 0
        cpu, rss = 0.0, 0
        for pid, child in now.items():
            known = self._children.setdefault(pid, child)
            try:
                with known.oneshot():
                    cpu += known.cpu_percent(None)
                    rss += known.memory_info().rss
            except psutil.Error:  # it ended between the listing and the reading
                continue
        self._children = {pid: self._children[pid] for pid in now}
        return cpu, rss, len(now)

    def _rapl_row(self, zone: rapl.RaplZone) -> dict[str, Any]:
        return {"device": zone.device, "kind": "rapl", "name": zone.name, "energy_j": zone.read()}

    # ---------------------------------------------------------------- output
    def frame(self):
        import pandas as pd

        with self._lock:
            frame = pd.DataFrame(self.rows, columns=COLUMNS)
        for c in COLUMNS:
            if c not in ("device", "kind", "name"):
                frame[c] = frame[c].astype("float64")
        return frame

    def _write(self, path: Path) -> None:
        from dawnpipe.fileio import write_parquet

        write_parquet(path, self.frame())

    def energy_source(self) -> str:
        """Which meters the run's energy comes from: GPUs (NVML) and CPU
        packages (RAPL) add up when both are there."""
        parts = (["NVML"] if self._gpus is not None and self._gpus.gpus else []) + (["RAPL"] if self._zones else [])
        return "+".join(parts) or "none"

    def summary(self) -> dict[str, Any]:
        """What run.json records about the telemetry of this run."""
        devices = sorted({(r["device"], r["kind"], r["name"]) for r in self.rows})
        return {
            "file": self.path.name if self.path is not None else None,
            "interval_s": self.interval_s,
            "samples": self.ticks,
            "duration_s": (self.stopped_at - self.t0) if self.stopped_at is not None and self.t0 is not None else None,
            "sources": self.sources,
            "devices": [{"device": d, "kind": k, "name": n} for d, k, n in devices],
            "energy_source": self.energy_source(),
            "training_clock_origin_s": self.training_clock_origin_s,
            "outcome": self.outcome,
            "error": self.error,
        }


def mark_training_clock(start_perf_counter: float) -> None:
    """Record where the trainer's wall clock (the log's ``wall_hours``) starts:
    the ``time.perf_counter()`` value it measures from. With it, energy can be
    integrated over each epoch's training time. A no-op when nothing samples."""
    sampler = _ACTIVE
    if sampler is not None and sampler.t0 is not None:
        sampler.training_clock_origin_s = start_perf_counter - sampler.t0


def sampling_disabled_reason(interval_s: float | None) -> str | None:
    if not interval_s:
        return "telemetry interval 0: sampling off"
    rank = os.environ.get("RANK")
    if rank not in (None, "", "0"):
        return f"distributed rank {rank}: rank 0 samples the node"
    return None


@contextlib.contextmanager
def sampling(path: str | os.PathLike | None, interval_s: float | None = 1.0, **kwargs) -> Iterator[Sampler | None]:
    """Sample in the background for the duration of the block. Yields None
    and samples nothing when the interval is 0 or this is not rank 0; the
    file is then written without rows, so a declared output still appears."""
    global _ACTIVE
    if interval_s is not None and interval_s < 0:
        from dawnpipe.errors import UsageError

        raise UsageError(f"telemetry interval must be >= 0 seconds (0 turns sampling off), got {interval_s:g}")
    if sampling_disabled_reason(interval_s):
        yield None
        if path is not None:
            from dawnpipe.fileio import write_parquet

            write_parquet(Path(path), Sampler(None).frame())
        return
    sampler = Sampler(path, interval_s, **kwargs).start()
    previous, _ACTIVE = _ACTIVE, sampler
    try:
        yield sampler
    except BaseException:
        with contextlib.suppress(Exception):  # the run's own error is the one to report
            sampler.stop(failed=True)
        raise
    else:
        sampler.stop()
    finally:
        _ACTIVE = previous


def summary_of(sampler: Sampler | None, interval_s: float | None) -> dict[str, Any]:
    """run.json's telemetry record, also when sampling was off."""
    return sampler.summary() if sampler is not None else disabled_summary(interval_s)


def disabled_summary(interval_s: float | None) -> dict[str, Any]:
    return {
        "file": None,
        "interval_s": interval_s or 0.0,
        "samples": 0,
        "energy_source": "none",
        "outcome": "off",
        "reason": sampling_disabled_reason(interval_s),
        "training_clock_origin_s": None,
    }
