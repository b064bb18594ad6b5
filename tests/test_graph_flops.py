"""FLOPs of a program's model counted from its graph (dawnpipe.programs.graph_flops),
checked against dawnpipe's own counter (torch.utils.flop_counter over a real
forward and backward pass) on the same networks, and the utilization a
program run gets from them (dawnpipe.metrics.program_flops).

Tolerance: none. For networks of convolutions and linear layers the graph's
count equals the torch counter's to the FLOP, forward and training alike:
both count 2 FLOPs per multiply-add of the same matrix multiplies and
convolutions, and both leave out what the other does not see (a batch norm
folded into its convolution by the ONNX export is element-wise work that
neither counts; ReLU, pooling and the residual adds are not counted either).
Where the two can differ: a grouped convolution (torch's counter counts its
weight gradient as if it were ungrouped, the graph at its forward cost), an
op that only exists in training (dropout's mask) or that one side
decomposes into a matrix multiply the other does not see, and a parameter
used only by an element-wise op before the first layer (the graph takes it
as fixed preprocessing, so that layer's input gradient is not counted).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_cli
from onnx import TensorProto, helper

from dawnpipe.metrics.flops import per_item
from dawnpipe.programs import graph_flops, model_files

ROOT = Path(__file__).resolve().parents[1]


def onnx_bytes(model: torch.nn.Module, example: torch.Tensor) -> bytes:
    """The model as a program exports it (TorchScript exporter, dynamic batch)."""
    buf = io.BytesIO()
    model.eval()
    torch.onnx.export(
        model, (example,), buf, dynamo=False, input_names=["images"], output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}
    )
    return buf.getvalue()


def torch_forward_per_item(model: torch.nn.Module, shape: tuple[int, ...]) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    model.eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(4, *shape))
    return counter.get_total_flops() / 4


def torch_training_per_item(model: torch.nn.Module, shape: tuple[int, ...]) -> float:
    """dawnpipe's own count (dawnpipe.metrics.flops.per_item: forward + backward with a cross-entropy loss)."""
    return per_item(lambda n: (torch.randn(n, *shape), torch.randint(0, 10, (n,))), model, batch_size=64)["flops_per_item"]


# ------------------------------------------------------------------ against dawnpipe's counter
@pytest.mark.parametrize(("name", "kwargs"), [("fastnet", {"widths": [16, 32, 64, 128]}), ("resnet20", {})])
def test_zoo_networks_exported_to_onnx_count_as_dawnpipes_counter(name, kwargs):
    from dawnpipe.models.torch_zoo import build_model

    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_classes=10, **kwargs)
    training = torch_training_per_item(model, (1, 28, 28))
    forward = torch_forward_per_item(model, (1, 28, 28))
    rec = graph_flops.count_onnx(onnx_bytes(model, torch.randn(2, 1, 28, 28)))
    assert rec["counted"], rec.get("reason")
    assert rec["forward_flops_per_item"] == forward
    assert rec["training_flops_per_item"] == rec["flops_per_item"] == training
    stem = 2 * 1 * kwargs.get("widths", [16])[0] * 9 * 28 * 28  # the first convolution: its input gradient is not needed
    assert training == 3 * forward - stem
    assert "BatchNormalization" not in rec["other_flops_per_item"]  # folded into the convolutions by the export
    assert rec["other_flops_per_item"]["Relu"] > 0 and rec["method"] == graph_flops.METHOD


