"""The TensorFlow trainer and inference backend, run for real through the CLI
on a few hundred Fashion-MNIST images: the torch trainer's contract (logs
passing the same schemas, threshold checkpoint, resumable, seeded), TF
threads from --threads, and TensorFlow loaded only by TF jobs."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, run_cli, tool_env, train_command
from tiny_training import assert_evaluation_off_the_clock, run_with_slow_evaluation, signal_mid_epoch, start_training

from dawnpipe.logs import read_run_tsv
from dawnpipe.schemas.results import RunLog, log_model, validate
from dawnpipe.tasks import get_task

pytestmark = pytest.mark.slow

# Runs a dawnpipe command in a fresh interpreter where only the packages of one
# conda env (envs/*.yaml, and what they depend on) can be imported, as in a
# `--use-conda` job; then reports which frameworks the command loaded.
PROBE = """
import importlib.metadata as md, json, os, re, sys

blocked = json.loads(os.environ["DAWNPIPE_TEST_BLOCKED"])
# None in sys.modules: `import x` raises ModuleNotFoundError and
# importlib.util.find_spec("x") answers None, as when x is not installed ...
for name in blocked["modules"]:
    sys.modules.setdefault(name, None)
# ... and its distribution has no metadata (torch asks importlib.metadata for optree).
_from_name = md.Distribution.from_name.__func__

def from_name(cls, name):
    if re.sub(r"[-_.]+", "-", name).lower() in blocked["distributions"]:
        raise md.PackageNotFoundError(name)
    return _from_name(cls, name)

md.Distribution.from_name = classmethod(from_name)
from dawnpipe.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
except ImportError:  # raised before dawnpipe's own error handling runs
    import traceback
    traceback.print_exc()
    code = 1
print("LOADED " + json.dumps({m: sys.modules.get(m) is not None for m in ("tensorflow", "keras", "torch")}))
sys.exit(code)
"""

TINY_RECIPE = {
    "task": "fashion-mnist",
    "framework": "tensorflow",
    "model": "resnet20",
    "hardware": "local-cpu",
    "hyperparameters": {"batch_size": 100, "epochs": 2, "lr": 0.05, "schedule": {"kind": "constant"}, "augment": {"crop_padding": 2, "flip": True}},
}
LIMITS = ["--train-limit", "600", "--test-limit", "200"]


def probe(env_file: str, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict[str, bool]]:
    """Run ``dawnpipe ARGS`` with only ``env_file``'s packages importable: (process, frameworks it loaded)."""
    env = tool_env({"DAWNPIPE_TEST_BLOCKED": json.dumps(outside_env(ROOT / env_file))})
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=timeout)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED ")]
    assert line, f"no LOADED line (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(line[-1].removeprefix("LOADED "))


def outside_env(env_file: Path) -> dict[str, list[str]]:
    """The installed distributions that ``env_file`` neither pins nor pulls in, and their top-level modules."""
    from importlib.metadata import distributions, packages_distributions

    pinned = [d.split("==")[0] for d in yaml.safe_load(env_file.read_text())["dependencies"][-1]["pip"]]
    provided = _with_dependencies(pinned) | {"dawnpipe"}
    dists = sorted({_canonical(d.metadata["Name"]) for d in distributions()} - provided)
    modules = sorted(m for m, owners in packages_distributions().items() if m not in sys.stdlib_module_names and not {_canonical(d) for d in owners} & provided)
    return {"distributions": dists, "modules": modules}


def train_args(entry: Path, out: Path, *extra: str) -> list[str]:
    return [*train_command(entry, out.parent / "prepared", out, work_dir=out / ".work", threads=2, settings=LIMITS), *extra]


