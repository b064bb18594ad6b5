"""Every reference in the repository leads somewhere: to a file, a module, a
name in a module, or a section of a page that exists.

    python scripts/refs.py            # exit 1 with `file:line: reference: reason` for each broken one
    python scripts/refs.py DIR        # the same for another tree laid out like this one

Part of `make lint` (a few seconds: nothing is imported or run). It reads the
files git holds (a new file once it is added), in the formats people write
references in: Markdown, Python comments and docstrings, YAML, TOML,
Snakemake rules, shell scripts and templates. A reference is:

- a repository path: a word that starts with one of the tree's top-level
  folders (``src/dawnpipe/metrics/tta.py``, ``config/studies/``), with an anchor when
  it names a page (``docs/rules.md#display-rules``). A placeholder matches any
  name: ``<name>``, ``{out}``, ``*`` and a one-letter stem (``config/x.yaml``);
  the path must then match at least one file;
- a relative path with a folder (``infer/program_onnx.py``): relative to the
  referring file's folder, the repository or the package, whichever holds its
  first folder (one that none holds, as ``parlai/tasks/...``, is another
  project's path, not ours);
- a bare page or rule file name (``rules.md``, ``stages.smk``): beside the
  referring file, at the top, in docs/ or in workflow/rules/;
- a dotted name under ``dawnpipe``: a module (``dawnpipe.metrics.tta``), a name it
  defines (``dawnpipe.metrics.tta.time_to_accuracy``) and a class's attribute
  (``dawnpipe.train.loop.TrainingClock.running``), looked up in the source;
- a Markdown page's relative links (``[rules](rules.md#display-rules)``), and
  a page and a quoted heading (``docs/programs.md, "Limits"``; a numbered
  heading may be quoted without its number). Anchors are GitHub's (``slug``);
- an issue or pull-request number: a reader of the repository cannot look it
  up, so the text says what the number or the code is instead (history is
  git's). A number of another project's tracker (``tensorflow/tensorflow#1``)
  can be looked up, and is no concern here.

Not references: URLs; absolute paths and paths that start with ``../``
(``../shared`` lies beside the repository, not in it); what the pipeline or a
bench script writes (a path git ignores, such as ``results/`` or ``data/``,
and the records ``docs/measurements/<name>.json``: one not measured yet shows
as a line saying how to measure it); and strings in Python code that are not
docstrings, which are data (a test names files that do not exist on purpose),
except a ``docs/`` path outside tests/, since a message that sends its reader
to the docs is a reference.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Files read for references: by suffix, and a few by name.
SUFFIXES = {".md", ".py", ".smk", ".yaml", ".yml", ".toml", ".sh", ".j2", ".cfg"}
NAMES = {"Makefile", "Snakefile", ".importlinter", "stage", "run"}
# Folders never read in a tree that is not a git work tree (in one, git's ignore rules decide).
SKIPPED = {".git", ".venv", ".snakemake", "__pycache__", ".pytest_cache", ".hypothesis", "results", "data"}

# References known to be broken in files being changed elsewhere, (file, reference): listed
# without failing. An entry whose reference is no longer broken is named, to be removed.
PENDING: set[tuple[str, str]] = set()  # references known broken, each fixed by its owner: (file, reference)


@dataclass(frozen=True)
class Broken:
    file: str
    line: int
    reference: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reference}: {self.reason}"


# ---- Markdown: what a page holds, and GitHub's anchors ----------------------------

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def split_markdown(text: str) -> tuple[list[str], list[str]]:
    """(lines of prose, lines of code blocks)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (links and code spans as their
    text), lower-cased, without punctuation but hyphens and underscores,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> frozenset[str]:
    """The anchors of a page's headings; a repeated heading's get -1, -2, ... as on GitHub."""
    stat = page.stat()
    return _anchors(page, stat.st_mtime_ns, stat.st_size)


