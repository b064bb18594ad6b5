"""CIFAR-10: the official python tarball layout, fetched from a local HTTP
server (MD5-verified), prepared to uint8 arrays, and the whole pipeline
through Snakemake on a generated tarball of a few hundred images."""

from __future__ import annotations

import io
import json
import pickle
import tarfile

import numpy as np
import pytest
import yaml
from conftest import copy_project, resolved_config, run_cli, run_snakemake
from vision_data import md5_of, py2_pickle, serve, write_cifar10_tarball

OFFICIAL_MD5 = "c58f30108f718f92721af3b95e74349a"
TARBALL = "cifar-10-python.tar.gz"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A served directory with a generated tarball, its expect file and the generated arrays."""
    root = tmp_path_factory.mktemp("cifar-mirror")
    (root / "www").mkdir()
    arrays = write_cifar10_tarball(root / "www" / TARBALL, n_train=300, n_test=100)
    expect = root / "expect.yaml"
    expect.write_text(yaml.safe_dump({"files": {TARBALL: {"md5": md5_of(root / "www" / TARBALL), "raw": True}}}))
    with serve(root / "www") as url:
        yield {"url": url, "expect": expect, "arrays": arrays, "www": root / "www"}


def test_fetch_and_prepare_give_the_generated_pixels(mirror, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "prepared"
    run_cli("fetch", "cifar10", "--dest", str(raw), "--source", mirror["url"], "--expect", str(mirror["expect"]), check=True)
    assert json.loads((raw / "fetch.json").read_text())["files"][TARBALL]["origin"].startswith("http://127.0.0.1:")
    run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(out), check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "npy-uint8" and manifest["classes"][0] == "airplane"
    for split in ("train", "test"):
        images, labels = mirror["arrays"][split]
        got = np.load(out / f"{split}_images.npy")
        assert got.shape == (len(labels), 32, 32, 3) and got.dtype == np.uint8
        np.testing.assert_array_equal(got, images)  # R, G, B planes back to H x W x C, row by row
        np.testing.assert_array_equal(np.load(out / f"{split}_labels.npy"), labels)
        assert sum(manifest["splits"][split]["class_counts"].values()) == len(labels)


def test_the_generated_batches_are_python2_pickles_like_the_real_ones(mirror):
    """What the loader is tested against: protocol 2, Python 2 ``str`` keys and
    pixels (bytes under encoding="bytes"), numpy 1.x's array reduction; none
    of Python 3's own ways of pickling bytes or numpy 2's module names."""
    import pickletools

    with tarfile.open(mirror["www"] / TARBALL) as tar:
        blob = tar.extractfile("cifar-10-batches-py/data_batch_1").read()
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(blob)]
    assert ops[0] == ("PROTO", 2)
    assert ("GLOBAL", "numpy.core.multiarray _reconstruct") in ops and ("GLOBAL", "numpy dtype") in ops
    assert not any(name in ("BINUNICODE", "SHORT_BINUNICODE", "BINBYTES", "SHORT_BINBYTES") for name, _ in ops)
    assert not any(name == "GLOBAL" and ("_codecs" in arg or "numpy._core" in arg) for name, arg in ops)
    doc = pickle.loads(blob, encoding="bytes")  # how the CIFAR-10 page says to read them (our own file: trusted)
    assert set(doc) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert doc[b"data"].dtype == np.uint8 and doc[b"data"].shape == (60, 3072) and len(doc[b"labels"]) == 60
    images, labels = mirror["arrays"]["train"]
    np.testing.assert_array_equal(doc[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), images[:60])
    assert doc[b"labels"] == [int(v) for v in labels[:60]]


def test_the_loader_reads_them_without_warnings(mirror, tmp_path):
    """numpy 2 still resolves numpy.core.multiarray (the real files' module) without a warning."""
    import warnings

    from dawnpipe.data.cifar import read_cifar10
    from dawnpipe.tasks import get_task

    data = get_task("cifar10").data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrays = read_cifar10(mirror["www"] / TARBALL, data["splits"], data["classes"])
    for split in ("train", "test"):
        np.testing.assert_array_equal(arrays[split][0], mirror["arrays"][split][0])
        np.testing.assert_array_equal(arrays[split][1], mirror["arrays"][split][1])


def test_checksum_mismatch_is_refused_and_leaves_nothing_valid(mirror, tmp_path):
    raw = tmp_path / "raw"
    # the generated tarball against the published MD5 of the real one
    proc = run_cli("fetch", "cifar10", "--dest", str(raw), "--source", mirror["url"])
    assert proc.returncode == 1
    got = md5_of(mirror["www"] / TARBALL)
    assert TARBALL in proc.stderr and OFFICIAL_MD5 in proc.stderr and got in proc.stderr
    assert "Traceback" not in proc.stderr and "None" not in proc.stderr  # md5 only: no "expected sha256 None"
    assert not (raw / "fetch.json").exists() and not (raw / TARBALL).exists()
    proc = run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(tmp_path / "prepared"))
    assert proc.returncode == 1 and "no fetch.json" in proc.stderr