def checkpoint_meta(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:  # no TensorFlow needed to read it
        return json.loads(str(z["meta"]))


@pytest.fixture(scope="module")
def work(tmp_path_factory, fashion_mnist_source) -> Path:
    base = tmp_path_factory.mktemp("tf")
    run_cli("fetch", "fashion-mnist", "--dest", str(base / "raw"), "--cache", str(base / "partial"), "--source", fashion_mnist_source, check=True)
    run_cli("prepare", "fashion-mnist", "--raw", str(base / "raw"), "--out", str(base / "prepared"), check=True)
    entry = base / "tiny-tf.yaml"
    entry.write_text(yaml.safe_dump(TINY_RECIPE))
    return base


@pytest.fixture(scope="module")
def tf_run(work) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """Two epochs, a threshold reached in the first one, the whole budget run."""
    out = work / "a"
    proc, loaded = probe("envs/train-tf.yaml", *train_args(work / "tiny-tf.yaml", out, "--threshold", "10"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, loaded


def test_tf_log_passes_the_schemas_of_every_run(tf_run):
    out, _, _ = tf_run
    task = get_task("fashion-mnist")
    tsv = read_run_tsv(out / "train.tsv", task)
    validate(log_model(task), tsv, str(out / "train.tsv"))
    assert list(tsv.columns) == ["epoch", "hours", "top1Accuracy"]
    assert tsv["epoch"].tolist() == [1, 2] and tsv["hours"].is_monotonic_increasing
    log = pd.read_parquet(out / "train.parquet")
    validate(RunLog, log, str(out / "train.parquet"))
    assert (log["eval_seconds"] > 0).all() and (log["hours"] < log["wall_hours"]).all()  # evaluation is off the clock
    assert log["lr"].tolist() == [0.05, 0.05]


def test_tf_run_json_records_the_tensorflow_environment(tf_run):
    out, proc, loaded = tf_run
    run = json.loads((out / "run.json").read_text())
    env = run["environment"]
    assert run["framework"] == env["framework"] == "tensorflow"
    assert env["framework_version"] == _installed_tensorflow()
    assert (env["threads"], env["interop_threads"], env["threads_set"]) == (2, 1, True)  # from --threads 2
    assert env["device"] == "cpu" and env["mixed_precision_policy"] == "float32"
    assert loaded == {"tensorflow": True, "keras": True, "torch": False}
    assert not (out / ".work").exists()
    assert "2 intra-op / 1 inter-op threads" in proc.stdout


@pytest.fixture(scope="module")
def tf_infer(tf_run, work) -> tuple[subprocess.CompletedProcess, dict]:
    out = tf_run[0]
    proc, loaded = probe(
        "envs/train-tf.yaml",
        "infer",
        "--checkpoint",
        str(out / "model.pt"),
        "--run-json",
        str(out / "run.json"),
        "--data",
        str(work / "prepared"),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(out / "latency.json"),
        "--items-parquet",
        str(out / "latency.parquet"),
        "--threads",
        "1",
        "--warmup",
        "5",
        "--limit",
        "200",
        "--throughput-seconds",
        "0.1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, loaded


def test_tf_checkpoint_is_the_first_epoch_at_the_threshold(tf_run, tf_infer):
    out, _, _ = tf_run
    run = json.loads((out / "run.json").read_text())
    assert run["result"]["reached"] and run["result"]["threshold_epoch"] == 1 and run["result"]["epochs_run"] == 2
    meta = checkpoint_meta(out / "model.pt")
    assert (meta["epoch"], meta["reached_threshold"], meta["framework"]) == (1, True, "tensorflow")
    # Answering the same 200 test items one at a time gives the accuracy logged for epoch 1, not epoch 2.
    latency = json.loads((out / "latency.json").read_text())
    tsv = read_run_tsv(out / "train.tsv", get_task("fashion-mnist"))
    assert latency["accuracy"] == pytest.approx(float(tsv["top1Accuracy"].iloc[0]))
    assert (latency["backend"], latency["threads"], latency["items"]) == ("tf-function", 1, 200)
    assert list(latency["throughput_items_per_second"]) == ["1", "8", "64", "256"]
    assert all(latency["throughput"][b]["answers_differing"] <= 4 for b in ("1", "8", "64", "256"))  # a trained model: near-ties are rare
    assert tf_infer[1]["torch"] is False


def test_tf_predictor_answers_top_k_best_first(tf_run, work):
    """ImageNet-style answers (top-5) from the same graph: the best id first."""
    from dawnpipe.data.loader import load_split
    from dawnpipe.infer.tf_backend import prepare

    items = np.array(load_split(work / "prepared", "test", 20).images)
    top1 = prepare(tf_run[0] / "model.pt", device="cpu", check_items=items)
    top3 = prepare(tf_run[0] / "model.pt", device="cpu", check_items=items, topk=3)
    assert top1.export_check["items"] == 20 and top1.export_check["max_abs_diff"] < 1e-3
    for item in items:
        best = top3.predict(item)
        assert len(set(best)) == 3 and best[0] == top1.predict(item)
    # the batch graph (throughput): the same answers, a batch at a time
    assert top1.predict_batch(items) == [top1.predict(item) for item in items]
    assert [row[0] for row in top3.predict_batch(items[:8])] == [top3.predict(item)[0] for item in items[:8]]


def test_tf_jobs_need_nothing_outside_envs_train_tf(tf_run, tf_infer):
    """envs/train-tf.yaml is truthful: the TF train and infer jobs above ran
    with every package outside it unimportable (torch among them)."""
    blocked = outside_env(ROOT / "envs/train-tf.yaml")["modules"]
    assert "torch" in blocked and "jinja2" in blocked and "tensorflow" not in blocked
    assert tf_run[2]["tensorflow"] and tf_infer[1]["tensorflow"]


def test_a_package_missing_from_the_env_fails_the_job(work, tmp_path):
    """The env check above can fail: without PyYAML/jsonschema a job cannot even read its entry."""
    thin = tmp_path / "thin.yaml"
    thin.write_text(yaml.safe_dump({"dependencies": ["python=3.11", {"pip": ["numpy==2.4.6"]}]}))
    proc, loaded = probe(str(thin), *train_args(work / "tiny-tf.yaml", tmp_path / "out"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert re.search(r"the Python package providing '\w+' is not installed in this environment; `make setup`", proc.stderr), proc.stderr
    assert not loaded["tensorflow"]


def test_interrupted_tf_run_resumes_to_the_same_log(tf_run, work):
    """Killed after epoch 1 and started again, a run continues from its saved
    model, optimizer and generator state and logs exactly what an uninterrupted
    run with the same seed logs (threshold never reached: the checkpoint is the last epoch)."""
    out = work / "b"
    args = [sys.executable, "-m", "dawnpipe", *train_args(work / "tiny-tf.yaml", out, "--threshold", "99")]
    proc = subprocess.Popen(args, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("epoch   1/2"):  # printed after epoch 1's state is saved
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=600)
    assert proc.returncode == -signal.SIGKILL and (out / ".work/last.npz").exists() and not (out / "train.tsv").exists()
    resumed = run_cli(*train_args(work / "tiny-tf.yaml", out, "--threshold", "99"), timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after epoch 1" in resumed.stdout
    a, b = pd.read_parquet(tf_run[0] / "train.parquet"), pd.read_parquet(out / "train.parquet")
    for column in ("epoch", "top1Accuracy", "train_loss", "eval_loss", "lr"):
        assert a[column].tolist() == b[column].tolist(), column
    meta = checkpoint_meta(out / "model.pt")
    assert (meta["epoch"], meta["reached_threshold"]) == (2, False)
    assert json.loads((out / "run.json").read_text())["result"]["resumed_from_epoch"] == 1


def test_sigterm_mid_epoch_tf_run_resumes_counting_the_lost_time(tf_run, work):
    """SIGTERM while epoch 2 trains: the TensorFlow trainer stops at the next
    step, says what it lost, and the restarted run logs what an uninterrupted
    run logs, with the lost time in its training hours (as the PyTorch trainers)."""
    out = work / "sigterm"
    args = train_args(work / "tiny-tf.yaml", out, "--threshold", "10")
    proc = start_training(args)
    signal_mid_epoch(proc, out / ".work", 2, signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert "stopped by SIGTERM in epoch 2" in err
    done = run_cli(*args, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming after epoch 1" in done.stdout and "counting" in done.stdout
    ref, log = pd.read_parquet(tf_run[0] / "train.parquet"), pd.read_parquet(out / "train.parquet")
    for column in ("epoch", "top1Accuracy", "train_loss", "eval_loss", "lr"):
        assert ref[column].tolist() == log[column].tolist(), column
    result = json.loads((out / "run.json").read_text())["result"]
    [record] = result["interruptions"]
    assert record["epoch"] == 2 and record["how"] == "signal SIGTERM" and record["lost_seconds"] > 0
    assert log["lost_seconds"].tolist() == pytest.approx([0.0, record["lost_seconds"]])
    assert (log["hours"] * 3600).tolist() == pytest.approx((log["epoch_train_seconds"] + log["lost_seconds"]).cumsum().tolist(), rel=1e-6)
    assert result["lost_training_seconds"] == pytest.approx(record["lost_seconds"])


def test_tf_evaluation_stays_off_the_training_clock(work):
    """Evaluation slowed by 6 s per epoch: the training clock does not move."""
    out = work / "slow-eval"
    run_with_slow_evaluation("dawnpipe.train.tf_trainer", 6.0, train_args(work / "tiny-tf.yaml", out))
    assert_evaluation_off_the_clock(pd.read_parquet(out / "train.parquet"), 6.0)


def test_pytorch_jobs_do_not_load_tensorflow(work):
    out = work / "torch"
    proc, loaded = probe("envs/train-torch.yaml", *train_args(ROOT / "config/entries/fastnet.yaml", out, "--threshold", "1", "--stop-at-threshold"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert loaded == {"tensorflow": False, "keras": False, "torch": True}
    proc, loaded = probe(
        "envs/train-torch.yaml",
        "infer",
        "--checkpoint",
        str(out / "model.pt"),
        "--run-json",
        str(out / "run.json"),
        "--data",
        str(work / "prepared"),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(out / "latency.json"),
        "--items-parquet",
        str(out / "latency.parquet"),
        "--limit",
        "20",
        "--throughput-seconds",  # a short look: what is asked here is which frameworks the job loads
        "0.05",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert loaded == {"tensorflow": False, "keras": False, "torch": True}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": "fastnet"}, "bad.yaml: model 'fastnet'.*unknown Keras model"),
        ({"model_args": {"widht": 2}}, "bad.yaml: field 'model_args': unknown key 'widht' \\(known: .*width.*\\) \\(model resnet20, tensorflow\\)"),
        ({"hyperparameters": {**TINY_RECIPE["hyperparameters"], "precision": "fp16"}}, "precision fp16 needs a CUDA device"),
        (
            {"distributed": {"nodes": 1, "processes_per_node": 2}},
            "bad.yaml: distributed: data-parallel training is implemented for the PyTorch image trainer only",
        ),
    ],
)
def test_bad_tf_entries_fail_with_a_message(work, change, message):
    entry = work / "bad.yaml"
    entry.write_text(yaml.safe_dump({**TINY_RECIPE, **change}))
    proc = run_cli(*train_args(entry, work / "bad"), timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr[-2000:]


def test_infer_rejects_a_file_that_is_not_a_keras_checkpoint(tf_run, work):
    out, _, _ = tf_run
    bad = work / "garbage.pt"
    bad.write_bytes(b"not a zip archive")
    proc = run_cli(
        "infer",
        "--checkpoint",
        str(bad),
        "--run-json",
        str(out / "run.json"),
        "--data",
        str(work / "prepared"),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(work / "g.json"),
        "--items-parquet",
        str(work / "g.parquet"),
        "--limit",
        "10",
        timeout=600,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{bad}: not a Keras checkpoint of dawnpipe" in proc.stderr
    assert not (work / "g.json").exists()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _with_dependencies(names: list[str]) -> set[str]:
    """``names`` and everything they require (installed metadata, no extras), canonical names."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [_canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_canonical(req.name))
    return seen


def _installed_tensorflow() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    pytest.fail("TensorFlow is not installed, though requirements.txt pins tensorflow-cpu: run `make setup`")
