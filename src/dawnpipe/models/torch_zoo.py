"""PyTorch models of the benchmark entries.

- ``resnet`` (``resnet20`` ... ``resnet110``, ``resnet164``): the CIFAR ResNets
  of He et al. (2016) used as DAWNBench seed entries: a 3x3 stem, three stages
  of 16/32/64 channels (x4 after bottlenecks), global average pooling.
  Basic blocks: depth = 6n + 2; bottleneck blocks: depth = 9n + 2. Downsampling
  shortcuts are 1x1 convolutions + batch norm ("option B"), so that the same
  network is easy to build in Keras with the same parameter count.
- ``fastnet``: a ResNet-9-style net after the fast single-GPU CIFAR-10 recipes
  (David Page's and airbench's): few, wide layers, max-pool downsampling, two
  residual blocks, a scaled linear head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(c_in: int, c_out: int, kernel: int = 3, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(c_out)]


def init_conv_weights(model: nn.Module) -> None:
    """He et al.'s initialisation of every convolution (fan_out, ReLU). A model
    built on the meta device (to check an entry or a checkpoint against it) has
    no values to initialise, and torch's meta kernel of ``normal_`` imports
    torch._dynamo, a second or more of CPU time per process: skipped there."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d) and not m.weight.is_meta:
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def drop_path(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """Stochastic depth (Huang et al. 2016), per sample: in training, each
    item's residual branch is zeroed with probability ``rate`` and the kept
    ones scaled by 1 / (1 - rate), so evaluation is the identity (no rescaling)."""
    if rate == 0.0 or not training:
        return x
    keep = 1.0 - rate
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    return x * mask / keep


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int, drop: float = 0.0):
        super().__init__()
        self.drop = drop
        c_out = width * self.expansion
        self.body = nn.Sequential(*conv_bn(c_in, width, 3, stride), nn.ReLU(inplace=True), *conv_bn(width, c_out))
        self.shortcut = nn.Sequential(*conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x):
        return F.relu(drop_path(self.body(x), self.drop, self.training) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int, drop: float = 0.0):
        super().__init__()
        self.drop = drop
        c_out = width * self.expansion
        self.body = nn.Sequential(
            *conv_bn(c_in, width, 1),
            nn.ReLU(inplace=True),
            *conv_bn(width, width, 3, stride),
            nn.ReLU(inplace=True),
            *conv_bn(width, c_out, 1),
        )
        self.shortcut = nn.Sequential(*conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x):
        return F.relu(drop_path(self.body(x), self.drop, self.training) + self.shortcut(x))


def drop_rates(blocks: int, drop_path: float) -> list[float]:
    """The linear decay rule: block l of L (from 1) drops with rate drop_path * l / L (the last: drop_path)."""
    return [drop_path * (i + 1) / blocks for i in range(blocks)]


class CifarResNet(nn.Module):
    def __init__(self, depth: int = 20, block: str = "basic", width: int = 16, in_channels: int = 3, num_classes: int = 10, drop_path: float = 0.0):
        super().__init__()
        block_cls = {"basic": BasicBlock, "bottleneck": Bottleneck}[block]
        per_block = 2 if block == "basic" else 3
        if (depth - 2) % (3 * per_block):
            raise ValueError(f"a {block} CIFAR ResNet needs depth = {3 * per_block}n + 2, not {depth}")
        n = (depth - 2) // (3 * per_block)
        layers: list[nn.Module] = [*conv_bn(in_channels, width), nn.ReLU(inplace=True)]
        c_in, rates = width, iter(drop_rates(3 * n, drop_path))
        for stage, w in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                layers.append(block_cls(c_in, w, 2 if stage > 0 and i == 0 else 1, next(rates)))
                c_in = w * block_cls.expansion
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)
        init_conv_weights(self)

    def forward(self, x):
        x = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(channels, channels), nn.ReLU(inplace=True), *conv_bn(channels, channels), nn.ReLU(inplace=True))

    def forward(self, x):
        return x + self.body(x)


