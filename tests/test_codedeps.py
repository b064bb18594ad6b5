"""A stage's code, read off its imports (dawnpipe.pipeline.codedeps): module
and function-level imports, absolute and relative, parent packages, the data
files beside each module; and on the real package, the same list for
Snakemake's rules and DVC's stages."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import ROOT

from dawnpipe.pipeline import codedeps
from dawnpipe.pipeline.codedeps import closure, code_files


def make_package(src: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


def test_imports_anywhere_in_a_module_are_followed(tmp_path):
    src = make_package(
        tmp_path / "src",
        {
            "dawnpipe/__init__.py": "",
            "dawnpipe/cli.py": "import importlib\n",
            "dawnpipe/stage.py": "def run():\n    from dawnpipe.helper import help_me\n    return help_me()\n",
            "dawnpipe/helper.py": "from . import leaf\nfrom .pkg import mod\n",
            "dawnpipe/leaf.py": "import numpy\n",
            "dawnpipe/pkg/__init__.py": "",
            "dawnpipe/pkg/mod.py": "from ..leaf import x\n",
            "dawnpipe/pkg/rules.yaml": "a: 1\n",
            "dawnpipe/pkg/templates/page.j2": "{{ x }}\n",
            "dawnpipe/pkg/templates/sections/part.j2": "\n",
            "dawnpipe/pkg/sub/__init__.py": "",
            "dawnpipe/pkg/sub/own.yaml": "b: 2\n",
            "dawnpipe/unused.py": "import dawnpipe.stage\n",
        },
    )
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.helper", "dawnpipe.leaf", "dawnpipe.pkg", "dawnpipe.pkg.mod"}
    files = code_files(src, ["dawnpipe.stage"])
    assert files == [
        "src/dawnpipe/__init__.py",
        "src/dawnpipe/helper.py",
        "src/dawnpipe/leaf.py",
        "src/dawnpipe/pkg/__init__.py",
        "src/dawnpipe/pkg/mod.py",
        "src/dawnpipe/pkg/rules.yaml",  # data beside a module it imports
        "src/dawnpipe/pkg/templates/page.j2",  # and in its non-package sub-directories
        "src/dawnpipe/pkg/templates/sections/part.j2",
        "src/dawnpipe/stage.py",
    ]  # not unused.py (nothing imports it), not pkg/sub (a package of its own, not imported)


def test_imports_in_every_kind_of_block_are_followed(tmp_path):
    """Only statements are walked (an import is one): each block that holds statements is entered."""
    blocks = (
        "class C:\n    import dawnpipe.in_class\n"
        "try:\n    import dawnpipe.in_try\nexcept ImportError:\n    import dawnpipe.in_handler\n"
        "else:\n    import dawnpipe.in_try_else\nfinally:\n    import dawnpipe.in_finally\n"
        "with open(__file__):\n    import dawnpipe.in_with\n"
        "for _ in ():\n    pass\nelse:\n    import dawnpipe.in_for_else\n"
        "while False:\n    pass\nelse:\n    import dawnpipe.in_while_else\n"
        "match 1:\n    case 1:\n        import dawnpipe.in_case\n"
        "async def f():\n    async with x:\n        import dawnpipe.in_async_with\n"
    )
    names = ["in_class", "in_try", "in_handler", "in_try_else", "in_finally", "in_with", "in_for_else", "in_while_else", "in_case", "in_async_with"]
    src = make_package(tmp_path / "src", {"dawnpipe/__init__.py": "", "dawnpipe/stage.py": blocks, **{f"dawnpipe/{n}.py": "" for n in names}})
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", *(f"dawnpipe.{n}" for n in names)}


def test_imports_for_annotations_only_are_not_followed(tmp_path):
    """An import under ``if TYPE_CHECKING:`` never runs: not the stage's code; its ``else`` branch runs, and is."""
    src = make_package(
        tmp_path / "src",
        {
            "dawnpipe/__init__.py": "",
            "dawnpipe/stage.py": (
                "import typing\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from dawnpipe.typed import Settings\nelse:\n    from dawnpipe import runs\n"
                "if typing.TYPE_CHECKING:\n    import dawnpipe.also_typed\n"
            ),
            "dawnpipe/typed.py": "",
            "dawnpipe/also_typed.py": "",
            "dawnpipe/runs.py": "",
        },
    )
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.runs"}


