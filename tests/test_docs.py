"""The docs people find their way in: README.md and docs/*.md.

Every relative link and anchor resolves (anchors by GitHub's heading slugs);
every `make` target and `dawnpipe` command the docs show exists (`make -n`,
`dawnpipe <command> --help`), and so does every script or file a command
names; the README stays within 12 KB; the measured tables equal a fresh
generation from their records (scripts/docs.py), and docs/pipeline.md one
from the stage table. Fast: part of `make lint`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, tool_env

README_LIMIT = 12_288
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Files another change produces; a link to one may run ahead of it. Remove a
# path from here once it is committed (a link to it is then checked like any).
PENDING: set[Path] = set()  # files a link may name before they exist (none now)


def script(name: str):
    """A module of scripts/, loaded from its file (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


docs = script("docs")
# What a Markdown page holds and GitHub's anchors, as the references check reads them (make lint).
refs = script("refs")
split_markdown, slug, INLINE_CODE = refs.split_markdown, refs.slug, refs.INLINE_CODE


def commands(page: Path) -> list[list[str]]:
    """Every shell command the page shows: code-block lines and inline code
    spans that start with a command, split at `&&`, `;` and `|`."""
    prose, code = split_markdown(page.read_text(encoding="utf-8"))
    spans = [m.group(2) for line in prose for m in INLINE_CODE.finditer(line)]
    found = []
    for text in code + spans:
        text = re.sub(r"(^|\s)#.*$", "", text)  # a comment
        for part in re.split(r"&&|;|\|", text):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if words:
                found.append(words)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for line, target in refs.links(page.read_text(encoding="utf-8")):
        dest = (page.parent / target.partition("#")[0]).resolve()
        if dest in PENDING and not dest.exists():
            continue
        reason = refs.link_problem(page, target)
        if reason:
            broken.append(f"line {line}: {target}: {reason}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slugs_follow_github():
    assert slug("What reruns") == "what-reruns"
    assert slug("The fast entry's studies") == "the-fast-entrys-studies"
    assert slug("`dawnpipe audit`") == "dawnpipe-audit"
    assert slug("1. Training time") == "1-training-time"
    assert slug('"The same results" as `make leaderboard`') == "the-same-results-as-make-leaderboard"
    assert slug("CIFAR-10.1: the new test set") == "cifar-101-the-new-test-set"


def test_the_readme_stays_short():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move the detail to a page of docs/"


def shown(predicate) -> dict[tuple[str, ...], str]:
    """The commands of every page for which ``predicate(words)`` gives a key: key -> the page showing it first."""
    found: dict[tuple[str, ...], str] = {}
    for page in PAGES:
        for words in commands(page):
            key = predicate(words)
            if key:
                found.setdefault(key, str(page.relative_to(ROOT)))
    return found


def make_target(words: list[str]) -> tuple[str, ...] | None:
    if words[0] != "make":
        return None
    targets = tuple(w for w in words[1:] if not w.startswith("-") and "=" not in w and "<" not in w)
    variables = tuple(w for w in words[1:] if "=" in w and "<" not in w)
    return (*targets, *variables) if targets else None


def test_every_make_target_shown_exists():
    found = shown(make_target)
    assert found, "no make command found in the docs"
    failed = []
    for key, page in found.items():
        proc = subprocess.run(["make", "-n", *key], cwd=ROOT, capture_output=True, text=True, env=tool_env(), timeout=60)
        if proc.returncode != 0:
            failed.append(f"{page}: make {' '.join(key)}: {proc.stderr.strip()[-300:]}")
    assert not failed, "\n".join(failed)


def dawnpipe_words(words: list[str]) -> tuple[str, ...] | None:
    """The argument words of a `dawnpipe ...` or `python -m dawnpipe ...` command."""
    if words[0] == "dawnpipe":
        rest = words[1:]
    elif words[:3] == ["python", "-m", "dawnpipe"]:
        rest = words[3:]
    else:
        return None
    return tuple(rest)


def help_argv(rest: tuple[str, ...]) -> list[str]:
    """`<command> [<verb>] --help` for a shown command: the verb is a plain word after the command."""
    if not rest or rest[0].startswith("-") or "<" in rest[0]:
        return ["--help"]
    argv = [rest[0]]
    if len(rest) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", rest[1]):
        argv.append(rest[1])
    return [*argv, "--help"]


def test_every_dawnpipe_command_shown_exists():
    found = {tuple(help_argv(rest)): page for rest, page in shown(dawnpipe_words).items()}
    assert len(found) > 10, f"only {len(found)} dawnpipe commands found in the docs"
    check = (
        "import contextlib, io, json, sys\n"
        "from dawnpipe.cli import main\n"
        "codes = {}\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    out = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
        "            main(argv)\n"
        "        codes[' '.join(argv)] = 0\n"
        "    except SystemExit as e:\n"
        "        codes[' '.join(argv)] = (e.code or 0) if isinstance(e.code, int) else 1\n"
        "print(json.dumps(codes))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check, json.dumps([list(k) for k in found])], cwd=ROOT, capture_output=True, text=True, env=tool_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = [f"{page}: dawnpipe {' '.join(argv)} exits {codes[' '.join(argv)]}" for argv, page in found.items() if codes[" ".join(argv)] != 0]
    assert not failed, "\n".join(failed)


def named_files(words: list[str]) -> tuple[str, ...] | None:
    """Repository files a command names: the script it runs and the configs it reads."""
    names = []
    if words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
        names.append(words[1])
    elif words[0].startswith(("scripts/", "bench/")):
        names.append(words[0])
    for i, w in enumerate(words[:-1]):
        if w in ("--configfile", "--entry", "--study") or (w == "variants" and i > 0):
            names.append(words[i + 1])
    names = [n for n in names if "<" not in n and "{" not in n and not n.startswith(("../", "/"))]
    return tuple(names) or None


def test_every_script_and_config_a_command_names_exists():
    missing = [f"{page}: {name}" for names, page in shown(named_files).items() for name in names if not (ROOT / name).exists()]
    assert not missing, "no such file: " + "; ".join(missing)


def test_the_generated_tables_equal_a_fresh_generation():
    stale = []
    for page in docs.pages(ROOT / "docs"):
        text = page.read_text(encoding="utf-8")
        if docs.generate(text, page) != text:
            stale.append(str(page.relative_to(ROOT)))
    assert not stale, f"generated tables out of date in {', '.join(stale)}: run `make docs` (never edit them by hand)"


def test_the_pipeline_page_equals_a_fresh_generation():
    """docs/pipeline.md is the stage table's own account of itself (`dawnpipe pipeline docs`), never edited by hand."""
    from dawnpipe.pipeline.docs import PAGE, page

    assert (ROOT / PAGE).read_text(encoding="utf-8") == page(), f"{PAGE} out of date with the stage table: run `make docs` (never edit it by hand)"


def test_the_measured_pages_have_their_blocks():
    """Every bench script's record and every ready-made study has a block where the docs show it."""
    blocks = {m.group("path") for page in (ROOT / "docs/measurements.md", ROOT / "docs/studies.md") for m in docs.BLOCK.finditer(page.read_text())}
    for name in ("tta", "overhead", "latency", "audit", "telemetry_overhead"):
        assert f"measurements/{name}.json" in blocks
    studies = {p.stem for p in (ROOT / "config/studies").glob("*.yaml") if not p.stem.startswith("test-")}
    assert {f"measurements/study-{s}.json" for s in studies} <= blocks
