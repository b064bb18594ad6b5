"""The public DAWNBench entries as a config (config/dawnbench.yaml, the
dawnbench stage, dawnpipe.data.dawnbench and dawnpipe.data.archive): an
archive laid out like GitHub's (dawn-bench-entries-master/CIFAR10/...) made
here from ../shared/dawnbench-entries, served by a real HTTP server on
127.0.0.1, fetched and unpacked by the pipeline under Snakemake, and ranked on
the page in the twelve published tables, whose top rows are recomputed here
from the auditor's own figures of the original directory; without network
one line naming the URL and the reason; hostile archives (a path leaving the
destination, an absolute path, links, oversized or duplicate entries) refused
whole with nothing written; a given sha256 checked."""

from __future__ import annotations

import io
import json
import shutil
import socket
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import copy_project, run_cli, run_snakemake
from local_http import serve

from dawnpipe.data.archive import Limits, unpack
from dawnpipe.errors import DawnpipeError

TOP = "dawn-bench-entries-master"
TASKS = {"cifar10": "CIFAR10", "imagenet": "ImageNet", "squad": "SQuAD"}


def github_zip(entries: Path, top: str = TOP) -> bytes:
    """A zip of ``entries`` as GitHub's archive of the repository lays it out: one top folder, folder entries too."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{top}/", b"")
        z.writestr(f"{top}/README.md", b"# DAWNBench entries\n")
        for path in sorted(entries.rglob("*")):
            name = f"{top}/{path.relative_to(entries).as_posix()}"
            if path.is_dir():
                z.writestr(name + "/", b"")
            else:
                z.write(path, name)
    return buf.getvalue()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the pipeline
def expected_best(audit: dict) -> dict[tuple[str, str], tuple[float, set[str]]]:
    """Per (task, objective): the best value among the submissions the audit
    ranks (rankable, no notes, reaching the threshold), and the sources with it."""
    best: dict[tuple[str, str], tuple[float, set[str]]] = {}

    def offer(task, objective, value, source):
        if value is None:
            return
        old = best.get((task, objective))
        if old is None or value < old[0] - 1e-12:
            best[(task, objective)] = (value, {source})
        elif abs(value - old[0]) <= 1e-12:
            old[1].add(source)

    for s in audit["submissions"]:
        if not s["rankable"] or s["notes"] or s["task"] not in TASKS:
            continue
        f = s["figures"]
        if s["kind"] == "train" and f.get("reached"):
            offer(s["task"], "train_time", f["hours_to_threshold"], s["source"])
            offer(s["task"], "train_cost", f.get("cost_usd"), s["source"])
        elif s["kind"] == "inference" and f.get("accuracy") is not None and f["accuracy"] >= f["threshold"]:
            offer(s["task"], "inference_latency", f.get("latency_ms"), s["source"])
            offer(s["task"], "inference_cost", f.get("cost_per_10k_usd"), s["source"])
    return best


@pytest.mark.slow
def test_the_pipeline_fetches_the_public_entries_and_ranks_them_in_the_twelve_tables(tmp_path, dawnbench_entries, fashion_mnist_source):
    audit_json = tmp_path / "audit.json"
    run_cli("audit", str(dawnbench_entries), "--json", str(audit_json))  # exit 0 or 1: the figures are what counts
    expected = expected_best(json.loads(audit_json.read_text()))
    assert len(expected) == 12, sorted(expected)  # the subset in ../shared has every table

    project = copy_project(tmp_path / "p")
    archive = github_zip(dawnbench_entries)
    with serve({"master.zip": archive}) as (base, log):
        layer = project / "config/local-dawnbench.yaml"
        # config/test.yaml's tiny data, one run of one entry beside the public entries (the test's only training),
        # answered by one backend (nothing here reads a second one)
        layer.write_text(
            yaml.safe_dump({"dawnbench_entries": {"source": base + "master.zip"}, "entries": ["fastnet"], "seeds": [0], "inference": {"backends": ["eager"]}})
        )
        proc = run_snakemake(
            project, "--cores", "2", "results/leaderboard.html", "--configfile", "config/test.yaml", "config/dawnbench.yaml", "config/local-dawnbench.yaml"
        )
    assert [name for name, _ in log] == ["master.zip"]
    stage_log = (project / "results/logs/dawnbench.log").read_text()
    assert "NOT verified: no sha256 given" in stage_log, stage_log
    record = json.loads((project / "data/dawnbench/fetch.json").read_text())
    assert record["verified"] is False and record["source"] == base + "master.zip"
    shipped = {p.relative_to(dawnbench_entries).as_posix() for p in dawnbench_entries.rglob("*") if p.is_file()}
    entries = project / "data/dawnbench/entries"
    unpacked = {
        p.relative_to(entries).as_posix() for p in entries.rglob("*") if p.is_file() and p.name != ".snakemake_timestamp"
    }  # Snakemake's mark of a directory output
    assert unpacked == shipped | {"README.md"}, proc.stdout[-2000:]  # the top folder stripped, nothing else added or lost

    board = json.loads((project / "results/leaderboard.json").read_text())
    page = (project / "results/leaderboard.html").read_text()
    tables = {(t["task"], t["objective"]): t for t in board["objectives"] if t["task"] in TASKS and not t["demo_threshold"]}
    assert len(tables) == 12
    for (task, objective), (value, sources) in expected.items():
        table = tables[(task, objective)]
        top = table["rows"][0]
        assert top["value"] == pytest.approx(value, rel=1e-9), (task, objective, top)
        assert any(top["source"].endswith(s) for s in sources), (task, objective, top["source"], sources)
        # on the page: the table, ranked, its first row that submission
        anchor = f'id="{task}-{objective}-{table["threshold"]}"'
        assert anchor in page, anchor
        section = page[page.index(anchor) :]
        first_row = section[section.index("<tbody>") : section.index("</tr>", section.index("<tbody>"))]
        assert top["display"] in first_row and top["model"].replace("&", "&amp;")[:20] in first_row.replace("&#39;", "'"), first_row
    # our own runs are still there, beside them
    assert any(t["task"] == "fashion-mnist" and t["rows"] for t in board["objectives"])


def test_both_front_ends_have_the_stage_only_in_a_config_that_fetches_the_entries(tmp_path):
    """config/dawnbench.yaml: a dawnbench stage in dvc.yaml (its command, outputs, the
    source as a parameter) and in Snakemake's plan, the report ranking its output;
    the default config: neither."""
    project = copy_project(tmp_path / "p")
    run_cli("pipeline", "dvc", "--config", "config/dawnbench.yaml", cwd=project, check=True)
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    stage = stages["dawnbench"]
    assert stage["cmd"].endswith(
        "dawnbench --dest data/dawnbench/entries --record data/dawnbench/fetch.json --cache data/.partial/dawnbench "
        "--source https://github.com/stanford-futuredata/dawn-bench-entries/archive/refs/heads/master.zip"
    ), stage["cmd"]
    assert "data/dawnbench/entries" in stage["outs"] and {"params.yaml": ["config.dawnbench_entries"]} in stage["params"]
    assert "--submissions results/submissions data/dawnbench/entries" in stages["report"]["cmd"]
    assert "data/dawnbench/entries" in stages["report"]["deps"]
    dry = run_snakemake(project, "-n", "results/leaderboard.html", "--configfile", "config/dawnbench.yaml")
    assert "rule dawnbench:" in dry.stdout and "data/dawnbench/entries" in dry.stdout
    run_cli("pipeline", "dvc", cwd=project, check=True)
    assert "dawnbench" not in yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    dry = run_snakemake(project, "-n", "results/leaderboard.html")
    assert "rule dawnbench:" not in dry.stdout


# ------------------------------------------------------------------ the fetch alone
def test_without_network_the_fetch_is_one_line_naming_the_url_and_the_reason(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/dawn-bench-entries/archive/refs/heads/master.zip"
    proc = run_cli("dawnbench", "--source", url, "--dest", str(tmp_path / "entries"), "--record", str(tmp_path / "fetch.json"), timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "Connection refused" in lines[0], lines
    assert not (tmp_path / "entries").exists() and not (tmp_path / "fetch.json").exists()


def test_a_local_archive_is_unpacked_without_its_top_folder_and_a_given_checksum_is_checked(tmp_path, dawnbench_entries):
    import hashlib

    data = github_zip(dawnbench_entries)
    archive = tmp_path / "entries.zip"
    archive.write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    dest, record = tmp_path / "entries", tmp_path / "fetch.json"
    proc = run_cli("dawnbench", "--source", str(archive), "--dest", str(dest), "--record", str(record), "--sha256", good, check=True)
    assert f"sha256 {good} (verified)" in proc.stdout
    assert json.loads(record.read_text())["verified"] is True
    assert (dest / "CIFAR10/train").is_dir() and not (dest / TOP).exists()
    assert sorted(p.name for p in dest.iterdir()) == ["CIFAR10", "ImageNet", "README.md", "SQuAD"]
    # a wrong checksum: refused, the entries unpacked before stay as they were, the record is gone
    before = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    proc = run_cli("dawnbench", "--source", str(archive), "--dest", str(dest), "--record", str(record), "--sha256", "0" * 64)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and f"sha256 {good}, expected {'0' * 64}" in proc.stderr
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == before and not record.exists()


def test_an_archive_without_the_task_folders_is_not_the_entries_repository(tmp_path):
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("some-repo-main/README.md", b"hello")
    proc = run_cli("dawnbench", "--source", str(archive), "--dest", str(tmp_path / "e"), "--record", str(tmp_path / "r.json"))
    assert proc.returncode == 1 and "no CIFAR10/, ImageNet/, SQuAD/ folder" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ hostile archives
def zip_with(tmp_path, entries: list[tuple[str, bytes, int | None]]) -> Path:
    """A zip of (name, data, unix mode or None) entries, written as given (no name clean-up)."""
    path = tmp_path / "hostile.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.create_system = 3  # unix: the mode is in the high bits of external_attr
                info.external_attr = mode << 16
            z.writestr(info, data)
    return path


def tar_with(tmp_path, members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> Path:
    path = tmp_path / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for m in members:
            body = (data or {}).get(m.name)
            if body is not None:
                m.size = len(body)
            t.addfile(m, io.BytesIO(body) if body is not None else None)
    return path


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    return m


FILE = stat.S_IFREG | 0o644
LINK = stat.S_IFLNK | 0o777


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")  # the duplicate is written on purpose
@pytest.mark.parametrize(
    "make, entry, reason",
    [
        (
            lambda t: zip_with(t, [(f"{TOP}/CIFAR10/train/a.json", b"{}", None), (f"{TOP}/../../evil.txt", b"x", None)]),
            "../../evil.txt",
            "leaving the destination",
        ),
        (lambda t: zip_with(t, [(str(t / "evil-abs.txt"), b"x", None)]), "evil-abs.txt", "an absolute path"),
        (lambda t: zip_with(t, [(f"{TOP}/CIFAR10/link", b"/etc/passwd", LINK)]), "CIFAR10/link", "a symbolic link"),
        (lambda t: zip_with(t, [(f"{TOP}\\..\\evil.txt", b"x", None)]), "evil.txt", "a backslash"),
        (lambda t: zip_with(t, [(f"{TOP}/a\x1b[2J.json", b"x", None)]), "a\\x1b[2J.json", "a control character"),
        (lambda t: zip_with(t, [(f"{TOP}/CIFAR10/a.json", b"1", FILE), (f"{TOP}/CIFAR10/a.json", b"2", FILE)]), "CIFAR10/a.json", "a second entry"),
        (lambda t: zip_with(t, [(f"{TOP}/CIFAR10/big.tsv", b"x" * 4096, None)]), "big.tsv", "allowed for one file"),
        (lambda t: tar_with(t, [tar_member(f"{TOP}/CIFAR10/link", tarfile.SYMTYPE, "../../../etc/passwd")]), "CIFAR10/link", "a symbolic link"),
        (lambda t: tar_with(t, [tar_member(f"{TOP}/CIFAR10/hard", tarfile.LNKTYPE, "/etc/passwd")]), "CIFAR10/hard", "a hard link"),
        (lambda t: tar_with(t, [tar_member(f"{TOP}/dev", tarfile.CHRTYPE)]), f"{TOP}/dev", "a special file"),
        (lambda t: tar_with(t, [tar_member("../evil.txt")], {"../evil.txt": b"x"}), "../evil.txt", "leaving the destination"),
    ],
    ids=[
        "zip-dotdot",
        "zip-absolute",
        "zip-symlink",
        "zip-backslash",
        "zip-control",
        "zip-duplicate",
        "zip-oversized",
        "tar-symlink",
        "tar-hardlink",
        "tar-device",
        "tar-dotdot",
    ],
)
def test_a_hostile_archive_is_refused_whole_and_nothing_is_written(tmp_path, make, entry, reason):
    archive = make(tmp_path)
    dest = tmp_path / "out" / "entries"
    with pytest.raises(DawnpipeError) as e:
        unpack(archive, dest, limits=Limits(entry_bytes=1024))
    message = str(e.value)
    assert entry in message and reason in message and "nothing was unpacked" in message, message
    assert not dest.exists() and list((tmp_path / "out").iterdir()) == []  # not even the temporary folder
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "evil-abs.txt").exists() and not Path("/evil.txt").exists()


def test_the_total_size_cap_counts_the_bytes_written_not_the_headers(tmp_path):
    archive = zip_with(tmp_path, [(f"{TOP}/CIFAR10/{i}.tsv", b"x" * 600, None) for i in range(4)])
    with pytest.raises(DawnpipeError, match="unpacks to more than the 2000 bytes allowed"):
        unpack(archive, tmp_path / "out", limits=Limits(total_bytes=2000))
    assert not (tmp_path / "out").exists()


def test_a_hostile_archive_through_the_command_is_one_line(tmp_path):
    archive = zip_with(tmp_path, [(f"{TOP}/CIFAR10/train/a.json", b"{}", None), (f"{TOP}/../../evil.txt", b"x", None)])
    proc = run_cli("dawnbench", "--source", str(archive), "--dest", str(tmp_path / "e"), "--record", str(tmp_path / "r.json"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "refused" in proc.stderr and str(archive) in proc.stderr
    assert not (tmp_path / "e").exists() and not (tmp_path.parent / "evil.txt").exists()
    shutil.rmtree(tmp_path / "e", ignore_errors=True)