def _example(name: str):
    sys.path.insert(0, str(ROOT / "examples" / "programs"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def example_models(tmp_path_factory) -> dict[str, model_files.ModelFile]:
    """The example programs' networks as their runs hand them over: weights
    saved as the programs save them, exported by dawnpipe's export worker with
    the preprocessing of their entries (config/entries/*-fmnist.yaml)."""
    import yaml

    from dawnpipe.programs.weights import ExportWorker

    out = tmp_path_factory.mktemp("example-models")
    torch.save(_example("torch_fmnist").Net().state_dict(), out / "epoch2.pt")
    _example("keras_fmnist").build_model().save_weights(str(out / "epoch1.weights.h5"))
    made = {}
    for name, framework, weights in (("torch-fmnist", "torch", "epoch2.pt"), ("keras-fmnist", "keras", "epoch1.weights.h5")):
        program = yaml.safe_load((ROOT / f"config/entries/{name}.yaml").read_text())["program"]
        with ExportWorker(program, ROOT / "examples/programs", framework, item_shape=(28, 28), log=out / f"{name}.log") as worker:
            made[name] = worker.export(out / weights, out / name)
    return made


def test_a_programs_own_model_with_its_normalisation_inside(example_models):
    """The example program's weights exported with its entry's preprocessing: the
    constants of (x * scale - mean) / std are preprocessing, not parameters, so
    the first convolution's input gradient is still not counted, as in torch."""
    net = _example("torch_fmnist").Net()
    rec = graph_flops.count_onnx(example_models["torch-fmnist"].onnx)
    assert rec["counted"]
    assert rec["training_flops_per_item"] == torch_training_per_item(net, (1, 28, 28))
    assert rec["forward_flops_per_item"] == torch_forward_per_item(net, (1, 28, 28))
    assert {"Div", "Sub"} <= set(rec["other_flops_per_item"])


def test_a_keras_savedmodel_counts_as_the_same_network_in_torch(example_models):
    """The Keras example is fastnet's network (16..128) in Keras 3, its weights
    exported as a SavedModel: its frozen serving graph counts what torch's
    counter counts on fastnet."""
    from dawnpipe.models.torch_zoo import build_model

    rec = graph_flops.count_model(example_models["keras-fmnist"], (28, 28))
    assert rec["counted"], rec.get("reason")
    fastnet = build_model("fastnet", in_channels=1, num_classes=10, widths=[16, 32, 64, 128])
    assert rec["forward_flops_per_item"] == torch_forward_per_item(fastnet, (1, 28, 28))
    assert rec["training_flops_per_item"] == torch_training_per_item(fastnet, (1, 28, 28))
    assert set(rec["by_op"]) == {"Conv2D", "MatMul"}


# ------------------------------------------------------------------ graphs by hand
def _graph(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("custom", 1)])
    return model.SerializeToString()


def _weight(name: str, *shape: int):
    return helper.make_tensor(name, TensorProto.FLOAT, shape, np.zeros(shape, dtype=np.float32).ravel().tolist())


def _x(*shape):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *shape])


def test_two_layers_by_hand_follow_autograds_rule():
    # layer 1 (8 -> 6) on data: forward 96 + weight gradient 96; layer 2 (6 -> 4): forward 48 + input and weight gradients 96
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    rec = graph_flops.count_onnx(_graph(nodes, [_x(8)], [out], [_weight("w1", 6, 8), _weight("b1", 6), _weight("w2", 6, 4)]))
    assert rec["forward_flops_per_item"] == 96 + 48
    assert rec["training_flops_per_item"] == 96 * 2 + 48 * 3
    assert rec["by_op"] == {"Gemm": 96.0, "MatMul": 48.0}
    assert rec["parameters"] == 6 * 8 + 6 + 6 * 4


def test_work_that_does_not_grow_with_the_batch_is_not_per_item():
    # a matrix multiply of two weights (the same at any batch) beside the layer: not spread over the items
    nodes = [helper.make_node("MatMul", ["a", "b"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"])]
    rec = graph_flops.count_onnx(
        _graph(nodes, [_x(8)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_weight("a", 8, 100), _weight("b", 100, 4)])
    )
    assert rec["forward_flops_per_item"] == 2 * 8 * 4


def test_an_unknown_op_on_a_large_tensor_is_refused_naming_it():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Attention", ["h"], ["y"], domain="custom", name="mystery")]
    rec = graph_flops.count_onnx(_graph(nodes, [_x(64)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_weight("w", 64, 4096)]))
    assert not rec["counted"]
    assert (
        rec["reason"]
        == "node 'mystery' (Attention, an op dawnpipe's FLOP table does not know) has a tensor of 8,192 elements at batch 2; its work cannot be counted"
    )


def test_a_small_unknown_op_is_shape_arithmetic_and_listed():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Tag", ["s"], ["t"], domain="custom"), helper.make_node("MatMul", ["x", "w"], ["y"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "t")]
    rec = graph_flops.count_onnx(_graph(nodes, [_x(8)], outs, [_weight("w", 8, 4)]))
    assert rec["counted"] and rec["ignored_ops"] == ["Tag"] and rec["forward_flops_per_item"] == 64


def test_a_shape_that_depends_on_the_data_is_refused():
    # Reshape to a size computed from the values of x: no shape inference can know it
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Cast", ["m"], ["k"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["k", "one"], ["k1"]),
        helper.make_node("Concat", ["minus_one", "k1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="head"),
    ]
    consts = [helper.make_tensor("one", TensorProto.INT64, [1], [1]), helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]), _weight("w", 8, 4)]
    rec = graph_flops.count_onnx(_graph(nodes, [_x(8)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts))
    assert not rec["counted"]
    assert rec["reason"].startswith("node 'head' (MatMul): ONNX shape inference cannot resolve its operand shapes (dynamic shapes)")


def test_what_is_not_a_one_input_onnx_model_is_refused():
    assert graph_flops.count_onnx(b"\x00not a model at all")["reason"].startswith("not an ONNX model")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    two = _graph([helper.make_node("MatMul", ["x", "z"], ["y"])], [_x(8), helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 4])], [y])
    assert graph_flops.count_onnx(two)["reason"] == "the model takes 2 inputs; the contract's model takes one (a batch of items)"
    no_work = _graph([helper.make_node("Relu", ["x"], ["y"])], [_x(8)], [y])
    assert "nothing of dawnpipe's model FLOPs" in graph_flops.count_onnx(no_work)["reason"]


def test_symbolic_item_axes_take_the_item_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])
    graph = _graph([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_weight("w", 8, 4)])
    assert "axis 1 is dynamic (features)" in graph_flops.count_onnx(graph)["reason"]
    assert graph_flops.count_onnx(graph, item_shape=(8,))["forward_flops_per_item"] == 64


