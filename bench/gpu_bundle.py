"""What bench/gpu_check.sh carries to the device machine, made here, and
installed there: the wheels of the packages dawnpipe's stages import that the
machine's image lacks, and Fashion-MNIST's raw files.

    bench/gpu_check.sh prepare            # here: .gpu-bundle/{wheels,fashion-mnist,commit.json}, size checked

The device machine reaches no registry, and its image holds PyTorch with CUDA,
pandas, pyarrow, onnxruntime and nvidia-ml-py but not jsonschema, pandera,
pydantic or mlperf-logging (/work/.library/device/KINDS.md, "Python packages
already there"; the stages' imports were traced on a tiny run). ``WHEELS``
names them; their versions are this project's pins (constraints.txt), for the
machine's Python (3.12, x86-64 manylinux), downloaded with pip the way the
device tool's README says. There, a carried wheel is installed (into a folder
put on PYTHONPATH) only where the image has no such package or an older one.

Everything that travels, the working tree (tracked and untracked files that
git does not ignore) and the bundle, must stay under the device tool's 64 MiB:
``travel_size`` counts it and ``prepare`` fails when it is over.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / ".gpu-bundle"
DEVICE_LIMIT_BYTES = 64 * 2**20  # the device tool's limit on what travels (tree + carried paths)
DEVICE_PYTHON = "3.12"  # the image's python3 (KINDS.md: Python 3.12.3)
# pip's platform tags for the device's x86-64 Linux (the device README's list)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# Imported by fetch/prepare/train/extract/flops/infer/utilization and absent from the image, with what they need
# that is absent too; typing-extensions is there, but pydantic needs a recent one: installed only if the image's is older.
WHEELS = (
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "pandera",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typeguard",
    "mlperf-logging",
    "typing-extensions",
)
DATA_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DATA_SOURCES = (Path("/usr/share/datasets/fashion-mnist"), ROOT / "data" / "raw" / "fashion-mnist")


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


def wheel_list(constraints: Path = ROOT / "constraints.txt") -> list[str]:
    """``name==version`` of every wheel to carry."""
    pinned = pins(constraints)
    missing = [w for w in WHEELS if normalize(w) not in pinned]
    if missing:
        raise SystemExit(f"gpu bundle: {constraints} pins no version of {', '.join(missing)}")
    return [f"{w}=={pinned[normalize(w)]}" for w in WHEELS]


def wheel_name_version(path: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return normalize(name), version


def download_wheels(dest: Path, python: str = sys.executable) -> list[Path]:
    """The bundle's wheels in ``dest``, downloaded where missing; wheels of other versions or packages removed."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {normalize(s.split("==")[0]): s.split("==")[1] for s in wheel_list()}
    for old in dest.glob("*.whl"):
        name, version = wheel_name_version(old)
        if wanted.get(name) != version:
            old.unlink()
    have = {wheel_name_version(w)[0] for w in dest.glob("*.whl")}
    needed = [f"{n}=={v}" for n, v in wanted.items() if n not in have]
    if needed:
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        command = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", DEVICE_PYTHON]
        command += ["--implementation", "cp", *platforms, "-d", str(dest), *needed]
        print(f"gpu bundle: pip download {' '.join(needed)}", flush=True)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join(line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING"))[-600:]
            raise SystemExit(f"gpu bundle: pip download failed ({done.returncode}): {tail}")
    wheels = sorted(dest.glob("*.whl"))
    got = {wheel_name_version(w)[0] for w in wheels}
    if got != set(wanted):
        raise SystemExit(f"gpu bundle: {dest} lacks wheels of {', '.join(sorted(set(wanted) - got))}")
    return wheels


def copy_data(dest: Path, sources: tuple[Path, ...] = DATA_SOURCES) -> Path:
    """Fashion-MNIST's four raw files in ``dest`` (copied, not linked: a link travels as a link)."""
    source = next((s for s in sources if all((s / f).is_file() for f in DATA_FILES)), None)
    if source is None:
        raise SystemExit(
            f"gpu bundle: no Fashion-MNIST raw files in {' or '.join(map(str, sources))} "
            "(install the Debian package dataset-fashion-mnist, or run `snakemake --cores all data/raw/fashion-mnist`)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for f in DATA_FILES:
        if not (dest / f).is_file() or (dest / f).stat().st_size != (source / f).stat().st_size:
            shutil.copyfile(source / f, dest / f)
    return source


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels: tracked files and untracked files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, check=True).stdout
    total = 0
    for name in filter(None, listed.decode("utf-8", "surrogateescape").split("\0")):
        path = root / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def travel_size(bundle: Path, root: Path = ROOT) -> dict[str, int]:
    tree, carried = tree_bytes(root), dir_bytes(bundle)
    return {"tree_bytes": tree, "bundle_bytes": carried, "total_bytes": tree + carried, "limit_bytes": DEVICE_LIMIT_BYTES}


def prepare(bundle: Path = BUNDLE, data_from: Path | None = None) -> dict[str, Any]:
    """Make the bundle (wheels, data, the commit it was made at) and check what travels fits."""
    wheels = download_wheels(bundle / "wheels")
    source = copy_data(bundle / "fashion-mnist", (data_from,) if data_from else DATA_SOURCES)
    from dawnpipe.runinfo import git_state

    state = {**git_state(ROOT), "wheels": [w.name for w in wheels], "data_from": str(source)}
    (bundle / "commit.json").write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    size = travel_size(bundle)
    mib = {k: v / 2**20 for k, v in size.items()}
    print(
        f"gpu bundle: {bundle}: {len(wheels)} wheels, Fashion-MNIST from {source}; travels {mib['total_bytes']:.1f} MiB "
        f"(working tree {mib['tree_bytes']:.1f} + bundle {mib['bundle_bytes']:.1f}) of the device's {mib['limit_bytes']:.0f} MiB",
        flush=True,
    )
    if size["total_bytes"] > DEVICE_LIMIT_BYTES:
        raise SystemExit(f"gpu bundle: {mib['total_bytes']:.1f} MiB would travel, over the device tool's {mib['limit_bytes']:.0f} MiB")
    return {**state, **size}


# ---------------------------------------------------------------- on the device machine
def installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def older(have: str, carried: str) -> bool:
    try:
        from packaging.version import Version

        return Version(have) < Version(carried)
    except Exception:  # no packaging, or a version it cannot read: only a different string counts as not the same
        return have != carried


def install_plan(wheels: Path) -> list[dict[str, Any]]:
    """Per carried wheel: what the running interpreter has, and whether to install it (absent, or older)."""
    plan = []
    for wheel in sorted(wheels.glob("*.whl")):
        name, version = wheel_name_version(wheel)
        have = installed_version(name)
        plan.append({"wheel": wheel.name, "package": name, "carried": version, "installed": have, "install": have is None or older(have, version)})
    return plan


def install(wheels: Path, site: Path, plan: list[dict[str, Any]]) -> subprocess.CompletedProcess | None:
    """pip install the planned wheels into ``site`` (to be put on PYTHONPATH), offline; None when none is needed."""
    chosen = [str(wheels / p["wheel"]) for p in plan if p["install"]]
    if not chosen:
        return None
    site.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade"]
    return subprocess.run([*command, "--target", str(site), *chosen], capture_output=True, text=True)


def bundle_commit(bundle: Path) -> dict[str, Any]:
    """The commit the bundle was prepared at (the device's copy of the tree has no .git)."""
    try:
        return json.loads((bundle / "commit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"commit": None, "dirty": None, "reason": f"no readable {bundle / 'commit.json'} (run bench/gpu_check.sh prepare)"}
