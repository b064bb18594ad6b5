"""The GPU check of issue 29: dawnpipe's CUDA paths run by its own stages on
one GPU, in one call of the device tool, everything measured written to $OUT.

    bench/gpu_check.sh prepare                  # here, just before the call: .gpu-bundle/ (bench/gpu_bundle.py)
    bash bench/gpu_check.sh                      # on the device machine (run tool: carry [".gpu-bundle"])
    bench/gpu_check.sh --cpu-dry-run [--out DIR] # here: the same steps on this CPU, tiny

Every step is ``python -m dawnpipe <stage>`` (fetch, prepare, train, extract,
flops, infer, utilization) in its own process group, its output in a log of
its own, under a time guard: at most its cap, and never past the check's
deadline (450 s on the GPU, so the whole call ends within 8 minutes of the
machine's start). A step that fails or runs out of time is recorded with its
log's tail and the check goes on with the steps that do not need its output.
gpu_check.json is rewritten after every step, so even a call cut short
brings back what was measured.

The steps, in the order of what matters most if time runs out:

1. install the bundle's missing wheels; probe the machine (bench/gpu_probe.py);
   fetch and prepare Fashion-MNIST from the bundle's raw files;
2. ``fastnet`` trained to 93% with the entry's bf16 (device auto: CUDA), its
   time to accuracy, FLOPs, inference with every PyTorch backend on the GPU
   (ONNX Runtime too, which fails there without a CUDA provider, saying so),
   and utilization (NVML power, energy to accuracy, memory; fraction of the
   datasheet peak in peaks.yaml);
3. ``fastnet`` again through DDP at world size 1 (DAWNPIPE_FORCE_DDP=1:
   dawnpipe's torchrun launcher and an NCCL process group);
4. ``resnet20-dawn`` (fp32) trained to 93%, inferred and measured the same way;
5. ``fastnet`` on the machine's CPU (device: cpu): the GPU/CPU ratio;
6. the torch.compile backend of the fastnet run (compiling takes a while).

The dry run (``--cpu-dry-run``) runs the same steps with 1,000 training and
200 test images, a demo threshold of 15%, 100 inference items, and without
torch.compile (minutes of compiling on a small CPU); GPU-only figures are
then null with the reason, never a number from elsewhere.

Outputs (``--out``, default $OUT, or bench/out/gpu-check for the dry run):
``gpu_check.json`` (bench/gpu_summary.py says what is in it),
``gpu_check.txt`` (the summary printed last), ``gpu_check_logs.tar.gz``
(every step's log and the runs' outputs but the checkpoints). Exit status 0
when every step that ran succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench")]

import gpu_bundle  # noqa: E402
import gpu_summary  # noqa: E402

TASK = "fashion-mnist"
ENTRIES = ROOT / "config" / "entries"
LOG_TAIL_LINES = 25
RESERVE_S = 12.0  # kept for the last JSON, the summary and the archive of the logs
OUT_FILE_LIMIT = 15 * 2**20  # the device tool brings back files of at most 16 MiB


@dataclass(frozen=True)
class Budget:
    """How big the check is: the GPU's real run, or the CPU's dry run."""

    mode: str
    deadline_s: float
    threshold: float | None  # None: the task's official one (93%)
    train_limit: int | None
    test_limit: int | None
    infer_limit: int | None
    warmup: int
    throughput_seconds: float
    telemetry_interval_s: float
    compile_backend: bool
    caps: dict[str, float] = field(default_factory=dict)  # seconds, at most, per kind of step

    def cap(self, kind: str) -> float:
        return self.caps.get(kind, 60.0)


GPU = Budget(
    "gpu",
    deadline_s=450.0,
    threshold=None,
    train_limit=None,
    test_limit=None,
    infer_limit=None,
    warmup=50,
    throughput_seconds=1.0,
    telemetry_interval_s=0.2,
    compile_backend=True,
    caps={"train": 150.0, "train-resnet20-dawn": 240.0, "train-fastnet-cpu": 180.0, "infer": 150.0, "compile": 180.0, "flops": 90.0},
)
DRY_RUN = Budget(
    "cpu-dry-run",
    deadline_s=480.0,
    threshold=15.0,
    train_limit=1000,
    test_limit=200,
    infer_limit=100,
    warmup=5,
    throughput_seconds=0.05,
    telemetry_interval_s=0.2,
    compile_backend=False,
    caps={"train": 120.0, "infer": 120.0, "flops": 90.0},
)


class Check:
    def __init__(self, budget: Budget, out: Path, work: Path, bundle: Path):
        self.budget, self.out, self.work, self.bundle = budget, out, work, bundle
        self.t0 = time.monotonic()
        self.started = gpu_summary.now()
        self.load_start = list(os.getloadavg())
        self.steps: list[dict[str, Any]] = []
        self.install_plan: list[dict[str, Any]] = []
        self.probe: dict[str, Any] | None = None
        self.logs = work / "logs"
        self.site = work / "site"
        self.data = work / "data" / "prepared" / TASK
        for d in (out, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ time
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget.deadline_s - self.elapsed() - RESERVE_S

    def say(self, text: str) -> None:
        print(f"[gpu-check {self.elapsed():6.1f}s] {text}", flush=True)

    # ------------------------------------------------------------ processes
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(self.site), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
        e["PYTHONUNBUFFERED"] = "1"
        return {**e, **(extra or {})}

    def run_dir(self, run: str) -> Path:
        return self.work / "runs" / run / "seed0"

    def step(self, name: str, argv: list[str], *, kind: str, needs: tuple[Path, ...] = (), env: dict[str, str] | None = None, stdout: Path | None = None):
        """Run one step under its time guard; its record (also kept in self.steps)."""
        record: dict[str, Any] = {"name": name, "command": " ".join(argv[2:] if argv[1:2] == ["-m"] else argv[1:]), "log": f"logs/{_file(name)}.log"}
        missing = [p for p in needs if not p.exists()]
        timeout = min(self.budget.cap(kind), self.left())
        if missing:
            record.update(status="skipped", seconds=0.0, reason=f"needs {_shown(missing[0], self.work)}, which an earlier step did not make")
        elif timeout < 5.0:
            record.update(status="skipped", seconds=0.0, reason=f"no time left: {max(self.left(), 0):.0f} s before the check's deadline")
        else:
            self.say(f"{name} ... (up to {timeout:.0f} s)")
            record.update(self._run(argv, timeout, self.logs / f"{_file(name)}.log", env, stdout))
        self.steps.append(record)
        self.say(f"{name}: {record['status']} in {record['seconds']:.1f} s" + (f": {record['reason']}" if record.get("reason") else ""))
        self.save()
        return record

    def _run(self, argv: list[str], timeout: float, log: Path, env: dict[str, str] | None, stdout: Path | None) -> dict[str, Any]:
        start = time.monotonic()
        with open(log, "wb") as err, contextlib.ExitStack() as files:
            out = files.enter_context(open(stdout, "wb")) if stdout else err  # the probe's JSON apart from its messages
            proc = subprocess.Popen(argv, cwd=ROOT, env=self.env(env), stdout=out, stderr=err, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
                status = "ok" if code == 0 else "failed"
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                code, status = proc.returncode, "timeout"
        record = {"status": status, "seconds": round(time.monotonic() - start, 2), "returncode": code}
        if status != "ok":
            tail = _tail(log)
            record["log_tail"] = tail
            why = next((line for line in reversed(tail) if "error" in line.lower() or "failed" in line.lower()), tail[-1] if tail else "")
            record["reason"] = f"stopped at its time limit of {timeout:.0f} s" if status == "timeout" else f"exit {code}: {why[:300]}"
        return record

    def dawnpipe(self, name: str, *args: str, kind: str, needs: tuple[Path, ...] = (), env: dict[str, str] | None = None) -> dict[str, Any]:
        return self.step(name, [sys.executable, "-m", "dawnpipe", *args], kind=kind, needs=needs, env=env)

    # ------------------------------------------------------------ the steps
    def install(self) -> None:
        """The bundle's wheels the interpreter lacks (or has older), into work/site; the dry run only plans."""
        start = time.monotonic()
        record: dict[str, Any] = {"name": "install", "log": "logs/install.log"}
        wheels = self.bundle / "wheels"
        self.install_plan = gpu_bundle.install_plan(wheels)
        chosen = [p["package"] for p in self.install_plan if p["install"]]
        if not self.install_plan:
            record.update(status="failed", reason=f"no wheels in {wheels}: run bench/gpu_check.sh prepare here before the call, and carry .gpu-bundle")
        elif self.budget.mode == "cpu-dry-run":
            record.update(status="ok", reason=f"dry run: planned only (this interpreter lacks {', '.join(chosen) or 'none of them'})")
        else:
            done = gpu_bundle.install(wheels, self.site, self.install_plan)
            (self.logs / "install.log").write_text((done.stdout + done.stderr) if done else "nothing to install\n", encoding="utf-8")
            if done is not None and done.returncode != 0:
                record.update(
                    status="failed", returncode=done.returncode, log_tail=_tail(self.logs / "install.log"), reason=f"pip install exit {done.returncode}"
                )
            else:
                record.update(status="ok", reason=f"installed {', '.join(chosen)}" if chosen else "every package already there")
        record["seconds"] = round(time.monotonic() - start, 2)
        self.steps.append(record)
        self.say(f"install: {record['status']}: {record.get('reason', '')}")
        self.save()

    def machine(self) -> bool:
        """Probe the machine; False when a GPU check has no GPU to check."""
        path = self.work / "probe.json"
        self.step("probe", [sys.executable, str(ROOT / "bench" / "gpu_probe.py")], kind="probe", stdout=path)
        try:
            self.probe = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.probe = None
        if self.budget.mode == "gpu" and not (self.probe and self.probe["torch"]["cuda_available"]):
            why = "no CUDA device: " + (self.probe["torch"].get("reason", "") if self.probe else "the probe failed")
            self.steps.append(
                {"name": "gpu", "status": "failed", "seconds": 0.0, "reason": f"{why}; on a machine without a GPU run bench/gpu_check.sh --cpu-dry-run"}
            )
            self.save()
            return False
        return True

    def prepare_data(self) -> None:
        raw = self.work / "data" / "raw" / TASK
        self.dawnpipe(
            "fetch", "fetch", TASK, "--dest", str(raw), "--cache", str(self.work / "data" / ".partial"), "--source", str(self.bundle / TASK), kind="fetch"
        )
        self.dawnpipe("prepare", "prepare", TASK, "--raw", str(raw), "--out", str(self.data), kind="prepare", needs=(raw / "fetch.json",))

    def entry(self, run: str) -> Path:
        """The entry file of a run: config/entries/<run>.yaml, or a variant of fastnet written for the check."""
        if (ENTRIES / f"{run}.yaml").is_file():
            return ENTRIES / f"{run}.yaml"
        import yaml

        doc = yaml.safe_load((ENTRIES / "fastnet.yaml").read_text(encoding="utf-8"))
        doc["description"] = f"{doc['description']}; {gpu_summary.VARIANTS[run]} (bench/gpu_check.py)"
        if run == "fastnet-cpu":
            doc["device"] = "cpu"
        elif run == "fastnet-ddp1":
            doc["distributed"] = {"nodes": 1, "processes_per_node": 1}
        path = self.work / "entries" / f"{run}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return path

    def train(self, run: str, *, env: dict[str, str] | None = None) -> None:
        b, d = self.budget, self.run_dir(run)
        limits = [
            w
            for flag, v in (("--threshold", b.threshold), ("--train-limit", b.train_limit), ("--test-limit", b.test_limit))
            if v is not None
            for w in (flag, str(v))
        ]
        args = ["train", "--entry", str(self.entry(run)), "--seed", "0", "--data", str(self.data), "--stop-at-threshold", "true", *limits]
        args += [f"--{o}={d / f}" for o, f in (("tsv", "train.tsv"), ("log-parquet", "train.parquet"), ("checkpoint", "model.pt"), ("run-json", "run.json"))]
        args += [f"--mllog={d / 'train.mllog'}", f"--work-dir={self.work / 'work' / run}", f"--telemetry={d / 'telemetry.parquet'}"]
        args += ["--telemetry-interval", str(b.telemetry_interval_s)]
        kind = f"train-{run}" if f"train-{run}" in b.caps else "train"
        self.dawnpipe(f"train/{run}", *args, kind=kind, needs=(self.data / "manifest.json",), env=env)
        self.dawnpipe(
            f"extract/{run}",
            *("extract", "--tsv", str(d / "train.tsv"), "--log-parquet", str(d / "train.parquet"), "--run-json", str(d / "run.json")),
            *("--prices", str(ROOT / "config" / "prices.yaml"), "--out", str(d / "time_to_accuracy.json")),
            kind="extract",
            needs=(d / "run.json",),
        )

    def flops(self, entry: str) -> Path:
        out = self.work / "flops" / f"{entry}.json"
        self.dawnpipe(
            f"flops/{entry}",
            "flops",
            "--entry",
            str(self.entry(entry)),
            "--data",
            str(self.data),
            "--out",
            str(out),
            kind="flops",
            needs=(self.data / "manifest.json",),
        )
        return out

    def infer(self, run: str, backends: list[str], *, name: str = "infer", out: str = "latency") -> None:
        b, d = self.budget, self.run_dir(run)
        device = "cpu" if b.mode == "cpu-dry-run" else "cuda"
        args = ["infer", "--checkpoint", str(d / "model.pt"), "--run-json", str(d / "run.json"), "--data", str(self.data)]
        args += [
            "--prices",
            str(ROOT / "config" / "prices.yaml"),
            "--out-dir",
            str(d / out),
            "--out",
            str(d / f"{out}.json"),
            "--items-parquet",
            str(d / f"{out}.parquet"),
        ]
        args += ["--threads", "1", "--warmup", str(b.warmup), "--backends", *backends, "--throughput-batches", "1", "8", "64", "256"]
        args += ["--throughput-seconds", str(b.throughput_seconds), "--device", device, "--telemetry", str(d / f"{out}_telemetry.parquet")]
        args += ["--telemetry-interval", str(b.telemetry_interval_s), *(["--limit", str(b.infer_limit)] if b.infer_limit else [])]
        self.dawnpipe(f"{name}/{run}", *args, kind="compile" if name == "compile" else "infer", needs=(d / "model.pt", d / "run.json"))

    def utilization(self, run: str, flops: Path) -> None:
        d = self.run_dir(run)
        args = ["utilization", "--log-parquet", str(d / "train.parquet"), "--run-json", str(d / "run.json"), "--flops", str(flops)]
        args += ["--telemetry", str(d / "telemetry.parquet"), "--out", str(d / "utilization.json")]
        if (d / "latency.json").is_file():  # the inference stage's samples and items: energy per item
            args += ["--inference-telemetry", str(d / "latency_telemetry.parquet"), "--latency-json", str(d / "latency.json")]
        self.dawnpipe(f"utilization/{run}", *args, kind="utilization", needs=(d / "run.json", flops))

    def compile_backend(self) -> None:
        if self.budget.compile_backend:
            self.infer("fastnet", ["compile"], name="compile", out="latency_compile")
        else:
            reason = "cpu dry run: torch.compile needs minutes of compiling on a small CPU (the GPU check runs it)"
            self.steps.append({"name": "compile/fastnet", "status": "skipped", "seconds": 0.0, "reason": reason})
            self.say(f"compile/fastnet: {reason}")

    # ------------------------------------------------------------ results
    def summary(self) -> dict[str, Any]:
        return gpu_summary.summarize(self)

    def save(self) -> None:
        _write_json(self.out / "gpu_check.json", self.summary())

    def finish(self) -> int:
        summary = self.summary()
        text = gpu_summary.text(summary)
        (self.out / "gpu_check.txt").write_text(text, encoding="utf-8")
        self.archive()
        summary = self.summary()  # with the archive's name
        _write_json(self.out / "gpu_check.json", summary)
        print(text, flush=True)
        return 0 if all(s["status"] in ("ok", "skipped") for s in self.steps) else 1

    def archive(self) -> None:
        """Every log and the runs' outputs but checkpoints, in one file (the device tool brings back at most 8)."""
        path = self.out / "gpu_check_logs.tar.gz"
        for skip_parquet in (False, True):
            with tarfile.open(path, "w:gz") as tar:
                for folder in ("logs", "runs", "entries", "flops", "work"):  # work: a stopped run's epochs, the ranks' own logs
                    if (self.work / folder).is_dir():
                        tar.add(self.work / folder, arcname=folder, filter=lambda t, s=skip_parquet: _keep(t, s))
                for name in ("probe.json",):
                    if (self.work / name).is_file():
                        tar.add(self.work / name, arcname=name)
            if path.stat().st_size <= OUT_FILE_LIMIT:
                return


