"""Weights instead of a model file (program contract 2, docs/programs.md):
the entry's ``program.model``, checked, and the export worker that turns each
epoch's weights into a model file dawnpipe scores.

A contract 2 program may save its weights, ``torch.save(model.state_dict(),
f"{out}/epoch{N}.pt")`` or Keras ``model.save_weights(f"{out}/epoch{N}.weights.h5")``,
and name in its entry how to build the network and what its own evaluation
does to a stored item:

    program:
      contract: 2
      model:
        factory: "main:Net"          # module importable from the workdir : callable building the network
        kwargs: {}                   # the factory's keyword arguments (plain JSON values)
        preprocessing: {scale: 0.00392156862745098, mean: [0.2860], std: [0.3530], layout: NCHW}

The network is the program's code, so it is built in a separate process (the
export worker, ``dawnpipe.programs.export_worker``), never in the process that
holds the test set: started once per run in the program's workdir, given no
data, and without network where ``unshare --net`` works (as root, or with
unprivileged user namespaces); ``ExportWorker.network`` says which. It exports
ONNX (torch) or a SavedModel (Keras) that takes the items exactly as the
prepared arrays store them, with the preprocessing inside; what comes back is
read and checked as any program's model file (``models.read_model``), and
scored by the same code.

    worker = ExportWorker(entry["program"], workdir, framework_of(weights), item_shape=(28, 28), log=log)
    worker.start()                                       # DawnpipeError: the factory or the layout, named
    model = worker.export(out / "epoch1.pt", exported)   # models.ModelFile of exported/epoch1.onnx
    worker.close()

Every refusal is one line naming the entry field (``program.model.factory``,
``program.model.preprocessing.mean``) or the weights file; the worker's
tracebacks and whatever the program's code prints go to its log.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.programs import model_files as models

FRAMEWORKS = ("torch", "keras")
SUFFIXES = {".pt": "torch", ".weights.h5": "keras"}  # the weights file's name says its framework
FORMAT_OF = {"torch": models.ONNX, "keras": models.SAVEDMODEL}
MODEL_CONTRACT = 2  # the version of the program contract that has program.model
# Bounds on an answer, not expectations: a worker that hangs is stopped, a large network's slow export is not.
START_SECONDS = 600.0  # importing the framework and the program's module, building the network once
EXPORT_SECONDS = 600.0  # one epoch's weights loaded and exported
CLOSE_SECONDS = 10.0
MAX_ANSWER = 1 << 20  # bytes of one answer line; a worker that sends more is stopped
# How the worker is kept off the network, tried in turn: a new network namespace
# as root, then inside a user namespace of its own (unprivileged user namespaces).
SANDBOXES: tuple[tuple[str, ...], ...] = (("unshare", "--net"), ("unshare", "--user", "--map-root-user", "--net"))
_WEIGHTS_NAME = re.compile(r"^epoch([0-9]+)(\.pt|\.weights\.h5)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------------ names
def weights_names(epoch: int) -> tuple[str, str]:
    """The names a program's weights of ``epoch`` may have in {out}: torch's, Keras's."""
    return f"epoch{epoch}.pt", f"epoch{epoch}.weights.h5"


def framework_of(path: str | os.PathLike) -> str | None:
    """``torch`` for ``epoch<N>.pt``, ``keras`` for ``epoch<N>.weights.h5``, else None."""
    m = _WEIGHTS_NAME.match(Path(path).name)
    return SUFFIXES[m.group(2)] if m else None


def epoch_of(path: str | os.PathLike) -> int | None:
    """N of ``epoch<N>.pt`` or ``epoch<N>.weights.h5``, else None."""
    m = _WEIGHTS_NAME.match(Path(path).name)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ the entry
def _factory_ok(spec: Any) -> bool:
    import keyword

    if not isinstance(spec, str) or spec.count(":") != 1:
        return False
    module, attr = spec.split(":")
    parts = [*module.split("."), *attr.split(".")]
    return all(_IDENTIFIER.match(p) and not keyword.iskeyword(p) for p in parts)


