"""Model FLOPs of a program's model, counted from its graph (ONNX, or a
TensorFlow SavedModel's serving function).

dawnpipe cannot run a program's training under its own FLOP counter
(``dawnpipe.metrics.flops``), but it holds the model the program handed
over, so it counts that model's graph instead. The convention is the
counter's own, so that a program's utilization and a zoo entry's compare:

- **Model FLOPs** are matrix multiplies and convolutions only, 2 FLOPs per
  multiply-add, bias adds not counted; each output element of such an op is
  a dot product, so its FLOPs are 2 x (output elements) x (the dot product's
  length):

  | op (ONNX / TensorFlow) | dot product length |
  |---|---|
  | ``Conv`` / ``Conv2D``, ``Conv3D`` | C_in/group x prod(kernel) |
  | ``ConvTranspose`` / ``Conv2DBackpropInput`` | C_out/group x prod(kernel), per *input* element |
  | ``DepthwiseConv2dNative`` (TensorFlow) | prod(kernel) |
  | ``Gemm``, ``MatMul`` / ``MatMul``, ``BatchMatMulV2`` | K, the shared axis |

- **Training FLOPs** (forward + backward, what ``flops_per_item`` of a zoo
  entry is) follow the rule torch's autograd follows and dawnpipe's counter
  counts: the backward pass of each of those ops computes the gradient of
  each of its two multiplicands that needs one, at the op's forward FLOPs
  each. A weight (a constant: an initializer, a frozen variable, or a tensor
  computed from constants alone) always needs one; a data input needs one
  when it depends on a trainable op (a multiply or convolution with a weight,
  or a batch normalisation with a scale). So a stack of layers costs 3x its
  forward, less the first layer's input gradient, which nothing needs.
  Elementwise ops with constants (a program's own normalisation,
  ``(x / 255 - mean) / std``) are taken as fixed preprocessing, not as
  parameters. The optimizer step is not counted (nor by dawnpipe's counter).
- **Other work** is counted too, by op type, and kept out of the model FLOPs
  (dawnpipe's convention leaves element-wise work out): 1 FLOP per output
  element of an elementwise op (``Add``, ``Relu``, ``Sigmoid``, ``Clip``,
  comparisons, ...), 2 per element of a fused batch normalisation (scale and
  shift), 5 per element of the other normalisations (mean, variance,
  subtract, divide, scale), 3 per element of ``Softmax``/``LogSoftmax``
  (exponent, sum, divide), the window size per output element of a max or
  average pool, 1 per input element of global pooling and reductions, 1 per
  output element of a resize; 0 for ops that only move data (``Reshape``,
  ``Transpose``, ``Concat``, ...).

Per item: the graph's shapes are inferred with its batch axis fixed at 1 and
at 2 (ONNX shape inference with data propagation; TensorFlow's shape
functions on the frozen serving graph), and the difference of the two counts
is the count per item, so work that does not grow with the batch is not
spread over the items.

A graph is refused (``counted: False`` with the reason, never an exception)
when it holds an op this table does not know, or control flow, with a large
tensor (more than ``SMALL_TENSOR`` elements at batch 2) or an input whose
shape is not resolved (one with small inputs and outputs, shape arithmetic,
is listed under ``ignored_ops``), or a
matrix multiply or convolution whose operand shapes cannot be resolved
(dynamic shapes), or when it is not a one-input model at all.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.tensorflow_import import tensorflow

METHOD = "estimated from the model graph"
RULE = (
    "training = forward + the gradient of each multiplicand that needs one (a weight always; a data input when it depends "
    "on a trainable op), each at the op's forward FLOPs: 3x forward less the first layer's input gradient"
)
SMALL_TENSOR = 4096  # elements at batch 2: an unknown op this small is shape arithmetic, not model work
BATCHES = (1, 2)
KEEP_INITIALIZER = 64  # elements: small ONNX initializers keep their values (shape arithmetic reads them), larger ones only their shape
FLOAT_TYPES = (1, 10, 11, 16)  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16

Shape = tuple[int, ...]


@dataclass
class Op:
    """One node of a graph in the counter's terms."""

    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    kind: str  # "matmul" (model FLOPs), "other" (counted apart), "const", "unknown", "control"
    flops: int | None = 0  # forward FLOPs of a "matmul" op; of an "other" op (None: its shape was not resolved)
    operands: tuple[int, ...] = ()  # "matmul": the positions of its two multiplicands
    scale: int | None = None  # a normalisation's scale input: a constant there makes it trainable
    in_sizes: list[int | None] = field(default_factory=list)  # elements of its inputs and outputs ("unknown", "control":
    out_sizes: list[int | None] = field(default_factory=list)  # whether they are small enough to be shape arithmetic)


