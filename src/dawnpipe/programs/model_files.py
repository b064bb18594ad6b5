"""The model files a program hands over, and dawnpipe's own score of them
(docs/programs.md#what-the-program-hands-over-its-models).

For an epoch N the program writes (contract 2: by its epoch_stop; contract 1:
during its evaluation window) ``{out}/epoch<N>.onnx`` (one input: a float32 batch of items exactly as the
prepared arrays store them; one output: logits ``[batch, classes]``) or, from
a program that cannot write ONNX, a TensorFlow SavedModel directory
``{out}/epoch<N>.savedmodel/`` with the same input and output (its
``serving_default`` signature).

A model file is the program's output, so untrusted: a regular file or a
directory of regular files (no links, nothing outside it), under a size cap,
read into memory once and loaded only by ONNX Runtime (from those bytes: no
external data file can be named) or TensorFlow (after its graph is checked
for operations that touch files or run Python); nothing is unpickled.

The run's ``model.pt`` is the model of the threshold epoch (the first epoch
dawnpipe's scoring put at the threshold; else the last evaluated one) as one
uncompressed NumPy archive, read with ``allow_pickle=False``: its format, its
contract, the epoch, and the model's bytes (a SavedModel as its files).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.tensorflow_import import tensorflow

ONNX, SAVEDMODEL = "onnx", "savedmodel"
FORMATS = (ONNX, SAVEDMODEL)
MAX_MODEL_BYTES = 2 << 30  # ONNX's protobuf limit; a SavedModel's files together
MAX_FILES = 10_000  # files of one SavedModel
SCORE_BATCH = 500  # items per forward pass when dawnpipe scores a model
# Operations a served classifier never needs and that reach outside the graph:
# reading, writing or listing files, running Python, talking to the system.
# A SavedModel whose functions hold one is refused, not loaded.
FORBIDDEN_TF_OPS = frozenset(
    {
        "ReadFile",
        "WriteFile",
        "MatchingFiles",
        "DeleteFile",
        "PyFunc",
        "PyFuncStateless",
        "EagerPyFunc",
        "Save",
        "SaveV2",
        "SaveSlices",
        "MergeV2Checkpoints",
        "ImmutableConst",
        "DecodeProtoV2",
        "EncodeProto",
        "LoadAndRemapMatrix",
        "ShardedFilename",
        "ShardedFilespec",
        "WholeFileReader",
        "WholeFileReaderV2",
        "TFRecordReader",
        "TFRecordReaderV2",
        "FixedLengthRecordReader",
        "FixedLengthRecordReaderV2",
        "TextLineReader",
        "TextLineReaderV2",
        "IdentityReader",
        "IdentityReaderV2",
        "LMDBReader",
        "SqlDataset",
        "Print",
        "PrintV2",
    }
)


@dataclass(frozen=True)
class ModelFile:
    """One model the program wrote: its format and its bytes (a SavedModel: relative path -> bytes)."""

    epoch: int
    format: str
    onnx: bytes | None = None
    files: dict[str, bytes] | None = None
    source: str = ""  # where it was read from, for messages

    @property
    def bytes(self) -> int:
        return len(self.onnx) if self.onnx is not None else sum(len(b) for b in (self.files or {}).values())


def expected_names(epoch: int) -> tuple[str, str]:
    return f"epoch{epoch}.onnx", f"epoch{epoch}.savedmodel"


def read_model(out: Path, epoch: int, max_bytes: int = MAX_MODEL_BYTES) -> ModelFile:
    """The model the program wrote for ``epoch`` in ``out``, read and checked; one error naming it otherwise."""
    onnx_name, sm_name = expected_names(epoch)
    onnx_path, sm_path = out / onnx_name, out / sm_name
    have = [p for p in (onnx_path, sm_path) if os.path.lexists(p)]
    if not have:
        raise DawnpipeError(f"epoch {epoch}: the program wrote no model file ({out}/{onnx_name} or {sm_name}/) by the end of its evaluation")
    if len(have) == 2:
        raise DawnpipeError(f"epoch {epoch}: the program wrote both {onnx_name} and {sm_name}/; one model per epoch")
    path = have[0]
    if path == onnx_path:
        return ModelFile(epoch, ONNX, onnx=_read_regular(path, max_bytes), source=str(path))
    return ModelFile(epoch, SAVEDMODEL, files=_read_tree(path, max_bytes), source=str(path))


def _read_regular(path: Path, max_bytes: int) -> bytes:
    from dawnpipe.fileio import read_capped_bytes

    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise DawnpipeError(f"{path}: not a regular file (a link, directory or device); a model file must be one")
    return read_capped_bytes(path, max_bytes)


def _read_tree(root: Path, max_bytes: int) -> dict[str, bytes]:
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise DawnpipeError(f"{root}: a SavedModel must be a directory (not a link or a file)")
    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            mode = os.lstat(full).st_mode
            rel = full.relative_to(root).as_posix()
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise DawnpipeError(f"{root}: {rel} is a link or a device; a SavedModel holds regular files only")
            if len(files) >= MAX_FILES:
                raise DawnpipeError(f"{root}: more than {MAX_FILES:,} files; not read")
            files[rel] = _read_regular(full, max_bytes - total)
            total += len(files[rel])
    if "saved_model.pb" not in files:
        raise DawnpipeError(f"{root}: no saved_model.pb; not a TensorFlow SavedModel")
    return files


# ------------------------------------------------------------------ archive
def save_archive(path: Path, model: ModelFile, facts: dict[str, Any]) -> bytes:
    """The run's model.pt: ``model`` and ``facts`` (epoch, measured accuracy, whether at the threshold) as a NumPy
    archive; the bytes written, as written (what stands at ``path`` later may be somebody else's)."""
    import io

    from dawnpipe.fileio import atomic_path
    from dawnpipe.programs.contract import CONTRACT

    arrays: dict[str, np.ndarray] = {
        "format": np.array(model.format),
        "contract": np.array(CONTRACT),
        "epoch": np.array(model.epoch),
    }
    for key, value in facts.items():
        arrays[f"fact_{key}"] = np.array(value)
    if model.onnx is not None:
        arrays["onnx"] = np.frombuffer(model.onnx, dtype=np.uint8)
    else:
        names = sorted(model.files or {})
        arrays["file_names"] = np.array(names)
        for i, name in enumerate(names):
            arrays[f"file_{i}"] = np.frombuffer(model.files[name], dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)
    return data


def load_archive(path: Path) -> tuple[ModelFile, dict[str, Any]]:
    """A program run's model.pt: the model and its facts; one error naming the file when it is anything else."""
    if not Path(path).is_file():
        raise FileNotFoundError(2, "No such file", str(path))
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError) as e:
        raise DawnpipeError(f"{path}: not a program run's model archive ({str(e)[:160]})") from None
    fmt = str(arrays.get("format", ""))
    if fmt not in FORMATS or "epoch" not in arrays:
        raise DawnpipeError(f"{path}: not a program run's model archive (format {fmt!r}; expected {' or '.join(FORMATS)})")
    facts = {k.removeprefix("fact_"): v.item() for k, v in arrays.items() if k.startswith("fact_")}
    facts["contract"] = int(arrays["contract"]) if "contract" in arrays else None
    epoch = int(arrays["epoch"])
    if fmt == ONNX:
        return ModelFile(epoch, ONNX, onnx=arrays["onnx"].tobytes(), source=str(path)), facts
    files = {}
    for i, name in enumerate(arrays["file_names"].tolist()):
        if not _safe_relative(name):
            raise DawnpipeError(f"{path}: SavedModel file name {name!r} is not a plain relative path; refused")
        files[name] = arrays[f"file_{i}"].tobytes()
    return ModelFile(epoch, SAVEDMODEL, files=files, source=str(path)), facts