# ------------------------------------------------------------------ a program run's utilization
def _program_run(tmp_path: Path, model: model_files.ModelFile, *, items_given=None, reported=7) -> tuple[Path, Path, Path, Path]:
    """A program run's files as the harness writes them: model.pt (the example's network), run.json, train.parquet."""
    from dawnpipe.data.arrays import save_split
    from dawnpipe.fileio import write_json
    from dawnpipe.train.logbook import Logbook

    data = tmp_path / "prepared"
    data.mkdir()
    rng = np.random.default_rng(0)
    classes = [str(i) for i in range(10)]
    splits = {
        s: save_split(data, s, rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n), classes, None)
        for s, n in (("train", 1000), ("test", 50))
    }
    write_json(data / "manifest.json", {"task": "fashion-mnist", "format": "npy-uint8", "classes": classes, "splits": splits})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model_files.save_archive(run_dir / "model.pt", model, {"measured": 91.0, "claimed": 91.0, "reached": True})
    rows = [
        {
            "epoch": e,
            "hours": 12.0 * e / 3600,
            "wall_hours": 15.0 * e / 3600,
            "top1Accuracy": acc,
            "train_loss": float("nan"),
            "eval_loss": float("nan"),
            "eval_seconds": 3.0,
            "checkpoint_seconds": 0.0,
            "epoch_train_seconds": 12.0,
            "lost_seconds": 0.0,
            "lr": float("nan"),
            "items_per_second": reported / 12.0,  # what the program said it trained on: not used
        }
        for e, acc in ((1, 85.0), (2, 91.0))
    ]
    Logbook(("top1Accuracy",), "top1Accuracy", 90.0, rows, demo=True).write(run_dir / "train.tsv", run_dir / "train.parquet")
    program = {
        "contract": 1,
        "model_format": "onnx",
        "claims": [{"epoch": e, "claimed": acc, "measured": acc, "agrees": True} for e, acc in ((1, 85.0), (2, 91.0))],
        "verified_epoch": 2,
        "excluded": None,
        "clock": {"epoch": 2, "dawnpipe_seconds": 24.0, "program_seconds": 24.0, "agrees": True},
        "startup_seconds": 1.0,
        "verify_seconds": 0.5,
        "exit": {"code": 0, "stopped_by_dawnpipe": None, "run_stop_status": "success"},
        "logged": {"train_samples": reported},
    }
    if items_given is not None:
        program["items_given"] = {"train": items_given}
    write_json(
        run_dir / "run.json",
        {
            "entry": "prog",
            "seed": 0,
            "task": "fashion-mnist",
            "model": "net.py",
            "framework": "program",
            "hardware": "local-cpu",
            "threshold": 90.0,
            "official_threshold": 93.0,
            "demo_threshold": True,
            "settings": {"entry": {"program": {"precision": "fp32"}}, "train_limit": 600},
            "environment": {"device": "cpu", "cpu_model": "Test CPU", "threads": 2},
            "telemetry": {"cpu_peak": {"fp32_tflops": 0.5, "memory_gbps": 10.0, "method": "test probe"}},
            "program": program,
        },
    )
    flops = tmp_path / "flops.json"
    write_json(flops, {"entry": "prog", "counted": False, "reason": "a program entry: estimated per run"})
    return run_dir, data, flops, tmp_path / "utilization.json"


