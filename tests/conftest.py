"""Shared fixtures: the project root, the shared data beside it, a subprocess
runner for the real CLI, and one real Snakemake run of config/test.yaml that
several end-to-end tests inspect (session scope: it trains real models)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# `make test` runs two workers on a 2-core machine, and each end-to-end run trains
# with 2 threads: more busy threads than cores. OpenMP's threads (PyTorch's on the
# CPU) spin while they wait for one another, on a core that another process's
# thread is waiting for; told to wait passively, they give it up. It changes how
# fast the suite runs, not what any test checks; set before torch is loaded here
# and inherited by every process the tests start (Slurm jobs too: sbatch
# --export=ALL). Runs outside the suite (a user's, a bench script's) keep OpenMP's default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dawnpipe.tensorflow_import import load_triton_first

# Test modules import Keras (so TensorFlow) as they are collected, and torch may load triton
# later in the same worker: triton first, as in every dawnpipe process (dawnpipe.tensorflow_import).
load_triton_first()

# the real-Slurm runs' fixtures (tests/test_slurm.py reads them)
pytest_plugins = ["slurm_runs"]

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
# What a copy of the project needs to run the workflow (no data, no results).
PROJECT_PARTS = ["Snakefile", "workflow", "config", "profiles", "envs", "src", "scripts", "examples", "pyproject.toml"]


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for subprocesses: this interpreter's bin dir first on PATH
    (snakemake, dvc), this checkout's src importable."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONHASHSEED", "0")
    env.update(extra or {})
    return env


def pytest_configure(config):
    """Hypothesis keeps its example database and caches in a temporary
    directory of the session (of each worker), removed at its end: by default
    it writes .hypothesis/ into the current directory, already while the test
    modules are collected, and a test writes only under temporary directories."""
    from hypothesis.configuration import set_hypothesis_home_dir

    config.hypothesis_home = tempfile.mkdtemp(prefix="dawnpipe-hypothesis-")
    set_hypothesis_home_dir(config.hypothesis_home)


def pytest_unconfigure(config):
    if getattr(config, "hypothesis_home", None):
        shutil.rmtree(config.hypothesis_home, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def session_temporary_directory(tmp_path_factory) -> Path:
    """The system's temporary directory, for this session (this worker) and every
    process it starts: a folder under pytest's own temporary directory. Files a
    library writes with ``tempfile`` then stay there, even from a process a test
    kills before it cleans up (TensorFlow's autograph modules, Snakemake's job
    scripts), instead of piling up in the machine's /tmp."""
    tmp = tmp_path_factory.mktemp("tmpdir", numbered=False)
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp)
    yield tmp
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]


CHART_DATA = re.compile(r'<script type="application/json" class="chart-data">(.*?)</script>', re.S)


def without_own_script(html: str) -> str:
    """The page minus dawnpipe's own embedded scripts: the page's script (there
    once), plotly.js and the chart script (once each where the page has a
    chart, never otherwise) and the charts' JSON (which must hold no '<'):
    what is left may then be searched for injected ones."""
    own = re.findall(r'<script id="dawnpipe-page">.*?</script>', html, re.S)
    assert len(own) == 1, f"{len(own)} copies of the page's own script"
    html = html.replace(own[0], "")
    data = CHART_DATA.findall(html)
    for name in ("plotly-js", "dawnpipe-charts"):
        found = re.findall(rf'<script id="{name}">.*?</script>', html, re.S)
        assert len(found) == (1 if data else 0), f"{len(found)} copies of script {name} in a page with {len(data)} charts"
        html = html.replace(found[0], "") if found else html
    assert not any("<" in d for d in data), "a chart's JSON holds '<'"
    return CHART_DATA.sub("", html)


def chart_specs(html: str) -> list[dict]:
    """The figures (plotly's data and layout) of a page's charts, as its script
    reads them, each checked against plotly.js's schema (the plotly package of
    the same plotly.js version: an attribute plotly.js does not know fails here,
    where the browser would silently ignore it)."""
    import json

    import plotly.graph_objects as go

    specs = [json.loads(d) for d in CHART_DATA.findall(html)]
    for spec in specs:
        go.Figure(spec)  # ValueError naming the attribute
    return specs


