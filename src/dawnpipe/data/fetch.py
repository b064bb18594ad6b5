"""fetch: get a task's raw files and verify them before anything uses them.

    dawnpipe fetch fashion-mnist --dest data/raw/fashion-mnist
    dawnpipe fetch fashion-mnist --dest DIR --source http://mirror/fashion/   # URL base
    dawnpipe fetch fashion-mnist --dest DIR --source /path/with/the/files     # local copy
    dawnpipe fetch cifar10 --dest DIR --new-test [--new-test-source URL_OR_DIR]  # + CIFAR-10.1 v6

Where the task lists local directories (the Debian package
dataset-fashion-mnist for Fashion-MNIST), files are copied from there; else
they are downloaded (resumably, partial files live in ``--cache``).
A file is checked by the checksum of its *content*: for ``.gz`` files the
decompressed bytes (Debian re-compresses, so gzip bytes differ from upstream),
else the bytes themselves; ``md5`` checks the raw file where a source
publishes only that. A file that fails is deleted and fetched again once; if it
fails again, fetch stops with both checksums. Only verified files are moved
into ``--dest``, and ``fetch.json`` there is written last.
"""

from __future__ import annotations

from pathlib import Path

from dawnpipe.argtypes import add_task_options, task_option
from dawnpipe.data.cifar10_1 import RECORD, fetch_new_test, spec_of
from dawnpipe.data.files import source_directory
from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import read_yaml, write_json
from dawnpipe.tasks import get_task


def fetch(
    task_name: str,
    dest: Path,
    *,
    source: str | None = None,
    cache: Path | None = None,
    expect: Path | None = None,
    new_test: bool = False,
    new_test_source: str | None = None,
) -> Path:
    """``new_test``: also the task's new test set (dawnpipe.data.cifar10_1),
    from ``new_test_source`` or where its task file says."""
    task = get_task(task_name)
    if new_test:
        spec_of(task)  # a task without one: said before anything is fetched
    spec_data = dict(task.data)
    if expect is not None:  # a mirror of modified data (tests, private copies)
        override = read_yaml(Path(expect))
        if not isinstance(override, dict) or not isinstance(override.get("files"), dict):
            raise DawnpipeError(f"{expect}: expected a mapping with 'files: {{name: {{sha256, bytes}}}}'")
        spec_data["files"] = override["files"]
    cache = cache or dest.parent / f".{dest.name}.partial"
    # fetch.json is the mark of a verified destination: gone until this run has verified everything
    (dest / "fetch.json").unlink(missing_ok=True)
    if source is not None:
        source = source_directory(source, spec_data)
    cache_existed = cache.exists()
    try:
        files = task.data_kind.fetch(spec_data, dest, cache, source)
        extra = {RECORD: fetch_new_test(task, dest, cache, new_test_source)} if new_test else {}
    finally:
        _remove_if_empty(cache, cache_existed)
    write_json(dest / "fetch.json", {"task": task_name, "files": files, **extra})
    return dest


def _remove_if_empty(cache: Path, existed: bool) -> None:
    """The partial-download directory, once nothing in it is worth resuming
    (every local copy, or every finished download, has been moved out).
    One that holds a partial file stays, as does one that was there before."""
    if existed:
        return
    try:
        cache.rmdir()  # only succeeds when empty
    except OSError:
        pass


def configure(p) -> None:
    p.add_argument("task", help="task name, e.g. fashion-mnist")
    p.add_argument("--dest", required=True, type=Path, help="directory to put the verified raw files in")
    p.add_argument("--source", help="URL base or local directory/file to take the files from (default: the task's local directories, else its official URL)")
    p.add_argument("--cache", type=Path, help="where partial downloads are kept between attempts (default: beside --dest)")
    add_task_options(p, what="source", dest="source_for", type=str, metavar="SOURCE")
    p.add_argument("--expect", type=Path, help="YAML with 'files: {name: {sha256, bytes}}' replacing the task's checksums (for modified mirrors)")
    p.add_argument("--new-test", action="store_true", help="also the task's new test set (CIFAR-10.1 v6 for cifar10), for entries with new_test: true")
    p.add_argument("--new-test-source", help="URL base or local directory/file to take the new test set from (default: where the task file says)")


def run(args) -> int:
    source = args.source or task_option(args, "source_for", args.task)
    if args.new_test_source and not args.new_test:
        raise UsageError("--new-test-source needs --new-test")
    fetch(args.task, args.dest, source=source, cache=args.cache, expect=args.expect, new_test=args.new_test, new_test_source=args.new_test_source)
    return 0