class FastNet(nn.Module):
    """prep conv -> [conv, pool, residual] -> [conv, pool] -> [conv, pool, residual] -> max-pool -> linear."""

    def __init__(self, widths=(32, 64, 128, 256), in_channels: int = 1, num_classes: int = 10, head_scale: float = 0.125):
        super().__init__()
        w0, w1, w2, w3 = widths

        def stage(c_in, c_out, residual):
            mods = [*conv_bn(c_in, c_out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            return nn.Sequential(*mods, Residual(c_out)) if residual else nn.Sequential(*mods)

        self.features = nn.Sequential(
            *conv_bn(in_channels, w0),
            nn.ReLU(inplace=True),
            stage(w0, w1, True),
            stage(w1, w2, False),
            stage(w2, w3, True),
            nn.AdaptiveMaxPool2d(1),
        )
        self.head = nn.Linear(w3, num_classes, bias=False)
        self.head_scale = head_scale

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1)) * self.head_scale


def build_model(name: str, *, in_channels: int, num_classes: int, **kwargs) -> nn.Module:
    if name == "fastnet":
        return FastNet(in_channels=in_channels, num_classes=num_classes, **kwargs)
    if name in IMAGENET_RESNETS:  # before the CIFAR names: resnet50 is not the 6n+2 CIFAR net of depth 50
        block, layers = IMAGENET_RESNETS[name]
        return ImageNetResNet(block, layers, in_channels=in_channels, num_classes=num_classes, **kwargs)
    if name.startswith("resnet") and name[6:].isdigit():
        depth = int(name[6:])
        kwargs.setdefault("block", "bottleneck" if depth == 164 else "basic")
        return CifarResNet(depth=depth, in_channels=in_channels, num_classes=num_classes, **kwargs)
    raise ValueError(f"unknown PyTorch model {name!r} (known: fastnet, resnet20/32/44/56/110 basic, resnet164 bottleneck; ImageNet: resnet18/34/50/101/152)")


# ImageNet ResNets (He et al. 2016), appended for the ImageNet task.
IMAGENET_RESNETS = {  # name -> (block, blocks per stage)
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}


class ImageNetResNet(nn.Module):
    """The ImageNet ResNets: a 7x7 stride-2 stem and a 3x3 stride-2 max-pool,
    four stages of width, 2x, 4x, 8x channels (x4 after bottlenecks; the stride
    of a bottleneck is on its 3x3 convolution, "ResNet v1.5" as in torchvision
    and the fast DAWNBench ImageNet entries), global average pooling. The last
    batch norm of every residual branch starts at zero (Goyal et al. 2017), so
    each block starts as the identity: what makes large-batch SGD stable.
    ``width`` (64 in the paper) exists for tiny test runs."""

    def __init__(
        self, block: str = "bottleneck", layers=(3, 4, 6, 3), width: int = 64, in_channels: int = 3, num_classes: int = 1000, zero_init_residual: bool = True
    ):
        super().__init__()
        block_cls = {"basic": BasicBlock, "bottleneck": Bottleneck}[block]
        stem = [*conv_bn(in_channels, width, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
        stages: list[nn.Module] = []
        c_in = width
        for stage, n in enumerate(layers):
            w = width * 2**stage
            for i in range(n):
                stages.append(block_cls(c_in, w, 2 if stage > 0 and i == 0 else 1))
                c_in = w * block_cls.expansion
        self.features = nn.Sequential(*stem, *stages)
        self.head = nn.Linear(c_in, num_classes)
        init_conv_weights(self)
        if zero_init_residual:
            for m in stages:
                nn.init.zeros_(m.body[-1].weight)  # the branch's last BatchNorm2d

    def forward(self, x):
        x = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Normalizer:
    """The input normalisation of the image models: (x in [0, 1] - mean) / std per channel,
    the same in training and in every inference backend (their reference)."""

    def __init__(self, mean: float | list[float], std: float | list[float], device):
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)

    def __call__(self, x01: torch.Tensor) -> torch.Tensor:
        return (x01 - self.mean) / self.std
