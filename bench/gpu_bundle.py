"""The offline bundle of the GPU check: made on a machine with network for a
GPU node without one, and installed from on the node by the check itself.

    bash bench/gpu_check.sh prepare [--bundle DIR] [--node-packages FILE] [--python-version X.Y] [--max-mib N]

What it holds (DIR, default .gpu-bundle/, git-ignored):

- ``wheels/``: the packages the check runs with (``REQUIREMENTS``: the lines
  of requirements.txt it needs, and everything they require for the node's
  Python and platform, read from the installed packages' metadata) at
  constraints.txt's pins, as wheels for the node's Python (``--python-version``,
  default this interpreter's) on x86-64 (or ``--arch``) Linux with glibc
  ``--glibc`` or newer; a package published only as source is built into a
  pure-Python wheel here;
- ``fashion-mnist/``: the four raw files of Fashion-MNIST;
- ``bundle.json``: the commit and whether the tree had uncommitted changes,
  what is in the bundle, and what it leaves out and why.

What it leaves out, each with its reason in bundle.json and on the terminal:

- *present on the node*: ``--node-packages FILE`` (``python3 -m pip freeze``
  run on the node) lists the package at the pin or newer. The CUDA stack
  (torch, torchvision, triton, nvidia-*, cuda-*) is left out whenever the node
  has a torch at all: a GPU node's own torch is built for its driver, the
  check runs with it and records which;
- *over the size limit* (``--max-mib N``; without it, no limit): the data
  first, then the wheels from the smallest package (by its size installed
  here) up, each kept while the bundle stays within N MiB. A package that
  takes more than four times the space left once installed here is not
  downloaded at all (a wheel is compressed, rarely by more than that).

On the node, the check installs a wheel of the bundle (into DIR/site, put on
PYTHONPATH) only where the interpreter has no such package or an older one,
and never a package of the CUDA stack where the node has a torch.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / ".gpu-bundle"
# What the check runs: requirements.txt but the test, lint, TensorFlow, DVC,
# Slurm and browser packages.
NOT_NEEDED = {
    "tensorflow-cpu",
    "dvc",
    "pytest",
    "hypothesis",
    "pytest-xdist",
    "ruff",
    "import-linter",
    "playwright",
    "plotly",
    "snakemake-executor-plugin-slurm",
    "pillow",
}
CUDA_STACK = re.compile(r"^(torch|torchvision|triton|nvidia-.*|cuda-.*)$")
# Needed by one step only: torchvision by the program entry torch-fmnist (it reads its data with it), and it
# must be built for the node's own torch, which the bundle leaves alone; the probe reports it missing apart
# (the torch-fmnist step then fails, naming it), not as a failure of the whole check.
OPTIONAL = {"torchvision"}
DATA_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DATA_SOURCES = (Path("/usr/share/datasets/fashion-mnist"), ROOT / "data" / "raw" / "fashion-mnist")
FREEZE_OMITS = {"pip", "setuptools", "wheel", "distribute"}  # `pip freeze` (and so constraints.txt) never lists these
COMPRESSION = 4.0  # a package installed is at most this many times its wheel (for skipping a download)
MIB = 2**20


class BundleError(Exception):
    """One line for the terminal: what is wrong and where."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(constraints: Path = ROOT / "constraints.txt") -> dict[str, str]:
    """name -> version of every ``name==version`` line of constraints.txt (the project's resolved set)."""
    found = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            found[normalize(m.group(1))] = m.group(2)
    return found


def requirements(path: Path = ROOT / "requirements.txt") -> list[str]:
    """The names of requirements.txt's lines the check needs."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)", line)
        if m and not line.lstrip().startswith("#") and normalize(m.group(1)) not in NOT_NEEDED:
            names.append(normalize(m.group(1)))
    return names


def marker_environment(python_version: str, arch: str) -> dict[str, str]:
    """The PEP 508 marker values of the node: CPython ``python_version`` on Linux ``arch``."""
    return {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": arch,
        "os_name": "posix",
    }


def closure(roots: list[str], python_version: str, arch: str) -> dict[str, list[str]]:
    """Every package the ``roots`` need on the node (name -> the packages that pull it in),
    read from the metadata of the packages installed here (constraints.txt's set)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    env = marker_environment(python_version, arch)
    needed: dict[str, list[str]] = {}
    todo: list[tuple[str, frozenset[str], str]] = [(r, frozenset(), "requirements.txt") for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras, by = todo.pop()
        needed.setdefault(name, [])
        if by not in needed[name]:
            needed[name].append(by)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            raise BundleError(f"gpu bundle: {name} (needed by {by}) is not installed here: run `make setup` first") from None
        for text in requires:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras)):
                todo.append((normalize(req.name), frozenset(req.extras), name))
    return needed


