"""CIFAR-10.1 v6, CIFAR-10's new test set (entry field new_test): fetched like
the other data sets, here from a real HTTP server on 127.0.0.1 serving
generated files in the real format (two .npy files: uint8 N x 32 x 32 x 3
images, integer labels); fetched unverified when no checksum is known (the
case of the package's task file) and saying so in the fetch log, the
prepared manifest, the run's output and run.json; checked when a task file
gives checksums. The .npy files are untrusted: read without pickle, each
problem one line naming the file. A run whose entry asks is scored on the
set at every evaluation, and the leaderboard's Generalization section shows
the score at the threshold checkpoint, recomputed here from the checkpoint."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import zipfile

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, copy_project, resolved_config, run_cli, run_snakemake
from local_http import serve
from vision_data import class_images, md5_of, write_cifar10_tarball

from dawnpipe.errors import DawnpipeError

TARBALL = "cifar-10-python.tar.gz"
DATA, LABELS = "cifar10.1_v6_data.npy", "cifar10.1_v6_labels.npy"
N = 60


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def generated(n: int = N, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """New test images drawn like the tarball's (the same class colours and stripes), other items."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    return class_images(labels, 32, 32, rng, 10), labels.astype(np.int64)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """A directory with a generated CIFAR-10 tarball and the expect file of its MD5."""
    root = tmp_path_factory.mktemp("cifar")
    (root / "www").mkdir()
    write_cifar10_tarball(root / "www" / TARBALL, n_train=300, n_test=100)
    expect = root / "expect.yaml"
    expect.write_text(yaml.safe_dump({"files": {TARBALL: {"md5": md5_of(root / "www" / TARBALL), "raw": True}}}))
    return {"dir": root / "www", "expect": expect}


def fetch(cifar, raw, new_source, *options, task="cifar10"):
    args = ["fetch", task, "--dest", str(raw), "--source", str(cifar["dir"]), "--expect", str(cifar["expect"]), "--new-test", "--new-test-source", new_source]
    return run_cli(*options, *args)


def test_fetched_from_a_url_unverified_and_saying_so_then_prepared_as_generated(cifar, tmp_path):
    images, labels = generated()
    raw, out = tmp_path / "raw", tmp_path / "prepared"
    with serve({DATA: npy(images), LABELS: npy(labels)}) as (url, log):
        proc = fetch(cifar, raw, url)
    assert proc.returncode == 0, proc.stderr
    assert {name for name, _ in log} == {DATA, LABELS}
    assert "NOT VERIFIED" in proc.stdout and f"{DATA}: downloaded from {url}{DATA} (not verified: no checksum is known" in proc.stdout
    record = json.loads((raw / "fetch.json").read_text())["new_test"]
    assert record["title"] == "CIFAR-10.1 v6" and record["verified"] is False
    assert record["files"][DATA]["sha256"] == hashlib.sha256(npy(images)).hexdigest()
    proc = run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(out), check=True)
    assert "CIFAR-10.1 v6: not verified" in proc.stdout and f"new_test has {N} items (the official set has 2000)" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["new_test"] == {"title": "CIFAR-10.1 v6", "verified": False, "items": N}
    assert manifest["splits"]["new_test"]["items"] == N and manifest["splits"]["train"]["items"] == 300  # the task's own splits as before
    np.testing.assert_array_equal(np.load(out / "new_test_images.npy"), images)
    np.testing.assert_array_equal(np.load(out / "new_test_labels.npy"), labels)
    # without --new-test the set is neither fetched nor prepared (a configuration whose entries do not ask)
    again = tmp_path / "raw2"
    run_cli("fetch", "cifar10", "--dest", str(again), "--source", str(cifar["dir"]), "--expect", str(cifar["expect"]), check=True)
    assert "new_test" not in json.loads((again / "fetch.json").read_text()) and not (again / DATA).exists()


def checked_task(tmp_path, files: dict) -> str:
    """A task directory holding CIFAR-10 under another name, its new test set's checksums given."""
    doc = yaml.safe_load((ROOT / "src/dawnpipe/tasks/cifar10.yaml").read_text())
    doc.update(name="cifar10-checked", submission_dir="CIFAR10checked")
    doc["data"]["new_test"]["files"] = files
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks/cifar10-checked.yaml").write_text(yaml.safe_dump(doc))
    return str(tmp_path / "tasks")


