"""A small training program for the program-entry tests: somebody else's
code as dawnpipe sees it (it imports nothing of dawnpipe). A two-layer
perceptron on prepared Fashion-MNIST, one ONNX model per evaluated epoch,
MLLOG printed by hand.

    python tests/programs/fmnist_program.py --data DIR --out DIR --seed 0 [--behaviour honest]

``--behaviour`` picks how it misbehaves, one way per test:

    honest         does what the contract asks
    overclaim      claims 15 points more accuracy than its own evaluation found
    slow-clock     its time_ms runs at half speed (a clock that disagrees)
    crash          raises after run_start, in epoch 2
    escapes        prints terminal escapes and HTML markup, also inside MLLOG values
    silent-death   never flushes its output and dies without a word (os._exit)
    no-model       forgets to write its model files
    broken         prints an MLLOG line that is not JSON
    hang           never ends (the budget stops it)
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--behaviour", default="honest")
args = p.parse_args()
torch.manual_seed(args.seed)
torch.set_num_threads(args.threads)
B = args.behaviour
T0 = time.time()
FLUSH = B != "silent-death"
if not FLUSH:
    sys.stdout = open(sys.stdout.fileno(), "w", buffering=1 << 20, closefd=False)  # block-buffered, never flushed


def log(key, value=None, kind="POINT_IN_TIME", **metadata):
    now = time.time()
    ms = (T0 + (now - T0) / 2 if B == "slow-clock" else now) * 1000
    print(":::MLLOG " + json.dumps({"namespace": "", "time_ms": ms, "event_type": kind, "key": key, "value": value, "metadata": metadata}), flush=FLUSH)


def split(name):
    manifest = json.loads(Path(args.data, "manifest.json").read_text())
    entry = manifest["splits"][name]
    x = np.load(Path(args.data, entry["images"]["file"]), allow_pickle=False)
    y = np.load(Path(args.data, entry["labels"]["file"]), allow_pickle=False)
    return torch.from_numpy(np.asarray(x, dtype=np.float32)), torch.from_numpy(np.asarray(y, dtype=np.int64))


class Net(torch.nn.Module):  # takes the items as stored: [batch, 28, 28], 0-255
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10))

    def forward(self, x):
        return self.body(x / 255.0 - 0.5)


train_x, train_y = split("train")
test_x, test_y = split("test")
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
if B == "escapes":
    print("\x1b[2J\x1b[31mred alert\x1b[0m <script>alert(1)</script> \u202eevil", flush=True)
log("submission_benchmark", "fashion-mnist")
log("global_batch_size", 100)
log("train_samples", len(train_y))
log("run_start", kind="INTERVAL_START")
for epoch in range(1, args.epochs + 1):
    log("epoch_start", kind="INTERVAL_START", epoch_num=epoch)
    if B == "crash" and epoch == 2:
        raise RuntimeError("something went wrong inside the program")
    if B == "silent-death" and epoch == 2:
        os._exit(3)
    if B == "slow-clock":
        time.sleep(3)  # an epoch long enough for a clock at half speed to be off by more than the second of slack
    order = torch.randperm(len(train_y))
    for i in range(0, len(order), 100):
        idx = order[i : i + 100]
        loss = torch.nn.functional.cross_entropy(model(train_x[idx]), train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    log("epoch_stop", kind="INTERVAL_END", epoch_num=epoch)
    log("eval_start", kind="INTERVAL_START", epoch_num=epoch)
    with torch.no_grad():
        accuracy = 100.0 * (model(test_x).argmax(1) == test_y).float().mean().item()
    if B != "no-model":
        tmp = Path(args.out, f".epoch{epoch}.onnx.tmp")
        torch.onnx.export(
            model,
            (test_x[:1],),
            str(tmp),
            dynamo=False,
            opset_version=17,
            input_names=["pixels"],
            output_names=["logits"],
            dynamic_axes={"pixels": {0: "n"}, "logits": {0: "n"}},
        )
        os.replace(tmp, Path(args.out, f"epoch{epoch}.onnx"))
    claimed = min(100.0, accuracy + 15.0) if B == "overclaim" else accuracy
    if B == "broken" and epoch == 2:
        print(":::MLLOG {not json", flush=True)
    if B == "escapes":
        log("note", "\x1b]0;owned\x07<b>bold</b>")
    log("eval_accuracy", claimed, epoch_num=epoch)
    log("eval_stop", kind="INTERVAL_END", epoch_num=epoch)
    print(f"epoch {epoch}: accuracy {accuracy:.2f}", flush=FLUSH)
while B == "hang":
    time.sleep(1)
log("run_stop", kind="INTERVAL_END", status="success")
