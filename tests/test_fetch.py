"""fetch + prepare against a real HTTP server on 127.0.0.1 serving generated
IDX files: verification of the decompressed content, a corrupted download
fetched again, a dropped connection resumed with Range, and a persistent
mismatch that is refused without leaving anything at the destination."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import run_cli
from local_http import serve

from dawnpipe.data.fetch import fetch
from dawnpipe.data.idx import read_idx, write_idx
from dawnpipe.data.prepare import prepare
from dawnpipe.errors import DawnpipeError

NAMES = {
    "train-images-idx3-ubyte.gz": (60, 28, 28),
    "train-labels-idx1-ubyte.gz": (60,),
    "t10k-images-idx3-ubyte.gz": (20, 28, 28),
    "t10k-labels-idx1-ubyte.gz": (20,),
}


def idx_gz(array: np.ndarray, tmp_path, name) -> bytes:
    path = tmp_path / f"gen-{name}"
    write_idx(path, array)
    return path.read_bytes()


def mirror(tmp_path, files: dict[str, bytes]) -> Path:
    """A local directory holding ``files``, as a --source."""
    src = tmp_path / "mirror"
    src.mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    return src


@pytest.fixture()
def generated(tmp_path):
    """Generated Fashion-MNIST-shaped IDX files (gzip bytes) and their expect YAML."""
    rng = np.random.default_rng(0)
    files, spec = {}, {}
    for name, shape in NAMES.items():
        array = rng.integers(0, 10 if len(shape) == 1 else 256, size=shape, dtype=np.uint8)
        files[name] = idx_gz(array, tmp_path, name)
        content = gzip.decompress(files[name])
        spec[name] = {"sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
    expect = tmp_path / "expect.yaml"
    expect.write_text(yaml.safe_dump({"files": spec}))
    return files, expect


def test_download_verify_and_prepare(tmp_path, generated):
    files, expect = generated
    dest = tmp_path / "raw"
    with serve(files) as (url, log):
        fetch("fashion-mnist", dest, source=url, cache=tmp_path / "cache", expect=expect)
    assert sorted(n for n, _ in log) == sorted(NAMES)
    record = json.loads((dest / "fetch.json").read_text())
    assert set(record["files"]) == set(NAMES) and all(f["origin"].startswith(url) for f in record["files"].values())
    out = prepare("fashion-mnist", dest, tmp_path / "prepared")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["images"]["shape"] == [60, 28, 28]
    assert sum(manifest["splits"]["test"]["class_counts"].values()) == 20
    images = np.load(out / "train_images.npy", mmap_mode="r")
    assert images.dtype == np.uint8 and np.array_equal(images, read_idx(dest / "train-images-idx3-ubyte.gz"))


def test_gzip_bytes_may_differ_if_content_matches(tmp_path, generated):
    """Debian re-compresses the files: a different gzip of the same content is accepted."""
    files, expect = generated
    name = "t10k-labels-idx1-ubyte.gz"
    recompressed = io.BytesIO()
    with gzip.GzipFile(fileobj=recompressed, mode="wb", compresslevel=1, mtime=12345) as f:
        f.write(gzip.decompress(files[name]))
    assert recompressed.getvalue() != files[name]
    with serve({**files, name: recompressed.getvalue()}) as (url, _):
        fetch("fashion-mnist", tmp_path / "raw", source=url, cache=tmp_path / "cache", expect=expect)


def test_corrupted_download_is_fetched_again(tmp_path, generated):
    files, expect = generated
    name = "train-images-idx3-ubyte.gz"
    with serve(files, faults={name: ["corrupt"]}) as (url, log):
        fetch("fashion-mnist", tmp_path / "raw", source=url, cache=tmp_path / "cache", expect=expect)
    assert [n for n, _ in log].count(name) == 2
    assert (tmp_path / "raw" / name).read_bytes() == files[name]


def test_dropped_connection_resumes_with_range(tmp_path, generated):
    files, expect = generated
    name = "train-images-idx3-ubyte.gz"
    with serve(files, faults={name: ["drop:1000"]}) as (url, log):
        fetch("fashion-mnist", tmp_path / "raw", source=url, cache=tmp_path / "cache", expect=expect)
    requests = [rng for n, rng in log if n == name]
    assert requests == [None, "bytes=1000-"]
    assert (tmp_path / "raw" / name).read_bytes() == files[name]


def test_partial_file_from_an_earlier_run_is_resumed(tmp_path, generated):
    files, expect = generated
    name = "train-labels-idx1-ubyte.gz"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{name}.part").write_bytes(files[name][:17])
    with serve(files) as (url, log):
        fetch("fashion-mnist", tmp_path / "raw", source=url, cache=cache, expect=expect)
    assert (name, "bytes=17-") in log


def test_existing_corrupted_destination_file_is_replaced(tmp_path, generated):
    files, expect = generated
    dest = tmp_path / "raw"
    dest.mkdir()
    name = "t10k-images-idx3-ubyte.gz"
    (dest / name).write_bytes(files[name][: len(files[name]) // 2])  # truncated gzip
    with serve(files) as (url, log):
        fetch("fashion-mnist", dest, source=url, cache=tmp_path / "cache", expect=expect)
    assert (dest / name).read_bytes() == files[name]
    assert name in [n for n, _ in log]


def test_persistent_mismatch_is_refused_and_leaves_nothing(tmp_path, generated):
    files, expect = generated
    name = "t10k-labels-idx1-ubyte.gz"
    bad = gzip.compress(gzip.decompress(files[name])[:-1] + b"\x09")
    dest = tmp_path / "raw"
    with serve({**files, name: bad}) as (url, _):
        proc = run_cli("fetch", "fashion-mnist", "--dest", str(dest), "--source", url, "--cache", str(tmp_path / "cache"), "--expect", str(expect))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    expected_sha = yaml.safe_load(expect.read_text())["files"][name]["sha256"]
    got_sha = hashlib.sha256(gzip.decompress(bad)).hexdigest()
    assert name in proc.stderr and expected_sha in proc.stderr and got_sha in proc.stderr
    assert not (dest / name).exists() and not (dest / "fetch.json").exists()
    with pytest.raises(DawnpipeError, match="fetch.json"):
        prepare("fashion-mnist", dest, tmp_path / "prepared")


def test_http_404_is_a_clear_error(tmp_path, generated):
    files, expect = generated
    missing = dict(files)
    missing.pop("train-labels-idx1-ubyte.gz")
    with serve(missing) as (url, _):
        proc = run_cli("fetch", "fashion-mnist", "--dest", str(tmp_path / "raw"), "--source", url, "--expect", str(expect))
    assert proc.returncode == 1 and "HTTP 404" in proc.stderr and "train-labels-idx1-ubyte.gz" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_local_directory_source(tmp_path, generated):
    files, expect = generated
    src = mirror(tmp_path, files)
    fetch("fashion-mnist", tmp_path / "raw", source=str(src), expect=expect)
    record = json.loads((tmp_path / "raw" / "fetch.json").read_text())
    assert all(f["origin"].startswith(str(src)) for f in record["files"].values())


def test_debian_package_matches_the_official_checksums(prepared_fashion_mnist):
    """The task's checksums are those of the real data, as installed from Debian
    (the session's copy of it is fetched against them, then prepared)."""
    manifest = json.loads((prepared_fashion_mnist / "manifest.json").read_text())
    assert manifest["splits"]["train"]["items"] == 60000 and manifest["splits"]["test"]["items"] == 10000
    assert set(manifest["splits"]["test"]["class_counts"].values()) == {1000}


def test_bad_idx_header_is_named(tmp_path):
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(b"\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02" + b"\x00" * 7)
    with pytest.raises(DawnpipeError, match="2 x 2|shape"):
        read_idx(path)


# ---------------------------------------------------------------- --source naming a file


def test_a_url_source_naming_one_of_the_files_means_its_directory(tmp_path, generated):
    """A link copied from a mirror's listing (http://host/path/train-images-idx3-ubyte.gz)
    is taken as the directory holding the files, not as <file>/<name>."""
    files, expect = generated
    dest = tmp_path / "raw"
    with serve(files) as (url, log):
        proc = run_cli(
            "fetch",
            "fashion-mnist",
            "--dest",
            str(dest),
            "--source",
            url + "train-images-idx3-ubyte.gz",
            "--cache",
            str(tmp_path / "cache"),
            "--expect",
            str(expect),
        )
    assert proc.returncode == 0, proc.stderr
    assert sorted(n for n, _ in log) == sorted(NAMES)  # every request under the directory, none under the file
    assert "names the file train-images-idx3-ubyte.gz" in proc.stdout and url in proc.stdout
    record = json.loads((dest / "fetch.json").read_text())
    assert all(f["origin"] == url + n for n, f in record["files"].items())


def test_a_url_source_naming_another_file_is_refused_naming_the_option(tmp_path, generated):
    files, expect = generated
    with serve(files) as (url, log):
        proc = run_cli("fetch", "fashion-mnist", "--dest", str(tmp_path / "raw"), "--source", url + "fashion.tar.gz", "--expect", str(expect))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"--source {url}fashion.tar.gz" in proc.stderr and "points at a file" in proc.stderr
    assert "train-images-idx3-ubyte.gz" in proc.stderr and f"e.g. {url}" in proc.stderr
    assert log == []  # nothing was requested


def test_a_local_source_naming_a_file_means_its_directory(tmp_path, generated):
    files, expect = generated
    src = mirror(tmp_path, files)
    fetch("fashion-mnist", tmp_path / "raw", source=str(src / "t10k-labels-idx1-ubyte.gz"), expect=expect)
    record = json.loads((tmp_path / "raw" / "fetch.json").read_text())
    assert set(record["files"]) == set(NAMES) and all(f["origin"] == str(src / n) for n, f in record["files"].items())


# ---------------------------------------------------------------- messages about checksums


def test_an_md5_only_mismatch_names_what_is_expected_and_never_none(tmp_path, generated):
    """A file checked by MD5 alone (CIFAR-10, ImageNet) used to be reported as
    'expected sha256 None, md5 ...'."""
    files, _ = generated
    name = "t10k-labels-idx1-ubyte.gz"
    expect = tmp_path / "md5.yaml"
    expect.write_text(yaml.safe_dump({"files": {name: {"md5": "0" * 32, "raw": True}}}))
    with serve(files) as (url, _):
        proc = run_cli("fetch", "fashion-mnist", "--dest", str(tmp_path / "raw"), "--source", url, "--cache", str(tmp_path / "cache"), "--expect", str(expect))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    got = hashlib.md5(files[name]).hexdigest()
    assert f"checksum mismatch after downloading twice from {url}{name}" in proc.stderr
    assert f"expected md5 {'0' * 32}" in proc.stderr and f"md5 {got}" in proc.stderr
    assert "None" not in proc.stderr and "sha256 None" not in proc.stderr


def test_a_file_without_a_known_checksum_says_so(tmp_path, generated):
    """No checksum listed: the file is accepted unverified, and the output says so and what to do;
    unreadable twice, the error says there was no checksum rather than 'expected sha256 None'."""
    files, _ = generated
    name = "t10k-labels-idx1-ubyte.gz"
    expect = tmp_path / "none.yaml"
    expect.write_text(yaml.safe_dump({"files": {name: {}}}))
    with serve(files) as (url, _):
        proc = run_cli(
            "fetch", "fashion-mnist", "--dest", str(tmp_path / "raw"), "--source", url, "--cache", str(tmp_path / "cache"), "--expect", str(expect), check=True
        )
    assert f"no checksum is known for {name}" in proc.stdout and "--expect" in proc.stdout and "not verified" in proc.stdout
    with serve({name: files[name][:40]}) as (url, _):  # a truncated gzip stream, twice
        proc = run_cli("fetch", "fashion-mnist", "--dest", str(tmp_path / "raw2"), "--source", url, "--cache", str(tmp_path / "cache"), "--expect", str(expect))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{name}: unreadable after downloading twice" in proc.stderr and f"no checksum is known for {name}" in proc.stderr
    assert "None" not in proc.stderr


def test_expected_text_names_only_what_is_given():
    from dawnpipe.data.files import expected_text

    assert expected_text({"md5": "ab", "raw": True}, "x.tar") == "expected md5 ab"
    assert expected_text({"sha256": "cd", "bytes": 3}, "x.gz") == "expected sha256 cd, 3 bytes of content"
    assert expected_text({"bytes": 3}, "x.gz").startswith("expected 3 bytes of content; no checksum is known for x.gz")
    assert expected_text({}, "x.gz").startswith("no checksum is known for x.gz") and "None" not in expected_text({}, "x.gz")


# ---------------------------------------------------------------- the partial-download directory


def test_a_local_fetch_leaves_no_partial_directory(tmp_path, generated):
    files, expect = generated
    src = mirror(tmp_path, files)
    fetch("fashion-mnist", tmp_path / "raw", source=str(src), expect=expect)  # default cache: beside --dest
    assert not (tmp_path / ".raw.partial").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_download_leaves_no_empty_partial_directory_but_keeps_one_to_resume(tmp_path, generated):
    files, expect = generated
    with serve(files) as (url, _):
        fetch("fashion-mnist", tmp_path / "raw", source=url, expect=expect)
    assert not (tmp_path / ".raw.partial").exists()
    name = "train-images-idx3-ubyte.gz"
    with serve(files, faults={name: ["drop:1000"] * 3}) as (url, _):
        with pytest.raises(DawnpipeError, match="resumes"):
            import dawnpipe.data.download as dl

            sleep = dl.time.sleep
            dl.time.sleep = lambda s: None
            try:
                fetch("fashion-mnist", tmp_path / "again", source=url, expect=expect)
            finally:
                dl.time.sleep = sleep
    assert (tmp_path / ".again.partial" / f"{name}.part").stat().st_size > 0  # kept for the next run
    cache = tmp_path / "mine"
    cache.mkdir()
    fetch("fashion-mnist", tmp_path / "third", source=str(tmp_path / "raw"), cache=cache, expect=expect)
    assert cache.is_dir()  # a cache directory given and already there is left alone