def installed_bytes(name: str) -> int | None:
    """What the package takes installed here (its RECORD's files), or None."""
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    total = 0
    for f in dist.files or []:
        if f.size is not None:
            total += int(f.size)
        else:
            try:
                total += dist.locate_file(f).stat().st_size
            except OSError:
                pass
    return total


def read_node_packages(path: Path) -> dict[str, str | None]:
    """name -> version of a ``pip freeze`` (``name==version``; ``name @ url``: version unknown)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise BundleError(f"gpu bundle: {path}: cannot read: {e.strerror or e}") from None
    found: dict[str, str | None] = {}
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        if m := re.match(r"^([A-Za-z0-9_.\-]+)\s*===?\s*(\S+)$", line):
            found[normalize(m.group(1))] = m.group(2)
        elif m := re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*@\s*\S+$", line):
            found[normalize(m.group(1))] = None
        else:
            raise BundleError(f"gpu bundle: {path}: line {number}: not 'name==version' or 'name @ url' (the output of `python3 -m pip freeze`)")
    return found


def older(have: str | None, wanted: str) -> bool:
    """Whether ``have`` is an older version than ``wanted`` (an unknown version is not)."""
    if have is None:
        return False
    try:
        from packaging.version import Version

        return Version(have) < Version(wanted)
    except Exception:  # a version packaging cannot read: only a different string counts as not the same
        return have != wanted


def plan(
    python_version: str, arch: str, node: dict[str, str | None] | None, constraints: Path = ROOT / "constraints.txt"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(what to bundle, what to leave out) before the size limit: name, version, who needs it, size installed here."""
    pinned = pins(constraints)
    needed = closure(requirements(), python_version, arch)
    node_torch = (node or {}).get("torch", "absent") if node is not None else "absent"
    take, leave = [], []
    for name in sorted(needed):
        if name not in pinned and name in FREEZE_OMITS and installed_version(name):
            pinned[name] = installed_version(name)  # pip freeze leaves it out of constraints.txt: the version installed beside the pins
        if name not in pinned:
            raise BundleError(f"gpu bundle: {constraints}: no pin of {name} (needed by {', '.join(needed[name])}): run `make lock`")
        row = {"package": name, "version": pinned[name], "needed_by": needed[name], "installed_bytes_here": installed_bytes(name)}
        if node is not None and name in node and not older(node[name], pinned[name]):
            leave.append({**row, "reason": f"present on the node ({name} {node[name] or '(version not given)'})"})
        elif node_torch != "absent" and CUDA_STACK.match(name):
            shown = f"torch {node_torch}" if node_torch else "a torch"
            leave.append({**row, "reason": f"present on the node: its own CUDA stack ({shown}) is kept, not replaced by PyPI's build"})
        else:
            take.append(row)
    return take, leave


def platform_tags(glibc: str, arch: str) -> list[str]:
    """pip's --platform values for Linux ``arch`` with glibc ``glibc`` or newer (pip does not expand them itself)."""
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{name}_{arch}" for m, name in legacy.items() if m <= minor]


