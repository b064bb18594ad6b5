"""Data-parallel training with torch.distributed (DDP): launching the ranks,
and the few collective steps the trainer needs.

An entry's ``distributed: {nodes, processes_per_node}`` asks for several
processes: one per GPU (NCCL) or per share of a node's CPU cores (gloo).
``dawnpipe train`` is then first a *launcher*: it starts the same command line
once per rank and waits for it,

- inside a Slurm allocation (``SLURM_JOB_ID`` set; the train rule asks the
  Slurm plugin for the tasks and nodes) with ``srun``, rank 0's address and a
  free port passed down in ``MASTER_ADDR``/``MASTER_PORT``;
- elsewhere with ``torchrun --standalone`` (``python -m torch.distributed.run``),
  which only covers one node.

A process knows it is a rank from its environment (torchrun's ``RANK``...,
or srun's ``SLURM_STEP_ID``/``SLURM_PROCID`` with ``SLURM_NTASKS`` equal to the
world size), so ``srun python -m dawnpipe train ...`` in a hand-written batch
script works too.

``DAWNPIPE_FORCE_DDP=1`` in the environment takes the data-parallel path with
one process too: the launcher, the process group (NCCL on a GPU) and DDP,
at world size 1. It changes no result; it is how the DDP and NCCL code is
exercised on a machine with one GPU (bench/gpu_check.sh).

The global batch of an entry (``hyperparameters.batch_size``) is split across
the ranks: every rank draws the same permutation and the same augmentation
choices for the whole global batch (one generator, seeded alike), and trains
on its contiguous share. Each rank's loss is weighted by its share so that DDP's
gradient average equals the gradient of the global batch mean: one process or
eight see the same items with the same augmentation, and differ only by batch
norm statistics (per rank, as in standard DDP) and floating-point order.

This module imports torch lazily: the launcher path never needs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError

FORCE_DDP = "DAWNPIPE_FORCE_DDP"  # "1": data-parallel machinery even for one process (see the module docstring)


def ddp_forced(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(FORCE_DDP) == "1"


@dataclass(frozen=True)
class Layout:
    """Processes an entry asks for."""

    nodes: int = 1
    processes_per_node: int = 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    @property
    def data_parallel(self) -> bool:
        """Whether the run is started as ranks of a process group: several processes, or one with DAWNPIPE_FORCE_DDP=1."""
        return self.world_size > 1 or ddp_forced()

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Layout:
        d = entry.get("distributed") or {}
        return cls(int(d.get("nodes", 1)), int(d.get("processes_per_node", 1)))


@dataclass(frozen=True)
class Rank:
    """This process's place in the job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    launcher: str = "none"  # none | torchrun | srun
    backend: str | None = None  # gloo | nccl, once the process group exists

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """A rank of a process group (a launcher started it), also when it is the only one."""
        return self.world_size > 1 or self.launcher != "none"


SINGLE = Rank()


def hardware_tag(price_tag: str, layout: Layout) -> str:
    """The hardware as the leaderboard shows it: the entry's (per-node, priced)
    tag, and the layout when there is more than one process."""
    if layout.world_size == 1:
        return price_tag
    nodes = f"{layout.nodes} x " if layout.nodes > 1 else ""
    return f"{nodes}{price_tag} ({layout.world_size} processes)"


# ---------------------------------------------------------------- who am I


