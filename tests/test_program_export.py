"""Weights a contract 2 program hands over (docs/programs.md): program.model
in the entry, and the export worker that builds the program's network from
its factory, loads the weights and exports it with the preprocessing inside.

The program here is written by the test as somebody else's would be: a
directory with a module of torch networks and one of Keras ones, importing
nothing of dawnpipe. Each exported model is read and scored by
programs/model_files.py as any program's model file is, and must answer as the
original network does with the program's own preprocessing applied in plain
torch or Keras: logits within 1e-4 (absolute and relative; float32 through
ONNX Runtime or a TensorFlow graph against eager code), the same argmax on
every item, the same score."""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dawnpipe.entries import validate_entry
from dawnpipe.errors import DawnpipeError
from dawnpipe.programs import model_files, weights
from dawnpipe.programs.weights import ExportWorker

TORCH_PROGRAM = '''
"""Somebody's networks, as their training program defines them."""
import json
import os
import socket
import subprocess
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width=8, classes=10, channels=1):
        super().__init__()
        self.conv = nn.Conv2d(channels, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).amax((2, 3)))


def noisy(**kwargs):
    """Prints everywhere a program's code may print, answers included, and reads stdin."""
    print("junk that is not JSON")
    print(json.dumps({"id": 1, "ok": True, "format": "onnx", "seconds": 0}))
    sys.__stdout__.write('{"ready": true}\\n')
    sys.__stdout__.flush()
    os.write(1, b'{"id": 2, "ok": false, "error": "forged"}\\n')
    subprocess.run(["echo", '{"id": 3, "ok": true}'], check=True)
    os.read(0, 100)  # the requests are not there to steal
    return Net(**kwargs)


def calls_out(port, report):
    """Tries to reach a local server; says what happened in the file ``report``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        outcome = "connected"
    except OSError as e:
        outcome = f"failed: {e}"
    with open(report, "w") as f:
        f.write(outcome)
    return Net()


BUILT = 0


def dies(mode):
    """Builds the network once (the worker's start), then exits or hangs."""
    global BUILT
    BUILT += 1
    if BUILT > 1 and mode == "exit":
        print("about to exit", file=sys.stderr)
        os._exit(3)
    if BUILT > 1 and mode == "hang":
        import time
        time.sleep(600)
    return Net()


def tuple_out():
    class Two(Net):
        def forward(self, x):
            return super().forward(x), x
    return Two()

'''

KERAS_PROGRAM = '''
"""Somebody's Keras network (channels last)."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras
from keras import layers


def small(width=4, classes=10):
    images = keras.Input((28, 28, 1))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 3, padding="same")(images)))
    return keras.Model(images, layers.Dense(classes)(layers.GlobalMaxPooling2D()(x)))
'''