def wheel_name_version(path: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return normalize(name), version


def pip_download(specs: list[str], dest: Path, python_version: str, platforms: list[str], log: list[str]) -> None:
    """Wheels of ``specs`` for the node (no dependencies: the list is the closure already)."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python_version]
    command += ["--implementation", "cp", *(w for p in platforms for w in ("--platform", p)), "-d", str(dest), *specs]
    done = subprocess.run(command, capture_output=True, text=True)
    log.append(done.stdout + done.stderr)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)


def fetch_wheel(row: dict[str, Any], dest: Path, python_version: str, platforms: list[str], log: list[str]) -> Path:
    """The wheel of one package in ``dest``: downloaded for the node, or built here when it is published as source only."""
    spec = f"{row['package']}=={row['version']}"
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        try:
            pip_download([spec], Path(tmp), python_version, platforms, log)
        except subprocess.CalledProcessError as e:
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, spec], capture_output=True, text=True)
            log.append(built.stdout + built.stderr)
            pure = [w for w in Path(tmp).glob("*.whl") if w.name.endswith("-none-any.whl")]
            if built.returncode != 0 or not pure:
                tail = " | ".join(x for x in e.stderr.splitlines() if x.strip() and not x.startswith("WARNING"))[-400:]
                raise BundleError(f"gpu bundle: no wheel of {spec} for Python {python_version} on {platforms[0]}: {tail}") from None
        (wheel,) = Path(tmp).glob("*.whl")
        target = dest / wheel.name
        shutil.move(wheel, target)
    return target


def copy_data(dest: Path, sources: tuple[Path, ...] = DATA_SOURCES) -> Path:
    """Fashion-MNIST's four raw files in ``dest`` (copied, not linked); where they came from."""
    source = next((s for s in sources if all((s / f).is_file() for f in DATA_FILES)), None)
    if source is None:
        raise BundleError(
            f"gpu bundle: no Fashion-MNIST raw files in {' or '.join(map(str, sources))} "
            "(install the Debian package dataset-fashion-mnist, run `snakemake --cores all data/raw/fashion-mnist`, or give --data-from DIR)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for f in DATA_FILES:
        if not (dest / f).is_file() or (dest / f).stat().st_size != (source / f).stat().st_size:
            shutil.copyfile(source / f, dest / f)
    return source


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def prepare(
    bundle: Path = BUNDLE,
    *,
    data_from: Path | None = None,
    node_packages: Path | None = None,
    python_version: str | None = None,
    arch: str = "x86_64",
    glibc: str = "2.28",
    max_mib: float | None = None,
) -> dict[str, Any]:
    """Make the bundle; its bundle.json (also returned)."""
    from dawnpipe.fileio import write_json
    from dawnpipe.runinfo import git_state

    python_version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    if not re.fullmatch(r"3\.\d+", python_version):
        raise BundleError(f"gpu bundle: --python-version {python_version!r}: expected 3.N, the node's `python3 -c 'import sys; print(sys.version[:4])'`")
    if not re.fullmatch(r"2\.\d+", glibc):
        raise BundleError(f"gpu bundle: --glibc {glibc!r}: expected 2.N, the node's `ldd --version`")
    if max_mib is not None and max_mib <= 0:
        raise BundleError(f"gpu bundle: --max-mib {max_mib:g}: must be positive")
    node = read_node_packages(node_packages) if node_packages else None
    take, leave = plan(python_version, arch, node)
    platforms = platform_tags(glibc, arch)
    bundle.mkdir(parents=True, exist_ok=True)
    source = copy_data(bundle / "fashion-mnist", (data_from,) if data_from else DATA_SOURCES)
    limit = max_mib * MIB if max_mib is not None else None
    used = dir_bytes(bundle / "fashion-mnist")
    if limit is not None and used > limit:
        raise BundleError(f"gpu bundle: --max-mib {max_mib:g}: Fashion-MNIST's raw files alone take {used / MIB:.1f} MiB")
    wheels_dir = bundle / "wheels"
    wheels_dir.mkdir(exist_ok=True)
    wanted = {(r["package"], r["version"]) for r in take}
    for old in wheels_dir.glob("*.whl"):  # wheels of another plan: gone, so what is there is what bundle.json says
        if wheel_name_version(old) not in wanted:
            old.unlink()
    have = {wheel_name_version(w): w for w in wheels_dir.glob("*.whl")}
    log: list[str] = []
    ordered = sorted(take, key=lambda r: (r["installed_bytes_here"] or 0, r["package"]))
    if limit is None:
        first = ordered
    else:  # the smallest, whose installed sizes together fit in what is left: their wheels fit too
        first, room = [], limit - used
        for r in ordered:
            if r["installed_bytes_here"] is None or r["installed_bytes_here"] > room:
                break
            first.append(r)
            room -= r["installed_bytes_here"]
    missing = [f"{r['package']}=={r['version']}" for r in first if (r["package"], r["version"]) not in have]
    if missing:  # one pip call for them (a source-only one then alone, below)
        print(f"gpu bundle: downloading {len(missing)} wheels for Python {python_version} ({platforms[0]})", flush=True)
        for _ in range(5):  # pip stops at a package without a wheel for the node: again without it (built below)
            try:
                pip_download(missing, wheels_dir, python_version, platforms, log)
                break
            except subprocess.CalledProcessError as e:
                no_wheel = {normalize(n) for n in re.findall(r"(?:distribution found for|satisfies the requirement) ([A-Za-z0-9_.\-]+)==", e.stderr)}
                rest = [s for s in missing if normalize(s.split("==")[0]) not in no_wheel]
                if not no_wheel or rest == missing:
                    break  # the one-by-one pass below names what failed
                missing = rest
        have = {wheel_name_version(w): w for w in wheels_dir.glob("*.whl")}
    kept = []
    for row in ordered:
        key = (row["package"], row["version"])
        left = None if limit is None else limit - used
        est = row["installed_bytes_here"]
        if key not in have and left is not None and est is not None and est / COMPRESSION > left:
            leave.append({**row, "reason": f"over the size limit: {est / MIB:.1f} MiB installed here, {left / MIB:.1f} MiB left of --max-mib {max_mib:g}"})
            continue
        wheel = have.get(key)
        if wheel is None:
            print(f"gpu bundle: downloading {row['package']}=={row['version']}", flush=True)
            wheel = fetch_wheel(row, wheels_dir, python_version, platforms, log)
        size = wheel.stat().st_size
        if left is not None and size > left:
            wheel.unlink()
            leave.append({**row, "reason": f"over the size limit: its wheel is {size / MIB:.1f} MiB, {left / MIB:.1f} MiB left of --max-mib {max_mib:g}"})
            continue
        used += size
        kept.append({**row, "wheel": wheel.name, "bytes": size})
    state = git_state(ROOT)
    doc = {
        "name": "gpu_bundle",
        "commit": state.get("commit"),
        "dirty": state.get("dirty"),
        "made": _now(),
        "python_version": python_version,
        "platforms": platforms,
        "requirements": requirements(),
        "node_packages": str(node_packages) if node_packages else None,
        "max_mib": max_mib,
        "wheels": sorted(kept, key=lambda r: r["package"]),
        "left_out": sorted(leave, key=lambda r: r["package"]),
        "data": {"task": "fashion-mnist", "from": str(source), "files": list(DATA_FILES), "bytes": dir_bytes(bundle / "fashion-mnist")},
        "total_bytes": used,
    }
    write_json(bundle / "bundle.json", doc)
    (bundle / "commit.json").unlink(missing_ok=True)  # the bundles of older commits kept the commit apart
    print(describe(doc, bundle), flush=True)
    return doc


def describe(doc: dict[str, Any], bundle: Path) -> str:
    """What prepare made, for the terminal: what is in it and what is left out, and why."""
    lines = [
        f"gpu bundle: {bundle}: {len(doc['wheels'])} wheels for Python {doc['python_version']} ({doc['platforms'][0]}), "
        f"Fashion-MNIST from {doc['data']['from']}, commit {str(doc['commit'])[:12]}{' with uncommitted changes' if doc['dirty'] else ''}: "
        f"{doc['total_bytes'] / MIB:.1f} MiB" + (f" of --max-mib {doc['max_mib']:g}" if doc["max_mib"] is not None else " (no size limit)")
    ]
    present = [r for r in doc["left_out"] if r["reason"].startswith("present on the node (")]
    other = [r for r in doc["left_out"] if r not in present]
    if present:
        lines.append(f"left out, present on the node at the pin or newer ({len(present)}): " + ", ".join(r["package"] for r in present))
    lines += [f"left out: {r['package']} {r['version']}: {r['reason']}" for r in other]
    lines.append(f"(what was left out, and why, is in {bundle / 'bundle.json'})")
    return "\n".join(lines)


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------- on the node
def installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def install_plan(wheels: Path) -> list[dict[str, Any]]:
    """Per wheel of the bundle: what the running interpreter has, and whether to install it
    (absent or older; never a package of the CUDA stack where the interpreter has a torch)."""
    node_torch = installed_version("torch")
    out = []
    for wheel in sorted(wheels.glob("*.whl")):
        name, version = wheel_name_version(wheel)
        have = installed_version(name)
        if node_torch is not None and CUDA_STACK.match(name):
            install, why = False, f"the node's own torch {node_torch} is kept"
        elif have is None:
            install, why = True, "absent"
        elif older(have, version):
            install, why = True, f"older ({have})"
        else:
            install, why = False, f"present ({have})"
        out.append({"wheel": wheel.name, "package": name, "carried": version, "installed": have, "install": install, "why": why})
    return out


def install(wheels: Path, site: Path, planned: list[dict[str, Any]]) -> subprocess.CompletedProcess | None:
    """pip install the planned wheels into ``site`` (put on PYTHONPATH), offline; None when none is needed."""
    chosen = [str(wheels / p["wheel"]) for p in planned if p["install"]]
    if not chosen:
        return None
    site.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade"]
    return subprocess.run([*command, "--target", str(site), *chosen], capture_output=True, text=True)


def read_bundle(bundle: Path) -> dict[str, Any] | None:
    """bundle.json, or None when the bundle has none (or it cannot be read)."""
    try:
        doc = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("name") == "gpu_bundle" else None