def _safe_relative(name: str) -> bool:
    p = PurePosixPath(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts and "\\" not in name and all(c.isprintable() for c in name)


# ------------------------------------------------------------------ loading
@dataclass
class Loaded:
    """A model ready to answer: ``logits(batch)`` takes stored items (any dtype; cast to float32 here)."""

    logits: Callable[[np.ndarray], np.ndarray]
    device: str
    runtime: str  # e.g. "onnxruntime 1.31.1", "tensorflow 2.21.0"
    input_name: str
    session: Any = None  # the ONNX Runtime session (backends reuse it), or the TF signature


def onnx_session(model: bytes | str, *, threads: int, device: str = "cpu", source: str = "model"):
    """An ONNX Runtime session of ``model`` (its bytes, or a path to a file dawnpipe wrote itself):
    all graph optimisations, run sequentially, ``threads`` intra-op threads, CUDA where asked and present."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    available = ort.get_available_providers()
    if device in ("cuda", "auto") and "CUDAExecutionProvider" in available:
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    elif device == "cuda":
        raise DawnpipeError(f"{source}: device cuda, but this onnxruntime has no CUDA provider (it has {', '.join(available)})")
    else:
        providers = ["CPUExecutionProvider"]
    try:
        return ort.InferenceSession(model, sess_options=opts, providers=providers)
    except Exception as e:  # ONNX Runtime's own exception types: a bad file is the program's problem, named
        raise DawnpipeError(f"{source}: ONNX Runtime cannot load it ({_first_line(e)})") from None


def load_onnx(model: ModelFile, *, threads: int, device: str = "cpu", item_shape: tuple[int, ...] | None = None) -> Loaded:
    import onnxruntime as ort

    session = onnx_session(model.onnx, threads=threads, device=device, source=model.source)
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(outputs) < 1:
        raise DawnpipeError(f"{model.source}: the model must take one input and give logits; it takes {len(inputs)} inputs and gives {len(outputs)} outputs")
    name = inputs[0].name
    if inputs[0].type != "tensor(float)":
        raise DawnpipeError(f"{model.source}: input {name!r} takes {inputs[0].type}; the contract's input is float32 (the stored items as numbers)")
    if item_shape is not None:
        _check_shape(model.source, name, inputs[0].shape, item_shape)
    run = session.run

    def logits(batch: np.ndarray) -> np.ndarray:
        return run(None, {name: np.ascontiguousarray(batch, dtype=np.float32)})[0]

    device_name = "cuda" if session.get_providers()[0].startswith("CUDA") else "cpu"
    return Loaded(logits, device_name, f"onnxruntime {ort.__version__}", name, session)


def _check_shape(source: str, name: str, declared: list, item_shape: tuple[int, ...]) -> None:
    """The declared input shape (symbols allowed for any axis) fits [batch, *item_shape]."""
    if declared is None:
        return
    if declared and isinstance(declared[0], int):
        raise DawnpipeError(f"{source}: input {name!r} has a batch axis fixed at {declared[0]}; the contract's batch axis is dynamic ([batch, ...])")
    want = [None, *item_shape]
    if len(declared) != len(want) or any(isinstance(d, int) and w is not None and d != w for d, w in zip(declared, want)):
        shown = ["batch", *item_shape]
        raise DawnpipeError(f"{source}: input {name!r} has shape {declared}; the contract's is {shown} (items exactly as the prepared arrays store them)")


@contextmanager
def savedmodel_dir(model: ModelFile) -> Iterator[Path]:
    """The SavedModel's files written into a private temporary directory (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="dawnpipe-savedmodel-") as tmp:
        root = Path(tmp) / "model"
        for name, data in (model.files or {}).items():
            if not _safe_relative(name):
                raise DawnpipeError(f"{model.source}: file name {name!r} is not a plain relative path; refused")
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        yield root


def check_savedmodel_ops(model: ModelFile, signature: str = "serving_default") -> None:
    """Refuse a SavedModel whose ``signature`` reaches an operation that reaches
    outside the graph (FORBIDDEN_TF_OPS). Only what serving the signature can
    run counts: a SavedModel also holds the saver's functions (SaveV2 and co.),
    which loading and serving never call."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString(model.files["saved_model.pb"])
    except Exception as e:
        raise DawnpipeError(f"{model.source}: saved_model.pb is not a SavedModel protobuf ({_first_line(e)})") from None
    metas = [m for m in proto.meta_graphs if signature in m.signature_def]
    if not metas:
        raise DawnpipeError(f"{model.source}: no {signature} signature; the contract's SavedModel serves its logits there")
    bad = sorted(reachable_ops(metas[0], signature) & FORBIDDEN_TF_OPS)
    if bad:
        raise DawnpipeError(
            f"{model.source}: its {signature} runs {', '.join(bad)}, which a classifier never needs (files, Python or printing); refused, not loaded"
        )


def reachable_ops(meta, signature: str) -> set[str]:
    """The operation types ``signature`` of a MetaGraphDef can run: the graph's nodes
    its outputs depend on, and every node of each function they call, transitively."""
    graph = meta.graph_def
    nodes = {n.name: n for n in graph.node}
    functions = {f.signature.name: f for f in graph.library.function}
    ops: set[str] = set()
    todo_nodes = [t.name.split(":")[0].lstrip("^") for t in meta.signature_def[signature].outputs.values()]
    todo_fns: list[str] = []
    seen_nodes: set[str] = set()
    seen_fns: set[str] = set()

    def called(attrs) -> list[str]:
        names = []
        for value in attrs.values():
            if value.HasField("func"):
                names.append(value.func.name)
            names += [f.name for f in value.list.func]
        return names

    while todo_nodes or todo_fns:
        if todo_nodes:
            name = todo_nodes.pop()
            if name in seen_nodes or name not in nodes:
                continue
            seen_nodes.add(name)
            node = nodes[name]
            ops.add(node.op)
            if node.op in functions:  # a function called by its name as an op
                todo_fns.append(node.op)
            todo_fns += called(node.attr)
            todo_nodes += [i.lstrip("^").split(":")[0] for i in node.input]
            continue
        fn_name = todo_fns.pop()
        if fn_name in seen_fns or fn_name not in functions:
            continue
        seen_fns.add(fn_name)
        for node in functions[fn_name].node_def:
            ops.add(node.op)
            if node.op in functions:
                todo_fns.append(node.op)
            todo_fns += called(node.attr)
    return ops


def load_savedmodel(model: ModelFile, root: Path, *, threads: int, item_shape: tuple[int, ...] | None = None) -> Loaded:
    """The SavedModel in ``root`` (from savedmodel_dir), its serving_default signature as ``logits``."""
    tf = tensorflow()

    check_savedmodel_ops(model)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TensorFlow already started in this process: its threads are set
    try:
        loaded = tf.saved_model.load(str(root))
        signature = loaded.signatures["serving_default"]
    except KeyError:
        raise DawnpipeError(f"{model.source}: no serving_default signature; the contract's SavedModel serves its logits there") from None
    except Exception as e:
        raise DawnpipeError(f"{model.source}: TensorFlow cannot load it ({_first_line(e)})") from None
    args, kwargs = signature.structured_input_signature
    if args or len(kwargs) != 1:
        raise DawnpipeError(f"{model.source}: serving_default must take one named input, it takes {len(args)} positional and {len(kwargs)} named")
    ((name, spec),) = kwargs.items()
    if spec.dtype != tf.float32:
        raise DawnpipeError(f"{model.source}: input {name!r} takes {spec.dtype.name}; the contract's input is float32")
    if item_shape is not None:
        _check_shape(model.source, name, spec.shape.as_list(), item_shape)
    outputs = signature.structured_outputs
    if len(outputs) != 1:
        raise DawnpipeError(f"{model.source}: serving_default must give one output (the logits), it gives {len(outputs)}: {', '.join(sorted(outputs))}")
    (out_name,) = outputs

    def logits(batch: np.ndarray) -> np.ndarray:
        return signature(**{name: tf.constant(np.asarray(batch, dtype=np.float32))})[out_name].numpy()

    gpu = bool(tf.config.list_logical_devices("GPU"))
    return Loaded(logits, "cuda" if gpu else "cpu", f"tensorflow {tf.__version__}", name, signature)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


# ------------------------------------------------------------------ scoring
def score(logits: Callable[[np.ndarray], np.ndarray], images, labels: np.ndarray, *, classes: int, topk: int = 1, source: str = "model") -> dict[str, float]:
    """top-1 (and top-``topk``) accuracy in percent of ``logits`` over the stored ``images``, in batches."""
    correct = correct_items(logits, images, labels, classes=classes, topk=topk, source=source)
    return {column: 100.0 * float(hits.mean()) if len(hits) else float("nan") for column, hits in correct.items()}


def correct_items(
    logits: Callable[[np.ndarray], np.ndarray], images, labels: np.ndarray, *, classes: int, topk: int = 1, source: str = "model"
) -> dict[str, np.ndarray]:
    """Per item, whether ``logits`` answer it right: ``top1Accuracy`` (and ``top<k>Accuracy``) -> a boolean array."""
    n = len(labels)
    top1 = np.zeros(n, dtype=bool)
    topk_hits = np.zeros(n, dtype=bool)
    for start in range(0, n, SCORE_BATCH):
        batch = np.asarray(images[start : start + SCORE_BATCH])
        try:
            out = np.asarray(logits(batch))
        except DawnpipeError:
            raise
        except Exception as e:  # the runtime refusing the program's model on the contract's input is the model's fault, named
            raise DawnpipeError(f"{source}: fails on items {start}..{start + len(batch) - 1} ({_first_line(e)})") from None
        if out.ndim != 2 or out.shape[0] != len(batch) or out.shape[1] != classes:
            raise DawnpipeError(
                f"{source}: gives an output of shape {list(out.shape)} for a batch of {len(batch)}; the contract's is [batch, {classes}] logits"
            )
        if np.isnan(out).any() or np.isposinf(out).any():  # -inf is a log-probability of 0: fine
            raise DawnpipeError(f"{source}: gives logits that are NaN or +infinity for items {start}..{start + len(batch) - 1}")
        truth = np.asarray(labels[start : start + SCORE_BATCH]).astype(np.int64)
        top1[start : start + len(batch)] = out.argmax(1) == truth
        if topk > 1:
            best = np.argsort(-out, axis=1, kind="stable")[:, :topk]
            topk_hits[start : start + len(batch)] = (best == truth[:, None]).any(1)
    result = {"top1Accuracy": top1}
    if topk > 1:
        result[f"top{topk}Accuracy"] = topk_hits
    return result