FMNIST = {"scale": 1 / 255, "mean": [0.2860], "std": [0.3530], "layout": "NCHW"}
CIFAR = {"scale": 0.00392156862745098, "mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616], "layout": "NCHW"}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def program(factory: str = "main:Net", preprocessing: dict | None = None, **kwargs) -> dict:
    return {"contract": 2, "model": {"factory": factory, "kwargs": kwargs, "preprocessing": preprocessing or FMNIST}}


def one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message


@pytest.fixture(scope="module")
def their_program(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("their-program")
    (root / "main.py").write_text(textwrap.dedent(TORCH_PROGRAM))
    (root / "keras_main.py").write_text(textwrap.dedent(KERAS_PROGRAM))
    return root


def their_net(their_program: Path, seed: int, **kwargs):
    """The network as the program trains it: its own class, weights and batch-norm statistics set by ``seed``."""
    import torch

    sys.path.insert(0, str(their_program))
    try:
        import main
    finally:
        sys.path.remove(str(their_program))
    torch.manual_seed(seed)
    net = main.Net(**kwargs)
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
    return net.eval()


def torch_reference(net, images: np.ndarray, prep: dict) -> np.ndarray:
    """The program's own evaluation: pixels / 255, normalised per channel, channels first."""
    import torch

    x = torch.from_numpy(images).float() / 255
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    mean = torch.tensor(prep["mean"]).reshape(1, -1, 1, 1)
    std = torch.tensor(prep["std"]).reshape(1, -1, 1, 1)
    with torch.no_grad():
        return net((x - mean) / std).numpy()


@pytest.fixture(scope="module")
def torch_worker(their_program, tmp_path_factory):
    log = tmp_path_factory.mktemp("worker") / "export.log"
    with ExportWorker(program(), their_program, "torch", item_shape=(28, 28), log=log) as worker:
        yield worker


# ------------------------------------------------------------------ exported models answer as the network does
def test_torch_weights_export_to_an_onnx_model_that_scores_as_the_network(torch_worker, their_program, tmp_path):
    import torch

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (96, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 96)
    logits = {}
    for epoch in (1, 2):  # one worker, one request per epoch
        net = their_net(their_program, seed=epoch)
        torch.save(net.state_dict(), tmp_path / f"epoch{epoch}.pt")
        model = torch_worker.export(tmp_path / f"epoch{epoch}.pt", tmp_path / "exported")
        assert model.format == model_files.ONNX and model.epoch == epoch
        assert model.source == f"{tmp_path}/exported/epoch{epoch}.onnx (exported from {tmp_path}/epoch{epoch}.pt)"
        loaded = model_files.load_onnx(model, threads=1, item_shape=(28, 28))  # as the harness loads any program's model
        got, want = loaded.logits(images), torch_reference(net, images, FMNIST)
        np.testing.assert_allclose(got, want, **TOLERANCE)
        assert (got.argmax(1) == want.argmax(1)).all()
        ours = model_files.score(loaded.logits, images, labels, classes=10)
        theirs = model_files.score(lambda b, net=net: torch_reference(net, b, FMNIST), images, labels, classes=10)
        assert ours == theirs
        logits[epoch] = got
    assert not np.allclose(logits[1], logits[2], atol=1e-2), "both epochs gave the same model: the weights were not loaded"
    assert torch_worker.running()


def test_cifar_items_reach_a_channels_first_network_normalised_per_channel(their_program, tmp_path):
    import torch

    prep = dict(CIFAR)
    net = their_net(their_program, seed=3, channels=3)
    torch.save(net.state_dict(), tmp_path / "epoch4.pt")
    with ExportWorker(program(preprocessing=prep, channels=3), their_program, "torch", item_shape=(32, 32, 3)) as worker:
        model = worker.export(tmp_path / "epoch4.pt", tmp_path)
    images = np.random.default_rng(1).integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    loaded = model_files.load_onnx(model, threads=1, item_shape=(32, 32, 3))
    np.testing.assert_allclose(loaded.logits(images), torch_reference(net, images, prep), **TOLERANCE)
    assert loaded.session.get_inputs()[0].shape[0] == "batch"  # the contract's dynamic batch axis


def test_keras_weights_export_to_a_savedmodel_that_scores_as_the_network(their_program, tmp_path):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    sys.path.insert(0, str(their_program))
    try:
        import keras_main
    finally:
        sys.path.remove(str(their_program))
    keras.utils.set_random_seed(5)
    net = keras_main.small()
    rng = np.random.default_rng(5)
    for var in net.weights:  # batch-norm statistics too: inference mode must use them
        var.assign(rng.uniform(0.5, 1.5, var.shape).astype("float32"))
    net.save_weights(tmp_path / "epoch2.weights.h5")
    prep = {"scale": 1 / 255, "mean": [0.2860], "std": [0.3530], "layout": "NHWC"}
    keras_main.small(width=8).save_weights(tmp_path / "epoch3.weights.h5")  # another network's
    (tmp_path / "epoch4.weights.h5").write_bytes(b"not HDF5")
    with ExportWorker(program("keras_main:small", prep), their_program, "keras", item_shape=(28, 28)) as worker:
        model = worker.export(tmp_path / "epoch2.weights.h5", tmp_path / "exported")
        assert worker.runtime.startswith("keras ")
        for epoch, says in ((3, "shape"), (4, "OSError: Unable to synchronously open file")):
            with pytest.raises(DawnpipeError) as err:
                worker.export(tmp_path / f"epoch{epoch}.weights.h5", tmp_path / "exported")
            message = str(err.value)
            one_line(message)
            assert message.startswith(f"{tmp_path}/epoch{epoch}.weights.h5: Keras load_weights into the network field 'program.model.factory'"), message
            assert says in message, message
    assert model.format == model_files.SAVEDMODEL and model.epoch == 2
    images = rng.integers(0, 256, (64, 28, 28)).astype(np.uint8)
    labels = rng.integers(0, 10, 64)
    with model_files.savedmodel_dir(model) as root:
        loaded = model_files.load_savedmodel(model, root, threads=1, item_shape=(28, 28))  # checks its ops too
        got = loaded.logits(images)
        scored = model_files.score(loaded.logits, images, labels, classes=10)

    def reference(batch):
        x = ((batch.astype("float32") / 255 - 0.2860) / 0.3530)[..., None]
        return net(x, training=False).numpy()

    np.testing.assert_allclose(got, reference(images), **TOLERANCE)
    assert (got.argmax(1) == reference(images).argmax(1)).all()
    assert scored == model_files.score(reference, images, labels, classes=10)


# ------------------------------------------------------------------ weights refused
def test_a_pickled_object_is_refused_and_its_code_never_runs(torch_worker, their_program, tmp_path):
    import torch

    marker = tmp_path / "the-pickle-ran"

    class Opens:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save(Opens(), tmp_path / "epoch1.pt")
    with pytest.raises(DawnpipeError) as err:
        torch_worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
    message = str(err.value)
    one_line(message)
    assert message.startswith(f"{tmp_path}/epoch1.pt: torch.load(weights_only=True) refuses it") and "GLOBAL io.open" in message, message
    assert "allowlist" not in message  # torch's advice to trust the file is not dawnpipe's
    assert not marker.exists()
    torch.save(their_net(their_program, seed=1), tmp_path / "epoch2.pt")  # the whole module pickled, not a state_dict
    with pytest.raises(DawnpipeError, match=r"epoch2\.pt: torch\.load\(weights_only=True\) refuses it"):
        torch_worker.export(tmp_path / "epoch2.pt", tmp_path / "exported")
    torch.save(their_net(their_program, seed=1).state_dict(), tmp_path / "epoch3.pt")
    assert torch_worker.export(tmp_path / "epoch3.pt", tmp_path / "exported").epoch == 3  # the worker is still fine


def test_weights_that_do_not_fit_the_network_are_named(torch_worker, their_program, tmp_path):
    import torch

    torch.save(their_net(their_program, seed=1, width=4).state_dict(), tmp_path / "epoch1.pt")
    with pytest.raises(DawnpipeError) as err:
        torch_worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
    message = str(err.value)
    one_line(message)
    assert message.startswith(f"{tmp_path}/epoch1.pt: its weights do not fit the network field 'program.model.factory' (main:Net)"), message
    assert "conv.weight [4, 1, 3, 3] (the network's: [8, 1, 3, 3])" in message
    torch.save({"model": their_net(their_program, seed=1).state_dict(), "epoch": 1}, tmp_path / "epoch2.pt")
    with pytest.raises(DawnpipeError, match=r"epoch2\.pt: holds a dict that is not a state_dict"):
        torch_worker.export(tmp_path / "epoch2.pt", tmp_path / "exported")
    assert not list((tmp_path / "exported").iterdir())  # nothing half-written


def test_a_weights_file_is_a_regular_file_of_the_run_s_format(torch_worker, their_program, tmp_path):
    import torch

    torch.save(their_net(their_program, seed=1).state_dict(), tmp_path / "real.pt")
    (tmp_path / "epoch1.pt").symlink_to(tmp_path / "real.pt")
    with pytest.raises(DawnpipeError, match=r"epoch1\.pt: not a regular file"):
        torch_worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
    (tmp_path / "epoch2.weights.h5").write_bytes(b"")
    with pytest.raises(DawnpipeError, match=r"keras weights, but this run's model files are torch weights"):
        torch_worker.export(tmp_path / "epoch2.weights.h5", tmp_path / "exported")
    with pytest.raises(DawnpipeError, match=r"not a weights file of the contract"):
        torch_worker.export(tmp_path / "model.pt", tmp_path / "exported")


# ------------------------------------------------------------------ the factory
@pytest.mark.parametrize(
    ("factory", "prep", "kwargs", "says"),
    [
        ("main:Nope", FMNIST, {}, "field 'program.model.factory' (main:Nope): module main has no Nope"),
        ("nomodule:Net", FMNIST, {}, "importing nomodule from the program's workdir fails (ModuleNotFoundError: No module named 'nomodule')"),
        ("main:Net", FMNIST, {"depth": 3}, "building the network fails (TypeError: "),
        ("main:tuple_out", FMNIST, {}, "the network gives a tuple for a batch of items [2, 28, 28]"),
        ("main:Net", {**FMNIST, "layout": "NHWC"}, {}, "given to it in field 'program.model.preprocessing.layout' NHWC (RuntimeError: "),
    ],
)
def test_a_factory_that_cannot_build_the_network_is_one_line_naming_the_field(their_program, factory, prep, kwargs, says):
    worker = ExportWorker(program(factory, prep, **kwargs), their_program, "torch", item_shape=(28, 28))
    with pytest.raises(DawnpipeError) as err:
        worker.start()
    worker.close()
    message = str(err.value)
    one_line(message)
    assert message.startswith("field 'program.model.factory'") and says in message, message


def test_a_factory_that_prints_does_not_break_the_protocol(their_program, tmp_path):
    import torch

    torch.save(their_net(their_program, seed=2).state_dict(), tmp_path / "epoch1.pt")
    log = tmp_path / "export.log"
    with ExportWorker(program("main:noisy"), their_program, "torch", item_shape=(28, 28), log=log) as worker:
        for _ in range(2):
            model = worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
            assert model.epoch == 1 and model.format == model_files.ONNX
    kept = log.read_text()
    assert kept.count("junk that is not JSON") == 3 and kept.count('"error": "forged"') == 3  # start and two exports: in the log


@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_a_worker_that_dies_or_hangs_is_named_and_started_again(their_program, tmp_path, mode):
    import torch

    torch.save(their_net(their_program, seed=2).state_dict(), tmp_path / "epoch1.pt")
    seconds = 3 if mode == "hang" else weights.EXPORT_SECONDS
    worker = ExportWorker(program("main:dies", mode=mode), their_program, "torch", item_shape=(28, 28), export_seconds=seconds)
    worker.start()
    first = worker.pid
    with pytest.raises(DawnpipeError) as err:
        worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
    message = str(err.value)
    one_line(message)
    if mode == "exit":
        assert message.startswith(f"the export worker exited (status 3) while exporting {tmp_path}/epoch1.pt; its last line: about to exit"), message
    else:
        assert message.startswith(f"the export worker gave no answer in 3 s while exporting {tmp_path}/epoch1.pt; stopped"), message
    assert not worker.running()
    with pytest.raises(DawnpipeError):  # started again (its factory fails again the same way)
        worker.export(tmp_path / "epoch1.pt", tmp_path / "exported")
    assert worker.pid != first
    worker.close()


# ------------------------------------------------------------------ no network
@pytest.fixture
def local_server():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    yield server
    server.close()


def accepted(server) -> bool:
    try:
        server.accept()[0].close()
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("sandbox", weights.SANDBOXES, ids=[" ".join(s) for s in weights.SANDBOXES])
def test_the_worker_has_no_network_where_unshare_works(their_program, tmp_path, local_server, sandbox):
    found = weights.network_sandbox([sandbox])
    if found[1] != "none":
        pytest.skip(f"{' '.join(sandbox)} does not work here: network {found[1]}")
    report = tmp_path / "outcome"
    port = local_server.getsockname()[1]
    with ExportWorker(program("main:calls_out", port=port, report=str(report)), their_program, "torch", item_shape=(28, 28), sandbox=found) as worker:
        assert worker.network == "none" and worker.isolation == " ".join(sandbox)
    assert report.read_text().startswith("failed: "), report.read_text()
    assert not accepted(local_server)


def test_without_unshare_the_same_factory_reaches_the_server_and_the_worker_says_so(their_program, tmp_path, local_server):
    """The control of the test above: the server is there to be reached."""
    found = weights.network_sandbox([("false",), ("no-such-command-here",)])
    assert found == ((), "available (false: exit status 1; no no-such-command-here command)")
    report = tmp_path / "outcome"
    port = local_server.getsockname()[1]
    with ExportWorker(program("main:calls_out", port=port, report=str(report)), their_program, "torch", item_shape=(28, 28), sandbox=found) as worker:
        assert worker.network.startswith("available (") and worker.isolation == ""
    assert report.read_text() == "connected"
    assert accepted(local_server)


# ------------------------------------------------------------------ program.model in the entry
ENTRY = {
    "task": "fashion-mnist",
    "hardware": "local-cpu",
    "program": {"contract": 2, "command": ["python", "train.py", "--out", "{out}"], "model": {"factory": "main:Net", "preprocessing": {"layout": "NCHW"}}},
}


def entry_with(**model) -> dict:
    doc = json.loads(json.dumps(ENTRY))
    doc["program"]["model"].update(model)
    return doc


def test_program_model_is_filled_in_with_its_defaults():
    e = validate_entry(entry_with(kwargs={"width": 16, "blocks": [1, 2], "norm": None}), "config/entries/p.yaml")
    model = e["program"]["model"]
    assert model["preprocessing"] == {"scale": 1.0, "mean": [0.0], "std": [1.0], "layout": "NCHW"}
    assert model["kwargs"] == {"width": 16, "blocks": [1, 2], "norm": None}
    assert validate_entry(entry_with(factory="nets.small:Factory.build"), "p.yaml")["program"]["contract"] == 2


@pytest.mark.parametrize(
    ("model", "contract", "field", "why"),
    [
        ({"factory": "main.Net"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"factory": "main:Net:x"}, 2, "program.model.factory", "got 'main:Net:x'"),
        ({"factory": "1main:Net"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"factory": "main:class"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"kwargs": {"since": datetime.date(2024, 1, 1)}}, 2, "program.model.kwargs.since", "a date; the factory's arguments are plain JSON"),
        ({"kwargs": {"sizes": [1, {2: "a"}]}}, 2, "program.model.kwargs.sizes[1]", "a key 2 that is not a string"),
        ({"kwargs": {"lr": float("nan")}}, 2, "program.model.kwargs.lr", "not a finite number"),
        ({"kwargs": [1, 2]}, 2, "program.model.kwargs", "expected a mapping"),
        ({"preprocessing": {"layout": "NCHW", "std": [0.5, 0.0, 0.5]}}, 2, "program.model.preprocessing.std.1", "expected a number > 0"),
        ({"preprocessing": {"layout": "NCHW", "scale": -1}}, 2, "program.model.preprocessing.scale", "expected a number > 0"),
        ({"preprocessing": {"layout": "NCHW", "mean": [0.1, 0.2], "std": [0.3, 0.3, 0.3]}}, 2, "program.model.preprocessing.std", "3 values, but mean has 2"),
        ({"preprocessing": {"layout": "CHW"}}, 2, "program.model.preprocessing.layout", "expected one of NCHW, NHWC"),
        ({"preprocessing": {"mean": [0.5]}}, 2, "program.model.preprocessing.layout", "missing"),
        ({"preprocessing": {"layout": "NCHW", "gamma": 2}}, 2, "program.model.preprocessing", "unknown key 'gamma'"),
        ({}, 1, "program.model", "a program hands over weights under contract 2"),
    ],
)
def test_a_program_model_that_cannot_be_represented_names_the_field(model, contract, field, why):
    doc = entry_with(**model)
    doc["program"]["contract"] = contract
    with pytest.raises(DawnpipeError) as err:
        validate_entry(doc, "config/entries/p.yaml")
    message = str(err.value)
    one_line(message)
    assert message.startswith(f"config/entries/p.yaml: field '{field}': ") and why in message, message


def test_mean_and_std_must_fit_the_channels_of_the_task_s_items(their_program):
    three = program(preprocessing={"mean": [0.5, 0.5, 0.5], "std": [0.25], "layout": "NCHW"})
    with pytest.raises(DawnpipeError) as err:
        ExportWorker(three, their_program, "torch", item_shape=(28, 28), source="config/entries/p.yaml")
    assert str(err.value) == (
        "config/entries/p.yaml: field 'program.model.preprocessing.mean': 3 values, but the task's items [28, 28] have 1 channel; give one value (every channel) or 1"
    )
    ExportWorker(three, their_program, "torch", item_shape=(32, 32, 3))  # fits: nothing started
    with pytest.raises(DawnpipeError, match=r"^program entry: field 'program.model': the program hands over weights"):
        ExportWorker({"contract": 2}, their_program, "torch", item_shape=(28, 28))


def test_the_weights_names_say_the_framework_and_the_epoch():
    assert weights.weights_names(3) == ("epoch3.pt", "epoch3.weights.h5")
    assert [weights.framework_of(n) for n in ("epoch3.pt", "epoch12.weights.h5", "epoch3.h5", "epoch.pt", "model.pt")] == ["torch", "keras", None, None, None]
    assert weights.epoch_of("/out/epoch12.weights.h5") == 12 and weights.epoch_of("/out/epoch1.onnx") is None
