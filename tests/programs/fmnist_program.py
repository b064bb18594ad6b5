"""A small training program for the program-entry tests: somebody else's
code as dawnpipe sees it (it imports nothing of dawnpipe). A two-layer
perceptron on prepared Fashion-MNIST, MLLOG printed by hand, one model per
epoch: under contract 1 an ONNX file written in each evaluation window,
under contract 2 handed over before each epoch_stop (ONNX, or its weights
with --weights).

    python tests/programs/fmnist_program.py --data DIR --out DIR --seed 0 [--contract 2] [--behaviour honest]

``--behaviour`` picks how it behaves, one way per test. Honest ones:

    honest         does what the contract asks
    slow-clock     its time_ms runs at half speed (a clock that disagrees)
    burst          contract 1: trains nothing in epochs 1 and 2; writes eval_stop of epoch 1 and
                   epoch_start ... eval_start of epoch 2 in one write, then sleeps inside that
                   evaluation window, where dawnpipe's freeze for epoch 1 lands; trains from epoch 3
    resumable      keeps its state in --state and continues from it when started again (its own
                   measure of its training too: what the attempt it resumes from had trained)

Programs that do not play fair:

    overclaim      claims 15 points more accuracy than its own evaluation found
    no-training    trains nothing and claims 95%
    hide-in-eval   contract 1: trains for --hide seconds more inside each evaluation window
    pre-start      trains for --hide seconds before it logs run_start, then an epoch of a few steps
    memorise       trains on the test items it is given as well (many passes)
    rewrite        contract 2: hands over an untrained model as epoch 1's, then, once dawnpipe has
                   read epoch 1's epoch_stop, writes its trained model under that name
    late-accuracy  contract 1: logs eval_stop, trains for --hide seconds more and writes its model
                   again, then logs eval_accuracy (the line that completes the evaluation)
    backdate       contract 1: floods its output before epoch 1's eval_accuracy, then trains on,
                   and once dawnpipe has read it all writes a better model for epoch 1 and sets its
                   modification time back
    escape         contract 2: a child in a session of its own moves itself out of the program's
                   cgroup (as root) and burns CPU through dawnpipe's freezes
    write-data     writes into dawnpipe's prepared data directory (the file $FMNIST_PROGRAM_VICTIM)
    swap-model     overwrites the model dawnpipe scored and keeps (threshold.npz beside {out}) after
                   its last epoch, or in its grace period when dawnpipe stops it

And programs that fail:

    crash          raises after run_start, in epoch 2
    escapes        prints terminal escapes and HTML markup, also inside MLLOG values
    silent-death   never flushes its output and dies without a word (os._exit)
    no-model       forgets to write its model files
    broken         prints an MLLOG line that is not JSON
    hang           never ends (the budget stops it)

It measures its own training time (each epoch from its epoch_start to its
epoch_stop: its training and, under contract 2, its hand-over; with
--no-eval, less the spans in which it saw itself stopped) and logs it
before each epoch_stop as ``self_training_seconds_<N>`` (cumulative),
and at the end as ``self_training_seconds`` (the list), so a test can hold
dawnpipe's clock against it.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from fmnist_net import Net  # beside this file


class StopWatch:
    """The spans in which this process was stopped (frozen), as it sees them
    itself: a thread that ticks every millisecond and notes a tick that came
    late by more than LATE seconds. A freeze lands a few milliseconds after
    epoch_stop, so it can fall inside the next epoch's measured span; the
    program's own training time leaves such spans out, as dawnpipe's clock
    leaves its freezes out, without reading anything of dawnpipe's."""

    TICK, LATE = 0.001, 0.03

    def __init__(self):
        import threading

        self.stopped: list[tuple[float, float]] = []
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self):
        while True:
            before = time.perf_counter()
            time.sleep(self.TICK)
            after = time.perf_counter()
            if after - before > self.TICK + self.LATE:
                self.stopped.append((before + self.TICK, after))

    def within(self, lo: float, hi: float) -> float:
        return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in list(self.stopped))


