"""utilization: achieved FLOP/s, fraction of peak and energy of one training run.

    python -m dawnpipe utilization --log-parquet results/runs/E/seed0/train.parquet \\
        --run-json results/runs/E/seed0/run.json --flops results/flops/E.json \\
        --telemetry results/runs/E/seed0/telemetry.parquet \\
        [--inference-telemetry results/runs/E/seed0/inference_telemetry.parquet --latency-json results/runs/E/seed0/latency.json] \\
        --out results/runs/E/seed0/utilization.json

Achieved FLOP/s of an epoch = counted model FLOPs per item (forward +
backward, ``dawnpipe flops``) x items trained per second of training clock
(the log's ``items_per_second``), docs/rules.md#analysis-metrics. The fraction
of peak divides by the device's peak for the entry's precision (``peaks.yaml``
for GPUs, the CPU probe in run.json otherwise). Energy comes from the
telemetry samples (``dawnpipe.telemetry.energy``); its source says which
meters: NVML, RAPL, both, or none (then there is no energy figure, only the
reason).

A program entry's run (``framework: program``) has no count from ``dawnpipe
flops``: its FLOPs are estimated from the model graph of the model it handed
over (``--model``, the run's model.pt) and its items per second are the
training items it was given (``--data``, the prepared data) over each epoch's
training time, never a count the program reports; the record says so
(``flops.method``, ``estimate``: ``dawnpipe.metrics.program_flops``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe.display import terminal_safe
from dawnpipe.entries import precision_of
from dawnpipe.fileio import write_json
from dawnpipe.logs import read_run_parquet
from dawnpipe.metrics.tta import time_to_accuracy
from dawnpipe.runfiles import read_run_file
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import energy as en
from dawnpipe.telemetry.peaks import device_peak

LOG_COLUMNS = ("eval_seconds", "epoch_train_seconds", "items_per_second")  # of train.parquet, beside the task's and the wall clock


def read_samples(path: Path | None) -> pd.DataFrame | None:
    if path is None or not path.is_file():
        return None
    return pd.read_parquet(path)


def telemetry_summary(samples: pd.DataFrame | None) -> dict[str, Any]:
    """Means and peaks per kind of device, for the report."""
    if samples is None or samples.empty:
        return {"samples": 0}
    out: dict[str, Any] = {"samples": int(samples["t_s"].nunique()), "seconds": float(samples["t_s"].max() - samples["t_s"].min())}
    proc = samples[samples["kind"] == "process"]
    if not proc.empty:
        out["process_cpu_pct_mean"] = float(proc["utilization_pct"].mean())
        out["process_rss_mb_max"] = float(proc["memory_used_mb"].max())
    gpu = samples[samples["kind"] == "gpu"]
    if not gpu.empty:
        per = gpu.groupby("device").agg(
            util=("utilization_pct", "mean"),
            mem=("memory_used_mb", "max"),
            power=("power_w", "mean"),
            temp=("temperature_c", "max"),
            sm=("sm_clock_mhz", "mean"),
        )
        out["gpus"] = [
            {
                "device": d,
                "utilization_pct_mean": _f(r.util),
                "memory_used_mb_max": _f(r.mem),
                "power_w_mean": _f(r.power),
                "temperature_c_max": _f(r.temp),
                "sm_clock_mhz_mean": _f(r.sm),
            }
            for d, r in per.iterrows()
        ]
    m = en.meter(samples)
    out["energy_j"] = m.total if m is not None else None
    out["energy_source"] = m.source if m is not None else "none"
    return out


def _f(x) -> float | None:
    return en.finite_or_none(float(x)) if x is not None else None


def utilization(
    log: pd.DataFrame,
    run: dict[str, Any],
    flops: dict[str, Any],
    samples: pd.DataFrame | None,
    inference_samples: pd.DataFrame | None = None,
    inference_items: int | None = None,
    items_given: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``items_given`` (a program run's, ``program_flops.train_items_given``): each
    epoch's items per second are the training items given over its training
    time, not the log's (the program's own count)."""
    task = get_task(run["task"])
    precision = run["environment"].get("precision") or precision_of(run["settings"]["entry"])  # what it computed in (auto resolved)
    tele = run.get("telemetry") or {}
    peak = device_peak(run["environment"], tele, precision)
    counted = bool(flops.get("counted"))
    origin = tele.get("training_clock_origin_s")
    m = en.meter(samples) if samples is not None and not samples.empty else None

    spans = en.training_spans(log)
    joules = en.epoch_energy(m, log, origin)
    kind = "gpu" if str(run["environment"].get("device", "cpu")).startswith("cuda") else "process"
    util = en.mean_in_spans(samples, kind, "utilization_pct", spans, origin) if samples is not None else [None] * len(log)
    epochs = []
    for i, row in enumerate(log.itertuples(index=False)):
        seconds = float(row.epoch_train_seconds)
        if items_given is not None:
            rate = items_given["train"] / seconds if seconds > 0 else None
        else:
            rate = en.finite_or_none(float(row.items_per_second))  # none where a program does not say how many items it trained on
        achieved = flops["flops_per_item"] * rate / 1e12 if counted and rate is not None else None
        epochs.append(
            {
                "epoch": float(row.epoch),
                "train_seconds": seconds,
                "items_per_second": rate,
                "achieved_tflops": achieved,
                "fraction_of_peak": achieved / peak["compute_tflops"] if achieved is not None and peak["compute_tflops"] else None,
                "energy_j": joules[i],
                "mean_power_w": joules[i] / seconds if joules[i] is not None and seconds > 0 else None,
                "utilization_pct_mean": util[i],
            }
        )
    achieved_all = [e["achieved_tflops"] for e in epochs if e["achieved_tflops"] is not None]
    fractions = [e["fraction_of_peak"] for e in epochs if e["fraction_of_peak"] is not None]

    tta = time_to_accuracy(log["epoch"].tolist(), log["hours"].tolist(), log[task.metric_column].tolist(), run["threshold"])
    energy: dict[str, Any] = {
        "source": m.source if m is not None else "none",
        "devices": list(m.devices) if m is not None else [],
        "run_j": m.total if m is not None else None,
        "reached": tta.reached,
        "threshold_epoch": tta.epoch,
        "energy_to_accuracy_j": None,
        "wall_energy_to_accuracy_j": None,
        "reason": None,
    }
    if m is None:
        energy["reason"] = _no_meter_reason(tele)
    elif not tta.reached:
        energy["reason"] = "the run did not reach its threshold"
    elif origin is None:
        energy["reason"] = "the trainer did not mark its clock origin (telemetry.mark_training_clock), so epochs cannot be placed on the samples"
    else:
        energy.update(en.energy_to_accuracy(m, log, origin, tta.row))
        if energy["energy_to_accuracy_j"] is None:
            energy["reason"] = "the samples do not cover every epoch up to the threshold (a resumed run keeps only its last part)"

    record = {
        "entry": run["entry"],
        "seed": int(run["seed"]),
        "task": task.name,
        "framework": run["framework"],
        "precision": precision,
        "threshold": float(run["threshold"]),
        "demo_threshold": bool(run["demo_threshold"]),
        "peak": peak,
        "flops": {
            k: flops.get(k)
            for k in ("counted", "reason", "flops_per_item", "bytes_per_item", "arithmetic_intensity", "batch_size", "method", "forward_flops_per_item", "rule")
        },
        "achieved_tflops_median": statistics.median(achieved_all) if achieved_all else None,
        "fraction_of_peak_median": statistics.median(fractions) if fractions else None,
        "epochs": epochs,
        "energy": energy,
        "telemetry": {
            **telemetry_summary(samples),
            "interval_s": tele.get("interval_s"),
            "sources": tele.get("sources", {}),
            "outcome": tele.get("outcome"),
            "error": tele.get("error"),
        },
    }
    if run["framework"] == "program":
        from dawnpipe.metrics import program_flops

        record["estimate"] = program_flops.estimate(flops, run, log, task.metric_column, items_given, peak)
    if inference_samples is not None:
        inf = telemetry_summary(inference_samples)
        if inference_items and inf.get("energy_j") is not None:
            inf["energy_per_item_j"] = inf["energy_j"] / inference_items
        record["inference_telemetry"] = inf
    return record