def _keep(info: tarfile.TarInfo, skip_parquet: bool) -> tarfile.TarInfo | None:
    if info.name.endswith((".pt", ".npz")) or (skip_parquet and info.name.endswith(".parquet")):
        return None
    return info


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group (a training run saves and stops), SIGKILL 10 s later."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
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


def _file(name: str) -> str:
    return name.replace("/", "-")


def _shown(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run_check(budget: Budget, out: Path, bundle: Path, work: Path | None = None) -> int:
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="dawnpipe-gpu-check-")) if own else work
    check = Check(budget, out, work, bundle)
    check.say(f"{budget.mode}: deadline {budget.deadline_s:.0f} s; work in {work}; results in {out}")
    try:
        check.install()
        if check.machine():
            check.prepare_data()
            check.train("fastnet")
            fastnet_flops = check.flops("fastnet")
            check.infer("fastnet", ["eager", "torchscript", "onnxruntime", "onnxruntime-int8"])
            check.utilization("fastnet", fastnet_flops)
            check.train("fastnet-ddp1", env={"DAWNPIPE_FORCE_DDP": "1", "NCCL_DEBUG": "INFO"})  # NCCL says in the log what it set up
            check.utilization("fastnet-ddp1", fastnet_flops)  # the same recipe: the same FLOPs per item
            check.train("resnet20-dawn")
            check.infer("resnet20-dawn", ["eager", "torchscript", "onnxruntime"])
            check.utilization("resnet20-dawn", check.flops("resnet20-dawn"))
            check.train("fastnet-cpu")
            check.utilization("fastnet-cpu", fastnet_flops)
            check.compile_backend()
        return check.finish()
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_check.sh", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="here: the wheels and data the device machine needs, in .gpu-bundle/, size checked")
    prep.add_argument("--bundle", type=Path, default=gpu_bundle.BUNDLE, help="where to make it (default .gpu-bundle)")
    prep.add_argument("--data-from", type=Path, help="Fashion-MNIST's raw files (default: the Debian package's, else data/raw/fashion-mnist)")
    run = sub.add_parser("run", help="the check (on the device machine, or --cpu-dry-run here)")
    run.add_argument("--cpu-dry-run", action="store_true", help="the same steps on this CPU, tiny; GPU-only figures null with the reason")
    run.add_argument("--out", type=Path, help="where gpu_check.json and the logs go (default $OUT; bench/out/gpu-check for the dry run)")
    run.add_argument("--bundle", type=Path, default=gpu_bundle.BUNDLE, help="the prepared bundle (default .gpu-bundle)")
    run.add_argument("--work", type=Path, help="keep the runs here (default: a temporary directory, removed)")
    run.add_argument("--deadline", type=float, help="seconds the steps may take in all (default 450 on the GPU, 480 in the dry run)")
    args = p.parse_args(argv)
    if args.command == "prepare":
        sys.path.insert(0, str(ROOT / "src"))
        gpu_bundle.prepare(args.bundle, args.data_from)
        return 0
    budget = DRY_RUN if args.cpu_dry_run else GPU
    if args.deadline is not None:
        budget = Budget(**{**budget.__dict__, "deadline_s": args.deadline})
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None and args.cpu_dry_run:
        out = ROOT / "bench" / "out" / "gpu-check"
    if out is None:
        p.error("no --out and no $OUT (the device tool sets $OUT; elsewhere give --out, or use --cpu-dry-run)")
    return run_check(budget, out, args.bundle, args.work)


if __name__ == "__main__":
    sys.exit(main())
