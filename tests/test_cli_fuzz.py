"""Every `dawnpipe` verb against random arguments and random files
(property-based, hypothesis): whatever comes in, the outcome is exit 0, 1 or
2 with at most one error line, never a traceback and never "internal error".

Arguments are drawn from each verb's own parser (its options and positional
arguments), with values that are paths of generated files (random bytes,
random JSON and YAML documents, deep nesting, control characters in keys),
directories holding them, numbers (NaN, infinity, negative, huge), words and
empty strings. The verbs run in this process through ``dawnpipe.cli.main``.
Training and inference are fuzzed on their argument and input validation:
the random files never make a valid entry, checkpoint or prepared set, so
no model is built."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dawnpipe.cli import COMMANDS, main

VERBS = sorted(COMMANDS)
_UNIQUE = itertools.count()
# known task names are left out where a valid one would start a real copy of Fashion-MNIST
NO_REAL_TASKS = {"fetch", "prepare"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.sampled_from([10**400, 2**64]) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
# MLLOG records (``dawnpipe mlperf score`` reads result_*.txt): any JSON after
# the token, and records of the right shape whose fields are anything
mllog_records = st.one_of(
    json_values.map(lambda v: ":::MLLOG " + json.dumps(v)),
    st.fixed_dictionaries(
        {
            "namespace": st.just(""),
            "time_ms": st.one_of(st.integers(0, 2 * 10**12), st.sampled_from([float("nan"), float("inf"), 10**400, "1.5", "x"]), json_values),
            "event_type": st.sampled_from(["POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"]),
            "key": st.one_of(st.sampled_from(["run_start", "run_stop", "submission_benchmark", "global_batch_size", "eval_accuracy"]), json_values),
            "value": json_values,
            "metadata": json_values,
        }
    ).map(lambda d: ":::MLLOG " + json.dumps(d)),
)
contents = st.one_of(
    st.binary(max_size=200),
    st.lists(mllog_records, min_size=1, max_size=6).map(lambda lines: "\n".join(lines).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: yaml.safe_dump(v).encode()),
    st.integers(1, 3000).map(lambda n: ("[" * n + "]" * n).encode()),  # deep nesting
    st.text(alphabet="\x1b[]0123456789;mJHK\u202e\x07\n\t{}:\"'", max_size=60).map(str.encode),  # escape sequences
    st.just(b'{"epoch": NaN, "hours": Infinity}'),
    st.just(b"\xef\xbb\xbfepoch\thours\ttop1Accuracy\n1\t0.1\t93\n"),
)


@st.composite
def a_path(draw, root: Path) -> str:
    """A generated file or a directory of generated files under ``root``, or a path that does not exist."""
    kind = draw(st.sampled_from(["file", "file", "dir", "missing"]))
    name = draw(st.text(alphabet="abcxyz-_.\x1b \u202e", min_size=1, max_size=8)).strip("./") or "f"
    path = root / f"{next(_UNIQUE)}-{name}"
    if kind == "file":
        path.write_bytes(draw(contents))
    elif kind == "dir":
        for i in range(draw(st.integers(0, 3))):
            sub = path / draw(st.sampled_from(["", "CIFAR10/train", "SQuAD/inference", "runs/e/seed0", "latency"]))
            sub.mkdir(parents=True, exist_ok=True)
            (sub / draw(st.sampled_from([f"x{i}.json", f"x{i}.tsv", "run.json", "time_to_accuracy.json", "manifest.json", "result_0.txt"]))).write_bytes(
                draw(contents)
            )
        path.mkdir(parents=True, exist_ok=True)
    return str(path)


NUMBERS = st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e308", "3", "0.5", "70", "99999999999999999999", "None", "true", "1", "2"])


def words(draw, root: Path, verb: str, action: argparse.Action):
    """A value for ``action``: mostly of the kind it wants (a number for a
    number, a path for a path), sometimes anything."""
    texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)
    task_words = (
        st.sampled_from(["no-such-task", "", "x\x1b[2J"]) if verb in NO_REAL_TASKS else st.sampled_from(["fashion-mnist", "cifar10", "no-such-task", ""])
    )
    anything = st.one_of(a_path(root), texts, NUMBERS, task_words)
    wants_number = action.type in (int, float) or getattr(action.type, "__name__", "") in (
        "positive_int",
        "optional_int",
        "threshold",
        "seconds",
        "finite_float",
        "seed",
    )
    if wants_number:
        return draw(st.one_of(NUMBERS, NUMBERS, anything))
    if action.dest in ("task", "command", "what") or action.dest.startswith(("threshold_for__", "source_for__", "ladder_for__")):
        return draw(st.one_of(task_words, anything))
    return draw(st.one_of(a_path(root), a_path(root), anything))


def parser_of(verb: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"dawnpipe {verb}")
    importlib.import_module(COMMANDS[verb][0]).configure(parser)
    return parser


@st.composite
def argv_for(draw, verb: str, root: Path) -> list[str]:
    parser = parser_of(verb)
    argv: list[str] = []
    for action in parser._actions:
        if action.dest == "help":
            continue
        if action.option_strings and not action.required and draw(st.integers(0, 3)) > 0:
            continue  # an optional option left out (most of the time: the others get a chance)
        if action.option_strings and action.required and draw(st.integers(0, 19)) == 0:
            continue  # now and then a required one too: argparse's usage error
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            argv.append(action.option_strings[0])
            continue
        count = draw(st.integers(1, 2)) if action.nargs in ("+", "*") else 0 if action.nargs == 0 else 1
        values = [words(draw, root, verb, action) for _ in range(count)]
        if action.choices:
            values = [draw(st.sampled_from([*map(str, action.choices), "nonsense"]))]
        argv += [*([action.option_strings[0]] if action.option_strings else []), *values]
    return argv


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return code, out.getvalue(), err.getvalue()


def error_lines(stderr: str) -> list[str]:
    """Lines that report a failure (argparse's usage text and progress bars are not)."""
    return [line for line in stderr.splitlines() if "error:" in line]


@pytest.mark.parametrize("verb", VERBS)
def test_random_arguments_and_files_never_crash(verb, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"fuzz-{verb}")
    crashes = Path(tempfile.gettempdir())  # where dawnpipe.crash writes its reports
    crashes_before = set(crashes.glob(f"dawnpipe-{verb}-crash-*"))
    cwd = os.getcwd()
    os.chdir(root)  # `pipeline` reads the project beside it: here there is none
    try:

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(argv=argv_for(verb, root))
        def check(argv):
            code, stdout, stderr = run([verb, *argv])
            assert code in (0, 1, 2), (argv, code, stderr[-2000:])
            assert "Traceback" not in stdout + stderr and "internal error" not in stderr, (argv, stderr[-2000:])
            assert len(error_lines(stderr)) <= 1, (argv, stderr[-2000:])
            assert "\x1b" not in stdout + stderr, (argv, stdout[-500:], stderr[-500:])  # untrusted text reaches the terminal escaped

        check()
    finally:
        os.chdir(cwd)
    assert set(crashes.glob(f"dawnpipe-{verb}-crash-*")) == crashes_before, "a crash report was written"


def test_output_paths_with_escape_characters_are_printed_escaped(tmp_path):
    """The one-line summary a verb prints after writing names its outputs;
    a path holding an escape sequence reaches the terminal escaped (the fuzz
    test above draws such names only by chance)."""
    out = tmp_path / "board\x1b[2J.json"
    (tmp_path / "submissions").mkdir()
    code, stdout, stderr = run(
        ["leaderboard", "--submissions", str(tmp_path / "submissions"), "--json", str(out), "--html", str(tmp_path / "page\x1b]0;x\x07.html")]
    )
    assert code == 0, stderr
    assert out.exists()
    assert "leaderboard: 0 ranked rows" in stdout
    assert "\x1b" not in stdout + stderr and "\x07" not in stdout + stderr
