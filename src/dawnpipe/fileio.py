"""Atomic writes: a reader (or Snakemake, or DVC) sees the old file or the
whole new one, never half of it; a crash leaves only a hidden temporary."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success.

    What already stands at ``path`` is honoured, not replaced: a symbolic link
    is written through (its target is renamed over), a character device or a
    pipe (``--json /dev/stdout``) is written to directly, since a stream cannot
    be half-overwritten; a directory is refused by its own name."""
    from dawnpipe.errors import DawnpipeError

    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.is_dir():
        raise DawnpipeError(f"{path}: is a directory, not a file to write")
    if path.exists() and not path.is_file():  # a device or a FIFO
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # once, at import: os.umask is process-wide, not thread-safe


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n")


def write_parquet(path: str | os.PathLike, frame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def write_csv(path: str | os.PathLike, frame, **kwargs) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, **kwargs)


# Every JSON and YAML file dawnpipe reads goes through read_json / read_yaml:
# size-capped before and while reading (a 100 MB file, a FIFO or /dev/zero
# costs neither time nor memory), nesting-capped, numbers that are not finite
# refused, text that is not UTF-8 named, YAML alias bombs cut short. The
# caps fit every file the pipeline writes or ships with a wide margin; a
# caller reading bigger files (SQuAD's 30 MB data files) says so.
MAX_BYTES = 64 << 20  # 64 MiB
MAX_DEPTH = 64  # levels of nested objects and lists
MAX_NODES = 2_000_000  # values in one document (YAML aliases counted each time they are used)
# Whole numbers outside a signed 64-bit integer: JSON sets no limit, Python
# reads 10**400 exactly, and the first float() of it raises OverflowError,
# numpy and Parquet refuse it. Nothing dawnpipe reads needs more: a file's
# modification time in nanoseconds since 1970 (fetch.json) is ~2**61.
MAX_WHOLE = 2**63 - 1


def read_capped_bytes(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` bytes; anything else a DawnpipeError naming it."""
    import stat

    from dawnpipe.errors import DawnpipeError

    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)  # FileNotFoundError and the like: the CLI names the file
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DawnpipeError(f"{path}: not a regular file (a directory, device, FIFO or socket); not read")
        if st.st_size > max_bytes:
            raise DawnpipeError(f"{path}: {st.st_size:,} bytes, over the {max_bytes:,}-byte cap for this kind of file; not read")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise DawnpipeError(f"{path}: grew over the {max_bytes:,}-byte cap while being read; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _text(path, data: bytes) -> str:
    from dawnpipe.errors import DawnpipeError

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DawnpipeError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}: {e.reason})") from None


def check_shape(doc: Any, path, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """``doc`` unless it nests deeper than ``max_depth``, holds more than
    ``max_nodes`` values, a number that is not finite or a whole number beyond
    ``MAX_WHOLE`` (int64; iteratively: no recursion to exhaust)."""
    import math

    from dawnpipe.errors import DawnpipeError

    stack, nodes = [(doc, ())], 0
    while stack:
        value, where = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise DawnpipeError(f"{path}: more than {max_nodes:,} values (YAML aliases count each time they are used); not read")
        if len(where) > max_depth:
            raise DawnpipeError(f"{path}: nested deeper than {max_depth} levels; not read")
        if isinstance(value, dict):
            stack.extend((v, (*where, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            field = ".".join(map(str, where)) or "(top level)"
            raise DawnpipeError(f"{path}: field '{field}': not a finite number (NaN or infinity)")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
            field = ".".join(map(str, where)) or "(top level)"
            raise DawnpipeError(f"{path}: field '{field}': a whole number beyond 64 bits ({str(value)[:10]}...); not read")
    return doc


def reject_json_constant(name: str):
    """``json.loads``' parse_constant: NaN, Infinity and -Infinity are Python's, not JSON's."""
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file, bounded (see above); every problem one DawnpipeError naming the file."""
    import json

    from dawnpipe.errors import DawnpipeError

    text = _text(path, read_capped_bytes(path, max_bytes))
    try:
        doc = json.loads(text, parse_constant=reject_json_constant)
    except json.JSONDecodeError as e:
        raise DawnpipeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise DawnpipeError(f"{path}: nested too deeply to read; not read") from None
    except ValueError as e:  # NaN/Infinity, or an integer of thousands of digits
        raise DawnpipeError(f"{path}: not valid JSON ({str(e)[:120]})") from None
    return check_shape(doc, path, max_depth)


def read_yaml(path: str | os.PathLike, *, max_bytes: int = 1 << 20, max_depth: int = MAX_DEPTH) -> Any:
    """A YAML file (configs, entries, tasks, rules, prices: 1 MiB is plenty),
    bounded like read_json; every problem one DawnpipeError naming the file."""
    return load_yaml_text(_text(path, read_capped_bytes(path, max_bytes)), path, max_depth)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load``, through libyaml where PyYAML was built with it: the
    same documents about ten times faster, which every stage and every
    Snakemake start pays on the configs, entries, tasks and schemas it reads."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_yaml_text(text: str, source, max_depth: int = MAX_DEPTH) -> Any:
    import yaml

    from dawnpipe.errors import DawnpipeError

    try:
        doc = parse_yaml(text)
    except yaml.YAMLError as e:
        raise DawnpipeError(f"{source}: not valid YAML: {e}") from None
    except RecursionError:
        raise DawnpipeError(f"{source}: nested too deeply to read; not read") from None
    except ValueError as e:  # an integer of thousands of digits
        raise DawnpipeError(f"{source}: not valid YAML ({str(e)[:120]})") from None
    return check_shape(doc, source, max_depth)