def test_a_checksum_in_the_task_file_is_checked(cifar, tmp_path):
    images, labels = generated()
    files = {DATA: npy(images), LABELS: npy(labels)}
    sums = {name: {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)} for name, blob in files.items()}
    tasks = checked_task(tmp_path, sums)
    with serve(files) as (url, _):
        proc = fetch(cifar, tmp_path / "raw", url, "--task-dir", tasks, task="cifar10-checked")
    assert proc.returncode == 0, proc.stderr
    assert "NOT VERIFIED" not in proc.stdout and f"{LABELS}: downloaded from {url}{LABELS} (verified)" in proc.stdout
    assert json.loads((tmp_path / "raw/fetch.json").read_text())["new_test"]["verified"] is True
    # the same files against another checksum: refused, naming the file and both checksums, nothing vouched for
    other = tmp_path / "other"
    other.mkdir()
    wrong = {**sums, LABELS: {"sha256": "0" * 64, "bytes": sums[LABELS]["bytes"]}}
    tasks = checked_task(other, wrong)
    with serve(files) as (url, _):
        proc = fetch(cifar, other / "raw", url, "--task-dir", tasks, task="cifar10-checked")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "error" in ln]  # beside the download progress bars
    assert line.startswith(f"dawnpipe fetch: error: {LABELS}: ") and "checksum mismatch" in line and "0" * 64 in line and sums[LABELS]["sha256"] in line
    assert not (other / "raw/fetch.json").exists()


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creating a file is enough to prove code ran