class NotCounted(DawnpipeError):
    """Why a graph's FLOPs cannot be counted (one line)."""


# ------------------------------------------------------------------ the API
def count_onnx(model_bytes: bytes, item_shape: Iterable[int] | None = None) -> dict[str, Any]:
    """FLOPs per item of the ONNX model ``model_bytes`` (the module's convention).

    ``item_shape``: one stored item's shape (e.g. ``(28, 28)``), for any axis
    besides the batch that the model leaves symbolic. Returns
    ``{"counted": True, "method", "forward_flops_per_item",
    "training_flops_per_item", "flops_per_item" (= training), "by_op"
    (forward model FLOPs per op type), "other_flops_per_item" (op type ->
    FLOPs; None where a shape was not resolved), "ignored_ops",
    "parameters", "rule", "batches_counted"}`` or
    ``{"counted": False, "method", "reason"}``."""
    return _guarded(lambda: _onnx_counts(model_bytes, _shape(item_shape)))


def count_savedmodel(model, item_shape: Iterable[int] | None = None) -> dict[str, Any]:
    """``count_onnx``'s record for a program's SavedModel (a ``models.ModelFile``):
    its ``serving_default`` function, checked like every SavedModel dawnpipe
    loads, frozen (variables as constants, calls inlined) and counted."""
    return _guarded(lambda: _savedmodel_counts(model, _shape(item_shape)))


def count_model(model, item_shape: Iterable[int] | None = None) -> dict[str, Any]:
    """The record of a program's model file (``dawnpipe.programs.model_files.ModelFile``), either format."""
    from dawnpipe.programs.model_files import ONNX, SAVEDMODEL

    if model.format == ONNX:
        return count_onnx(model.onnx, item_shape)
    if model.format == SAVEDMODEL:
        return count_savedmodel(model, item_shape)
    return {"counted": False, "method": METHOD, "reason": f"a {model.format} model: only an ONNX graph or a SavedModel's serving function is counted"}


def _shape(item_shape: Iterable[int] | None) -> Shape | None:
    return None if item_shape is None else tuple(int(d) for d in item_shape)


