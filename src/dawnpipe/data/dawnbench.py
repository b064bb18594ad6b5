"""dawnbench: the public DAWNBench entries, as a submission directory.

    dawnpipe dawnbench --source https://github.com/stanford-futuredata/dawn-bench-entries/archive/refs/heads/master.zip \\
        --dest data/dawnbench/entries --record data/dawnbench/fetch.json [--sha256 HEX]
    dawnpipe dawnbench --source dawn-bench-entries-master.zip --dest ... --record ...   # a local copy

Fetches the archive of the public entries repository (the DAWNBench v1
submissions behind the published leaderboard: ``CIFAR10/``, ``ImageNet/``,
``SQuAD/``) from its URL (resumably, the partial file in ``--cache``) or a
local path, checks its sha256 when one is given, and unpacks it safely
(dawnpipe.data.archive: the archive is untrusted input) into ``--dest``,
which the report then audits and ranks like any submission directory
(config ``dawnbench_entries``). GitHub makes branch archives on request, so
their bytes are not stable and no checksum of the real one is known here:
without ``--sha256`` the archive is not verified, and the output and
``--record`` say so. ``--record`` (written last) holds the source, the
archive's sha256, whether it was verified and the files unpacked per task.
"""

from __future__ import annotations

import re
from pathlib import Path

from dawnpipe.data.archive import unpack
from dawnpipe.data.download import download
from dawnpipe.data.files import content_check, is_url
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import write_json

URL = "https://github.com/stanford-futuredata/dawn-bench-entries/archive/refs/heads/master.zip"
TASK_DIRS = ("CIFAR10", "ImageNet", "SQuAD")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def fetch_archive(source: str, cache: Path) -> Path:
    """The archive as a local file: downloaded into ``cache`` from a URL, or the local path itself."""
    if is_url(source):
        part = cache / "dawn-bench-entries.archive.part"
        try:
            download(source, part)
        except DawnpipeError as e:
            raise DawnpipeError(f"cannot fetch the DAWNBench entries: {e}") from None
        return part
    path = Path(source)
    if not path.is_file():
        raise DawnpipeError(f"{source}: no such archive (give the URL of the entries repository's archive or a local zip/tar.gz of it)")
    return path


def fetch_entries(source: str, dest: Path, record: Path, *, sha256: str | None = None, cache: Path | None = None) -> dict:
    if sha256 is not None and not SHA256.match(sha256):
        raise UsageError(f"--sha256 {sha256!r}: not a sha256 (64 lower-case hexadecimal digits)")
    record.unlink(missing_ok=True)  # the mark of a verified, unpacked destination: gone until this run wrote one
    cache = cache or dest.parent / f".{dest.name}.partial"
    archive = fetch_archive(source, cache)
    check = content_check(archive, {"sha256": sha256, "raw": True})  # the data sets' check, of the archive's bytes
    digest = check.sha256
    if not check.ok:
        if archive.parent == cache:
            archive.unlink()  # a wrong download is not kept to resume from
        raise DawnpipeError(f"{source}: {check.reason} (dawnbench_entries.sha256); nothing was unpacked")
    files = unpack(archive, dest)
    per_task = {t: sum(f.startswith(f"{t}/") for f in files) for t in TASK_DIRS}
    if not any(per_task.values()):
        raise DawnpipeError(f"{source}: no {', '.join(d + '/' for d in TASK_DIRS)} folder in the archive: not the DAWNBench entries repository")
    if archive.parent == cache:
        archive.unlink()
    note = "verified" if sha256 else "NOT verified: no sha256 given (config dawnbench_entries.sha256, or --sha256)"
    doc = {"source": source, "sha256": digest, "verified": sha256 is not None, "files": len(files), "files_per_task": per_task}
    write_json(record, doc)
    counts = ", ".join(f"{t} {n}" for t, n in per_task.items())
    print(terminal_safe(f"dawnbench: {source}: sha256 {digest} ({note}); {len(files)} files unpacked into {dest} ({counts})"))
    return doc


def configure(p) -> None:
    # required, no default: nothing reaches for the network unless asked to (the public archive: URL)
    p.add_argument("--source", required=True, help=f"URL or local path of the entries repository's archive, zip or tar.gz (the public one: {URL})")
    p.add_argument("--dest", required=True, type=Path, help="directory to unpack the entries into (replaced whole, only on success)")
    p.add_argument("--record", required=True, type=Path, help="JSON written last: source, sha256, verified or not, files per task")
    p.add_argument("--sha256", help="the archive's expected sha256; without it the archive is not verified (and the output says so)")
    p.add_argument("--cache", type=Path, help="where a partial download is kept between attempts (default: beside --dest)")


def run(args) -> int:
    fetch_entries(args.source, args.dest, args.record, sha256=args.sha256, cache=args.cache)
    return 0