@cache
def _anchors(page: Path, mtime_ns: int, size: int) -> frozenset[str]:
    prose, _ = split_markdown(page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for line in prose:
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of every link in a Markdown text's prose (none in code)."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            for target in LINK.findall(INLINE_CODE.sub("", line)):
                yield number, target


def link_problem(page: Path, target: str) -> str | None:
    """Why a relative link of a Markdown page leads nowhere, or None (a URL is not followed)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    return section_problem(dest, anchor) if dest.exists() else "no such file"


def section_problem(page: Path, anchor: str) -> str | None:
    if anchor and page.suffix == ".md" and page.is_file() and anchor not in anchors(page):
        return f"no heading with anchor #{anchor} in {page.name}"
    return None


# ---- The text of a file, where references live ------------------------------------

PROSE, CODE = "prose", "code"  # prose is checked for every kind of reference, code strings for docs/ paths only


def python_texts(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, text, kind) of a Python source: comments and docstrings (a
    string that is a statement of its own) are prose, other strings code."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    starts = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    for i, tok in enumerate(significant):
        if tok.type == tokenize.STRING:
            before = significant[i - 1].type if i else tokenize.NEWLINE
            after = significant[i + 1].type if i + 1 < len(significant) else tokenize.ENDMARKER
            kind = PROSE if before in starts and after in (tokenize.NEWLINE, tokenize.ENDMARKER) else CODE
            for offset, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + offset, line, kind
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string, PROSE


def texts(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, text, kind) of every piece of a file that may hold a reference (none of a file git lists but the tree has lost)."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        try:
            yield from list(python_texts(text))
            return
        except (tokenize.TokenError, SyntaxError, IndentationError):
            pass  # not Python this interpreter reads: every line is text
    for number, line in enumerate(text.splitlines(), 1):
        yield number, line, PROSE


# ---- Names a module defines ------------------------------------------------------

Members = frozenset[str] | None  # a class's attribute names; None: not looked into


def module_names(source: Path) -> tuple[dict[str, Members], bool]:
    """A module's top-level names, with each class's members, and whether it
    has a ``__getattr__`` (then any name may exist)."""
    stat = source.stat()
    return _module_names(source, stat.st_mtime_ns, stat.st_size)


@cache
def _module_names(source: Path, mtime_ns: int, size: int) -> tuple[dict[str, Members], bool]:
    names: dict[str, Members] = {}

    def stored(node: ast.AST) -> Iterator[str]:
        return (n.id for n in ast.walk(node) if isinstance(n, ast.Name))

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                names[node.name] = class_members(node)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names[node.name] = None
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.update(dict.fromkeys(stored(target)))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                names.update(dict.fromkeys(stored(node.target)))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update(dict.fromkeys((a.asname or a.name).split(".")[0] for a in node.names))
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    visit(part)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(source.read_text(encoding="utf-8")).body)
    return names, "__getattr__" in names


def class_members(node: ast.ClassDef) -> frozenset[str]:
    """What a class defines: methods, nested classes, class attributes and
    fields, and what its methods set on ``self``."""
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and child is not node:
            found.add(child.name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            found.add(child.id)
        elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store) and isinstance(child.value, ast.Name) and child.value.id == "self":
            found.add(child.attr)
    return frozenset(found)


# ---- References, and where they lead --------------------------------------------------

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\bmailto:\S+|\bwww\.\S+")
STARTS = r"(?<![\w./~$@%\\-])"  # a reference starts a word: not inside a longer path, a URL or a variable
ANCHOR = r"(?:#[\w-]+)?"
PLACEHOLDER = re.compile(r"<[^<>/]*>|\{[^{}/]*\}|(?<![^/])[A-Za-z](?=\.\w+$|\.\w+/|/|$)")
RECORD = re.compile(r"docs/measurements/[^/]+\.json")
RELATIVE = re.compile(STARTS + r"(?:[A-Za-z_][\w-]*/)+[\w-]+\.(?:py|md|smk|yaml|yml|j2|sh|toml)" + ANCHOR + r"(?![\w/-])")
BARE = re.compile(STARTS + r"[\w-]+\.(?:md|smk)" + ANCHOR + r"(?![\w/-])")
DOTTED = re.compile(r"(?<![\w.@/-])dawnpipe(?:\.[A-Za-z_]\w*)+")
SECTION = re.compile(r"([\w./-]+\.md),\s+(?:section\s+)?\"([^\"]+)\"")
ISSUE = re.compile(r"\b(?:issues?|pull requests?|PRs?)\s+#?\d+\b", re.I)


class Tree:
    """A repository, or any folder laid out like it, and the files it holds."""

    def __init__(self, root: Path, files: list[Path] | None = None):
        self.root = root.resolve()
        self.files = sorted(files if files is not None else held_files(self.root))
        self.package = self.root / "src" / "dawnpipe"
        tops = sorted({f.relative_to(self.root).parts[0] for f in self.files if len(f.relative_to(self.root).parts) > 1})
        self.repo_path = re.compile(STARTS + rf"(?:{'|'.join(map(re.escape, tops)) or '(?!)'})/[\w.*<>{{}}/-]*" + ANCHOR)
        self.ignored_paths: dict[str, bool] = {}

    def broken(self) -> list[Broken]:
        found: list[Broken] = []
        for path in self.files:
            if path.suffix in SUFFIXES or path.name in NAMES:
                found.extend(self.broken_in(path))
        return found

    def broken_in(self, path: Path) -> list[Broken]:
        """Each broken reference of one file, once per line."""
        rel = path.relative_to(self.root).as_posix()
        found: dict[tuple[int, str], str] = {}
        for number, text, kind in texts(path):
            if kind == CODE and rel.startswith("tests/"):
                continue  # a test's strings are its fixtures, messages to nobody
            text = URL.sub(lambda m: " " * len(m.group()), text)
            for reference, reason in self.problems(path, text, kind):
                found.setdefault((number, reference), reason)
        if path.suffix == ".md":
            for number, target in links(path.read_text(encoding="utf-8")):
                reason = link_problem(path, target)
                if reason:
                    found.setdefault((number, target), reason)
        return [Broken(rel, number, reference, reason) for (number, reference), reason in sorted(found.items())]

    def problems(self, path: Path, text: str, kind: str) -> Iterator[tuple[str, str]]:
        """(reference, reason) of each broken reference in one piece of text."""
        taken: list[tuple[int, int]] = []

        def fresh(m: re.Match) -> bool:
            """A match not inside one already checked (a repository path holds a relative one)."""
            if any(a <= m.start() < b for a, b in taken):
                return False
            taken.append(m.span())
            return True

        for m in self.repo_path.finditer(text):
            reference = m.group().rstrip(".-")
            if fresh(m) and (kind == PROSE or reference.startswith("docs/")):
                reason = self.path_problem(self.root, reference)
                if reason:
                    yield reference, reason
        if kind == CODE:
            return
        for m in RELATIVE.finditer(text):
            if fresh(m):
                # its first folder says what it is relative to; in none of them: another project's path
                first = m.group().split("/")[0]
                bases = [b for b in (path.parent, self.root, self.package) if (b / first).is_dir()]
                reason = self.first_problem(bases, m.group()) if bases else None
                if reason and not self.is_output(m.group()):
                    yield m.group(), reason
        for m in BARE.finditer(text):
            if fresh(m):
                bases = [path.parent, self.root, self.root / "docs", self.root / "workflow" / "rules"]
                reason = self.first_problem(bases, m.group())
                if reason:
                    yield m.group(), reason
        for m in SECTION.finditer(text):
            page, heading = m.groups()
            dest = next((b / page for b in (path.parent, self.root, self.root / "docs") if (b / page).is_file()), None)
            # a numbered heading ("1. Training time") may be quoted without its number
            if dest is not None and slug(heading) not in anchors(dest) | {re.sub(r"^\d+-", "", a) for a in anchors(dest)}:
                yield f'{page}, "{heading}"', f"no heading {heading!r} in {dest.relative_to(self.root).as_posix()}"
        for m in DOTTED.finditer(text):
            reason = self.name_problem(m.group())
            if reason:
                yield m.group(), reason
        for m in ISSUE.finditer(text):
            yield m.group(), "a number a reader of the repository cannot look up: say what the number or the code is"

    def first_problem(self, bases: list[Path], reference: str) -> str | None:
        """None where the reference resolves against one of the bases, else why it does not against the first."""
        reasons = [self.path_problem(base, reference) for base in bases]
        return None if None in reasons else reasons[0]

    def path_problem(self, base: Path, reference: str) -> str | None:
        path, _, anchor = reference.partition("#")
        pattern = PLACEHOLDER.sub("*", path)
        if "*" in pattern:
            reason = None if any(base.glob(pattern.rstrip("/"))) else "no file matches"
        else:
            reason = section_problem(base / path, anchor) if (base / path).exists() else "no such file"
        return None if reason and base == self.root and self.is_output(path) else reason

    def is_output(self, reference: str) -> bool:
        """A path the pipeline or a bench script writes: a record of docs/measurements/, or one git ignores."""
        path = reference.partition("#")[0]
        if RECORD.fullmatch(PLACEHOLDER.sub("x", path)):
            return True
        if path not in self.ignored_paths:
            self.ignored_paths[path] = (self.root / ".git").exists() and (
                subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=self.root, capture_output=True).returncode == 0
            )
        return self.ignored_paths[path]

    def name_problem(self, dotted: str) -> str | None:
        """Why a dotted name (a module, a name in it, a class's attribute) names nothing in the source, or None."""
        parts = dotted.split(".")
        k = len(parts)
        while k > 1 and self.module_file(parts[:k]) is None:
            k -= 1
        source = self.module_file(parts[:k])
        if source is None:
            return "no such module"
        if k == len(parts):
            return None
        names, dynamic = module_names(source)
        module, name = ".".join(parts[:k]), parts[k]
        if name not in names:
            return None if dynamic else f"no module or name {name} in {module}"
        members = names[name]
        if k + 1 < len(parts) and members is not None and parts[k + 1] not in members:
            return f"no attribute {parts[k + 1]} of {module}.{name}"
        return None

    def module_file(self, parts: list[str]) -> Path | None:
        base = self.root / "src" / Path(*parts)
        return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def held_files(root: Path) -> list[Path]:
    """The files git holds, as the working tree has them; outside git, every file but the SKIPPED folders'."""
    if (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
        return [root / name for name in out.split("\0") if name and (root / name).is_file()]
    return [p for p in root.rglob("*") if p.is_file() and not SKIPPED & set(p.relative_to(root).parts)]


def report(broken: list[Broken], pending: set[tuple[str, str]], out: Callable[[str], None] = print) -> int:
    """Print each broken reference (pending ones marked) and each PENDING entry that is fixed; 1 if any is not pending."""
    failing = 0
    for b in broken:
        known = (b.file, b.reference) in pending
        failing += not known
        out(f"{b}" + (" (pending: PENDING in scripts/refs.py)" if known else ""))
    for file, reference in sorted(pending - {(b.file, b.reference) for b in broken}):
        out(f"scripts/refs.py: PENDING: {file}: {reference} is no longer broken: remove the entry")
    if failing:
        out(f"{failing} broken reference(s)")
    return 1 if failing else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else ROOT
    return report(Tree(root).broken(), PENDING if root.resolve() == ROOT else set())


if __name__ == "__main__":
    sys.exit(main())