def rank_from_env(env: Mapping[str, str], world_size: int) -> Rank | None:
    """This process's rank if a launcher started it, else None (it must launch)."""
    if "RANK" in env and "WORLD_SIZE" in env and "LOCAL_RANK" in env:  # torchrun
        got = int(env["WORLD_SIZE"])
        if got != world_size:
            raise DawnpipeError(f"started by torchrun with WORLD_SIZE={got}, but the entry's distributed layout has {world_size} processes")
        return Rank(int(env["RANK"]), int(env["LOCAL_RANK"]), world_size, "torchrun")
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) == world_size and (world_size > 1 or ddp_forced(env)):
        return Rank(int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0")), world_size, "srun")
    return None


# ---------------------------------------------------------------- launching


def launch_command(
    layout: Layout, args: Sequence[str], env: Mapping[str, str], threads: int | None = None, ranks_dir: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """(command, extra environment) that runs ``python -m dawnpipe <args>`` once
    per rank; ``threads`` is each rank's CPU share (srun's --cpus-per-task).
    ``ranks_dir``: where each rank's stderr (and, under torchrun, the other
    ranks' stdout) is kept, so a failure is one line on the job's terminal and
    the whole story in files; rank 0's stdout (the progress lines) stays on
    the terminal."""
    module = [sys.executable, "-m", "dawnpipe", *args]
    if "SLURM_JOB_ID" in env:
        if shutil.which("srun") is None:
            raise DawnpipeError("SLURM_JOB_ID is set but srun is not on PATH; cannot start the ranks inside this allocation")
        # Every option explicit: the Slurm plugin strips the allocation's SLURM_*
        # variables (task counts, cpus per task) before running the rule's command.
        cmd = [
            "srun",
            f"--ntasks={layout.world_size}",
            f"--nodes={layout.nodes}",
            f"--ntasks-per-node={layout.processes_per_node}",
            *([f"--cpus-per-task={threads}"] if threads else []),
            "--kill-on-bad-exit=1",  # one rank failing ends the others instead of leaving them in a collective
            *([f"--error={ranks_dir}/rank%t.stderr"] if ranks_dir else []),
            *module,
        ]
        return cmd, {"MASTER_ADDR": first_node(env), "MASTER_PORT": str(free_port())}
    if layout.nodes > 1:
        raise DawnpipeError(
            f"distributed.nodes is {layout.nodes}: more than one node needs a Slurm allocation "
            "(run through `snakemake --profile profiles/slurm`, or inside sbatch/salloc)"
        )
    # every rank's stdout and stderr to files, rank 0's stdout also on the terminal
    keep = [f"--log-dir={ranks_dir}", "--redirects=3", "--tee=0:1"] if ranks_dir else []
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={layout.processes_per_node}", *keep, "-m", "dawnpipe", *args]
    # torchrun would otherwise set 1 (with a banner); the trainer sets --threads itself anyway
    return cmd, {"OMP_NUM_THREADS": str(threads or 1)}


def first_node(env: Mapping[str, str]) -> str:
    """Host of rank 0: the first node of the allocation (srun places ranks in
    node order). The node list comes from the environment or, where the Slurm
    plugin stripped it, from squeue; the batch step runs on that node, so its
    own host name is the fallback."""
    try:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist and env.get("SLURM_JOB_ID"):
            nodelist = _run(["squeue", "-h", "-j", env["SLURM_JOB_ID"], "-o", "%N"]).strip()
        if nodelist:
            hosts = _run(["scontrol", "show", "hostnames", nodelist]).split()
            if hosts:
                return hosts[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return socket.gethostname()


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_launcher(layout: Layout, args: Sequence[str], threads: int | None = None, *, label: str = "the run", ranks_dir: Path | None = None) -> int:
    """Start the ranks and wait for them; forward SIGTERM/SIGINT (Slurm's
    walltime signal, Ctrl-C) so they can save what they have and stop. A
    failure is one DawnpipeError naming the rank, ``label`` (entry and seed)
    and the rank's own one-line reason; torchrun's traceback and every rank's
    output stay in ``ranks_dir``, which the line names."""
    if ranks_dir is not None:
        shutil.rmtree(ranks_dir, ignore_errors=True)  # an earlier attempt's outputs would be read as this one's
        ranks_dir.mkdir(parents=True, exist_ok=True)
    cmd, extra = launch_command(layout, args, os.environ, threads, str(ranks_dir) if ranks_dir else None)
    env = {**os.environ, **extra}
    print(f"train: starting {layout.world_size} processes ({layout.nodes} node(s) x {layout.processes_per_node}): {' '.join(cmd[:8])} ...", flush=True)
    launcher_err = open(ranks_dir / "launcher.stderr", "wb") if ranks_dir is not None else None
    try:
        proc = subprocess.Popen(cmd, env=env, stderr=launcher_err)
    except BaseException:
        if launcher_err:
            launcher_err.close()
        raise
    previous = {}

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, forward)
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if launcher_err:
            launcher_err.close()
    if code != 0 and ranks_dir is not None:
        rank, reason = failed_rank(ranks_dir)
        how = f"rank {rank} of {label} failed: {reason}" if rank is not None else f"{label}: the ranks' launcher {cmd[0]} exited with code {code}"
        raise DawnpipeError(f"{how} (every rank's output: {ranks_dir})")
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's convention


def failed_rank(ranks_dir: Path) -> tuple[int | None, str]:
    """(rank, its reason) of the lowest rank whose stderr ends in dawnpipe's
    one-line error of its own (one that says another rank left it only where
    no rank has another), else the lowest rank with any stderr; (None, "") for none.
    torchrun keeps <dir>/<run>/attempt_<n>/<local rank>/stderr.log, srun
    <dir>/rank<N>.stderr."""
    found: dict[int, list[str]] = {}
    for path in ranks_dir.rglob("*"):
        if path.name == "stderr.log" and path.parent.name.isdigit():
            rank = int(path.parent.name)
        elif path.name.startswith("rank") and path.name.endswith(".stderr") and path.name[4:-7].isdigit():
            rank = int(path.name[4:-7])
        else:
            continue
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="backslashreplace").splitlines() if line.strip()]
        if lines:
            found[rank] = lines
    ours = {
        r: next(line for line in reversed(ls) if line.startswith("dawnpipe train:"))
        for r, ls in found.items()
        if any(line.startswith("dawnpipe train:") for line in ls)
    }
    if ours:
        first = {r: line for r, line in ours.items() if PEER_LEFT not in line} or ours  # a rank's own failure before a lost peer
        rank = min(first)
        return rank, first[rank].removeprefix("dawnpipe train:").strip().removeprefix("error:").strip()
    if found:
        rank = min(found)
        return rank, found[rank][-1][:300]
    return None, ""