def test_a_refused_refetch_withdraws_the_earlier_verification(mirror, tmp_path):
    raw = tmp_path / "raw"
    run_cli("fetch", "cifar10", "--dest", str(raw), "--source", mirror["url"], "--expect", str(mirror["expect"]), check=True)
    assert (raw / "fetch.json").exists()
    assert run_cli("fetch", "cifar10", "--dest", str(raw), "--source", mirror["url"]).returncode == 1
    assert not (raw / "fetch.json").exists()  # the old fetch.json vouched for a file now rejected


def _tarball_with(path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creating a file is enough to prove code ran


def _fetched(tmp_path, tarball) -> Path:  # noqa: F821
    expect = tmp_path / "expect.yaml"
    expect.write_text(yaml.safe_dump({"files": {TARBALL: {"md5": md5_of(tarball), "raw": True}}}))
    raw = tmp_path / "raw"
    run_cli("fetch", "cifar10", "--dest", str(raw), "--source", str(tarball.parent), "--expect", str(expect), check=True)
    return raw


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    meta = pickle.dumps({b"label_names": [b"airplane"], b"payload": _RunsCode(str(marker))}, protocol=2)
    (tmp_path / "src").mkdir()
    _tarball_with(tmp_path / "src" / TARBALL, {"batches.meta": meta})
    raw = _fetched(tmp_path, tmp_path / "src" / TARBALL)
    proc = run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(tmp_path / "prepared"))
    assert proc.returncode == 1
    assert "batches.meta" in proc.stderr and "io.open" in proc.stderr and "refusing" in proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "prepared" / "manifest.json").exists()


def test_a_batch_of_the_wrong_shape_is_named(tmp_path):
    classes = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    good = {b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 3]}
    members = {"batches.meta": py2_pickle({b"label_names": classes}), "test_batch": py2_pickle(good)}
    for i in range(1, 6):
        members[f"data_batch_{i}"] = py2_pickle(good)
    members["data_batch_3"] = py2_pickle({b"data": np.zeros((4, 1024), np.uint8), b"labels": [0, 1, 2, 3]})
    (tmp_path / "src").mkdir()
    _tarball_with(tmp_path / "src" / TARBALL, members)
    raw = _fetched(tmp_path, tmp_path / "src" / TARBALL)
    proc = run_cli("prepare", "cifar10", "--raw", str(raw), "--out", str(tmp_path / "prepared"))
    assert proc.returncode == 1 and "data_batch_3" in proc.stderr and "3072" in proc.stderr and "(4, 1024)" in proc.stderr


@pytest.mark.slow
def test_cifar10_end_to_end_through_snakemake(mirror, tmp_path):
    """config/test-cifar10.yaml on the generated tarball: first against the
    published MD5 (refused: the job fails and leaves no data/raw/cifar10), then
    with the generated file's checksum: fetch, prepare, train 2 epochs of both
    smoke entries, extract, infer, report."""
    work = copy_project(tmp_path / "project")
    config = resolved_config(work, "config/test-cifar10.yaml")
    config["data_sources"] = {"cifar10": mirror["url"]}
    (work / "config" / "refused.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(work, "results/leaderboard.html", "--configfile", "config/refused.yaml", check=False)
    assert proc.returncode == 1  # Snakemake's exit when a job fails
    assert not (work / "data" / "raw" / "cifar10").exists()
    log = (work / "results" / "logs" / "fetch" / "cifar10.log").read_text()
    assert "checksum mismatch" in log and OFFICIAL_MD5 in log and md5_of(mirror["www"] / TARBALL) in log

    config["data_checksums"] = {"cifar10": str(mirror["expect"])}
    (work / "config" / "run.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(work, "results/leaderboard.html", "--configfile", "config/run.yaml")
    assert (work / "data" / "raw" / "cifar10" / "fetch.json").exists()
    assert json.loads((work / "data" / "prepared" / "cifar10" / "manifest.json").read_text())["splits"]["train"]["items"] == 300
    for entry in config["entries"]:
        run = work / "results" / "runs" / entry / "seed0"
        tsv = (run / "train.tsv").read_text().splitlines()
        assert tsv[0] == "epoch\thours\ttop1Accuracy" and len(tsv) == 3  # 2 epochs
        latency = json.loads((run / "latency.json").read_text())
        assert latency["task"] == "cifar10" and latency["items"] == 100 and latency["metric"] == "top1Accuracy"
        assert json.loads((run / "time_to_accuracy.json").read_text())
    board = json.loads((work / "results" / "leaderboard.json").read_text())
    assert "cifar10" in json.dumps(board) and "smoke-fastnet-cifar10" in json.dumps(board)
    assert (work / "results" / "leaderboard.html").stat().st_size > 0