p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--layout", choices=("data", "torchvision", "npz"), default="data", help="what --data is: {data}, {torchvision} or {npz}")
p.add_argument("--out", required=True)
p.add_argument("--state", default=None)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--contract", type=int, default=1)
p.add_argument("--weights", action="store_true", help="contract 2: hand over the state_dict (epoch<N>.pt), not ONNX")
p.add_argument(
    "--no-eval",
    action="store_true",
    help="contract 2: no evaluation of its own (nothing but training on its clock); its own measure leaves out the time it saw itself stopped",
)
p.add_argument("--hide", type=float, default=3.0, help="seconds of hidden training (hide-in-eval: wall; pre-start: CPU)")
p.add_argument("--epoch-sleep", type=float, default=0.0, help="seconds each epoch's training also sleeps (a longer epoch)")
p.add_argument(
    "--checkpoint-pause-epoch",
    type=int,
    default=None,
    help="resumable: after this epoch's checkpoint, say so in --state/paused and sleep 3 s before its epoch_stop (a kill lands between them)",
)
p.add_argument("--behaviour", default="honest")
args = p.parse_args()
torch.manual_seed(args.seed)
torch.set_num_threads(args.threads)
B = args.behaviour
T0 = time.time()
FLUSH = B != "silent-death"
if not FLUSH:
    sys.stdout = open(sys.stdout.fileno(), "w", buffering=1 << 20, closefd=False)  # block-buffered, never flushed


def record(key, value=None, kind="POINT_IN_TIME", **metadata):
    now = time.time()
    ms = (T0 + (now - T0) / 2 if B == "slow-clock" else now) * 1000
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": ms, "event_type": kind, "key": key, "value": value, "metadata": metadata})


def log(key, value=None, kind="POINT_IN_TIME", **metadata):
    print(record(key, value, kind, **metadata), flush=FLUSH)


def split(name):
    if args.layout == "torchvision":  # read as torchvision's own data set reads it
        from torchvision import datasets

        ds = datasets.FashionMNIST(args.data, train=name == "train", download=False)
        x, y = ds.data.numpy(), ds.targets.numpy()
    elif args.layout == "npz":  # as keras.datasets.fashion_mnist.load_data() returns it
        with np.load(args.data, allow_pickle=False) as z:
            x, y = z[f"x_{name}"], z[f"y_{name}"]
    else:
        manifest = json.loads(Path(args.data, "manifest.json").read_text())
        entry = manifest["splits"][name]
        x = np.load(Path(args.data, entry["images"]["file"]), allow_pickle=False)
        y = np.load(Path(args.data, entry["labels"]["file"]), allow_pickle=False)
    return torch.from_numpy(np.asarray(x, dtype=np.float32) / 255.0 - 0.5), torch.from_numpy(np.asarray(y, dtype=np.int64))


class Stored(torch.nn.Module):  # the model as handed over in ONNX: takes the items as stored, [batch, 28, 28], 0-255
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, pixels):
        return self.net(pixels / 255.0 - 0.5)


def train_pass(x, y, seconds=None, cpu=False):
    """One pass over (x, y) in batches of 100; with ``seconds``, passes until that much time has gone
    (``cpu``: that much CPU time of this process, whatever else the machine runs); the wall seconds it took."""
    began, began_cpu = time.perf_counter(), time.process_time()
    while True:
        order = torch.randperm(len(y))
        for i in range(0, len(order) - 49, 100):  # a last batch under 50 items is left out (one item would throw it off)
            idx = order[i : i + 100]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        spent = time.process_time() - began_cpu if cpu else time.perf_counter() - began
        if seconds is None or spent >= seconds:
            return time.perf_counter() - began


def read_by_dawnpipe():
    """Wait until the reader of this process's output has read all of it (the pipe is empty: the
    epoch_stop just logged is in dawnpipe's hands, and with it the freeze that takes the model), and a
    second more. A write before then would land on the epoch's clock, which runs to the line's
    arrival: the model dawnpipe took then would be the trained one, timed honestly, and nothing hidden."""
    import fcntl
    import termios

    waited = time.monotonic()
    try:
        while int.from_bytes(fcntl.ioctl(sys.stdout.fileno(), termios.FIONREAD, b"\0" * 4), sys.byteorder) and time.monotonic() - waited < 60:
            time.sleep(0.01)
    except OSError:
        pass  # not a pipe: the second alone
    time.sleep(1.0)


def write_model(epoch):
    if B == "no-model":
        return
    if args.weights:
        tmp = Path(args.out, f".epoch{epoch}.pt.tmp")
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, Path(args.out, f"epoch{epoch}.pt"))
        return
    tmp = Path(args.out, f".epoch{epoch}.onnx.tmp")
    torch.onnx.export(
        Stored(model),
        (torch.zeros(1, 28, 28),),
        str(tmp),
        dynamo=False,
        opset_version=17,
        input_names=["pixels"],
        output_names=["logits"],
        dynamic_axes={"pixels": {0: "n"}, "logits": {0: "n"}},
    )
    os.replace(tmp, Path(args.out, f"epoch{epoch}.onnx"))


