"""The export worker of program contract 2 (docs/programs.md): the process
that turns the weights a program saved into a model file dawnpipe scores.

    python -m dawnpipe.programs.export_worker    # started by dawnpipe.programs.weights.ExportWorker

Building the network means importing the program's module and calling its
factory: running the program's code. That code runs here, never in dawnpipe's
own process, which holds the test set. The worker is given no data (only the
weights files it is asked to export, and the environment the entry's
``program.env`` gives the program), runs in the program's workdir, is
started under ``unshare --net`` where the system allows, so the program's code
it runs has no network either, and is kept stopped (SIGSTOP) except while it
answers a request. One worker per run: the framework and the
program's module are imported once, and each epoch's weights are one request.

Protocol, one JSON object per line:

    stdin, first line:  {"framework": "torch"|"keras", "workdir": DIR, "factory": "module:callable",
                         "kwargs": {...}, "preprocessing": {"scale", "mean", "std", "layout"},
                         "item_shape": [28, 28], "threads": N}
    answer:             {"ready": true, "runtime": "torch 2.14.1 ...", "interfaces": ["lo"]}
                        or {"ready": false, "error": REASON}
    stdin, each request {"id": N, "weights": PATH, "dest": PATH}   (absolute paths)
    answer:             {"id": N, "ok": true, "format": "onnx"|"savedmodel", "seconds": S}
                        or {"id": N, "ok": false, "error": REASON}

The model written to ``dest`` (a temporary name, then renamed) takes a float32
batch of items exactly as the prepared arrays store them ([batch, 28, 28] or
[batch, 32, 32, 3], raw values) and gives the network's output [batch,
classes]: the entry's preprocessing (x * scale, (x - mean) / std per channel,
the network's layout) is inside it. torch: ONNX (opset 17, dynamic batch
axis). Keras: a SavedModel holding the weights only, its ``serving_default``
taking ``images`` and giving ``logits``, without saver ops (as
examples/programs/keras_fmnist.py writes one).

A REASON is one line naming the entry field (``program.model.factory``) or the
weights file; the traceback goes to the worker's stderr, which the harness
keeps in a log. Whatever the program's code prints cannot reach the answers:
file descriptor 1 and ``sys.stdout`` point at stderr, the answers go to a
private duplicate of the original stdout, and the program's code sees
/dev/null as stdin.

This module imports only the standard library at the top (the framework when
set up) and nothing of dawnpipe beyond its package. It is started with
``python -P`` and puts the program's workdir first on ``sys.path`` only once
the framework is imported, so a file of the program cannot replace either.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dawnpipe.tensorflow_import import tensorflow

OPSET = 17  # what examples/programs/torch_fmnist.py exports; ONNX Runtime 1.31 runs it
FACTORY = "program.model.factory"
LAYOUT = "program.model.preprocessing.layout"
INPUT, OUTPUT = "images", "logits"
CHECK_BATCH = 2  # items of the zero batch the network is tried on (a batch of 1 hides a wrong batch axis)


class Refusal(Exception):
    """A reason the answer carries: one line, already naming the entry field or the weights file."""


def one_line(error: BaseException) -> str:
    """``Type: first line`` of an exception (a weights_only refusal: its informative line)."""
    lines = [s.strip() for s in str(error).strip().splitlines() if s.strip()]
    # torch's own advice (allowlist the global) is not dawnpipe's: a .pt is read with weights_only, always
    informative = [s.split(" Please use ")[0] for s in lines if s.startswith("WeightsUnpickler error:")]
    text = (informative or lines or [""])[0]
    if not informative and text.endswith(":") and len(lines) > 1:  # "... Example error message for object X:" and the example
        text = f"{text} {lines[1]}"
    name = type(error).__name__
    return (f"{name}: {text}" if text else name)[:400]


def resolve_factory(spec: str):
    """The callable ``module:attr.path`` names, imported from the workdir."""
    module_name, _, attr_path = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except (Exception, SystemExit) as e:
        raise Refusal(f"field '{FACTORY}' ({spec}): importing {module_name} from the program's workdir fails ({one_line(e)})") from e
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Refusal(f"field '{FACTORY}' ({spec}): module {module_name} has no {attr_path}") from None
        except (Exception, SystemExit) as e:
            raise Refusal(f"field '{FACTORY}' ({spec}): reading {attr_path} fails ({one_line(e)})") from e
    if not callable(obj):
        raise Refusal(f"field '{FACTORY}' ({spec}): {attr_path} is a {type(obj).__name__}, not a callable that builds the network")
    return obj


def shape_words(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_logits(out, is_tensor, spec: str, where: str) -> None:
    """The network's output on the check batch: one [batch, classes] tensor, as the contract scores it."""
    if not is_tensor(out):
        raise Refusal(f"field '{FACTORY}' ({spec}): the network gives a {type(out).__name__} {where}; the contract takes one tensor of logits [batch, classes]")
    shape = tuple(int(d) for d in out.shape)
    if len(shape) != 2 or shape[0] != CHECK_BATCH:
        raise Refusal(
            f"field '{FACTORY}' ({spec}): the network gives shape {shape_words(shape)} {where}; the contract takes logits [batch, classes] "
            f"(here [{CHECK_BATCH}, classes])"
        )