def _npz(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("arr_0.npy", npy(array))
    return buf.getvalue()


IMAGES, LABELS_OK = generated(8)
BAD = [
    ("float images", {DATA: npy(IMAGES.astype(np.float32))}, DATA, "expected a uint8 array of N x 32 x 32 x 3 images, got float32 (8, 32, 32, 3)"),
    ("grey images", {DATA: npy(IMAGES[..., 0])}, DATA, "got uint8 (8, 32, 32)"),
    ("object array", {DATA: npy(np.array([IMAGES, None], dtype=object), allow_pickle=True)}, DATA, "needs pickle to load"),
    ("npz archive", {DATA: _npz(IMAGES)}, DATA, "not a plain .npy array (a NpzFile)"),
    ("truncated", {DATA: npy(IMAGES)[:-100]}, DATA, "not a plain .npy array"),
    ("label out of range", {LABELS: npy(np.array([0, 1, 2, 3, 10, 5, 6, 7]))}, LABELS, "label 10 at item 4 is outside 0..9"),
    ("negative label", {LABELS: npy(np.array([0, 1, 2, 3, 4, 5, 6, -1]))}, LABELS, "label -1 at item 7 is outside 0..9"),
    ("float labels", {LABELS: npy(LABELS_OK.astype(np.float64))}, LABELS, "integer class ids, got float64"),
    ("too few labels", {LABELS: npy(LABELS_OK[:5])}, LABELS, "5 labels for 8 images"),
]


@pytest.mark.parametrize("files, culprit, reason", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_bad_new_test_file_is_one_error_naming_it(tmp_path, files, culprit, reason):
    from dawnpipe.data.cifar10_1 import read_images, read_labels

    for name, blob in {DATA: npy(IMAGES), LABELS: npy(LABELS_OK), **files}.items():
        (tmp_path / name).write_bytes(blob)
    with pytest.raises(DawnpipeError) as err:
        read_labels(tmp_path / LABELS, len(read_images(tmp_path / DATA, (32, 32, 3))), 10)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / culprit}: ") and reason in message and "\n" not in message, message


def test_a_pickle_in_place_of_the_images_is_refused_and_never_run(cifar, tmp_path):
    marker = tmp_path / "code-ran"
    source = tmp_path / "new"
    source.mkdir()
    (source / DATA).write_bytes(pickle.dumps(_RunsCode(str(marker))))
    (source / LABELS).write_bytes(npy(LABELS_OK))
    raw = tmp_path / "raw"
    assert fetch(cifar, raw, str(source)).returncode == 0  # no checksum known: fetched as it is
    proc = run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(tmp_path / "prepared"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == f"dawnpipe prepare: error: {raw / DATA}: not a plain .npy array: it needs pickle to load, and dawnpipe runs nothing from a download: refused"
    assert not marker.exists() and not (tmp_path / "prepared/manifest.json").exists()


def test_an_entry_asking_for_a_new_test_set_its_task_lacks_is_named(tmp_path):
    project = copy_project(tmp_path / "p")
    entry = (project / "config/entries/smoke/smoke-fastnet.yaml").read_text()
    (project / "config/entries/smoke/smoke-new.yaml").write_text(entry + "new_test: true\n")
    (project / "config/x.yaml").write_text("entries: [smoke-new]\nentries_dir: config/entries/smoke\n")
    proc = run_cli("pipeline", "config", "--config", "config/x.yaml", cwd=project)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "config/entries/smoke/smoke-new.yaml: field 'new_test': task fashion-mnist has no new test set" in line


def independent_accuracy(checkpoint_path, images: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy of a training checkpoint on ``images``, computed here from
    its weights and stored preprocessing (not by the trainer's evaluation)."""
    import torch

    from dawnpipe.checkpoint import load_checkpoint
    from dawnpipe.models.torch_zoo import build_model

    ckpt = load_checkpoint(checkpoint_path)
    model = build_model(ckpt["model"], in_channels=ckpt["in_channels"], num_classes=ckpt["num_classes"], **ckpt["model_args"])
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    mean, std = (torch.tensor(v, dtype=torch.float32).reshape(1, -1, 1, 1) for v in (ckpt["mean"], ckpt["std"]))
    x = (x - mean) / std
    with torch.no_grad():
        logits = model(x)
        if ckpt["tta_flip"]:
            logits = logits + model(torch.flip(x, dims=[3]))
    return 100.0 * float((logits.argmax(1).numpy() == labels).mean())


@pytest.mark.slow
def test_every_evaluation_is_scored_on_it_and_the_leaderboard_shows_it(cifar, tmp_path):
    """config/test-cifar10.yaml with an entry that asks (new_test: true), CIFAR-10.1
    served over HTTP (config new_test_sources): fetch, prepare, train, extract,
    infer, report through Snakemake."""
    images, labels = generated()
    work = copy_project(tmp_path / "project")
    entry = (work / "config/entries/smoke/smoke-fastnet-cifar10.yaml").read_text()
    (work / "config/entries/smoke/smoke-fastnet-cifar10-new.yaml").write_text(entry + "new_test: true\n")
    config = resolved_config(work, "config/test-cifar10.yaml")
    config["entries"] = ["smoke-fastnet-cifar10-new"]
    config["data_sources"] = {"cifar10": str(cifar["dir"])}
    config["data_checksums"] = {"cifar10": str(cifar["expect"])}
    with serve({DATA: npy(images), LABELS: npy(labels)}) as (url, _):
        config["new_test_sources"] = {"cifar10": url}
        (work / "config/run.yaml").write_text(yaml.safe_dump(config))
        run_snakemake(work, "--cores", "2", "results/leaderboard.html", "--configfile", "config/run.yaml")
    assert "NOT VERIFIED" in (work / "results/logs/fetch/cifar10.log").read_text()
    run = work / "results/runs/smoke-fastnet-cifar10-new/seed0"
    train_log = (work / "results/logs/train/smoke-fastnet-cifar10-new/seed0.log").read_text()
    assert f"{N} items of CIFAR-10.1 v6 (NOT VERIFIED: no checksum of its files is known)" in train_log
    result = json.loads((run / "run.json").read_text())["result"]
    assert result["new_test_items"] == N and result["new_test"] == {"title": "CIFAR-10.1 v6", "verified": False}
    log = pd.read_parquet(run / "train.parquet")
    assert len(log) == 2 and log["new_test_top1Accuracy"].notna().all()  # every evaluation (2 epochs)
    tta = json.loads((run / "time_to_accuracy.json").read_text())
    row = log[log["epoch"] == tta["epochs_to_accuracy"]].iloc[0] if tta["reached"] else log.iloc[-1]
    # model.pt is that checkpoint: its accuracy on the new images, computed independently (to one item: float order)
    assert abs(independent_accuracy(run / "model.pt", images, labels) - row["new_test_top1Accuracy"]) <= 100.0 / N + 1e-9
    table = pd.read_parquet(work / "results/runs.parquet")
    assert table["new_test_metric"].iloc[0] == pytest.approx(row["new_test_top1Accuracy"])
    assert table["new_test_gap"].iloc[0] == pytest.approx(row["top1Accuracy"] - row["new_test_top1Accuracy"])
    assert table["held_out_metric"].isna().all()  # no held-out split asked for
    page = (work / "results/leaderboard.html").read_text()
    section = page[page.index('id="generalization"') :]
    section = section[: section.index("</table>")]
    assert "CIFAR-10.1 v6" in section and "not verified" in section
    assert f"{row['new_test_top1Accuracy']:.2f}" in section and f"{row['top1Accuracy'] - row['new_test_top1Accuracy']:+.2f}" in section


@pytest.mark.slow
def test_the_tensorflow_trainer_scores_it_too(cifar, tmp_path):
    from tiny_training import TINY_ENTRY, train_args, write_entry

    images, labels = generated()
    source = tmp_path / "new"
    source.mkdir()
    (source / DATA).write_bytes(npy(images))
    (source / LABELS).write_bytes(npy(labels))
    raw, prepared, out = tmp_path / "raw", tmp_path / "prepared", tmp_path / "run"
    assert fetch(cifar, raw, str(source)).returncode == 0  # a local directory, like data_sources
    run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(prepared), check=True)
    hp = {**TINY_ENTRY["hyperparameters"], "epochs": 2}
    entry = write_entry(
        tmp_path / "e.yaml", task="cifar10", framework="tensorflow", model="resnet20", model_args={"width": 4}, new_test=True, hyperparameters=hp
    )
    proc = run_cli(*train_args(entry, prepared, out), check=True, timeout=900)
    assert f"{N} items of CIFAR-10.1 v6 (NOT VERIFIED" in proc.stdout
    log = pd.read_parquet(out / "train.parquet")
    assert len(log) == 2 and log["new_test_top1Accuracy"].between(0, 100).all()
    # accuracies of 60 items are multiples of 100/60
    assert all(abs(v * N / 100 - round(v * N / 100)) < 1e-6 for v in log["new_test_top1Accuracy"])
    result = json.loads((out / "run.json").read_text())["result"]
    assert result["new_test_items"] == N and result["new_test"] == {"title": "CIFAR-10.1 v6", "verified": False} and result["held_out_items"] == 0