def test_a_program_runs_utilization_is_estimated_from_its_model_graph(tmp_path, example_models):
    run_dir, data, flops, out = _program_run(tmp_path, example_models["torch-fmnist"])
    proc = run_cli(
        "utilization",
        *("--log-parquet", str(run_dir / "train.parquet"), "--run-json", str(run_dir / "run.json"), "--flops", str(flops)),
        *("--model", str(run_dir / "model.pt"), "--data", str(data), "--out", str(out)),
        check=True,
    )
    rec = json.loads(out.read_text())
    per = torch_training_per_item(_example("torch_fmnist").Net(), (1, 28, 28))
    assert rec["flops"]["counted"] and rec["flops"]["flops_per_item"] == per
    assert rec["flops"]["method"].startswith("estimated from the model graph (onnx model of epoch 2")
    est = rec["estimate"]
    # the 600 items of train_limit (not the 1,000 prepared, not the 7 the program reported) x 2 epochs, over dawnpipe's 24 s
    assert (est["train_items"], est["epochs"], est["training_seconds"]) == (600, 2, 24.0)
    assert est["training_flops"] == per * 600 * 2
    assert est["achieved_tflops"] == pytest.approx(per * 1200 / 24 / 1e12)
    assert est["fraction_of_peak"] == pytest.approx(est["achieved_tflops"] / 0.5)
    assert rec["epochs"][0]["items_per_second"] == pytest.approx(600 / 12.0)
    assert "estimated from the model graph" in proc.stdout and "% of peak" in proc.stdout


def test_the_items_the_harness_says_it_gave_win_and_no_model_says_why(tmp_path, example_models):
    from dawnpipe.metrics import program_flops
    from dawnpipe.metrics.utilization import utilization

    run_dir, data, _, _ = _program_run(tmp_path, example_models["torch-fmnist"], items_given=480)
    run = json.loads((run_dir / "run.json").read_text())
    assert program_flops.train_items_given(run, data) == {"train": 480, "from": "run.json program.items_given.train"}
    flops, items = program_flops.run_flops(run, None, data)
    assert not flops["counted"] and "no model of the run" in flops["reason"]
    rec = utilization(pd.read_parquet(run_dir / "train.parquet"), run, flops, None, items_given=items)
    assert rec["estimate"]["achieved_tflops"] is None and rec["estimate"]["reason"].startswith("FLOPs not counted: no model")
    assert rec["achieved_tflops_median"] is None


def test_the_page_labels_a_program_runs_utilization(tmp_path, example_models):
    from dawnpipe.metrics import program_flops
    from dawnpipe.metrics.utilization import utilization
    from dawnpipe.report import telemetry_sections

    run_dir, data, _, _ = _program_run(tmp_path, example_models["torch-fmnist"])
    run = json.loads((run_dir / "run.json").read_text())
    flops, items = program_flops.run_flops(run, run_dir / "model.pt", data)
    util = utilization(pd.read_parquet(run_dir / "train.parquet"), run, flops, None, items_given=items)
    (row,) = telemetry_sections.energy_rows([{"run": run, "utilization": util}])
    assert row["flops_estimated"] and row["achieved_tflops"] == util["estimate"]["achieved_tflops"]
    assert telemetry_sections.roofline_by_device([{"run": run, "utilization": util}])[0]["chart"]  # no point (no intensity), still a chart


def test_a_model_file_that_is_no_graph_says_why():
    weights = model_files.ModelFile(1, "pt", files={"epoch1.pt": b"weights"}, source="epoch1.pt")
    assert graph_flops.count_model(weights)["reason"] == "a pt model: only an ONNX graph or a SavedModel's serving function is counted"
    empty = model_files.ModelFile(1, model_files.SAVEDMODEL, files={"variables/variables.index": b""}, source="epoch1.savedmodel")
    assert graph_flops.count_model(empty) == {"counted": False, "method": graph_flops.METHOD, "reason": "no saved_model.pb: not a TensorFlow SavedModel"}