def _not_json(value: Any, path: str) -> tuple[str, str] | None:
    """(field, what) of the first value in ``value`` that JSON cannot carry as it is, or None."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, "not a finite number")
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (bad := _not_json(item, f"{path}[{i}]")) is not None:
                return bad
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return path, f"a key {key!r} that is not a string"
            if (bad := _not_json(item, f"{path}.{key}")) is not None:
                return bad
        return None
    return path, f"a {type(value).__name__}"


def channels_of(item_shape: Sequence[int]) -> int:
    """Channels of a stored image item: [H, W] has 1, [H, W, C] has C."""
    if len(item_shape) == 2:
        return 1
    if len(item_shape) == 3:
        return int(item_shape[2])
    raise DawnpipeError(f"items of shape {list(item_shape)} are not images ([H, W] or [H, W, C]); a program's weights cannot be exported for them")


def check_entry(program: Mapping[str, Any], source: str, *, item_shape: Sequence[int] | None = None) -> None:
    """``program.model`` as the schema cannot check it (the schema has: types,
    required fields, std > 0, scale > 0, the layouts); one DawnpipeError
    ``SOURCE: field 'program.model.X': reason`` otherwise. Without
    ``item_shape`` (the configuration is read before any data is prepared)
    mean and std must agree with each other; with it, with the items' channels."""
    model = program.get("model")
    if model is None:
        return
    if program.get("contract", 1) != MODEL_CONTRACT:
        raise DawnpipeError(
            f"{source}: field 'program.model': a program hands over weights under contract {MODEL_CONTRACT} (program.contract: {MODEL_CONTRACT}); "
            f"this entry follows contract {program.get('contract', 1)}, where it writes ONNX or a SavedModel itself"
        )
    factory = model.get("factory")
    if not _factory_ok(factory):
        shown = repr(factory) if isinstance(factory, str) else type(factory).__name__
        raise DawnpipeError(
            f"{source}: field 'program.model.factory': expected \"module:callable\" (a module importable from the workdir, "
            f"dotted, and the callable in it that builds the network, e.g. main:Net), got {terminal_safe(shown)}"
        )
    if (bad := _not_json(model.get("kwargs", {}), "program.model.kwargs")) is not None:
        field, what = bad
        raise DawnpipeError(f"{source}: field '{field}': {terminal_safe(what)}; the factory's arguments are plain JSON values")
    prep = model.get("preprocessing", {})
    mean, std = prep.get("mean", [0.0]), prep.get("std", [1.0])
    if len(mean) > 1 and len(std) > 1 and len(mean) != len(std):
        raise DawnpipeError(
            f"{source}: field 'program.model.preprocessing.std': {len(std)} values, but mean has {len(mean)}; "
            "each is one value (every channel) or one per channel"
        )
    if item_shape is not None:
        channels = channels_of(item_shape)
        for name, values in (("mean", mean), ("std", std)):
            if len(values) not in (1, channels):
                raise DawnpipeError(
                    f"{source}: field 'program.model.preprocessing.{name}': {len(values)} values, but the task's items "
                    f"{list(item_shape)} have {channels} channel{'s' if channels != 1 else ''}; give one value (every channel) or {channels}"
                )


# ------------------------------------------------------------------ isolation
def network_sandbox(candidates: Sequence[Sequence[str]] = SANDBOXES) -> tuple[tuple[str, ...], str]:
    """(the command prefix that takes the network away, ``"none"``), from the
    first of ``candidates`` that runs ``true`` here; else ``((), "available (why)")``.
    Never fails: no network for the worker is asked for, not required."""
    reasons = []
    for prefix in candidates:
        prefix = tuple(prefix)
        if shutil.which(prefix[0]) is None:
            reasons.append(f"no {prefix[0]} command")
            continue
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, text=True, errors="replace", timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"{' '.join(prefix)}: {e}")
            continue
        if done.returncode == 0:
            return prefix, "none"
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        reasons.append(f"{' '.join(prefix)}: {terminal_safe(said[:160])}")
    return (), f"available ({'; '.join(reasons) or 'no way to take it away was tried'})"