def replace(tmp: Path, dest: Path) -> None:
    """``tmp`` renamed to ``dest``; a model already there (an earlier try of the same epoch) is replaced."""
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def discard(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink()


# ------------------------------------------------------------------ the frameworks
class Export:
    """What both frameworks share: building the network and trying it on stored items.
    A framework says its network type, how it runs a zero batch behind the
    preprocessing, how it loads weights and how it writes its model file."""

    format = ""
    network_type: type = object
    network_words = ""

    def __init__(self, setup: Mapping[str, Any]):
        self.setup = setup

    def run_zeros(self, net, items: list[int]):
        """``net``'s output for a zero batch of stored items of shape ``items``, behind the preprocessing."""
        raise NotImplementedError

    def is_tensor(self, out) -> bool:
        raise NotImplementedError

    def build(self, factory):
        """The factory's network, tried on a zero batch of items (which also builds a subclassed Keras model)."""
        spec = self.setup["factory"]
        try:
            net = factory(**self.setup["kwargs"])
        except (Exception, SystemExit) as e:
            raise Refusal(f"field '{FACTORY}' ({spec}): building the network fails ({one_line(e)})") from e
        if not isinstance(net, self.network_type):
            raise Refusal(f"field '{FACTORY}' ({spec}): returns a {type(net).__name__}, not a {self.network_words}")
        self.check(net)
        return net

    def check(self, net) -> None:
        """The network, behind the preprocessing, answers a zero batch with logits: factory and layout fit."""
        spec = self.setup["factory"]
        items = [CHECK_BATCH, *self.setup["item_shape"]]
        try:
            out = self.run_zeros(net, items)
        except (Exception, SystemExit) as e:
            raise Refusal(
                f"field '{FACTORY}' ({spec}): the network fails on a batch of stored items {shape_words(items)} "
                f"given to it in field '{LAYOUT}' {self.setup['preprocessing']['layout']} ({one_line(e)})"
            ) from e
        check_logits(out, self.is_tensor, spec, f"for a batch of items {shape_words(items)}")


class TorchExport(Export):
    """A torch.nn.Module from the factory, its state_dict from ``epoch<N>.pt``, ONNX out."""

    format = "onnx"
    network_words = "torch.nn.Module"

    def __init__(self, setup: Mapping[str, Any]):
        import torch

        super().__init__(setup)
        torch.set_num_threads(int(setup["threads"]))
        self.torch, self.network_type = torch, torch.nn.Module
        self.runtime = f"torch {torch.__version__} (ONNX opset {OPSET})"

    def is_tensor(self, out) -> bool:
        return isinstance(out, self.torch.Tensor)

    def run_zeros(self, net, items: list[int]):
        with self.torch.no_grad():
            return self.preprocessed(net)(self.torch.zeros(items))

    def preprocessed(self, net):
        """``net`` behind the entry's preprocessing, in eval mode: it takes the stored items."""
        torch = self.torch
        prep, rank = self.setup["preprocessing"], len(self.setup["item_shape"])
        channels_first = prep["layout"] == "NCHW"
        shape = (1, -1, 1, 1) if channels_first else (1, 1, 1, -1)

        class Preprocessed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net
                self.register_buffer("mean", torch.tensor(prep["mean"], dtype=torch.float32).reshape(shape))
                self.register_buffer("std", torch.tensor(prep["std"], dtype=torch.float32).reshape(shape))

            def forward(self, images):
                x = images * float(prep["scale"])
                if rank == 2:  # [batch, H, W]: the channel axis the network expects
                    x = x.unsqueeze(1 if channels_first else -1)
                elif channels_first:  # stored [batch, H, W, C]
                    x = x.permute(0, 3, 1, 2)
                return self.net((x - self.mean) / self.std)

        return Preprocessed().eval()

    def load(self, net, weights: Path) -> None:
        torch, spec = self.torch, self.setup["factory"]
        try:
            state = torch.load(weights, weights_only=True, map_location="cpu")
        except Exception as e:
            raise Refusal(
                f"{weights}: torch.load(weights_only=True) refuses it ({one_line(e)}); a .pt holds torch.save(model.state_dict()), no other object"
            ) from e
        if not isinstance(state, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
            raise Refusal(f"{weights}: holds a {type(state).__name__} that is not a state_dict (names -> tensors); save torch.save(model.state_dict(), ...)")
        own = net.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        shapes = [f"{k} {list(state[k].shape)} (the network's: {list(own[k].shape)})" for k in own if k in state and state[k].shape != own[k].shape]
        problems = [
            f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
            for label, names in (("missing", missing), ("not in the network", unexpected), ("other shapes", shapes))
            if names
        ]
        if problems:
            raise Refusal(f"{weights}: its weights do not fit the network field '{FACTORY}' ({spec}) builds; " + "; ".join(problems))
        try:
            net.load_state_dict(state, strict=True)
        except Exception as e:
            raise Refusal(f"{weights}: the network field '{FACTORY}' ({spec}) builds does not take them ({one_line(e)})") from e

    def export(self, net, dest: Path) -> None:
        torch = self.torch
        model = self.preprocessed(net)
        items = torch.zeros([CHECK_BATCH, *self.setup["item_shape"]])
        with torch.no_grad():
            check_logits(model(items), self.is_tensor, self.setup["factory"], "with these weights")
        tmp = dest.with_name(f".{dest.name}.tmp")
        try:
            torch.onnx.export(
                model,
                (items,),
                str(tmp),
                dynamo=False,
                opset_version=OPSET,
                input_names=[INPUT],
                output_names=[OUTPUT],
                dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}},
            )
            replace(tmp, dest)
        except Exception as e:
            discard(tmp)
            raise Refusal(f"field '{FACTORY}' ({self.setup['factory']}): torch.onnx.export of its network fails ({one_line(e)})") from e


