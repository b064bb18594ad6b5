"""Fashion-MNIST in plain PyTorch: a narrow ResNet-9-style net (widths 16..128), batch
256, SGD (momentum 0.9, weight decay 5e-4), one-cycle rate (linear from 0.1 x lr to lr
over half an epoch, then down to 0 at the end), no augmentation, bf16 autocast where
the hardware has it, channels_last, 4 epochs.

    python torch_fmnist.py --data ROOT --out OUT [--state DIR] [--seed 0]

ROOT: a torchvision root holding FashionMNIST/raw/ (datasets.FashionMNIST reads it
with download=False). Each epoch's weights go to OUT/epoch<N>.pt (its state_dict) before
the epoch ends; --state keeps a checkpoint to continue from after an interruption.
It logs MLLOG (mlperf_logging.mllog) as a benchmark reads it: run_start, and per epoch
N epoch_start/epoch_stop around its training.
"""

import argparse
from pathlib import Path

import torch
from mlperf_logging import mllog
from torch import nn
from torchvision import datasets

MEAN, STD = 0.2860, 0.3530  # of Fashion-MNIST's training pixels / 255


def conv_bn(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)


class Net(nn.Module):
    """Normalised images [batch, 1, 28, 28] -> prep conv, 3 conv-pool stages (+residual), max-pool, linear."""

    def __init__(self, widths=(16, 32, 64, 128), classes=10):
        super().__init__()
        w0, w1, w2, w3 = widths
        self.features = nn.Sequential(
            *conv_bn(1, w0),
            *conv_bn(w0, w1), nn.MaxPool2d(2), Residual(*conv_bn(w1, w1), *conv_bn(w1, w1)),
            *conv_bn(w1, w2), nn.MaxPool2d(2),
            *conv_bn(w2, w3), nn.MaxPool2d(2), Residual(*conv_bn(w3, w3), *conv_bn(w3, w3)),
            nn.AdaptiveMaxPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(w3, classes, bias=False)

    def forward(self, x):
        return self.head(self.features(x)) * 0.125


def lr_at(epoch, peak, epochs, warmup=0.5):
    """One cycle: linear from 0.1 x peak to peak at `warmup` epochs, then linear to 0 at `epochs`."""
    if epoch <= warmup:
        return peak * (0.1 + 0.9 * epoch / warmup)
    return peak * max(0.0, 1 - (epoch - warmup) / (epochs - warmup))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="torchvision root with FashionMNIST/raw/")
    p.add_argument("--out", type=Path, required=True, help="directory for epoch<N>.pt")
    p.add_argument("--state", type=Path, help="directory for a checkpoint to continue from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="training autocast (auto: bf16 where the hardware has it)")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if args.precision == "auto":
        args.precision = "bf16" if (torch.cuda.is_bf16_supported(False) if device.type == "cuda" else torch.cpu._is_avx512_bf16_supported()) else "fp32"
    train = datasets.FashionMNIST(args.data, train=True, download=False)
    train_x = ((train.data.float() / 255 - MEAN) / STD).unsqueeze(1).to(device)  # all of it in memory: [N, 1, 28, 28]
    train_y = train.targets.to(device)
    model = Net().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    first = 1
    if args.state and (args.state / "checkpoint.pt").is_file():  # continue after an interruption
        saved = torch.load(args.state / "checkpoint.pt", map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        torch.set_rng_state(saved["rng"])
        first = saved["epoch"] + 1
    n = len(train_x)
    steps = n // args.batch_size + (n % args.batch_size >= 2)  # a last batch of one cannot be batch-normalised
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    print(f"torch_fmnist: {n} training items, epochs {first}..{args.epochs} of {steps} steps, {args.precision} on {device}", flush=True)

    log = mllog.get_mllogger()
    log.event(key="global_batch_size", value=args.batch_size)
    log.start(key="run_start")
    for epoch in range(first, args.epochs + 1):
        log.start(key="epoch_start", metadata={"epoch_num": epoch})
        model.train()
        perm = torch.randperm(n).to(device)
        for step in range(steps):
            idx = perm[step * args.batch_size : (step + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = lr_at(epoch - 1 + step / steps, args.lr, args.epochs)
            with autocast:
                loss = nn.functional.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.save(model.state_dict(), args.out / f"epoch{epoch}.pt")
        if args.state:  # written whole, then renamed: a kill never leaves half a checkpoint
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch}, args.state / "new.pt")
            (args.state / "new.pt").replace(args.state / "checkpoint.pt")
        log.end(key="epoch_stop", metadata={"epoch_num": epoch})
        print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)
    log.end(key="run_stop", metadata={"status": "success"})


if __name__ == "__main__":
    main()
