"""The stage table (dawnpipe.pipeline.stages) against what reads it: every
stage's command as dvc.yaml writes it is accepted by its own command's
parser; a command written for a caller outside the pipeline is the
pipeline's; the DAG docs/pipeline.md draws has every edge the jobs of the
ready-made configurations have; a word naming nothing of its stage is
refused when the table is built."""

from __future__ import annotations

import argparse
import importlib
import os

import pytest
from conftest import ROOT

from dawnpipe.cli import COMMANDS
from dawnpipe.pipeline import docs, render
from dawnpipe.pipeline.config import resolve
from dawnpipe.pipeline.dvc import jobs
from dawnpipe.pipeline.plan import Plan
from dawnpipe.pipeline.stages import STAGES, STUDY, TRAIN, In, Input, Out, Output, Param, Stage, command_words, outputs_in

CONFIGS = ["config/config.yaml", "config/test.yaml", "config/test-study.yaml", "config/dawnbench.yaml", "config/benchmark.yaml"]


def plan_of(config: str) -> Plan:
    return Plan(resolve([] if config == "config/config.yaml" else [config]))


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_stage_command_is_one_its_command_parses(config):
    """A flag renamed in a command's parser, or one the table spells wrong,
    fails here, not in the middle of a pipeline run."""
    plan = plan_of(config)
    parsed = 0
    for stage in STAGES:
        module = importlib.import_module(COMMANDS[stage.command][0])
        for _, job in jobs(stage, plan):
            argv = render.command(stage, plan, job)[len(plan.task_dir_words()) :]
            assert argv[0] == stage.command
            parser = _Parser(prog=f"dawnpipe {stage.command}")
            module.configure(parser)
            try:
                parser.parse_args(argv[1:])
            except _Refused as e:
                pytest.fail(f"{config}: stage {stage.name}, job {job}: {e}\n{' '.join(argv)}")
            parsed += 1
    assert parsed >= len(STAGES) - 3  # every stage the configuration has (fetch_program, dawnbench, study only in some)


def test_a_caller_outside_the_pipeline_writes_the_pipelines_command():
    """The values of one job, as the pipeline computes them, give the pipeline's
    own command through command_words; outputs_in puts the outputs where
    the table puts them in a run directory."""
    plan = plan_of("config/test.yaml")
    entry, seed = plan.runs()[0]
    job = {"entry": entry, "seed": str(seed)}
    run = plan.run_dir(entry, seed)
    assert {name: str(path) for name, path in outputs_in(TRAIN, run).items()} == render.outputs(TRAIN, job)
    values = {"entry_file": plan.entries[entry].file, "seed": seed, "data": f"data/prepared/{plan.task_of(entry)}", **outputs_in(TRAIN, run)}
    values |= {"work_dir": f"results/.work/{entry}/seed{seed}", "settings": TRAIN.params["settings"](plan, job)}
    values |= {name: TRAIN.params[name](plan, job) for name in ("telemetry_interval", "cpu_peak_probe")}
    assert command_words(TRAIN, values) == render.command(TRAIN, plan, job)[len(plan.task_dir_words()) :]


def test_a_word_without_a_value_is_left_out_with_its_flag():
    assert command_words(TRAIN, {}) == ["train"]
    assert command_words(TRAIN, {"seed": 3, "threads": None, "settings": ["--threshold", "90.0"]}) == ["train", "--seed", "3", "--threshold", "90.0"]
    # literal words stay: the verb and a fixed path
    assert command_words(STUDY, {}) == ["study", "summarize", "--runs", "results/runs"]


def test_a_word_naming_nothing_of_its_stage_is_refused():
    base = dict(name="x", command="extract", per=("entry",), inputs={"a": Input("a/{entry}")}, outputs={"b": Output("b/{entry}")}, log="l")
    Stage(**base, args=(("--a", In("a")), ("--b", Out("b"))))
    with pytest.raises(ValueError, match=r"In\('nope'\) names nothing"):
        Stage(**base, args=(("--a", In("nope")),))
    with pytest.raises(ValueError, match=r"Param\('p'\) names nothing"):
        Stage(**base, args=(Param("p"),))
    with pytest.raises(ValueError, match="'a' is in its command twice"):
        Stage(**base, args=(("--a", In("a")), ("--again", In("a"))))


def _writer(path: str, written: dict[str, str]) -> str | None:
    """The stage that writes ``path``: a file it writes, or one inside a directory it writes."""
    path = os.path.normpath(path)
    while path not in (".", "", "/"):
        if path in written:
            return written[path]
        path = os.path.dirname(path)
    return None


@pytest.mark.parametrize("config", CONFIGS)
def test_the_drawn_dag_has_every_edge_of_the_jobs(config):
    """docs/pipeline.md's picture is drawn from the table's path templates;
    every input of every job that another stage's job writes must be one of
    its arrows (so an input added as a function without its template shows)."""
    plan = plan_of(config)
    written = {}
    for stage in STAGES:
        for _, job in jobs(stage, plan):
            written |= {os.path.normpath(p): stage.name for p in render.outputs(stage, job).values()}
    drawn = set(docs.edges())
    found = set()
    for stage in STAGES:
        for _, job in jobs(stage, plan):
            for paths in render.inputs(stage, plan, job).values():
                for path in paths:
                    writer = _writer(path, written)
                    if writer is not None and writer != stage.name:
                        found.add((writer, stage.name))
    assert found, f"{config}: no stage reads another's output"
    assert found <= drawn, f"{config}: arrows the picture misses: {sorted(found - drawn)}"


def test_every_input_computed_per_job_says_what_it_gives():
    for stage in STAGES:
        for name, spec in stage.inputs.items():
            assert spec.shows, f"stage {stage.name}, input {name}: no path template (values.shows)"


def test_the_page_shows_every_stage_and_the_dag():
    text = (ROOT / docs.PAGE).read_text(encoding="utf-8")
    assert "```mermaid\nflowchart LR\n" in text
    for stage in STAGES:
        assert f"\n## {stage.name}\n" in text
    for writer, reader in docs.edges():
        assert f"  {writer} --> {reader}\n" in text