# ------------------------------------------------------------------ keras
class KerasExport(Export):
    """A keras.Model from the factory (TensorFlow backend), ``load_weights(epoch<N>.weights.h5)``, a SavedModel out."""

    format = "savedmodel"
    network_words = "keras.Model"

    def __init__(self, setup: Mapping[str, Any]):
        os.environ["KERAS_BACKEND"] = "tensorflow"  # a SavedModel needs it; a .weights.h5 file is the same under any backend
        tf = tensorflow("2")
        import keras

        super().__init__(setup)
        threads = int(setup["threads"])
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self.tf, self.keras, self.network_type = tf, keras, keras.Model
        self.runtime = f"keras {keras.__version__}, tensorflow {tf.__version__}"

    def is_tensor(self, out) -> bool:
        return bool(self.tf.is_tensor(out))

    def run_zeros(self, net, items: list[int]):
        return net(self.preprocess(self.tf.zeros(items)), training=False)

    def preprocess(self, images):
        tf, prep, rank = self.tf, self.setup["preprocessing"], len(self.setup["item_shape"])
        channels_first = prep["layout"] == "NCHW"
        shape = (1, -1, 1, 1) if channels_first else (1, 1, 1, -1)
        x = images * float(prep["scale"])
        if rank == 2:
            x = tf.expand_dims(x, 1 if channels_first else -1)
        elif channels_first:
            x = tf.transpose(x, (0, 3, 1, 2))
        mean = tf.reshape(tf.constant(prep["mean"], tf.float32), shape)
        std = tf.reshape(tf.constant(prep["std"], tf.float32), shape)
        return (x - mean) / std

    def load(self, net, weights: Path) -> None:
        try:
            net.load_weights(str(weights))
        except Exception as e:
            raise Refusal(f"{weights}: Keras load_weights into the network field '{FACTORY}' ({self.setup['factory']}) builds fails ({one_line(e)})") from e

    def export(self, net, dest: Path) -> None:
        tf = self.tf
        preprocess, item_shape = self.preprocess, list(self.setup["item_shape"])

        class Serving(tf.Module):
            """The weights (tracked: saved; no optimizer state) and the one signature."""

            def __init__(self):
                super().__init__()
                self.weights = list(net.weights)
                self.predict = lambda images: net(preprocess(images), training=False)  # a plain function: not tracked
                self.serve = tf.function(
                    lambda images: {OUTPUT: tf.cast(self.predict(images), tf.float32)},
                    input_signature=[tf.TensorSpec([None, *item_shape], tf.float32, name=INPUT)],
                )

        tmp = dest.with_name(f".{dest.name}.tmp")
        discard(tmp)
        try:
            module = Serving()
            # no saver ops (SaveV2 and co.): the model is only served, and dawnpipe refuses ops that write files
            options = tf.saved_model.SaveOptions(experimental_skip_saver=True)
            tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve}, options=options)
            replace(tmp, dest)
        except Exception as e:
            discard(tmp)
            raise Refusal(f"field '{FACTORY}' ({self.setup['factory']}): saving its network as a SavedModel fails ({one_line(e)})") from e