def _guarded(count: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return {"counted": True, "method": METHOD, **count()}
    except NotCounted as e:
        return {"counted": False, "method": METHOD, "reason": str(e)}


# ------------------------------------------------------------------ the tally
def tally(ops: list[Op], constants: set[str], batch: int) -> dict[str, Any]:
    """Forward and training model FLOPs, other work by op type, of one graph at one batch size."""
    constants = set(constants)
    trainable: set[str] = set()
    by_op: Counter[str] = Counter()
    other: Counter[str] = Counter()
    unresolved: set[str] = set()
    ignored: set[str] = set()
    forward = training = 0
    for op in ops:
        if op.kind == "const" or (op.inputs and all(i in constants for i in op.inputs)):
            constants.update(op.outputs)
            continue
        if op.kind in ("unknown", "control"):
            known = [s for s in (*op.in_sizes, *op.out_sizes) if s is not None]
            if None in op.in_sizes or max(known, default=0) > SMALL_TENSOR:
                size = f"a tensor of {max(known):,} elements" if known and max(known) > SMALL_TENSOR else "inputs whose shapes are not resolved"
                what = "control flow" if op.kind == "control" else "an op dawnpipe's FLOP table does not know"
                raise NotCounted(f"node {op.name!r} ({op.type}, {what}) has {size} at batch {batch}; its work cannot be counted")
            ignored.add(op.type)
            continue
        multiplicands = [op.inputs[k] for k in op.operands if k < len(op.inputs)]
        weighted = any(i in constants for i in multiplicands) or (op.scale is not None and op.scale < len(op.inputs) and op.inputs[op.scale] in constants)
        if weighted or any(i in trainable for i in op.inputs):
            trainable.update(op.outputs)
        if op.kind == "matmul":
            forward += op.flops
            by_op[op.type] += op.flops
            training += op.flops * (1 + sum(1 for i in multiplicands if i in constants or i in trainable))
        elif op.flops is None:
            unresolved.add(op.type)
        elif op.flops:
            other[op.type] += op.flops
    return {"forward": forward, "training": training, "by_op": by_op, "other": other, "unresolved": unresolved, "ignored": ignored}


def per_item(one: dict[str, Any], two: dict[str, Any], parameters: int) -> dict[str, Any]:
    """The record's counts from the tallies at batch 1 and 2."""
    forward = two["forward"] - one["forward"]
    training = two["training"] - one["training"]
    if forward <= 0:
        raise NotCounted("no matrix multiply or convolution whose work grows with the batch: nothing of dawnpipe's model FLOPs to count")
    unresolved = one["unresolved"] | two["unresolved"]
    return {
        "forward_flops_per_item": float(forward),
        "training_flops_per_item": float(training),
        "flops_per_item": float(training),
        "by_op": {op: float(two["by_op"][op] - one["by_op"][op]) for op in sorted(two["by_op"])},
        "other_flops_per_item": {
            op: None if op in unresolved else float(two["other"][op] - one["other"][op]) for op in sorted(two["other"].keys() | unresolved)
        },
        "ignored_ops": sorted(one["ignored"] | two["ignored"]),
        "parameters": parameters,
        "rule": RULE,
        "batches_counted": list(BATCHES),
    }


@dataclass(frozen=True)
class OpTable:
    """One framework's op types outside the model FLOPs, by how their work is counted."""

    normalization: dict[str, int]  # op -> FLOPs per output element; its input 1 is a scale (a parameter when constant)
    elementwise: frozenset[str]  # 1 per output element
    softmax: frozenset[str]  # 3 per output element
    pool: frozenset[str]  # the window's size per output element
    reduction: frozenset[str]  # 1 per input element
    data: frozenset[str]  # 0: they only move data
    control: frozenset[str]  # refused over large tensors


def _other_work(op: Op, table: OpTable, in_shapes: list, out_shapes: list, window: Callable[[], list[int] | None]) -> None:
    """``op``'s work by ``table`` (or its kind, "unknown" or "control", with its tensors' sizes)."""
    t, out = op.type, _elements(out_shapes[0]) if out_shapes else None
    if t in table.normalization:
        op.flops, op.scale = (None if out is None else table.normalization[t] * out), 1
    elif t in table.elementwise:
        op.flops = out
    elif t in table.softmax:
        op.flops = None if out is None else 3 * out
    elif t in table.pool:
        size = window()
        op.flops = None if out is None or not size else out * math.prod(size)
    elif t in table.reduction:
        op.flops = _elements(in_shapes[0]) if in_shapes else None
    elif t in table.data:
        op.flops = 0
    else:
        op.kind = "control" if t in table.control else "unknown"
        op.in_sizes, op.out_sizes = [_elements(s) for s in in_shapes], [_elements(s) for s in out_shapes]


def _elements(shape: Shape | None) -> int | None:
    return None if shape is None else math.prod(shape)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


# ------------------------------------------------------------------ ONNX
ONNX_MATMUL = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
ONNX_ELEMENTWISE = frozenset(
    "Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Relu LeakyRelu PRelu Elu Selu Celu Sigmoid HardSigmoid HardSwish "
    "Tanh Softplus Softsign Gelu Erf Mish Clip Max Min Sum Mean Floor Ceil Round Sign Where Not And Or Xor Equal Greater Less "
    "GreaterOrEqual LessOrEqual ThresholdedRelu Mod Sin Cos IsNaN IsInf QuantizeLinear DequantizeLinear Shrink Resize Upsample".split()
)
ONNX_NORMALIZATION = {"BatchNormalization": 2, "InstanceNormalization": 5, "LayerNormalization": 5, "GroupNormalization": 5, "MeanVarianceNormalization": 5}
ONNX_SOFTMAX = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
ONNX_POOL = frozenset({"MaxPool", "AveragePool", "LpPool"})
ONNX_REDUCTION = frozenset(
    "GlobalAveragePool GlobalMaxPool GlobalLpPool ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 "
    "ReduceLogSum ReduceLogSumExp ReduceSumSquare ArgMax ArgMin TopK LpNormalization".split()
)
ONNX_DATA = frozenset(
    "Reshape Flatten Transpose Concat Split Slice Gather GatherElements GatherND Squeeze Unsqueeze Identity Cast CastLike "
    "Shape Size ConstantOfShape Expand Pad Tile Dropout Range DepthToSpace SpaceToDepth ScatterND ScatterElements "
    "OneHot NonZero Trilu EyeLike Compress ReverseSequence".split()
)
ONNX_CONTROL = frozenset({"If", "Loop", "Scan", "SequenceMap"})
ONNX_TABLE = OpTable(ONNX_NORMALIZATION, ONNX_ELEMENTWISE, ONNX_SOFTMAX, ONNX_POOL, ONNX_REDUCTION, ONNX_DATA, ONNX_CONTROL)


def _onnx_counts(model_bytes: bytes, item_shape: Shape | None) -> dict[str, Any]:
    try:
        import onnx
    except ModuleNotFoundError:
        raise NotCounted("the onnx package is not installed in this environment (pip install onnx)") from None
    try:
        model = onnx.load_from_string(model_bytes)
    except Exception as e:  # protobuf's DecodeError and friends: bytes that are not ONNX
        raise NotCounted(f"not an ONNX model ({_first_line(e)})") from None
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise NotCounted(f"its local functions cannot be inlined ({_first_line(e)})") from None
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise NotCounted(f"the model takes {len(inputs)} inputs; the contract's model takes one (a batch of items)")
    skeleton, constants = _onnx_skeleton(onnx, model)
    tallies = [tally(_onnx_ops(onnx, skeleton, inputs[0].name, batch, item_shape), constants, batch) for batch in BATCHES]
    parameters = sum(math.prod(t.dims) for t in model.graph.initializer if t.data_type in FLOAT_TYPES)
    return per_item(*tallies, int(parameters))


def _onnx_skeleton(onnx, model):
    """The graph without its weights' values: a large initializer becomes a typed
    input of its shape (shape inference needs no more, and a copy of a model's
    weights costs memory); small ones keep their values (shape arithmetic reads
    them). Returns it and the names of every initializer (the graph's constants)."""
    skeleton = onnx.ModelProto(ir_version=model.ir_version)
    skeleton.opset_import.extend(model.opset_import)
    graph = skeleton.graph
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    for t in model.graph.initializer:
        if math.prod(t.dims) > KEEP_INITIALIZER:
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            graph.initializer.append(t)
    return skeleton, {t.name for t in model.graph.initializer}


def _onnx_ops(onnx, skeleton, input_name: str, batch: int, item_shape: Shape | None) -> list[Op]:
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    _fix_onnx_input(model, input_name, batch, item_shape)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        raise NotCounted(f"ONNX shape inference fails on it ({_first_line(e)})") from None
    graph = inferred.graph
    shapes: dict[str, Shape | None] = {vi.name: _onnx_shape(vi) for vi in (*graph.input, *graph.value_info, *graph.output)}
    shapes.update({t.name: tuple(t.dims) for t in graph.initializer})
    return [_onnx_op(node, shapes) for node in graph.node]


def _fix_onnx_input(model, name: str, batch: int, item_shape: Shape | None) -> None:
    (vi,) = [i for i in model.graph.input if i.name == name]
    tensor = vi.type.tensor_type
    if not tensor.HasField("shape") or len(tensor.shape.dim) == 0:
        if item_shape is None:
            raise NotCounted(f"input {name!r} has no declared shape and no item shape was given")
        for _ in range(1 + len(item_shape)):
            tensor.shape.dim.add()
    dims = tensor.shape.dim
    if item_shape is not None and len(dims) != 1 + len(item_shape):
        raise NotCounted(f"input {name!r} has {len(dims)} axes; items of shape {list(item_shape)} need {1 + len(item_shape)} (a batch axis first)")
    for k, d in enumerate(dims):
        if k == 0:
            d.Clear()
            d.dim_value = batch
        elif not d.HasField("dim_value") or d.dim_value <= 0:
            if item_shape is None:
                raise NotCounted(f"input {name!r}: axis {k} is dynamic ({d.dim_param or 'unnamed'}) and no item shape was given")
            d.Clear()
            d.dim_value = item_shape[k - 1]


def _onnx_shape(vi) -> Shape | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def _onnx_attr(node, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return a.i if a.type == a.INT else list(a.ints) if a.type == a.INTS else default
    return default


def _onnx_op(node, shapes: dict[str, Shape | None]) -> Op:
    t, ins, outs = node.op_type, [i for i in node.input if i], list(node.output)
    name = node.name or f"{t} -> {', '.join(outs)}"
    in_shapes, out_shapes = [shapes.get(i) for i in ins], [shapes.get(o) for o in outs]
    op = Op(t, name, ins, outs, "other")
    out = _elements(out_shapes[0]) if out_shapes else None
    if t == "Constant":
        op.kind = "const"
    elif t in ONNX_MATMUL:
        op.kind, op.operands = "matmul", (0, 1)
        a, w = (in_shapes + [None, None])[:2]
        if a is None or w is None or out is None:
            raise NotCounted(f"node {name!r} ({t}): ONNX shape inference cannot resolve its operand shapes (dynamic shapes); its FLOPs cannot be counted")
        if t == "Conv":
            op.flops = 2 * out * math.prod(w[1:])
        elif t == "ConvTranspose":
            op.flops = 2 * math.prod(a) * math.prod(w[1:])
        elif t == "Gemm":
            op.flops = 2 * out * (a[0] if _onnx_attr(node, "transA", 0) else a[1])
        else:
            op.flops = 2 * out * a[-1]
    else:
        _other_work(op, ONNX_TABLE, in_shapes, out_shapes, lambda: _onnx_attr(node, "kernel_shape"))
    return op


# ------------------------------------------------------------------ SavedModel
TF_MATMUL = {  # op -> (its multiplicands, the dot product's length from (input shapes, attributes))
    "Conv2D": ((0, 1), lambda s, a: math.prod(s[1][:-1])),
    "Conv3D": ((0, 1), lambda s, a: math.prod(s[1][:-1])),
    "DepthwiseConv2dNative": ((0, 1), lambda s, a: math.prod(s[1][:-2])),
    "Conv2DBackpropInput": ((1, 2), lambda s, a: math.prod(s[1][:-1])),  # per element of out_backprop (input 2)
    "MatMul": ((0, 1), lambda s, a: s[0][0] if a("transpose_a") else s[0][1]),
    "BatchMatMul": ((0, 1), lambda s, a: s[0][-2] if a("adj_x") else s[0][-1]),
    "BatchMatMulV2": ((0, 1), lambda s, a: s[0][-2] if a("adj_x") else s[0][-1]),
    "BatchMatMulV3": ((0, 1), lambda s, a: s[0][-2] if a("adj_x") else s[0][-1]),
}
TF_ELEMENTWISE = frozenset(
    "Add AddV2 AddN Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod Maximum Minimum Relu Relu6 Elu Selu LeakyRelu Sigmoid Tanh "
    "Softplus Softsign Exp Log Log1p Sqrt Rsqrt Square SquaredDifference Neg Abs Pow Erf BiasAdd Select SelectV2 Greater Less "
    "Equal NotEqual GreaterEqual LessEqual LogicalAnd LogicalOr LogicalNot ClipByValue Floor Ceil Round Sign Reciprocal Gelu "
    "ResizeBilinear ResizeNearestNeighbor".split()
)
TF_NORMALIZATION = {"FusedBatchNorm": 2, "FusedBatchNormV2": 2, "FusedBatchNormV3": 2}
TF_SOFTMAX = frozenset({"Softmax", "LogSoftmax"})
TF_POOL = frozenset({"MaxPool", "MaxPoolV2", "AvgPool", "MaxPool3D", "AvgPool3D"})
TF_REDUCTION = frozenset("Mean Sum Max Min Prod ArgMax ArgMin All Any TopKV2".split())
TF_DATA = frozenset(
    "Reshape Identity IdentityN Placeholder Cast Transpose ConcatV2 Concat Pack Unpack StridedSlice Slice Shape ShapeN Size "
    "Squeeze ExpandDims Pad PadV2 MirrorPad Tile Fill ZerosLike OnesLike GatherV2 Range NoOp Split SplitV StopGradient "
    "PreventGradient BroadcastTo Rank SpaceToDepth DepthToSpace".split()
)
TF_CONTROL = frozenset({"PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If", "StatelessIf", "Case"})
TF_TABLE = OpTable(TF_NORMALIZATION, TF_ELEMENTWISE, TF_SOFTMAX, TF_POOL, TF_REDUCTION, TF_DATA, TF_CONTROL)


def _savedmodel_counts(model, item_shape: Shape | None) -> dict[str, Any]:
    from dawnpipe.programs import model_files as models

    try:
        tf = tensorflow()
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    except ModuleNotFoundError:
        raise NotCounted("TensorFlow is not installed in this environment; a SavedModel's graph is read with it") from None
    if "saved_model.pb" not in (model.files or {}):
        raise NotCounted("no saved_model.pb: not a TensorFlow SavedModel")
    try:
        models.check_savedmodel_ops(model)  # refused before TensorFlow loads anything of it
    except DawnpipeError as e:
        raise NotCounted(str(e)) from None
    with models.savedmodel_dir(model) as root:
        try:
            loaded = tf.saved_model.load(str(root))  # kept referenced: its variables are read while freezing
            frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
        except Exception as e:  # TensorFlow's own error types: the program's file, named
            raise NotCounted(f"TensorFlow cannot load and freeze its serving_default ({_first_line(e)})") from None
    graph_def = frozen.graph.as_graph_def()
    placeholders = [n for n in graph_def.node if n.op == "Placeholder"]
    if len(placeholders) != 1:
        raise NotCounted(f"its frozen serving_default takes {len(placeholders)} inputs; the contract's model takes one (a batch of items)")
    declared = frozen.inputs[0].shape
    if declared.rank is None and item_shape is None:
        raise NotCounted("its input has no declared shape and no item shape was given")
    rest = item_shape if item_shape is not None else tuple(declared.as_list()[1:])
    if any(d is None for d in rest):
        raise NotCounted(f"its input's item axes are dynamic ({declared}) and no item shape was given")
    tallies = []
    for batch in BATCHES:
        graph = tf.Graph()
        with graph.as_default():
            fixed = tf.compat.v1.placeholder(frozen.inputs[0].dtype, (batch, *rest))
            try:
                tf.graph_util.import_graph_def(graph_def, input_map={placeholders[0].name: fixed}, name="")
            except Exception as e:
                raise NotCounted(f"its graph does not take items of shape {list(rest)} ({_first_line(e)})") from None
        ops = [_tf_op(o) for o in graph.get_operations() if o.type != "Placeholder"]
        tallies.append(tally(ops, set(), batch))
    floats = (tf.float32, tf.float16, tf.float64, tf.bfloat16)
    parameters = sum(
        tf.TensorShape(n.attr["value"].tensor.tensor_shape).num_elements() for n in graph_def.node if n.op == "Const" and n.attr["dtype"].type in floats
    )
    return per_item(*tallies, int(parameters))


def _tf_shape(tensor) -> Shape | None:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return None if dims is None or any(d is None for d in dims) else tuple(dims)


def _tf_op(o) -> Op:
    t, name = o.type, o.name
    ins, outs = [i.name for i in o.inputs], [x.name for x in o.outputs]
    in_shapes, out_shapes = [_tf_shape(i) for i in o.inputs], [_tf_shape(x) for x in o.outputs]
    op = Op(t, name, ins, outs, "other")
    out = _elements(out_shapes[0]) if out_shapes else None

    def attr(key: str):
        try:
            return o.get_attr(key)
        except ValueError:
            return None

    if t == "Const":
        op.kind = "const"
    elif t in TF_MATMUL:
        operands, length = TF_MATMUL[t]
        op.kind, op.operands = "matmul", operands
        if any(in_shapes[k] is None for k in operands) or out is None:
            raise NotCounted(f"node {name!r} ({t}): TensorFlow cannot resolve its operand shapes (dynamic shapes); its FLOPs cannot be counted")
        driving = _elements(in_shapes[2]) if t == "Conv2DBackpropInput" else out
        op.flops = 2 * driving * length(in_shapes, attr)
    else:
        _other_work(op, TF_TABLE, in_shapes, out_shapes, lambda: attr("ksize"))
    return op
