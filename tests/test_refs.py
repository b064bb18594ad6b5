"""The references check (scripts/refs.py, part of `make lint`): it fails on a
reference planted broken in a small tree of its own, naming the file, the
line and the reference; it passes on ordinary prose and on references that
resolve; and this repository has no broken reference.

The planted texts write the docs folder as DOCS/ (made docs/ when written), so
that this file's own strings are not references into this repository's docs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_docs import refs

# A small tree laid out like the repository, every reference in it resolving.
GOOD = {
    "docs/rules.md": "# Rules\n\n## Display rules\n\n### 1. Training time\n\nSee [display](#display-rules).\n",
    "docs/other.md": "The [rules](rules.md#display-rules), `src/dawnpipe/tta.py` and `config/studies/<name>.yaml`.\n",
    "src/dawnpipe/__init__.py": "",
    "src/dawnpipe/tta.py": (
        '"""Time to accuracy (DOCS/rules.md#1-training-time)."""\n\n\n'
        "def time_to_accuracy():\n    pass\n\n\n"
        "class Clock:\n    def stop(self):\n        self.stopped = True\n"
    ),
    "src/dawnpipe/infer/__init__.py": "",
    "src/dawnpipe/infer/timing.py": "# the clock of timing.py, as in infer/timing.py\n",
    "config/studies/batch.yaml": "# a study (DOCS/rules.md#display-rules)\n",
    "workflow/rules/stages.smk": "# helpers are in common.smk\n",
    "workflow/rules/common.smk": "# the rules are in stages.smk\n",
}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("DOCS/", "docs/"), encoding="utf-8")
    return root


def broken(root: Path) -> list[tuple[str, int, str, str]]:
    return [(b.file, b.line, b.reference, b.reason) for b in refs.Tree(root).broken()]


def test_a_tree_whose_references_resolve_passes(tmp_path):
    assert broken(write(tmp_path, GOOD)) == []


# (file, its text, the broken reference reported on line 2, a part of the reason)
PLANTED = [
    ("src/dawnpipe/a.py", '"""One.\nSee DOCS/rules.md#no-such-section."""\n', "docs/rules.md#no-such-section", "no heading with anchor #no-such-section"),
    ("src/dawnpipe/a.py", "x = 1\n# the rule: DOCS/nowhere.md\n", "docs/nowhere.md", "no such file"),
    ("src/dawnpipe/a.py", 'x = 1\nraise ValueError("see DOCS/nowhere.md")\n', "docs/nowhere.md", "no such file"),
    (
        "src/dawnpipe/a.py",
        '"""One.\nThe backends are dawnpipe.infer.program_backends."""\n',
        "dawnpipe.infer.program_backends",
        "no module or name program_backends",
    ),
    ("src/dawnpipe/a.py", '"""One.\nSee dawnpipe.tta.time_to_accurracy."""\n', "dawnpipe.tta.time_to_accurracy", "no module or name time_to_accurracy"),
    ("src/dawnpipe/a.py", '"""One.\nSee dawnpipe.tta.Clock.start."""\n', "dawnpipe.tta.Clock.start", "no attribute start of dawnpipe.tta.Clock"),
    ("src/dawnpipe/a.py", "x = 1\n# beside infer/program_backends.py\n", "infer/program_backends.py", "no such file"),
    ("src/dawnpipe/a.py", "x = 1\n# the rules of DESIGN.md section 2\n", "DESIGN.md", "no such file"),
    ("src/dawnpipe/a.py", "x = 1\n# fixed for PR #19\n", "PR #19", "cannot look up"),
    ("workflow/rules/extra.smk", "# one\n# the helpers rules.smk uses\n", "rules.smk", "no such file"),
    ("config/a.yaml", "# one\n# the studies: config/studies/<name>.json\n", "config/studies/<name>.json", "no file matches"),
    ("docs/third.md", "# Third\n[the rules](rules.md#nowhere)\n", "rules.md#nowhere", "no heading with anchor #nowhere"),
    ("docs/third.md", "# Third\nThe code: `src/dawnpipe/nowhere.py`.\n", "src/dawnpipe/nowhere.py", "no such file"),
    ("docs/third.md", '# Third\nAs DOCS/rules.md, "Ranking" says.\n', 'docs/rules.md, "Ranking"', "no heading 'Ranking'"),
    ("README.md", "# Read me\nSee [setup](DOCS/setup.md).\n", "docs/setup.md", "no such file"),
]