def _no_meter_reason(tele: dict[str, Any]) -> str:
    if not tele or tele.get("outcome") == "off":
        return "telemetry was off for this run"
    sources = tele.get("sources") or {}
    return "no energy meter: " + "; ".join(v for k, v in sources.items() if k in ("gpu", "rapl") and v)


def configure(p) -> None:
    p.add_argument("--log-parquet", required=True, type=Path, help="the run's Parquet log (items/s, epoch times)")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (device, precision, telemetry, CPU probe)")
    p.add_argument("--flops", required=True, type=Path, help="FLOP count of the entry (dawnpipe flops)")
    p.add_argument("--telemetry", type=Path, help="the run's telemetry Parquet (absent: no energy)")
    p.add_argument("--inference-telemetry", type=Path, help="telemetry Parquet of the inference stage (optional)")
    p.add_argument("--latency-json", type=Path, help="latency.json of the inference stage (items answered, for energy per item)")
    p.add_argument("--model", type=Path, help="a program run's model.pt: its FLOPs are estimated from the model graph (program entries only)")
    p.add_argument("--data", type=Path, help="prepared data of the run's task: the training items a program run was given (program entries only)")
    p.add_argument("--out", required=True, type=Path, help="output JSON")


def run(args) -> int:
    run_info = read_run_file(args.run_json, "run_measured")
    items = read_run_file(args.latency_json, "latency")["items"] if args.latency_json else None
    log = read_run_parquet(args.log_parquet, get_task(run_info["task"]), LOG_COLUMNS)
    flops, given = read_run_file(args.flops, "flops"), None
    if run_info["framework"] == "program":  # no count of the entry: estimated from this run's own model
        from dawnpipe.data.loader import prepared_dir
        from dawnpipe.metrics import program_flops

        data = prepared_dir(args.data, run_info["task"]) if args.data else None
        flops, given = program_flops.run_flops(run_info, args.model, data)
    record = utilization(log, run_info, flops, read_samples(args.telemetry), read_samples(args.inference_telemetry), items, given)
    write_json(args.out, record)
    e, med = record["energy"], record["achieved_tflops_median"]
    frac = record["fraction_of_peak_median"]
    estimate = record.get("estimate")
    if estimate is not None:
        med, frac = estimate["achieved_tflops"], estimate["fraction_of_peak"]
    # run.json's entry and device names and flops.json's reason are files' text (dvc pull, a colleague): shown escaped
    print(
        terminal_safe(
            f"utilization: {record['entry']} seed {record['seed']}: "
            + (
                f"{med * 1e3:.2f} GFLOP/s " + ("achieved to the ranked epoch, estimated from the model graph" if estimate else "median achieved")
                if med is not None
                else (f"not estimated ({estimate['reason']})" if estimate else f"FLOPs not counted ({record['flops']['reason']})")
            )
            + (f", {100 * frac:.1f}% of peak ({record['peak']['device']})" if frac is not None else f", peak unknown ({record['peak']['source']})")
            + "; energy: "
            + (f"{e['energy_to_accuracy_j']:.1f} J to accuracy ({e['source']})" if e["energy_to_accuracy_j"] is not None else f"not measured ({e['reason']})")
        )
    )
    return 0