def escape():
    """A child in a session of its own that leaves the program's cgroup and burns CPU; it has left before run_start."""
    marker = Path(args.out, ".escaped")
    code = (
        "import os, time\n"
        "for path in ('/sys/fs/cgroup/unified/cgroup.procs', '/sys/fs/cgroup/cgroup.procs', '/sys/fs/cgroup/freezer/cgroup.procs'):\n"
        "    try:\n        open(path, 'w').write(str(os.getpid()))\n    except OSError:\n        pass\n"
        f"open({str(marker)!r}, 'w').close()\n"
        "end = time.time() + 600\nwhile time.time() < end:\n    pass\n"
    )
    subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    while not marker.exists():
        time.sleep(0.05)
    marker.unlink()


train_x, train_y = split("train")
test_x, test_y = split("test")
model = Net(args.hidden)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
first = 1
trained = 0.0  # seconds of this program's training loops (its own measure)
progress = []
if B == "resumable" and args.state and Path(args.state, "checkpoint.pt").is_file():
    saved = torch.load(Path(args.state, "checkpoint.pt"), weights_only=True)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    torch.set_rng_state(saved["rng"])
    first = int(saved["epoch"]) + 1
    trained, progress = float(saved["trained"]), [float(x) for x in saved["progress"]]  # its own measure goes on too
    print(f"resuming after epoch {first - 1}", flush=True)
if B == "escapes":
    print("\x1b[2J\x1b[31mred alert\x1b[0m <script>alert(1)</script> \u202eevil", flush=True)
if B == "swap-model":
    import signal

    def swap_model(*_):
        Path(args.out).parent.joinpath("threshold.npz").write_bytes(b"not the model dawnpipe scored")
        os._exit(0)

    signal.signal(signal.SIGTERM, swap_model)
if B == "write-data":
    Path(os.environ["FMNIST_PROGRAM_VICTIM"]).write_text("planted")  # a file of its own in somebody else's data
if B == "pre-start":
    trained += train_pass(train_x, train_y, seconds=args.hide, cpu=True)  # before the clock starts: --hide CPU seconds of training
if B == "escape":
    escape()