# ------------------------------------------------------------------ the client
class ExportWorker:
    """The export worker of one run (docs/programs.md, contract 2).

    ``program``: the entry's ``program`` section (its ``model`` is used);
    ``workdir``: the program's working directory (the worker's cwd, first on its
    sys.path); ``framework``: ``"torch"`` or ``"keras"`` (``framework_of`` the
    first weights file); ``item_shape``: one stored test item's shape
    ((28, 28), (32, 32, 3)); ``threads``: the worker's CPU threads (the program
    is frozen while it works); ``env``: extra environment variables (the
    entry's filled ``program.env``); ``log``: a file the worker's stderr is
    appended to (its tracebacks, the program's prints; a temporary file when
    None); ``sandbox``: ``network_sandbox()``'s answer (found when None);
    ``start_seconds``/``export_seconds``: how long an answer may take before
    the worker is stopped; ``source``: what names the entry in a refusal of
    its ``program.model`` (the entry file).

    A refused ``program.model`` raises DawnpipeError when the worker is made.
    After ``start()``: ``network`` is ``"none"`` or ``"available (why)"``,
    ``isolation`` the command prefix used (``"unshare --net"``, or ``""``),
    ``runtime`` the worker's framework, ``pid`` its process id.
    """

    def __init__(
        self,
        program: Mapping[str, Any],
        workdir: str | os.PathLike,
        framework: str,
        *,
        item_shape: Sequence[int],
        threads: int = 1,
        env: Mapping[str, str] | None = None,
        log: str | os.PathLike | None = None,
        sandbox: tuple[Sequence[str], str] | None = None,
        start_seconds: float = START_SECONDS,
        export_seconds: float = EXPORT_SECONDS,
        python: str = sys.executable,
        source: str = "program entry",
    ):
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
        model = program.get("model")
        if not model:
            raise DawnpipeError(
                f"{source}: field 'program.model': the program hands over weights (.pt or .weights.h5), but its entry names no "
                "program.model (factory and preprocessing) to build the network from"
            )
        check_entry(program, source, item_shape=item_shape)
        prep = {"scale": 1.0, "mean": [0.0], "std": [1.0], **model["preprocessing"]}
        self.setup = {
            "framework": framework,
            "workdir": str(Path(workdir).resolve()),
            "factory": model["factory"],
            "kwargs": model.get("kwargs", {}),
            "preprocessing": prep,
            "item_shape": [int(d) for d in item_shape],
            "threads": int(threads),
        }
        self.framework, self.workdir = framework, Path(workdir)
        self.env, self.log = dict(env or {}), log
        self.sandbox, self.start_seconds, self.export_seconds, self.python = sandbox, start_seconds, export_seconds, python
        self.network = self.isolation = self.runtime = ""
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._network = ""

    # ---------------------------------------------------------------- life
    def __enter__(self) -> ExportWorker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the worker and wait until it has imported the framework and the
        factory and built the network once (so a wrong factory or layout is said
        before the first epoch). DawnpipeError with the reason otherwise."""
        if self.running():
            return
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the worker's process and hand it its setup, without waiting for its answer (``wait_ready``)."""
        self._release()  # a worker that died: its pipes
        if self.sandbox is None:
            self.sandbox = network_sandbox()
        prefix, network = tuple(self.sandbox[0]), self.sandbox[1]
        self.isolation = " ".join(prefix)
        import dawnpipe

        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = self.env.get(name, str(self.setup["threads"]))
        # dawnpipe itself from where this process has it, whatever the workdir holds
        package_root = str(Path(dawnpipe.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([package_root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        if self._log_file is None:
            self._log_file = open(self.log, "a+b") if self.log is not None else tempfile.TemporaryFile(prefix="dawnpipe-export-worker-")
        self._buffer = b""
        try:
            self._proc = subprocess.Popen(
                # -P: the workdir (its cwd) is not first on sys.path while dawnpipe's worker is imported
                [*prefix, self.python, "-P", "-m", "dawnpipe.programs.export_worker"],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log_file,
                start_new_session=True,  # its own process group: stopping it stops what the program's code started
            )
        except OSError as e:
            raise DawnpipeError(f"the export worker cannot be started in {self.workdir} ({e.strerror or e})") from None
        self.pid = self._proc.pid
        self._network = network
        self._send(self.setup)

    def wait_ready(self) -> None:
        """The spawned worker's answer to its setup: ready, or DawnpipeError with its reason (it is stopped)."""
        network = self._network
        ready = self._answer(self.start_seconds, "importing the framework and field 'program.model.factory'")
        if not ready.get("ready"):
            self._stop()
            raise DawnpipeError(terminal_safe(str(ready.get("error", "the export worker refused to start"))))
        self.runtime = terminal_safe(str(ready.get("runtime", "")))
        seen = [str(name) for name in ready.get("interfaces", [])]
        if network == "none" and any(name != "lo" for name in seen):
            network = f"available (under {self.isolation} the worker sees interfaces {terminal_safe(', '.join(seen))})"
        self.network = network
        self._signal(signal.SIGSTOP)  # stopped between exports: the program's code in it runs only while it exports

    def _signal(self, sig: int) -> None:
        """``sig`` to the worker's process group (it, and whatever the program's code started in it)."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """End the worker: its stdin closed (it exits), stopped after CLOSE_SECONDS if it does not."""
        if self._proc is not None:
            self._signal(signal.SIGCONT)  # stopped between exports: let it read the end of its input
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            self._stop()  # it, or what the program's code left running in its process group
            self._release()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _stop(self) -> None:
        """SIGKILL to the worker's process group (it and whatever the program's code started)."""
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()

    def _release(self) -> None:
        if self._proc is not None:
            for pipe in (self._proc.stdin, self._proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            self._proc = None

    # ---------------------------------------------------------------- exporting
    def export(self, weights: str | os.PathLike, dest_dir: str | os.PathLike) -> models.ModelFile:
        """The model of ``weights`` (``{out}/epoch<N>.pt`` or ``.weights.h5``),
        exported into ``dest_dir`` as ``epoch<N>.onnx`` or ``epoch<N>.savedmodel/``,
        read and checked by ``models.read_model``; its ``source`` names both
        files. A worker that died (or was stopped after a timeout) is started
        again first. DawnpipeError with one line naming the weights file or
        the entry field otherwise."""
        weights, dest_dir = Path(weights).absolute(), Path(dest_dir).absolute()
        epoch, framework = epoch_of(weights), framework_of(weights)
        if epoch is None:
            raise DawnpipeError(f"{weights}: not a weights file of the contract (epoch<N>.pt or epoch<N>.weights.h5)")
        if framework != self.framework:
            raise DawnpipeError(f"{weights}: {framework} weights, but this run's model files are {self.framework} weights; one format per run")
        try:
            st = os.lstat(weights)
        except FileNotFoundError:
            raise DawnpipeError(f"{weights}: no such file") from None
        if not stat.S_ISREG(st.st_mode):
            raise DawnpipeError(f"{weights}: not a regular file (a link, directory or device); a weights file must be one")
        if st.st_size > models.MAX_MODEL_BYTES:
            raise DawnpipeError(f"{weights}: {st.st_size:,} bytes, over the {models.MAX_MODEL_BYTES:,} a model file may have; not read")
        onnx_name, sm_name = models.expected_names(epoch)
        dest = dest_dir / (onnx_name if self.framework == "torch" else sm_name)
        dest_dir.mkdir(parents=True, exist_ok=True)
        for stale in (dest_dir / onnx_name, dest_dir / sm_name):  # an earlier try of this epoch
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            elif os.path.lexists(stale):
                stale.unlink()
        if not self.running():
            self.start()
        self._next_id += 1
        request_id = self._next_id
        self._signal(signal.SIGCONT)
        try:
            self._send({"id": request_id, "weights": str(weights), "dest": str(dest)})
            done = self._answer(self.export_seconds, f"exporting {weights}")
        finally:
            self._signal(signal.SIGSTOP)
        if done.get("id") != request_id:
            self._stop()
            raise DawnpipeError(f"{weights}: the export worker answered another request ({terminal_safe(str(done)[:160])}); stopped")
        if not done.get("ok"):
            raise DawnpipeError(terminal_safe(str(done.get("error", f"{weights}: the export worker gave no reason"))))
        model = models.read_model(dest_dir, epoch)
        if model.format != FORMAT_OF[self.framework]:
            raise DawnpipeError(f"{weights}: the export worker wrote {model.source}, not the {FORMAT_OF[self.framework]} it was asked for")
        return dataclasses.replace(model, source=f"{model.source} (exported from {weights})")

    # ---------------------------------------------------------------- the protocol
    def _send(self, obj: dict[str, Any]) -> None:
        try:
            self._proc.stdin.write((json.dumps(obj) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it exited: _answer says so, with its status and its last words

    def _answer(self, seconds: float, doing: str) -> dict[str, Any]:
        """The worker's next answer line, within ``seconds``; it is stopped and named otherwise."""
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self._stop()
                raise DawnpipeError(f"the export worker gave no answer in {seconds:g} s while {doing}; stopped{self._last_words()}")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                status = self._proc.wait()
                self._stop()
                raise DawnpipeError(f"the export worker exited (status {status}) while {doing}{self._last_words()}")
            self._buffer += chunk
            if len(self._buffer) > MAX_ANSWER:
                self._stop()
                raise DawnpipeError(f"the export worker sent over {MAX_ANSWER:,} bytes without an answer while {doing}; stopped")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self._stop()
            raise DawnpipeError(
                f"the export worker's answer is not a JSON object while {doing} ({terminal_safe(line[:120].decode(errors='replace'))}); stopped"
            )
        return answer

    def _last_words(self) -> str:
        """The last line of the worker's log, for a worker that exited or hung."""
        if self._log_file is None:
            return ""
        try:
            fd = self._log_file.fileno()
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 4096, max(0, size - 4096))  # pread: the worker's offset in a shared file stays
            lines = [s for s in tail.decode(errors="replace").splitlines() if s.strip()]
        except OSError:
            return ""
        where = f" (the log: {self.log})" if self.log is not None else ""
        return f"; its last line{where}: {terminal_safe(lines[-1][:200])}" if lines else ""