def fresh_process():
    """What a new process starts with: no import lists in memory, only the cache file."""
    codedeps._imports_of.cache_clear()
    codedeps._cache.cache_clear()


def test_the_cached_import_lists_follow_every_edit(tmp_path):
    """The import lists kept beside the bytecode are keyed by each module's
    source: a process after an edit sees the edit, a cache that is unreadable
    or of the wrong shape is ignored, and the answer is the parse's each time."""
    src = make_package(
        tmp_path / "src",
        {"dawnpipe/__init__.py": "", "dawnpipe/stage.py": "from dawnpipe import a\n", "dawnpipe/a.py": "", "dawnpipe/b.py": ""},
    )
    cache = src / codedeps.CACHE
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.a"}
    written = json.loads(cache.read_text())
    assert sorted(k.rpartition(":")[0] for k in written) == ["dawnpipe/__init__.py", "dawnpipe/a.py", "dawnpipe/stage.py"]

    (src / "dawnpipe/stage.py").write_text("from dawnpipe import b\n")  # same size, same second
    fresh_process()
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.b"}
    stage_keys = [k for k in json.loads(cache.read_text()) if k.startswith("dawnpipe/stage.py:")]
    assert len(stage_keys) == 1 and stage_keys[0] not in written  # the old source's entry is replaced

    for garbage in ("not json", '{"dawnpipe/stage.py:x": "dawnpipe.a"}', "[1, 2]"):
        cache.write_text(garbage)
        fresh_process()
        assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.b"}, garbage
        assert json.loads(cache.read_text())  # rewritten from the parse


def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path):
    src = make_package(tmp_path / "src", {"dawnpipe/__init__.py": "", "dawnpipe/stage.py": "import dawnpipe.a\n", "dawnpipe/a.py": ""})
    (src / "dawnpipe/__pycache__").write_text("a file where the cache's directory would be")
    assert closure(src, ["dawnpipe.stage"]) == {"dawnpipe", "dawnpipe.stage", "dawnpipe.a"}


def test_snakemake_and_dvc_list_the_same_code_for_each_stage(monkeypatch):
    """The rules' `code` inputs and dvc.yaml's deps come from one function:
    the code files dvc.yaml lists for each stage are the ones it computes."""
    from dawnpipe.pipeline import render
    from dawnpipe.pipeline.config import resolve
    from dawnpipe.pipeline.plan import Plan
    from dawnpipe.pipeline.stages import STAGES

    monkeypatch.chdir(ROOT)
    plan = Plan(resolve([]))
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for stage in STAGES:
        if stage.name not in dvc:  # no job in this config (the study stage without studies)
            continue
        code = render.code(stage, plan, Path("src"))
        body = dvc[stage.name].get("do", dvc[stage.name])
        assert [d for d in body["deps"] if d.startswith("src/")] == code, stage.name


def test_a_stage_runs_its_own_command_and_not_the_others(monkeypatch):
    from dawnpipe.cli import COMMANDS
    from dawnpipe.pipeline import render
    from dawnpipe.pipeline.config import resolve
    from dawnpipe.pipeline.plan import Plan
    from dawnpipe.pipeline.stages import STAGES

    monkeypatch.chdir(ROOT)
    plan = Plan(resolve([]))
    code = {s.name: set(render.code(s, plan, Path("src"))) for s in STAGES}
    for stage in STAGES:
        assert "src/" + COMMANDS[stage.command][0].replace(".", "/") + ".py" in code[stage.name], stage.name
    # every trainer an entry may pick at run time is the train stage's code
    assert {"src/dawnpipe/train/torch_trainer.py", "src/dawnpipe/train/tf_trainer.py", "src/dawnpipe/train/squad_trainer.py"} <= code["train"]
    # the report does not run training code, and extracting a time runs no model
    assert "src/dawnpipe/train/torch_trainer.py" not in code["report"]
    assert not any(f.startswith("src/dawnpipe/models/") for f in code["extract"])
    # the configured inference backends' modules are the infer stage's code
    assert {"src/dawnpipe/infer/torch_backend.py", "src/dawnpipe/infer/onnx_int8_backend.py"} <= code["infer"]
    assert "src/dawnpipe/infer/compile_backend.py" not in code["infer"]  # not in config/config.yaml's backends