def run_cli(*args: str, cwd: Path | None = None, check: bool = False, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m dawnpipe ARGS`` for real; returns the completed process (text)."""
    proc = subprocess.run([sys.executable, "-m", "dawnpipe", *args], cwd=cwd, env=env or tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dawnpipe {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def train_command(entry, data, out, *, seed=0, settings: list[str] | tuple[str, ...] = (), **values) -> list[str]:
    """``train`` and its arguments for one run of ``entry`` on ``data`` into the
    directory ``out``, written from the stage table as the pipeline writes them
    (dawnpipe.pipeline.stages.command_words): the train stage's outputs under
    their names in ``out``; ``settings``, the run's settings words
    (dawnpipe.pipeline.values.train_settings); ``values``, any other word of
    the command by its name (``work_dir``, ``threads``, ``telemetry_interval``);
    the CPU peak probe as short as config/test.yaml has it, unless given."""
    from dawnpipe.pipeline.stages import TRAIN, command_words, outputs_in

    values = {"cpu_peak_probe": probe_seconds_of_test_config(), **values}
    return command_words(TRAIN, {"entry_file": entry, "seed": seed, "data": data, **outputs_in(TRAIN, out), "settings": list(settings), **values})


@functools.cache
def probe_seconds_of_test_config() -> float:
    """config/test.yaml's telemetry.cpu_peak_probe_s: each measurement of a CPU run's peak probe."""
    return resolved_config(ROOT, "config/test.yaml")["telemetry"]["cpu_peak_probe_s"]


def run_snakemake(workdir: Path, *args: str, timeout: float = 1200, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["snakemake", *args], cwd=workdir, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


def job_resources(output: str, rule: str) -> list[str]:
    """The `resources:` line Snakemake printed for each job of ``rule`` in ``output``."""
    blocks = re.findall(rf"^(?:local)?rule {rule}:\n((?:[ \t]+\S.*\n)+)", output, re.M)
    return [m.group(1) for block in blocks if (m := re.search(r"^\s+resources: (.*)$", block, re.M))]


def resolved_config(project: Path, name: str) -> dict:
    """A config of ``project`` as the pipeline reads it: laid over its
    config/config.yaml (configs state only what they change). Writing the
    result to a file gives a complete config, itself a valid layer."""
    from dawnpipe.pipeline.config import resolve

    return resolve([] if name == "config/config.yaml" else [name], root=project).values


def copy_project(dest: Path) -> Path:
    """The project's parts under ``dest``, with the bytecode `make test` compiled
    (copy2 keeps the times Python checks it against, so a module edited since
    is compiled again, and the bytecode of the rest saves each stage process
    compiling it)."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("*.egg-info"))
        elif src.exists():
            shutil.copy2(src, dest / part)
    return dest


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (the shared data beside the repository)")
    return SHARED


@pytest.fixture(scope="session")
def dawnbench_entries(shared_dir) -> Path:
    path = shared_dir / "dawnbench-entries"
    if not path.is_dir():
        pytest.skip(f"{path} is absent (real DAWNBench submissions)")
    return path


@pytest.fixture(scope="session")
def fashion_mnist_source(tmp_path_factory) -> str:
    """Where the real Fashion-MNIST comes from: the Debian package's directory
    (`make setup` installs it where apt is usable), else the official files,
    downloaded once by the fetch stage. Neither: the tests that train on it
    fail, saying why; they are never skipped silently."""
    local = Path("/usr/share/datasets/fashion-mnist")
    if local.is_dir():
        return str(local)
    from dawnpipe.data.fetch import fetch

    try:
        return str(fetch("fashion-mnist", tmp_path_factory.mktemp("fashion-mnist") / "raw"))
    except Exception as e:
        pytest.fail(
            f"no Fashion-MNIST: the Debian package dataset-fashion-mnist is not installed "
            f"(`make setup` installs it as root or with sudo where apt is usable) and the official "
            f"download failed: {e}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def prepared_fashion_mnist(tmp_path_factory, fashion_mnist_source) -> Path:
    """The real Fashion-MNIST fetched and prepared once per session (read-only: copy before changing it)."""
    from tiny_training import prepare_fashion_mnist

    return prepare_fashion_mnist(fashion_mnist_source, tmp_path_factory.mktemp("fashion-mnist-prepared"))


@pytest.fixture(scope="session")
def test_workflow(request, tmp_path_factory, fashion_mnist_source) -> Path:
    """A copy of the project where config/test.yaml has run to the leaderboard.
    Where the session also runs it under Slurm (tests/test_slurm.py), that run
    starts first and goes on beside this one (tests/slurm_runs.py)."""
    if any("slurm_runs" in item.fixturenames for item in request.session.items):
        request.getfixturevalue("slurm_runs")
    work = copy_project(tmp_path_factory.mktemp("wf"))
    run_snakemake(work, "results/leaderboard.html", "--configfile", "config/test.yaml")
    return work


# `make test` runs the suite on two pytest-xdist workers (-n 2 --dist loadscope
# --no-loadscope-reorder): the end-to-end tests spend much of their time waiting
# (Slurm's status polls, subprocess start-up, DVC's git calls), which the other
# worker fills. A scope is a test module, so that a module's fixtures (most of
# them real training runs) are built once, on one worker; the modules that use
# the session's test_workflow share one scope, so that it too is built once and
# test_pipeline's temporary edits of it never race another reader. (xdist's own
# --dist loadgroup marks do not group under pytest 9: they rename Node._nodeid,
# which pytest 9 no longer reads.)
SHARED_RUN_GROUP = "test_workflow"
SHARED_RUN_MODULES = frozenset(
    f"tests/{name}.py" for name in ("test_infer_workflow", "test_leaderboard", "test_page_browser", "test_pipeline", "test_slurm", "test_telemetry_workflow")
)


def _scope(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return SHARED_RUN_GROUP if module in SHARED_RUN_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModuleScopes(config, log)


# In the shared run's scope, the tests that read the Slurm runs come last:
# those runs go on in the background from the moment test_workflow starts
# (tests/slurm_runs.py), while the scope's other tests run.
LAST_IN_SHARED_RUN = "tests/test_slurm.py"


def pytest_collection_modifyitems(config, items):
    """The order in which the scopes are handed out (--no-loadscope-reorder:
    as listed here, each to the first worker with little left to do). The
    shared run's scope (the Slurm module among it) is the longest, so it comes
    first; then the modules with slow tests (end-to-end runs), then the rest,
    each in file order: the many short modules at the end keep both workers
    busy until the suite's last minute. Every module that uses test_workflow
    must be in SHARED_RUN_MODULES (the scheduler sees only test ids, not
    fixtures)."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    for module, tests in modules.items():
        if module not in SHARED_RUN_MODULES and any("test_workflow" in item.fixturenames for item in tests):
            raise pytest.UsageError(f"{module} uses test_workflow: add it to SHARED_RUN_MODULES in tests/conftest.py")
    slow = {module for module, tests in modules.items() if any(item.get_closest_marker("slow") for item in tests)}

    def order(item) -> tuple[bool, bool, bool]:
        module = item.nodeid.split("::", 1)[0]
        return _scope(item.nodeid) != SHARED_RUN_GROUP, module not in slow, module == LAST_IN_SHARED_RUN

    items.sort(key=order)  # stable: the file order within each
