"""Where the time goes: hardware telemetry and energy, sampled while a run
trains or answers items (docs/rules.md#analysis-metrics); the numbers made of
them per run are dawnpipe.metrics' (utilization, energy to accuracy).

- ``sampler``: a background thread that samples the hardware at a fixed
  interval while a run trains or answers items (NVML per GPU, psutil for the
  process, RAPL package energy where the kernel exposes it) and writes one
  Parquet file next to the run's log.
- ``energy``: joules from those samples, over the same spans as the training
  clock (energy to accuracy).
- ``peaks``: the device's peak rates, the CPU's measured peak (what a run's
  achieved FLOP/s is a fraction of: dawnpipe.metrics.utilization).

Trainers and the inference stage need only this module's light API:
``sampling(...)`` around the run and ``mark_training_clock(start)`` where the
training clock's wall-clock origin is taken. Importing it costs no framework.
"""

from dawnpipe.telemetry.sampler import Sampler, mark_training_clock, sampling

__all__ = ["Sampler", "mark_training_clock", "run_record", "sampling"]


def run_record(sampler: Sampler | None, interval_s: float | None, *, framework: str, environment: dict, precision: str, probe_seconds: float) -> dict:
    """run.json's ``telemetry``: the sampler's summary and, for a CPU run, the
    CPU's peak measured once, after training, by a short matrix-multiply probe
    (``probe_seconds`` per measurement)."""
    from dawnpipe.telemetry.sampler import summary_of

    record = summary_of(sampler, interval_s)
    if not str(environment.get("device", "cpu")).startswith("cuda"):
        from dawnpipe.telemetry.peaks import probe_cpu

        record["cpu_peak"] = probe_cpu(framework, tuple(dict.fromkeys(("fp32", precision))), seconds=probe_seconds)
    return record
