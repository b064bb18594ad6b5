"""The GPU check: dawnpipe's CUDA paths run on a machine with one NVIDIA GPU,
each figure beside a reference measured on the same card in the same run,
everything written to one folder.

    bash bench/gpu_check.sh --out DIR [--steps a,b,...] [--bundle DIR]   # on the GPU machine
    bash bench/gpu_check.sh --cpu-dry-run --out DIR                     # anywhere: the same steps, tiny, on the CPU
    bash bench/gpu_check.sh --list-steps

The check is a sequence of steps (``STEPS``; ``--list-steps`` prints them).
Most are the pipeline itself: ``snakemake --keep-going`` with
config/gpu-check.yaml (and a layer the check writes: where the raw data come
from, the dry run's tiny sizes) run in DIR/pipeline, a working directory
whose code and configuration are this checkout's, with one entry's files as
targets. What cannot be a stage is a step of its own: installing the bundle,
probing the machine, the references on the card (bench/gpu_reference.py:
the matrix-product peak, CUDA events around the training clock and around
each inference item), and two pipeline runs that need something a
configuration cannot say: the data-parallel run (``DAWNPIPE_FORCE_DDP=1`` in
its environment) and the CPU run, cut at its time cap by design.

Every step runs in its own process group, its output in DIR/logs/<step>.log,
under a time guard: at most its cap, never past the check's deadline (6
minutes on a GPU). A step that fails or runs out of time is recorded with
its reason and the end of its log, and the check goes on. DIR/gpu_check.json
is rewritten when a step starts and when it ends, so a check cut short still
says what it measured; a null in it always carries its reason
(bench/gpu_summary.py). ``--steps`` runs some steps again in the same DIR:
their records replace theirs, every other step's record is kept, and every
figure is read again from the files the steps left in DIR.

``install`` and ``probe`` run in every invocation (``probe`` before anything
else on a GPU: without a CUDA device the GPU check stops there). The dry run
(``--cpu-dry-run``) runs every step on 1,000 training and 200 test images
with a 15% demo threshold; the steps that time GPU work (``peak``, ``clock``,
``latency``) are skipped there with the reason, and every GPU figure is null
with its reason, never a number from elsewhere.

Exit status 0 when every step of this invocation succeeded (a dry run's GPU
steps skipped by design), 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "src")]

import gpu_bundle  # noqa: E402
import gpu_summary  # noqa: E402

CONFIG = "config/gpu-check.yaml"
# What DIR/pipeline links to: the checkout's workflow, code and configuration (data/ and results/ are the check's own).
PROJECT_PARTS = ("Snakefile", "workflow", "config", "profiles", "envs", "src", "scripts", "examples", "pyproject.toml")
LOG_TAIL_LINES = 25
RESERVE_S = 5.0  # kept for the last JSON and the summary
TASK = "fashion-mnist"


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    gpu_cap_s: float  # seconds at most on the GPU
    dry_cap_s: float  # seconds at most in the dry run
    gpu_only: bool = False  # times GPU work: skipped by design in the dry run
    cut_at_cap: bool = False  # stopped at its cap by design: what it measured until then is its result
    always: bool = False  # runs in every invocation


STEPS: tuple[Step, ...] = (
    Step("install", "the bundle's wheels this Python lacks or has older, into DIR/site (none without a bundle)", 60, 120, always=True),
    Step("probe", "the machine: GPU, driver, CUDA, the torch the check runs with, the packages against the pins", 60, 120, always=True),
    Step("peak", "bf16 and fp32 matrix products (8192 x 8192) timed with CUDA events: the card's reference peak", 45, 0, gpu_only=True),
    Step("data", "pipeline: Fashion-MNIST fetched (from the bundle where it has it) and prepared", 90, 180),
    Step("fastnet", "pipeline: fastnet (bf16) to 93%, its FLOPs, inference with every backend at batch 1/8/64/256, utilization, energy", 120, 300),
    Step("latency", "fastnet's model answered item by item by the stage's timing loop, a CUDA event before and after each item", 45, 0, gpu_only=True),
    Step("clock", "fastnet trained by dawnpipe's training loop with CUDA events around each epoch's training clock", 75, 0, gpu_only=True),
    Step("resnet20-dawn", "pipeline: resnet20-dawn (fp32, TF32 off) to 93%, the same figures", 150, 300),
    Step("torch-fmnist", "pipeline: the program entry torch-fmnist on the GPU, its model scored by ONNX Runtime", 90, 300),
    Step("ddp", "pipeline: fastnet through torchrun, a process group (NCCL on a GPU) and DDP at world size 1", 75, 300),
    Step("cpu", "pipeline: fastnet on this machine's CPU, cut at its time cap: the GPU/CPU ratio per epoch", 45, 300, cut_at_cap=True),
)
BY_NAME = {s.name: s for s in STEPS}
ENTRY_STEPS = {"fastnet": "fastnet", "resnet20-dawn": "resnet20-dawn", "torch-fmnist": "torch-fmnist"}
VARIANT_STEPS = {"ddp": "fastnet-ddp1", "cpu": "fastnet-cpu"}
VARIANTS = {
    "fastnet-ddp1": ("data-parallel at world size 1 (torchrun, a process group, DDP; DAWNPIPE_FORCE_DDP=1)", {}),
    "fastnet-cpu": ("on the CPU (device: cpu)", {"device": "cpu"}),
}


@dataclass(frozen=True)
class Budget:
    """How big the check is: the GPU's run, or the CPU's dry run."""

    mode: str
    deadline_s: float
    layer: dict[str, Any]  # laid over config/gpu-check.yaml

    def cap(self, step: Step) -> float:
        return step.gpu_cap_s if self.mode == "gpu" else step.dry_cap_s


GPU = Budget("gpu", 360.0, {})
DRY_RUN = Budget(
    "cpu-dry-run",
    1500.0,
    {
        "thresholds": {TASK: 15.0},
        "train_limit": 1000,
        "test_limit": 200,
        "inference": {"warmup": 5, "throughput_seconds": 0.05},
        "telemetry": {"interval_s": 0.2},
    },
)


class Interrupted(Exception):
    pass


class UsageError(Exception):
    pass


def _interrupt(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


class Check:
    def __init__(self, budget: Budget, out: Path, bundle: Path | None, argv: list[str]):
        self.budget, self.out, self.bundle = budget, out, bundle
        self.t0 = time.monotonic()
        self.logs, self.site, self.files = out / "logs", out / "site", out / "steps"
        self.pipeline = out / "pipeline"
        self.doc = self.existing()
        self.doc.setdefault("started", gpu_summary.now())
        self.doc.setdefault("steps", {})
        self.invocation = {"started": gpu_summary.now(), "argv": argv, "load_average": {"start": list(os.getloadavg())}, "steps": []}
        self.doc.setdefault("invocations", []).append(self.invocation)
        for d in (out, self.logs, self.files):
            d.mkdir(parents=True, exist_ok=True)
        if str(self.site) not in sys.path:  # what install put there counts as installed, in this process too
            sys.path.insert(0, str(self.site))

    def existing(self) -> dict[str, Any]:
        """The JSON of an earlier invocation in DIR (kept and merged into), or a new one."""
        path = self.out / "gpu_check.json"
        if not path.exists():
            return {"name": "gpu_check", "mode": self.budget.mode}
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UsageError(f"{path}: cannot be read as JSON ({e}); give another --out, or remove it") from None
        if not isinstance(doc, dict) or doc.get("name") != "gpu_check" or not isinstance(doc.get("steps"), dict):
            raise UsageError(f"{path}: field 'name'/'steps': not a GPU check's JSON of this version; give another --out")
        if doc.get("mode") != self.budget.mode:
            raise UsageError(f"{path}: field 'mode': {doc.get('mode')!r}, and this is a {self.budget.mode} check: give another --out")
        return doc

    # ------------------------------------------------------------ time
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget.deadline_s - self.elapsed() - RESERVE_S

    def say(self, text: str) -> None:
        print(f"[gpu-check {self.elapsed():6.1f}s] {text}", flush=True)

    # ------------------------------------------------------------ records
    def save(self) -> None:
        self.doc["updated"] = gpu_summary.now()
        self.invocation["elapsed_s"] = round(self.elapsed(), 1)
        self.invocation["load_average"]["end"] = list(os.getloadavg())
        summary = gpu_summary.summarize(self.out, self.doc, self.budget.mode)
        _write_json(self.out / "gpu_check.json", summary)

    def begin(self, step: Step, timeout: float) -> dict[str, Any]:
        record = {"status": "running", "started": gpu_summary.now(), "cap_s": round(timeout, 1), "log": f"logs/{step.name}.log"}
        self.doc["steps"][step.name] = record
        if step.name not in self.invocation["steps"]:
            self.invocation["steps"].append(step.name)
        self.say(f"{step.name} ... (up to {timeout:.0f} s)")
        self.save()
        return record

    def end(self, step: Step, record: dict[str, Any]) -> None:
        self.doc["steps"][step.name] = record
        self.say(f"{step.name}: {record['status']} in {record.get('seconds', 0):.1f} s" + (f": {record['reason']}" if record.get("reason") else ""))
        self.save()

    def skip(self, step: Step, reason: str, *, by_design: bool = False) -> None:
        if step.name not in self.invocation["steps"]:
            self.invocation["steps"].append(step.name)
        self.end(step, {"status": "skipped", "seconds": 0.0, "reason": reason, "by_design": by_design})

    # ------------------------------------------------------------ processes
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        e = dict(os.environ)
        path = [str(ROOT / "src"), *([str(self.site)] if self.site.is_dir() else []), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])]
        e["PYTHONPATH"] = os.pathsep.join(path)
        e["PYTHONUNBUFFERED"] = "1"
        e["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), e.get("PATH", "")])
        return {**e, **(extra or {})}

    def run_process(self, step: Step, argv: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None, stdout: Path | None = None) -> dict:
        """Run one step's process under its time guard; its record."""
        timeout = min(self.budget.cap(step), self.left())
        record = self.begin(step, timeout)
        record["command"] = " ".join(_shown(a, self.out) for a in argv[1:])
        log = self.logs / f"{step.name}.log"
        start = time.monotonic()
        proc = None
        try:
            with open(log, "wb") as err, open(stdout or os.devnull, "wb") as own:
                # the probe's JSON apart from its messages
                proc = subprocess.Popen(argv, cwd=cwd, env=self.env(env), stdout=own if stdout else err, stderr=err, start_new_session=True)
                try:
                    code = proc.wait(timeout=timeout)
                    status = "ok" if code == 0 else "failed"
                except subprocess.TimeoutExpired:
                    _stop_group(proc)
                    code, status = proc.returncode, "timeout"
        except Interrupted as e:
            if proc is not None:
                _stop_group(proc)
            record.update(status="interrupted", seconds=round(time.monotonic() - start, 2), reason=f"the check was stopped ({e})")
            self.end(step, record)
            raise
        record.update(status=status, seconds=round(time.monotonic() - start, 2), returncode=code)
        if status == "timeout" and step.cut_at_cap:
            record.update(
                status="ok", cut_at_cap=True, reason=f"stopped at its time cap of {timeout:.0f} s, as planned: what it measured until then is its result"
            )
        elif status != "ok":
            record["log_tail"] = _tail(log)
            record["reason"] = (
                f"stopped at its time limit of {timeout:.0f} s" if status == "timeout" else failure_reason(log, record["log_tail"], code, self.pipeline)
            )
        self.end(step, record)
        return record

    # ------------------------------------------------------------ the steps
    def install(self, step: Step) -> None:
        record = self.begin(step, self.budget.cap(step))
        start = time.monotonic()
        wheels = self.bundle / "wheels" if self.bundle else None
        if wheels is None or not wheels.is_dir():
            record.update(status="ok", plan=[], reason=f"no bundle at {self.bundle}: this Python's own packages are used" if self.bundle else "no bundle")
        else:
            plan = gpu_bundle.install_plan(wheels)
            record["plan"] = plan
            record["bundle"] = gpu_bundle.read_bundle(self.bundle)
            chosen = [p["package"] for p in plan if p["install"]]
            done = gpu_bundle.install(wheels, self.site, plan)
            (self.logs / "install.log").write_text((done.stdout + done.stderr) if done else "nothing to install\n", encoding="utf-8")
            if done is not None and done.returncode != 0:
                record.update(
                    status="failed", returncode=done.returncode, log_tail=_tail(self.logs / "install.log"), reason=f"pip install exit {done.returncode}"
                )
            else:
                kept = [p["package"] for p in plan if not p["install"]]
                record.update(status="ok", reason=f"installed {', '.join(chosen) or 'nothing'}; kept this Python's {', '.join(kept) or 'nothing'}")
        record["seconds"] = round(time.monotonic() - start, 2)
        self.end(step, record)

    def probe(self, step: Step) -> bool:
        """Probe the machine; False when a GPU check has no GPU to check."""
        path = self.files / "probe.json"
        tmp = path.with_name(".probe.json.tmp")
        record = self.run_process(step, [sys.executable, str(ROOT / "bench" / "gpu_probe.py"), "--site", str(self.site)], stdout=tmp)
        if record["status"] == "ok":
            os.replace(tmp, path)
        probe = gpu_summary.read_json(path) if record["status"] == "ok" else None
        if probe and probe["requirements"]["missing"]:
            missing = ", ".join(probe["requirements"]["missing"])
            record.update(
                status="failed", reason=f"this Python lacks {missing}: make a bundle (bash bench/gpu_check.sh prepare) where there is network, then --bundle"
            )
            self.end(step, record)
        if self.budget.mode == "gpu" and not (probe and probe["torch"]["cuda_available"]):
            why = probe["torch"].get("reason", "") if probe else record.get("reason", "the probe failed")
            record.update(status="failed", reason=f"no CUDA device: {why}; on a machine without a GPU run bash bench/gpu_check.sh --cpu-dry-run")
            self.end(step, record)
            return False
        return True

    def layer(self) -> Path:
        """DIR/pipeline: links to the checkout, the check's configuration layer, the variants' entries."""
        self.pipeline.mkdir(parents=True, exist_ok=True)
        for part in PROJECT_PARTS:
            link, target = self.pipeline / part, ROOT / part
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            if link.is_symlink() or link.is_file():
                link.unlink()
            link.symlink_to(target)
        data = self.data_source()
        layer = {**self.budget.layer, **({"data_sources": {TASK: str(data)}} if data else {})}
        _write_if_changed(
            self.pipeline / "check.yaml",
            "# Written by bench/gpu_check.sh, laid over config/gpu-check.yaml: where the raw data come from"
            + (", the dry run's sizes" if self.budget.mode != "gpu" else "")
            + "\n"
            + (json.dumps(layer, indent=1) if layer else "{}")
            + "\n",
        )
        import yaml

        base = yaml.safe_load((ROOT / "config" / "entries" / "fastnet.yaml").read_text(encoding="utf-8"))
        for name, (what, change) in VARIANTS.items():
            doc = {**base, **change, "description": f"{base['description']}; {what} (bench/gpu_check.sh)"}
            header = f"# fastnet (config/entries/fastnet.yaml) {what}: written by bench/gpu_check.sh\n"
            _write_if_changed(self.pipeline / "entries" / f"{name}.yaml", header + yaml.safe_dump(doc, sort_keys=False))
        _write_if_changed(
            self.pipeline / "variants.yaml",
            "# Written by bench/gpu_check.sh: the variants of fastnet the ddp and cpu steps run\n"
            + json.dumps({"entries_dir": "entries", "entries": list(VARIANTS)}, indent=1)
            + "\n",
        )
        return self.pipeline

    def data_source(self) -> Path | None:
        """The raw Fashion-MNIST files: the bundle's, else a local copy, else none (the task's own source, over the network)."""
        candidates = ([self.bundle / TASK] if self.bundle else []) + list(gpu_bundle.DATA_SOURCES)
        return next((c.resolve() for c in candidates if all((c / f).is_file() for f in gpu_bundle.DATA_FILES)), None)

    def snakemake(self, step: Step, targets: list[str], *, variants: bool = False, env: dict[str, str] | None = None) -> dict[str, Any]:
        pipeline = self.layer()
        layers = [CONFIG, "check.yaml", *(["variants.yaml"] if variants else [])]
        argv = [sys.executable, "-m", "snakemake", "--snakefile", "Snakefile", "--cores", "all", "--keep-going", "--rerun-incomplete"]
        argv += ["--configfile", *layers, "--", *targets]
        return self.run_process(step, argv, cwd=pipeline, env=env)

    def run_step(self, step: Step) -> None:
        if self.budget.mode != "gpu" and step.gpu_only:
            return self.skip(step, "no GPU in a dry run: this step times work queued on a GPU with CUDA events", by_design=True)
        if self.left() < 5.0:
            return self.skip(step, f"no time left: {max(self.left(), 0):.0f} s before the check's deadline of {self.budget.deadline_s:.0f} s")
        runs = self.pipeline / "results" / "runs"
        prepared = self.pipeline / "data" / "prepared" / TASK
        if step.name == "install":
            return self.install(step)
        if step.name == "data":
            self.snakemake(step, [f"data/prepared/{TASK}"])
        elif step.name in ENTRY_STEPS:
            run = f"results/runs/{ENTRY_STEPS[step.name]}/seed0"
            self.snakemake(step, [f"{run}/time_to_accuracy.json", f"{run}/latency.json", f"{run}/utilization.json"])
        elif step.name in VARIANT_STEPS:
            env = {"DAWNPIPE_FORCE_DDP": "1", "NCCL_DEBUG": "INFO"} if step.name == "ddp" else None  # NCCL says in the log what it set up
            self.snakemake(step, [f"results/runs/{VARIANT_STEPS[step.name]}/seed0/time_to_accuracy.json"], variants=True, env=env)
        elif step.name == "peak":
            self.run_process(step, [sys.executable, str(ROOT / "bench" / "gpu_reference.py"), "peak", "--out", str(self.files / "peak.json")])
        elif step.name == "latency":
            model = runs / "fastnet" / "seed0" / "model.pt"
            if not model.is_file():
                return self.skip(step, f"needs {_shown(model, self.out)}, which the fastnet step makes")
            argv = [sys.executable, str(ROOT / "bench" / "gpu_reference.py"), "latency", "--checkpoint", str(model), "--data", str(prepared)]
            argv += ["--stage-dir", str(model.parent / "latency"), "--out", str(self.files / "latency.json")]
            self.run_process(step, argv)
        elif step.name == "clock":
            if not (prepared / "manifest.json").is_file():
                return self.skip(step, f"needs {_shown(prepared, self.out)}, which the data step makes")
            from dawnpipe.pipeline.stages import TRAIN, command_words
            from dawnpipe.pipeline.values import train_settings

            argv = [sys.executable, str(ROOT / "bench" / "gpu_reference.py"), "clock", "--out-dir", str(self.files / "clock")]
            # the run's words of the train stage's command, from the stage table (gpu_reference adds its outputs)
            run = {"entry_file": ROOT / "config/entries/fastnet.yaml", "seed": 0, "data": prepared, "telemetry_interval": 0}
            argv += command_words(TRAIN, {**run, "settings": train_settings(stop_at_threshold=True)})[1:]
            self.run_process(step, argv)
        return None

    def finish(self) -> int:
        self.save()
        summary = gpu_summary.read_json(self.out / "gpu_check.json")
        text = gpu_summary.text(summary)
        _write_text(self.out / "gpu_check.txt", text)
        print(text, flush=True)
        mine = [self.doc["steps"][n] for n in self.invocation["steps"]]
        return 0 if all(r["status"] == "ok" or (r["status"] == "skipped" and r.get("by_design")) for r in mine) else 1