EXPORTS = {"torch": TorchExport, "keras": KerasExport}


# ------------------------------------------------------------------ the process
class Worker:
    """The set-up state: the framework's exporter and the factory, imported once."""

    def __init__(self, setup: Mapping[str, Any]):
        self.setup = setup
        self.exporter = EXPORTS[setup["framework"]](setup)  # the framework first: the workdir cannot replace it
        sys.path.insert(0, str(setup["workdir"]))
        self.factory = resolve_factory(setup["factory"])
        self.exporter.build(self.factory)  # the factory and the layout fit the items, said before the first epoch

    def export(self, weights: Path, dest: Path) -> None:
        net = self.exporter.build(self.factory)
        self.exporter.load(net, weights)
        self.exporter.export(net, dest)  # in inference mode: torch's eval(), Keras's training=False


def interfaces() -> list[str]:
    """The network interfaces this process sees (under unshare --net: only lo, down)."""
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")  # os.dup: not inherited by what the program's code starts
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    os.dup2(2, 1)  # whatever writes to fd 1 (print, C code, a child process) lands in the log
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout, sys.stdin = sys.stderr, open(os.devnull, encoding="utf-8")  # the process's stdin, kept open

    def answer(obj: dict[str, Any]) -> None:
        answers.write(json.dumps(obj) + "\n")
        answers.flush()

    setup_line = requests.readline()
    try:
        setup = json.loads(setup_line)
        worker = Worker(setup)
    except Refusal as e:
        traceback.print_exc()
        answer({"ready": False, "error": str(e)})
        return 1
    except (Exception, SystemExit) as e:
        traceback.print_exc()
        answer({"ready": False, "error": f"setting up fails ({one_line(e)})"})
        return 1
    answer({"ready": True, "runtime": worker.exporter.runtime, "format": worker.exporter.format, "interfaces": interfaces()})
    for line in requests:
        start = time.perf_counter()
        request: dict[str, Any] = {}
        try:
            request = json.loads(line)
            worker.export(Path(request["weights"]), Path(request["dest"]))
            answer({"id": request["id"], "ok": True, "format": worker.exporter.format, "seconds": time.perf_counter() - start})
        except Refusal as e:
            traceback.print_exc()
            answer({"id": request.get("id"), "ok": False, "error": str(e)})
        except (Exception, SystemExit) as e:
            traceback.print_exc()
            where = request.get("weights", "the request")
            answer({"id": request.get("id"), "ok": False, "error": f"{where}: exporting fails ({one_line(e)})"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
