"""gpu_check.json, made from the files the pipeline's stages wrote during the
GPU check (bench/gpu_check.py) and from nothing else: every number is read
from a run.json, train.tsv, time_to_accuracy.json, latency/<backend>.json or
utilization.json, or from the machine's probe. What could not be measured is
null, and the section's ``reasons`` says why (a step that failed or ran out
of time, a run on the CPU: "no GPU ...").

Sections: ``machine`` (GPU, driver, the peaks.yaml row its name finds),
``bundle`` (what was installed), ``steps`` (each step's status, seconds, log,
and the tail of a failed one's log), ``training`` (per run: device,
precision, time to the threshold, epochs, seconds per epoch), ``inference``
(per run and backend: device, latency per item, throughput at batch 1, 8, 64
and 256, and the backends that failed, with why), ``telemetry`` (NVML power,
memory, energy to accuracy), ``utilization`` (achieved TFLOP/s against the
peak of the run's precision), ``ddp`` (the world-size-1 run: backend,
launcher, time per epoch against one plain process), ``gpu_vs_cpu`` (fastnet
on the GPU against the same recipe on the machine's CPU).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import gpu_bundle

RUNS = ("fastnet", "fastnet-ddp1", "resnet20-dawn", "fastnet-cpu")
VARIANTS = {"fastnet-ddp1": "data-parallel at world size 1 (DDP, torchrun, NCCL on a GPU)", "fastnet-cpu": "on the CPU (device: cpu)"}
INFERENCE = {"fastnet": ("fastnet", "latency"), "resnet20-dawn": ("resnet20-dawn", "latency"), "fastnet (compile)": ("fastnet", "latency_compile")}
LATENCY_KEYS = ("latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def with_reasons(values: dict[str, Any], reason_of) -> dict[str, Any]:
    """``values`` with ``reasons``: for each null value, why (``reason_of(key)``)."""
    reasons = {k: reason_of(k) for k, v in values.items() if v is None}
    return {**values, "reasons": reasons}


def step_of(check, name: str) -> dict[str, Any] | None:
    return next((s for s in reversed(check.steps) if s["name"] == name), None)


def step_reason(check, name: str) -> str:
    s = step_of(check, name)
    if s is None:
        return f"step {name} has not run (yet)"
    return f"step {name} {s['status']}" + (f": {s['reason']}" if s.get("reason") else "") + (f" (log {s['log']})" if s.get("log") else "")


def on_gpu(device: str | None) -> bool:
    return bool(device) and str(device).startswith("cuda")


def no_gpu(device: str | None) -> str:
    return f"no GPU: the run trained on {device}" if device else "no GPU figure: the run has no run.json"


# ---------------------------------------------------------------- the machine
def machine(check) -> dict[str, Any]:
    p = check.probe
    if p is None:
        return with_reasons({"gpu": None, "peak_row": None, "cpu_model": None}, lambda k: step_reason(check, "probe"))
    torch_dev = (p["torch"]["devices"] or [None])[0]
    nvml_dev = (p["nvml"]["devices"] or [None])[0]
    gpu = None
    if torch_dev is not None:
        gpu = {
            "torch_name": torch_dev["name"],
            "nvml_name": nvml_dev["name"] if nvml_dev else None,
            "compute_capability": torch_dev["compute_capability"],
            "multiprocessors": torch_dev["multiprocessors"],
            "memory_gib": torch_dev["memory_gib"],
            "driver": p["nvml"].get("driver"),
            "power_limit_w": nvml_dev["power_limit_w"] if nvml_dev else None,
            "energy_counter": nvml_dev["energy_counter"] if nvml_dev else None,
            "nvml_status": p["nvml"]["status"],
            "devices": len(p["torch"]["devices"]),
        }
    row = p["peaks"].get(torch_dev["name"]) if torch_dev else None
    values = {
        "gpu": gpu,
        "peak_row": row if row and row.get("device") else None,
        # both names find the same row: the table's key is what torch and NVML call the part
        "names_find_peak_row": (
            all((p["peaks"].get(n) or {}).get("device") == row.get("device") for n in (gpu["torch_name"], gpu["nvml_name"]) if n) if gpu and row else None
        ),
        "cpu_model": p["cpu_model"],
        "cpu_count": p["cpu_count"],
        "platform": p["platform"],
        "memory_gib": p.get("memory_gib"),
        "python": p["python"],
        "torch": p["torch"]["version"],
        "cuda": p["torch"]["cuda"],
        "cudnn": p["torch"]["cudnn"],
        "onnxruntime_providers": p.get("onnxruntime_providers"),
        "packages": p["packages"],
    }

    def why(key: str) -> str:
        if gpu is None and key in ("gpu", "peak_row", "names_find_peak_row", "cuda", "cudnn"):
            return f"no GPU: {p['torch'].get('reason', 'torch sees no CUDA device')}; {p['nvml']['status']}"
        if key == "peak_row":
            return (row or {}).get("reason", "no row")
        return "not reported by the probe"

    return with_reasons(values, why)


# ---------------------------------------------------------------- training
def epochs_from_tsv(path: Path) -> list[dict[str, float]]:
    """(epoch, training-clock seconds of that epoch, its metric) from a DAWNBench TSV (cumulative hours)."""
    try:
        with open(path, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    except OSError:
        return []
    out, before = [], 0.0
    for r in rows:
        hours = float(r["hours"])
        metric = next((float(v) for k, v in r.items() if k not in ("epoch", "hours")), None)
        out.append({"epoch": float(r["epoch"]), "seconds": (hours - before) * 3600.0, "metric": metric})
        before = hours
    return out


def training(check, run: str) -> dict[str, Any]:
    d = check.run_dir(run)
    info, tta, util = read_json(d / "run.json"), read_json(d / "time_to_accuracy.json"), read_json(d / "utilization.json")
    partial = not (d / "train.tsv").is_file()
    epochs = epochs_from_tsv(check.work / "work" / run / "train.tsv" if partial else d / "train.tsv")
    env = (info or {}).get("environment", {})
    result = (info or {}).get("result", {})
    device = env.get("device")
    seconds = [e["seconds"] for e in epochs]
    rates = [e["items_per_second"] for e in (util or {}).get("epochs", []) if e.get("items_per_second") is not None]
    reached = tta.get("reached") if tta else None
    values = {
        "entry": run,
        "variant": VARIANTS.get(run),
        "step": (step_of(check, f"train/{run}") or {}).get("status"),
        "device": device,
        "gpu": (env.get("gpus") or [None])[0] if on_gpu(device) else None,
        "precision": (info or {}).get("settings", {}).get("entry", {}).get("hyperparameters", {}).get("precision"),
        "tf32_allowed": env.get("tf32_allowed"),
        "threads": (info or {}).get("threads_per_process"),
        "threshold": (info or {}).get("threshold"),
        "demo_threshold": (info or {}).get("demo_threshold"),
        "train_items": result.get("train_items"),
        "reached": reached,
        "time_to_accuracy_s": tta["time_to_accuracy_hours"] * 3600.0 if tta and reached else None,
        "epochs_to_accuracy": tta["epochs_to_accuracy"] if tta and reached else None,
        "epochs_run": len(epochs) if epochs else None,
        "epoch_seconds": seconds,
        "epoch_seconds_median": statistics.median(seconds) if seconds else None,
        "epoch_seconds_after_first": statistics.median(seconds[1:]) if len(seconds) > 1 else None,  # the first holds cuDNN's and the allocator's warm-up
        "items_per_second_median": statistics.median(rates) if rates else None,
        "wall_seconds": result["wall_hours"] * 3600.0 if result.get("wall_hours") is not None else None,
        "epochs_from": "run" if not partial else ("the stopped run's per-epoch log so far" if epochs else None),
        "distributed": result.get("distributed"),
    }

    def why(key: str) -> str:
        if info is None and key not in ("epoch_seconds_median", "epoch_seconds_after_first", "epochs_run", "epochs_from"):
            return step_reason(check, f"train/{run}")
        if key == "gpu":
            return no_gpu(device) if run != "fastnet-cpu" else "the CPU run (device: cpu)"
        if key in ("time_to_accuracy_s", "epochs_to_accuracy") and tta is not None and not reached:
            return f"did not reach {tta.get('threshold')}%: {tta.get('reason') or 'its epoch budget ended first'}"
        if key in ("time_to_accuracy_s", "epochs_to_accuracy", "reached"):
            return step_reason(check, f"extract/{run}")
        if key == "items_per_second_median":
            return step_reason(check, f"utilization/{run}")
        if key == "epoch_seconds_after_first":
            return "one epoch only" if seconds else step_reason(check, f"train/{run}")
        if key == "variant":
            return "an entry of config/entries as it is"
        if key == "tf32_allowed":
            return "run.json does not say (a run of an older commit)"
        return step_reason(check, f"train/{run}")

    return with_reasons(values, why)


# ---------------------------------------------------------------- inference
FAILED_LINE = re.compile(r"infer: backend (\S+) failed: (.*)")
ALL_FAILED = re.compile(r"every backend failed \((.*)\); nothing written")


def failures_from_log(log: Path) -> list[dict[str, str]]:
    try:
        text = log.read_text(encoding="utf-8", errors="backslashreplace")
    except OSError:
        return []
    found = {m.group(1): m.group(2).strip() for m in FAILED_LINE.finditer(text)}
    if not found and (m := ALL_FAILED.search(text)):
        for part in m.group(1).split("; "):
            name, _, reason = part.partition(": ")
            found[name] = reason
    return [{"backend": b, "reason": r} for b, r in found.items()]


def inference(check, run: str, out: str, step: str) -> dict[str, Any]:
    d = check.run_dir(run)
    backends = {}
    for path in sorted((d / out).glob("*.json")) if (d / out).is_dir() else []:
        r = read_json(path)
        if not r:
            continue
        backends[r["backend"]] = {
            "device": r["device"],
            "precision": r["precision"],
            "threads": r["threads"],
            "framework_version": r["framework_version"],
            "items": r["items"],
            "full_inference_set": r["full_inference_set"],
            **{k: r[k] for k in LATENCY_KEYS},
            "warmup_items": r["warmup_items"],
            "accuracy": r["accuracy"],
            "meets_threshold": r["meets_threshold"],
            "throughput_items_per_second": r.get("throughput_items_per_second") or None,
            "export_check_max_abs_diff": (r.get("export_check") or {}).get("max_abs_diff"),
            "prepare_seconds": (r.get("backend_notes") or {}).get("prepare_seconds"),
        }
    headline = read_json(d / f"{out}.json")
    failed = (headline or {}).get("backends_failed")
    if failed is None:
        s = step_of(check, f"{step}/{run}")
        failed = failures_from_log(check.logs / f"{step}-{run}.log") if s else []
    failed = [{"backend": f["backend"], "reason": f["reason"]} for f in failed]
    values = {"step": (step_of(check, f"{step}/{run}") or {}).get("status"), "backends": backends or None, "failed": failed}
    values["on_gpu"] = [b for b, r in backends.items() if on_gpu(r["device"])]
    return with_reasons(values, lambda k: step_reason(check, f"{step}/{run}"))


# ---------------------------------------------------------------- telemetry and utilization
GPU_TELEMETRY = {"power_w_mean": "power_w_mean", "memory_used_mb_max": "memory_used_mb_max", "gpu_utilization_pct_mean": "utilization_pct_mean"}
GPU_TELEMETRY |= {"sm_clock_mhz_mean": "sm_clock_mhz_mean", "temperature_c_max": "temperature_c_max"}


def telemetry(check, run: str, trained: dict[str, Any]) -> dict[str, Any]:
    u = read_json(check.run_dir(run) / "utilization.json")
    tele = (u or {}).get("telemetry", {})
    gpu = (tele.get("gpus") or [{}])[0]
    energy = (u or {}).get("energy", {})
    values = {
        "gpu_device": gpu.get("device"),
        **{k: gpu.get(v) for k, v in GPU_TELEMETRY.items()},
        "energy_source": energy.get("source"),
        "energy_to_accuracy_j": energy.get("energy_to_accuracy_j"),
        "wall_energy_to_accuracy_j": energy.get("wall_energy_to_accuracy_j"),
        "run_energy_j": energy.get("run_j"),
        "inference_energy_per_item_j": (u or {}).get("inference_telemetry", {}).get("energy_per_item_j"),
        "samples": tele.get("samples"),
        "interval_s": tele.get("interval_s"),
        "process_rss_mb_max": tele.get("process_rss_mb_max"),
    }
    device = trained.get("device")

    def why(key: str) -> str:
        if u is None:
            return step_reason(check, f"utilization/{run}")
        cpu = "" if on_gpu(device) else no_gpu(device) + "; "
        if key in ("energy_to_accuracy_j", "wall_energy_to_accuracy_j", "run_energy_j"):
            return cpu + (energy.get("reason") or "no energy meter")
        if key == "inference_energy_per_item_j":
            return cpu + ("no inference step's samples with energy" if run in ("fastnet", "resnet20-dawn") else "no inference step for this run")
        if key == "gpu_device" or key in GPU_TELEMETRY:
            return (cpu or "NVML gave no such samples: ") + str(tele.get("sources", {}).get("gpu", ""))
        return "not in utilization.json"

    return with_reasons(values, why)


def utilization(check, run: str) -> dict[str, Any]:
    u = read_json(check.run_dir(run) / "utilization.json")
    peak, flops = (u or {}).get("peak", {}), (u or {}).get("flops", {})
    values = {
        "precision": (u or {}).get("precision"),
        "peak_device": peak.get("device"),
        "peak_method": peak.get("method"),
        "peak_tflops": peak.get("compute_tflops"),
        "peak_memory_gbps": peak.get("memory_gbps"),
        "peak_source": peak.get("source"),
        "flops_per_item": flops.get("flops_per_item"),
        "arithmetic_intensity": flops.get("arithmetic_intensity"),
        "achieved_tflops_median": (u or {}).get("achieved_tflops_median"),
        "fraction_of_peak_median": (u or {}).get("fraction_of_peak_median"),
    }

    def why(key: str) -> str:
        if u is None:
            return step_reason(check, f"utilization/{run}")
        if key in ("peak_tflops", "fraction_of_peak_median", "peak_method"):
            return peak.get("source") or "no peak"
        if key in ("flops_per_item", "arithmetic_intensity", "achieved_tflops_median"):
            return flops.get("reason") or "FLOPs not counted"
        return "not in utilization.json"

    return with_reasons(values, why)


# ---------------------------------------------------------------- comparisons
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ddp(dp: dict[str, Any], single: dict[str, Any]) -> dict[str, Any]:
    dist = dp.get("distributed") or {}
    device = dp.get("device")
    expected = "nccl" if on_gpu(device) else "gloo"
    values = {
        "device": device,
        "backend": dist.get("backend"),
        "expected_backend": expected if device else None,
        "launcher": dist.get("launcher"),
        "world_size": dist.get("world_size"),
        "nccl": (dist.get("backend") == "nccl") if on_gpu(device) else None,
        "data_parallel_path_taken": (dist.get("backend") == expected and dist.get("launcher") == "torchrun") if device else None,
        "time_to_accuracy_s": dp.get("time_to_accuracy_s"),
        "epoch_seconds_median": dp.get("epoch_seconds_median"),
        "threads": dp.get("threads"),  # torchrun starts a rank with 1 CPU thread unless the job gives --threads
        "single_process_epoch_seconds_median": single.get("epoch_seconds_median"),
        "single_process_threads": single.get("threads"),
        "ddp_over_single_epoch_time": ratio(dp.get("epoch_seconds_median"), single.get("epoch_seconds_median")),
    }

    def why(key: str) -> str:
        if key == "nccl" and device:
            return f"no GPU: the rank ran on {device}, so gloo (NCCL is between GPUs)"
        if key in ("backend", "launcher", "world_size") and device:
            return "the data-parallel path was not taken: run.json's result.distributed says none"
        if key.startswith("single_process_"):
            return single["reasons"].get(key.removeprefix("single_process_"), "not measured")
        if key == "ddp_over_single_epoch_time":
            return single["reasons"].get("epoch_seconds_median") or dp["reasons"].get("epoch_seconds_median", "not measured")
        return dp["reasons"].get({"expected_backend": "device", "data_parallel_path_taken": "device"}.get(key, key)) or dp["reasons"].get(
            "device", "not measured"
        )

    return with_reasons(values, why)


def gpu_vs_cpu(gpu_run: dict[str, Any], cpu_run: dict[str, Any]) -> dict[str, Any]:
    gpu_ok = on_gpu(gpu_run.get("device"))
    values = {
        "gpu": gpu_run.get("gpu"),
        "gpu_time_to_accuracy_s": gpu_run.get("time_to_accuracy_s") if gpu_ok else None,
        "cpu_time_to_accuracy_s": cpu_run.get("time_to_accuracy_s"),
        "cpu_over_gpu_time_to_accuracy": ratio(cpu_run.get("time_to_accuracy_s"), gpu_run.get("time_to_accuracy_s")) if gpu_ok else None,
        "gpu_epoch_seconds_median": gpu_run.get("epoch_seconds_median") if gpu_ok else None,
        "cpu_epoch_seconds_median": cpu_run.get("epoch_seconds_median"),
        "cpu_over_gpu_epoch_time": ratio(cpu_run.get("epoch_seconds_median"), gpu_run.get("epoch_seconds_median")) if gpu_ok else None,
        "cpu_threads": cpu_run.get("threads"),
    }

    def why(key: str) -> str:
        if not gpu_ok and (key.startswith("gpu") or "over_gpu" in key):
            return no_gpu(gpu_run.get("device")) + " (both runs on the CPU: no ratio)"
        source = cpu_run if key.startswith("cpu") else gpu_run
        return (source.get("reasons") or {}).get(key.replace("cpu_", "").replace("gpu_", ""), "not measured")

    return with_reasons(values, why)


# ---------------------------------------------------------------- the whole
def summarize(check) -> dict[str, Any]:
    b = check.budget
    trained = {run: training(check, run) for run in RUNS}
    infer_steps = {"fastnet (compile)": "compile"}
    return {
        "name": "gpu_check",
        "mode": b.mode,
        "started": check.started,
        "updated": now(),
        "elapsed_s": round(check.elapsed(), 1),
        "load_average": {"start": check.load_start, "end": list(os.getloadavg())},  # was anything else running on the machine
        "commit": gpu_bundle.bundle_commit(check.bundle),
        "budget": {k: v for k, v in b.__dict__.items()},
        "machine": machine(check),
        "bundle": {"wheels": check.install_plan},
        "steps": check.steps,
        "training": trained,
        "inference": {name: inference(check, run, out, infer_steps.get(name, "infer")) for name, (run, out) in INFERENCE.items()},
        "telemetry": {run: telemetry(check, run, trained[run]) for run in RUNS},
        "utilization": {run: utilization(check, run) for run in RUNS},
        "ddp": ddp(trained["fastnet-ddp1"], trained["fastnet"]),
        "gpu_vs_cpu": gpu_vs_cpu(trained["fastnet"], trained["fastnet-cpu"]),
    }


def _n(x: float | None, fmt: str = "{:.1f}", none: str = "-") -> str:
    return fmt.format(x) if x is not None else none


def text(s: dict[str, Any]) -> str:
    """The summary printed last (and gpu_check.txt)."""
    m = s["machine"]
    counts = {k: sum(1 for st in s["steps"] if st["status"] == k) for k in ("ok", "failed", "timeout", "skipped")}
    gpu = (m.get("gpu") or {}).get("torch_name") or "no GPU"
    lines = [
        f"gpu check ({s['mode']}) on {gpu}, commit {str(s['commit'].get('commit'))[:10]}: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f", {s['elapsed_s']:.0f} s",
        f"peak row: {(m.get('peak_row') or {}).get('device') or m['reasons'].get('peak_row', '-')}",
        "",
        f"{'training':<16}{'device':<9}{'precision':<10}{'to threshold':>14}{'epochs':>8}{'s/epoch':>9}{'items/s':>10}",
    ]
    for run, t in s["training"].items():
        lines.append(
            f"{run:<16}{str(t['device'] or '-'):<9}{str(t['precision'] or '-'):<10}{_n(t['time_to_accuracy_s'], '{:.1f} s'):>14}"
            f"{_n(t['epochs_to_accuracy'], '{:.0f}'):>8}{_n(t['epoch_seconds_median'], '{:.2f}'):>9}{_n(t['items_per_second_median'], '{:,.0f}'):>10}"
        )
    lines += ["", f"{'inference':<30}{'device':<9}{'ms/item':>9}{'p99':>9}   items/s at batch 1 / 8 / 64 / 256"]
    for name, inf in s["inference"].items():
        for backend, r in (inf["backends"] or {}).items():
            tp = r["throughput_items_per_second"] or {}
            lines.append(
                f"{name + ' ' + backend:<30}{r['device']:<9}{r['latency_mean_ms']:>9.3f}{r['latency_p99_ms']:>9.3f}   "
                + " / ".join(_n(tp.get(k), "{:,.0f}") for k in ("1", "8", "64", "256"))
            )
        lines += [f"{name + ' ' + f['backend']:<30}failed: {f['reason'][:90]}" for f in inf["failed"]]
    lines += ["", f"{'telemetry':<16}{'power W':>9}{'mem MB':>9}{'energy to thr. J':>18}   {'achieved TFLOP/s':>17}{'of peak':>9}"]
    for run in s["telemetry"]:
        t, u = s["telemetry"][run], s["utilization"][run]
        lines.append(
            f"{run:<16}{_n(t['power_w_mean']):>9}{_n(t['memory_used_mb_max'], '{:.0f}'):>9}{_n(t['energy_to_accuracy_j']):>18}   "
            f"{_n(u['achieved_tflops_median'], '{:.3f}'):>17}{_n(u['fraction_of_peak_median'], '{:.2%}'):>9}"
        )
    d, g = s["ddp"], s["gpu_vs_cpu"]
    lines += [
        "",
        f"ddp: backend {d['backend']} (expected {d['expected_backend']}) via {d['launcher']}, world size {d['world_size']}: "
        f"{_n(d['epoch_seconds_median'], '{:.2f}')} s/epoch against {_n(d['single_process_epoch_seconds_median'], '{:.2f}')} in one process",
        f"gpu vs cpu (fastnet): to threshold {_n(g['gpu_time_to_accuracy_s'])} s vs {_n(g['cpu_time_to_accuracy_s'])} s "
        f"({_n(g['cpu_over_gpu_time_to_accuracy'], '{:.1f}x')}); per epoch {_n(g['cpu_over_gpu_epoch_time'], '{:.1f}x')}"
        + (f" ({g['reasons'].get('cpu_over_gpu_epoch_time')})" if g["cpu_over_gpu_epoch_time"] is None else ""),
    ]
    for status in ("failed", "timeout", "skipped"):
        listed = [st for st in s["steps"] if st["status"] == status]
        if listed:
            lines += ["", f"{status}:"] + [f"  {st['name']}: {st.get('reason', '')[:200]}" for st in listed]
    return "\n".join(lines) + "\n"