def failure_reason(log: Path, tail: list[str], code: int | None, pipeline: Path) -> str:
    """Why a step failed: for the pipeline, each rule that failed with the last error line of its stage log."""
    text = log.read_text(encoding="utf-8", errors="backslashreplace") if log.is_file() else ""
    failed = gpu_summary.failed_rules(text)
    if failed:
        parts = []
        for rule, stage_log in failed:
            line = gpu_summary.error_line(pipeline / stage_log) if stage_log else None
            parts.append(f"rule {rule} failed" + (f": {line}" if line else "") + (f" (log pipeline/{stage_log})" if stage_log else ""))
        return "; ".join(parts)[:600]
    why = next((line for line in reversed(tail) if "error" in line.lower() or "failed" in line.lower()), tail[-1] if tail else "")
    return f"exit {code}: {why[:300]}"


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group (a training run saves and stops; Snakemake cancels its jobs), SIGKILL 15 s later."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(log: Path) -> list[str]:
    try:
        lines = log.read_text(encoding="utf-8", errors="backslashreplace").splitlines()
    except OSError:
        return []
    return [line[:400] for line in lines if line.strip()][-LOG_TAIL_LINES:]


def _shown(path: Path | str, base: Path) -> str:
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return str(path)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    _write_text(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")


def _write_if_changed(path: Path, text: str) -> None:
    """Write only what differs: an unchanged file keeps its time stamp (Snakemake compares them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        _write_text(path, text)


def parse_steps(text: str | None) -> list[Step]:
    if text is None:
        return list(STEPS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise UsageError(f"--steps: unknown step {', '.join(unknown) or '(none given)'} (the steps: {', '.join(BY_NAME)})")
    wanted = set(names)
    return [s for s in STEPS if s.name in wanted or s.always]


def list_steps() -> str:
    lines = [f"{'step':<15}{'GPU cap':>8}{'dry cap':>8}  what"]
    for s in STEPS:
        flags = " [every invocation]" if s.always else " [GPU only]" if s.gpu_only else " [cut at its cap]" if s.cut_at_cap else ""
        lines.append(f"{s.name:<15}{s.gpu_cap_s:>7.0f}s{(f'{s.dry_cap_s:.0f}s' if s.dry_cap_s else '-'):>8}  {s.what}{flags}")
    lines.append(f"deadline: {GPU.deadline_s:.0f} s on a GPU, {DRY_RUN.deadline_s:.0f} s in the dry run (--deadline)")
    return "\n".join(lines)


def run_check(budget: Budget, out: Path, bundle: Path | None, steps: list[Step], argv: list[str]) -> int:
    check = Check(budget, out, bundle, argv)
    check.say(f"{budget.mode}: deadline {budget.deadline_s:.0f} s; steps {', '.join(s.name for s in steps)}; results in {out}")
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for step in steps:
            if step.name == "probe":
                if not check.probe(step):
                    for rest in steps[steps.index(step) + 1 :]:
                        check.skip(rest, "no GPU: the probe found no CUDA device")
                    break
            else:
                check.run_step(step)
        return check.finish()
    except Interrupted as e:
        for name in check.invocation["steps"]:  # stopped before its process started, or while its record was written
            if check.doc["steps"][name]["status"] == "running":
                check.doc["steps"][name].update(status="interrupted", seconds=0.0, reason=f"the check was stopped ({e})")
        check.say(f"stopped ({e}): {out / 'gpu_check.json'} holds what was measured")
        check.finish()
        return 143 if str(e) == "SIGTERM" else 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="bash bench/gpu_check.sh", description=__doc__.split("\n\n")[0], epilog=list_steps(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="where there is network: the offline bundle for a GPU node (bench/gpu_bundle.py)")
    prep.add_argument("--bundle", type=Path, default=gpu_bundle.BUNDLE, help="where to make it (default .gpu-bundle)")
    prep.add_argument("--node-packages", type=Path, help="`python3 -m pip freeze` of the node: what it has is left out")
    prep.add_argument("--python-version", help="the node's Python, 3.N (default: this one's)")
    prep.add_argument("--arch", default="x86_64", help="the node's machine (default x86_64; aarch64 for Grace)")
    prep.add_argument("--glibc", default="2.28", help="the node's glibc, 2.N (default 2.28)")
    prep.add_argument("--max-mib", type=float, help="the bundle's size limit in MiB (default: none)")
    prep.add_argument("--data-from", type=Path, help="Fashion-MNIST's raw files (default: the Debian package's, else data/raw/fashion-mnist)")
    run = sub.add_parser("run", help="the check", epilog=list_steps(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--out", type=Path, help="where gpu_check.json, the logs and the runs go (required; the dry run's default: bench/out/gpu-check)")
    run.add_argument("--cpu-dry-run", action="store_true", help="the same steps on this CPU, tiny; GPU figures null with the reason")
    run.add_argument("--steps", help="comma-separated steps to run (default: all; install and probe always run)")
    run.add_argument("--list-steps", action="store_true", help="print the steps and exit")
    run.add_argument("--bundle", type=Path, help="the offline bundle (default .gpu-bundle where it exists)")
    run.add_argument(
        "--deadline", type=float, help=f"seconds the steps may take in all (default {GPU.deadline_s:.0f} on a GPU, {DRY_RUN.deadline_s:.0f} in the dry run)"
    )
    args = p.parse_args(argv)
    if args.command == "prepare":
        try:
            gpu_bundle.prepare(
                args.bundle,
                data_from=args.data_from,
                node_packages=args.node_packages,
                python_version=args.python_version,
                arch=args.arch,
                glibc=args.glibc,
                max_mib=args.max_mib,
            )
        except gpu_bundle.BundleError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    if args.list_steps:
        print(list_steps())
        return 0
    budget = DRY_RUN if args.cpu_dry_run else GPU
    if args.deadline is not None:
        budget = Budget(budget.mode, args.deadline, budget.layer)
    out = args.out or (ROOT / "bench" / "out" / "gpu-check" if args.cpu_dry_run else None)
    bundle = args.bundle or (gpu_bundle.BUNDLE if gpu_bundle.BUNDLE.is_dir() else None)
    try:
        if out is None:
            raise UsageError("--out DIR is required: where gpu_check.json, the logs and the runs go")
        if bundle is not None and not bundle.is_dir():
            raise UsageError(f"--bundle {bundle}: no such directory (bash bench/gpu_check.sh prepare makes one)")
        steps = parse_steps(args.steps)
        return run_check(budget, out.resolve(), bundle.resolve() if bundle else None, steps, argv)
    except UsageError as e:
        print(f"gpu check: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