@pytest.mark.parametrize("name, text, reference, reason", PLANTED, ids=[p[2] for p in PLANTED])
def test_a_planted_broken_reference_is_named_with_its_file_and_line(tmp_path, name, text, reference, reason):
    found = broken(write(tmp_path, {**GOOD, name: text}))
    assert [(f, line, r) for f, line, r, _ in found] == [(name, 2, reference.replace("DOCS/", "docs/"))], found
    assert reason in found[0][3]


def test_ordinary_prose_and_what_is_not_in_the_repository_are_not_references(tmp_path):
    prose = (
        '"""Nothing here is a broken reference.\n\n'
        "A URL: https://github.com/x/y/blob/main/DOCS/nowhere.md; a path beside the\n"
        "repository: ../shared/DOCS/nowhere.md and ../shared/DESIGN.md; an absolute one:\n"
        "/usr/share/datasets/x.md; another project's file: parlai/tasks/squad/build.py;\n"
        "another tracker's number: tensorflow/tensorflow#100442; a placeholder:\n"
        "config/studies/x.yaml, DOCS/x.md, config/studies/<name>.yaml, src/dawnpipe/{module}.py;\n"
        "an output: results/leaderboard.html, DOCS/measurements/tta.json; an address\n"
        "tests@dawnpipe.invalid; names that resolve: dawnpipe.tta, dawnpipe.tta.Clock.stop,\n"
        'dawnpipe.tta.Clock.stopped, infer/timing.py, rules.md, DOCS/rules.md, "Training time";\n'
        "a ratio of 3/4 and an issue of trust.\n"
        '"""\n\n'
        'LOGGER = "dawnpipe.nowhere"  # a string in code is data\n'
        'FIXTURE = "src/dawnpipe/nowhere.py"\n'
    )
    assert broken(write(tmp_path, {**GOOD, "src/dawnpipe/prose.py": prose})) == []


def test_a_path_git_ignores_is_an_output_and_a_file_git_does_not_hold_is_not_read(tmp_path):
    write(tmp_path, {**GOOD, ".gitignore": "/bench/out/\n", "bench/a.py": "# writes bench/out/a.json, not bench/nowhere.py\n"})
    (tmp_path / "notes.md").write_text("See DESIGN.md.\n")  # never added: not read
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", *GOOD, ".gitignore", "bench/a.py"], cwd=tmp_path, check=True)
    assert [(f, r) for f, _, r, _ in broken(tmp_path)] == [("bench/a.py", "bench/nowhere.py")]


def test_the_command_names_each_broken_reference_and_fails(tmp_path):
    write(tmp_path, {**GOOD, "src/dawnpipe/a.py": '"""One.\n\nSee DOCS/nowhere.md."""\n'})
    proc = subprocess.run([sys.executable, ROOT / "scripts/refs.py", tmp_path], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "src/dawnpipe/a.py:3: docs/nowhere.md: no such file"
    assert proc.stderr == ""
    write(tmp_path, {"src/dawnpipe/a.py": '"""One.\n\nSee DOCS/rules.md."""\n'})
    proc = subprocess.run([sys.executable, ROOT / "scripts/refs.py", tmp_path], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stdout + proc.stderr


def test_a_pending_reference_is_listed_without_failing_and_a_fixed_one_is_named_for_removal():
    one = refs.Broken("src/dawnpipe/a.py", 2, "DESIGN.md", "no such file")
    lines: list[str] = []
    assert refs.report([one], {("src/dawnpipe/a.py", "DESIGN.md")}, lines.append) == 0
    assert lines == ["src/dawnpipe/a.py:2: DESIGN.md: no such file (pending: PENDING in scripts/refs.py)"]
    lines.clear()
    assert refs.report([], {("src/dawnpipe/a.py", "DESIGN.md")}, lines.append) == 0
    assert lines == ["scripts/refs.py: PENDING: src/dawnpipe/a.py: DESIGN.md is no longer broken: remove the entry"]
    lines.clear()
    assert refs.report([one], set(), lines.append) == 1
    assert lines == ["src/dawnpipe/a.py:2: DESIGN.md: no such file", "1 broken reference(s)"]


def test_this_repository_has_no_broken_reference():
    lines: list[str] = []
    assert refs.report(refs.Tree(ROOT).broken(), refs.PENDING, lines.append) == 0, "\n".join(lines)