# ---------------------------------------------------------------- inside a rank


def init(rank: Rank, device_type: str) -> Rank:
    """Join the process group: NCCL between GPUs, gloo between CPU processes."""
    if not rank.distributed:
        return rank
    import datetime as dt

    import torch.distributed as dist

    env = os.environ
    if rank.launcher == "srun" and "MASTER_ADDR" not in env:  # srun by hand, not through our launcher
        env["MASTER_ADDR"] = first_node(env)
        env["MASTER_PORT"] = str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    backend = "nccl" if device_type == "cuda" else "gloo"
    with peers_watched(rank):
        dist.init_process_group(backend, init_method="env://", rank=rank.rank, world_size=rank.world_size, timeout=dt.timedelta(minutes=30))
    return Rank(rank.rank, rank.local_rank, rank.world_size, rank.launcher, backend)


# A rank whose peer exits (its own bad input, a kill, out of memory) sees the
# process group's connection close under it, in whatever collective it is in,
# the group's forming included: that is not its own failure, nor a bug.
PEER_LEFT = "another rank left the process group"
_CONNECTION_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote process exited")


def _lost_peer(e: BaseException) -> bool:
    return any(words in str(e) for words in _CONNECTION_LOST)


@contextmanager
def peers_watched(rank: Rank) -> Iterator[None]:
    """A lost peer inside the block is one line saying so (the launcher names
    the rank that failed first by its own line), not a crash of this rank."""
    try:
        yield
    except RuntimeError as e:
        if not rank.distributed or not _lost_peer(e):
            raise
        said = str(e).strip().splitlines()[0][:300]  # not empty: it names the lost connection
        raise DawnpipeError(f"{PEER_LEFT} ({said}); the output of the rank that failed says why") from None


def cuda_device_index(rank: Rank, device_count: int) -> int:
    """GPU of this rank: its local rank among the node's GPUs, or the only one
    it sees when Slurm binds one GPU per task."""
    if device_count < 1:
        raise DawnpipeError("entry asks for device: cuda but no CUDA device is available")
    return rank.local_rank % device_count


def shard(n: int, rank: Rank) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous share of n items (the first n % world ranks get one more)."""
    base, extra = divmod(n, rank.world_size)
    lo = rank.rank * base + min(rank.rank, extra)
    return lo, lo + base + (1 if rank.rank < extra else 0)


def barrier(rank: Rank) -> None:
    if rank.distributed:
        import torch.distributed as dist

        dist.barrier()


def all_reduce_sum(tensor, rank: Rank):
    """Sum of ``tensor`` over the ranks (in place; returned for convenience)."""
    if rank.distributed:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, rank: Rank, device) -> bool:
    """True on every rank if it is True on one (e.g. a SIGTERM seen by one rank)."""
    if not rank.distributed:
        return flag
    import torch

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce_sum(t, rank).item() > 0)


def wrap(model, rank: Rank, device):
    """The model DDP trains (itself when there is one process)."""
    if not rank.distributed:
        return model
    import warnings

    from torch.nn.parallel import DistributedDataParallel

    # A 1-input-channel convolution's weight is both NCHW- and NHWC-contiguous;
    # autograd may pick the other strides for its gradient. Only a copy, not an error.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def unwrap(model):
    return getattr(model, "module", model)


def sync_buffers(model, rank: Rank) -> None:
    """Give every rank rank 0's buffers (batch norm running statistics, which
    each rank updates from its own share), so all evaluate, and rank 0 saves,
    one and the same model."""
    if not rank.distributed:
        return
    import torch.distributed as dist

    for buf in unwrap(model).buffers():
        dist.broadcast(buf, src=0)


def shutdown(rank: Rank) -> None:
    if rank.distributed and rank.backend:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def layout_record(layout: Layout, rank: Rank) -> dict[str, Any]:
    """What run.json says about the processes."""
    return {
        "nodes": layout.nodes,
        "processes_per_node": layout.processes_per_node,
        "world_size": layout.world_size,
        "backend": rank.backend,
        "launcher": rank.launcher,
    }
