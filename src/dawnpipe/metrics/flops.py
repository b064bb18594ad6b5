"""flops: model FLOPs and operand bytes of one training step, per item, once per entry.

    python -m dawnpipe flops --entry config/entries/fastnet.yaml \\
        --data data/prepared/fashion-mnist --out results/flops/fastnet.json

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` over a
forward and a backward pass (matrix multiplies and convolutions, 2 FLOPs per
multiply-add; element-wise work is not counted, the usual "model FLOPs"
convention behind DAWNBench's utilization figures). The optimizer step is
not included.

Bytes are an operand-traffic model: every ATen operator reads its tensor
inputs and writes its outputs once, with no reuse through caches. That
overstates the traffic, so the arithmetic intensity (FLOPs per byte) it
gives is a lower bound; it is the x-axis of the roofline chart.

Both are measured on the CPU at two small batch sizes with the entry's
precision (autocast) and memory format, and extrapolated linearly to the
entry's batch size: FLOPs grow with the batch, while the weights' bytes do
not, which is what makes intensity depend on the batch size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json

COUNT_BATCHES = (2, 4)


def _counters():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class OperandBytes(TorchDispatchMode):
        """Bytes of every tensor each ATen operator takes and returns."""

        def __init__(self):
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten((args, kwargs))[0] + tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
            return out

    return OperandBytes


def measure_step(model, x, y, precision: str = "fp32") -> tuple[int, int]:
    """(FLOPs, operand bytes) of one forward + backward pass of ``model`` on
    the batch (x, y) with a cross-entropy loss, on the CPU."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    OperandBytes = _counters()
    dtype = None if precision == "fp32" else torch.bfloat16  # fp16 autocast is CUDA-only; bf16 has the same element size
    model.train()
    with FlopCounterMode(display=False) as flops, OperandBytes() as traffic:
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(flops.get_total_flops()), int(traffic.bytes)


def per_item(make_batch: Callable[[int], tuple[Any, Any]], model, batch_size: int, precision: str = "fp32") -> dict[str, float]:
    """FLOPs and bytes per item at ``batch_size``, from two small batches."""
    (b1, b2) = COUNT_BATCHES
    f1, m1 = measure_step(model, *make_batch(b1), precision)
    f2, m2 = measure_step(model, *make_batch(b2), precision)
    flop_slope, byte_slope = (f2 - f1) / (b2 - b1), (m2 - m1) / (b2 - b1)
    flops_at = f1 + flop_slope * (batch_size - b1)
    bytes_at = m1 + byte_slope * (batch_size - b1)
    return {
        "flops_per_item": flops_at / batch_size,
        "bytes_per_item": bytes_at / batch_size,
        "arithmetic_intensity": flops_at / bytes_at if bytes_at > 0 else None,
        "step_flops": flops_at,
        "step_bytes": bytes_at,
    }


def count_entry(entry: dict[str, Any], data: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"entry": entry["id"], "task": entry["task"], "framework": entry["framework"], "model": entry["model"]}
    if entry["framework"] == "program":
        return {
            **record,
            "counted": False,
            "reason": "a program entry: its network is inside the program, so its FLOPs are estimated per run from the model graph "
            "of the model each run hands over (the utilization stage; dawnpipe.metrics.program_flops)",
        }
    if entry["framework"] != "pytorch":
        return {
            **record,
            "counted": False,
            "reason": f"FLOPs are counted for PyTorch entries only (torch.utils.flop_counter); this entry is {entry['framework']}",
        }
    from dawnpipe.tasks import get_task

    if get_task(entry["task"]).metric_column not in ("top1Accuracy", "top5Accuracy"):
        return {**record, "counted": False, "reason": f"FLOPs are counted for image-classification entries; {entry['task']} items are not images"}
    import torch

    from dawnpipe.data.loader import load_split, prepared_dir
    from dawnpipe.models.precision import used_precision
    from dawnpipe.models.torch_zoo import build_model

    split = load_split(prepared_dir(data, entry["task"]), "train", 1)
    shape = tuple(split.images.shape[1:])
    if len(shape) not in (2, 3):
        return {**record, "counted": False, "reason": f"{data}: items of shape {list(shape)} are not images"}
    channels = 1 if len(shape) == 2 else shape[2]
    hw = shape[:2]
    hp = entry["hyperparameters"]
    torch.manual_seed(0)
    try:
        model = build_model(entry["model"], in_channels=channels, num_classes=len(split.classes), **entry["model_args"])
    except ValueError as e:
        raise DawnpipeError(f"entry {entry['id']}: {e}") from None
    fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=fmt)

    def make_batch(n: int):
        x = torch.randn(n, channels, *hw).contiguous(memory_format=fmt)
        return x, torch.randint(0, len(split.classes), (n,))

    precision = used_precision(hp["precision"], "cpu")[0]  # counted on this CPU: auto as it computes here
    counts = per_item(make_batch, model, hp["batch_size"], precision)
    return {
        **record,
        "counted": True,
        **counts,
        "batch_size": hp["batch_size"],
        "precision": precision,
        "item_shape": [channels, *hw],
        "parameters": sum(p.numel() for p in model.parameters()),
        "method": "torch.utils.flop_counter.FlopCounterMode (forward + backward; matmul/conv FLOPs); "
        "operand bytes of every ATen op; measured at batches "
        f"{COUNT_BATCHES[0]} and {COUNT_BATCHES[1]} on the CPU, extrapolated to batch {hp['batch_size']}",
        "torch_version": torch.__version__,
    }


def configure(p) -> None:
    p.add_argument("--entry", required=True, type=Path, help="entry YAML (config/entries/<id>.yaml), or a study variant: <study file>#<variant id>")
    p.add_argument(
        "--entries-dir", type=Path, default=None, help="where a study variant's base entry is (default: config/entries beside the study's directory)"
    )
    p.add_argument("--data", required=True, type=Path, help="prepared data of the entry's task, or a directory of prepared sets (item shape, classes)")
    p.add_argument("--out", required=True, type=Path, help="output JSON")


def run(args) -> int:
    from dawnpipe.studies import load_entry_ref

    entry = load_entry_ref(args.entry, args.entries_dir)
    record = count_entry(entry, args.data)
    write_json(args.out, record)
    if record["counted"]:
        print(
            f"flops: {entry['id']}: {record['flops_per_item'] / 1e6:.1f} MFLOP per item (forward + backward), "
            f"{record['bytes_per_item'] / 1e6:.2f} MB operand traffic, intensity {record['arithmetic_intensity']:.1f} FLOP/byte "
            f"at batch {record['batch_size']} ({record['precision']})"
        )
    else:
        print(terminal_safe(f"flops: {entry['id']}: not counted: {record['reason']}"))
    return 0
