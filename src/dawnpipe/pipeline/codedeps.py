"""The code a stage may run, read off the imports of its modules.

A stage's code is the closure of what its command's module imports inside
the package, at module level or inside a function (the CLI imports lazily, so
both count; an import under ``if TYPE_CHECKING:`` never runs, so does not),
plus the package data each of those modules reads: the non-Python files
beside it (task files, schemas, templates, rules). Snakemake
makes them inputs of the stage's rule and dvc.yaml lists them as deps, so an
edit reruns the same stages under both tools; nothing is listed by hand.

Modules chosen at run time by name (a trainer or an inference backend picked
from a registry) are not imports; the stage table names them as extra roots.

Every Snakemake start (and every Slurm job's, which parses the workflow again)
reads the whole package this way. Parsing is most of that time, so what each
module imports is kept in ``dawnpipe/__pycache__/codedeps.json`` beside the
bytecode, under the module's path and a hash of its source: an edited module
is parsed again, an unchanged one is not. The file is only a cache: when it is
missing, unreadable or not writable, every module is parsed.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

PACKAGE = "dawnpipe"
CACHE = Path(PACKAGE, "__pycache__", "codedeps.json")  # under src


@functools.cache
def module_file(src: Path, module: str) -> Path | None:
    """The file of ``module`` under ``src`` (a package's ``__init__.py``), or None."""
    base = src.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports for annotations only, which never run."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# The fields that hold a statement's nested statements: an import is a
# statement, so it can only be found in these, never inside an expression.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(tree: ast.AST):
    """Every statement of ``tree`` at any depth (in functions, classes, ``try``
    and ``with`` blocks, ...), less the bodies of ``if TYPE_CHECKING:`` blocks.
    Expressions are not entered: walking only statements keeps this a small
    part of every Snakemake start, which reads the whole package."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _type_checking(node):
            todo += node.orelse
            continue
        for name in _BLOCKS:
            block = getattr(node, name, None)
            if isinstance(block, list):
                todo += block


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Package modules ``tree`` imports, anywhere in it (absolute and relative) but under ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here[: len(here) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


class _ImportsCache:
    """What each module imports, keyed by ``<path under src>:<hash of its source>``."""

    def __init__(self, src: Path):
        self.src, self.path = src, src / CACHE
        self.changed = False
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            entries = {}
        valid = isinstance(entries, dict) and all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in entries.values())
        self.entries: dict[str, list[str]] = entries if valid else {}

    def imported(self, module: str, path: Path) -> list[str]:
        source = path.read_bytes()
        name = path.relative_to(self.src).as_posix()
        key = f"{name}:{hashlib.blake2b(source, digest_size=16).hexdigest()}"
        if key not in self.entries:
            tree = ast.parse(source.decode("utf-8"), filename=str(path))
            for stale in [k for k in self.entries if k.rpartition(":")[0] == name]:
                del self.entries[stale]
            self.entries[key] = sorted(_imported(tree, module, path.name == "__init__.py"))
            self.changed = True
        return self.entries[key]

    def save(self) -> None:
        """Write the entries if this process added any; a cache that cannot be written is skipped."""
        if self.changed:
            from dawnpipe.fileio import write_json

            with contextlib.suppress(OSError):
                write_json(self.path, self.entries)
            self.changed = False


@functools.cache
def _cache(src: Path) -> _ImportsCache:
    return _ImportsCache(src)


@functools.cache
def _imports_of(src: Path, module: str) -> frozenset[str]:
    path = module_file(src, module)
    if path is None:
        return frozenset()
    deps = set()
    for name in _cache(src).imported(module, path):
        # importing a.b.c runs a/__init__, a/b/__init__ too
        parts = name.split(".")
        deps |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return frozenset(m for m in deps if module_file(src, m) is not None and m != module)


def closure(src: Path, roots: Iterable[str]) -> set[str]:
    """Every package module reachable from ``roots`` by imports."""
    seen: set[str] = set()
    todo = [r for r in roots]
    while todo:
        module = todo.pop()
        if module in seen or module_file(src, module) is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its parent packages run first
        todo += sorted(_imports_of(src, module))
    _cache(src).save()
    return seen


@functools.cache
def data_files(directory: Path) -> tuple[Path, ...]:
    """Package data beside a module: the non-Python files of its directory and
    of its sub-directories that are not packages themselves (templates/sections)."""
    found = []
    for p in sorted(directory.iterdir()):
        if p.name.startswith(".") or p.name == "__pycache__":
            continue
        if p.is_file() and p.suffix not in (".py", ".pyc"):
            found.append(p)
        elif p.is_dir() and not (p / "__init__.py").exists():
            found += data_files(p)
    return tuple(found)


def code_files(src: Path, roots: Iterable[str]) -> list[str]:
    """The files (relative to ``src``'s parent, POSIX) a stage rooted at ``roots`` may run or read."""
    files = {module_file(src, module) for module in closure(src, roots)}
    for directory in {path.parent for path in files}:
        files |= set(data_files(directory))
    return sorted(p.relative_to(src.parent).as_posix() for p in files)