log("submission_benchmark", "fashion-mnist")
log("global_batch_size", 100)
log("train_samples", len(train_y))
log("run_start", kind="INTERVAL_START")
watch = StopWatch() if args.no_eval else None
epoch = first
while epoch <= args.epochs:
    log("epoch_start", kind="INTERVAL_START", epoch_num=epoch)
    if B == "crash" and epoch == 2:
        raise RuntimeError("something went wrong inside the program")
    if B == "silent-death" and epoch == 2:
        os._exit(3)
    if B == "slow-clock":
        time.sleep(3)  # an epoch long enough for a clock at half speed to be off by more than the second of slack
    began = time.perf_counter()  # its epoch starts (dawnpipe freezes it only between epochs, at epoch_stop)
    if B == "no-training" or (B == "burst" and epoch == 1):
        pass
    elif B == "rewrite" and epoch == 1:
        write_model(epoch)  # an untrained model handed over as epoch 1's; the trained one replaces it after epoch_stop
        train_pass(train_x, train_y)
    elif B == "pre-start" and epoch == 1:
        train_pass(train_x[:200], train_y[:200])  # "an epoch" of two steps
    elif B == "memorise":
        train_pass(train_x, train_y)
        for _ in range(30):  # and the test items it was given, until it knows them
            train_pass(test_x, test_y)
    else:
        train_pass(train_x, train_y)
    time.sleep(args.epoch_sleep)
    if args.contract >= 2 and not (B == "rewrite" and epoch == 1):
        write_model(epoch)
    if B == "resumable" and args.state:
        tmp = Path(args.state, "checkpoint.pt.tmp")
        so_far = trained + time.perf_counter() - began  # its own measure to this epoch (what a resumed attempt goes on from)
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch}
        torch.save({**state, "trained": so_far, "progress": [*progress, so_far]}, tmp)
        os.replace(tmp, Path(args.state, "checkpoint.pt"))
        if epoch == args.checkpoint_pause_epoch:
            Path(args.state, "paused").write_text(str(epoch))
            time.sleep(3)
    ended = time.perf_counter()
    trained += ended - began - (watch.within(began, ended) if watch else 0.0)  # the epoch as it sees it: its training and its hand-over
    progress.append(trained)
    log(f"self_training_seconds_{epoch}", trained)  # its own measure, to this epoch
    log("epoch_stop", kind="INTERVAL_END", epoch_num=epoch)
    if args.no_eval:
        epoch += 1
        continue
    if B == "rewrite" and epoch == 1:
        read_by_dawnpipe()
        write_model(epoch)  # a better model under the old epoch's name, once dawnpipe has taken the first
    log("eval_start", kind="INTERVAL_START", epoch_num=epoch)
    if B == "hide-in-eval":
        trained += train_pass(train_x, train_y, seconds=args.hide)  # off the clock, it hopes
    with torch.no_grad():
        accuracy = 100.0 * (model(test_x).argmax(1) == test_y).float().mean().item()
    if args.contract < 2:
        write_model(epoch)
    claimed = min(100.0, accuracy + 15.0) if B == "overclaim" else 95.0 if B == "no-training" else accuracy
    if B == "broken" and epoch == 2:
        print(":::MLLOG {not json", flush=True)
    if B == "escapes":
        log("note", "\x1b]0;owned\x07<b>bold</b>")
    if B == "late-accuracy":
        log("eval_stop", kind="INTERVAL_END", epoch_num=epoch)  # its window ends here; what follows is its epoch's time
        trained += train_pass(train_x, train_y, seconds=args.hide)
        write_model(epoch)
        with torch.no_grad():
            claimed = 100.0 * (model(test_x).argmax(1) == test_y).float().mean().item()  # of the model it hands over
        log("eval_accuracy", claimed, epoch_num=epoch)
        epoch += 1
        continue
    if B == "backdate" and epoch == 1:
        before = os.stat(Path(args.out, "epoch1.onnx")).st_mtime_ns
        sys.stdout.write("".join(f"line {i} of a flood that keeps dawnpipe's reader busy\n" for i in range(200_000)))
        log("eval_accuracy", claimed, epoch_num=epoch)
        log("eval_stop", kind="INTERVAL_END", epoch_num=epoch)
        train_pass(train_x, train_y)  # while dawnpipe reads the flood, before it takes epoch 1's model
        read_by_dawnpipe()  # a write before the lines' arrival would be inside the evaluation window, under its bound
        write_model(epoch)
        os.utime(Path(args.out, "epoch1.onnx"), ns=(before, before))  # as if written before the evaluation ended
        epoch += 1
        continue
    log("eval_accuracy", claimed, epoch_num=epoch)
    if B == "burst" and epoch < args.epochs:
        # the next epoch trains nothing: this eval_stop and its epoch_start, epoch_stop and eval_start go out in one write
        nxt = epoch + 1
        progress.append(trained)
        log(f"self_training_seconds_{nxt}", trained)  # it trains nothing in epoch nxt
        lines = [
            record("eval_stop", kind="INTERVAL_END", epoch_num=epoch),
            record("epoch_start", kind="INTERVAL_START", epoch_num=nxt),
            record("epoch_stop", kind="INTERVAL_END", epoch_num=nxt),
            record("eval_start", kind="INTERVAL_START", epoch_num=nxt),
        ]
        os.write(1, ("\n".join(lines) + "\n").encode())
        time.sleep(0.8)  # inside epoch nxt's evaluation window, where dawnpipe's freeze for this epoch lands
        write_model(nxt)
        log("eval_accuracy", accuracy, epoch_num=nxt)
        log("eval_stop", kind="INTERVAL_END", epoch_num=nxt)
        epoch += 2
        continue
    log("eval_stop", kind="INTERVAL_END", epoch_num=epoch)
    print(f"epoch {epoch}: accuracy {accuracy:.2f}", flush=FLUSH)
    epoch += 1
while B == "hang":
    time.sleep(1)
log("self_training_seconds", progress)
if B == "swap-model":
    time.sleep(1)  # thawed by now: dawnpipe has scored the last epoch and written its threshold.npz
    Path(args.out).parent.joinpath("threshold.npz").write_bytes(b"not the model dawnpipe scored")
log("run_stop", kind="INTERVAL_END", status="success")
