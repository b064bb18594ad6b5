"""envs/*.yaml (for `--sdm conda` users) pin the same versions as
requirements.txt (what `make setup` installs), and constraints.txt agrees with
both; every rule's conda env exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)")


def pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        m = PIN.match(line.strip())
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return out


def requirement_pins() -> dict[str, str]:
    return pins((ROOT / "requirements.txt").read_text().splitlines())


def env_pins(path: Path) -> dict[str, str]:
    doc = yaml.safe_load(path.read_text())
    pip = next((d["pip"] for d in doc["dependencies"] if isinstance(d, dict) and "pip" in d), [])
    return pins(pip)


ENVS = sorted((ROOT / "envs").glob("*.yaml"))


@pytest.mark.parametrize("env", ENVS, ids=[e.name for e in ENVS])
def test_env_pins_agree_with_requirements(env):
    required = requirement_pins()
    mine = env_pins(env)
    assert mine, f"{env}: no pinned pip packages"
    for name, version in mine.items():
        assert name in required, f"{env}: {name} is not in requirements.txt"
        assert version == required[name], f"{env}: {name}=={version} but requirements.txt pins {required[name]}"
    python = [d for d in yaml.safe_load(env.read_text())["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert python == ["python=3.11"], f"{env}: python pin {python}"


def test_constraints_agree_with_requirements():
    constraints = pins((ROOT / "constraints.txt").read_text().splitlines())
    for name, version in requirement_pins().items():
        assert constraints.get(name) == version, f"constraints.txt pins {name}=={constraints.get(name)}, requirements.txt {version}"


def test_every_requirement_is_pinned_exactly():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            assert PIN.match(line), f"requirements.txt: {line!r} is not an exact pin"


def test_every_stage_names_an_existing_env(monkeypatch):
    """The stage table names each stage's conda env (workflow/rules/common.smk
    turns it into envs/<name>.yaml), for every entry of a config with
    PyTorch and TensorFlow entries."""
    from dawnpipe.pipeline.config import resolve
    from dawnpipe.pipeline.plan import Plan
    from dawnpipe.pipeline.stages import STAGES

    monkeypatch.chdir(ROOT)
    plan = Plan(resolve(["config/benchmark.yaml"]))
    named = set()
    for stage in STAGES:
        envs = [stage.env] if isinstance(stage.env, str) else [stage.env(plan, {"entry": e}) for e in plan.entries]
        named |= {f"{e}.yaml" for e in envs}
    assert named == {e.name for e in ENVS}
