"""Where the PyTorch trainer's images come from, and crops for large images.

Two sources behind one interface (``device_images`` / ``epoch_batches``):

- in memory (npy-uint8: Fashion-MNIST, CIFAR-10): the whole split is one uint8
  N x C x H x W tensor on the device, moved there before the clock starts, and
  a batch is an index into it (as airbench does);
- sharded (npy-uint8-shards: ImageNet, 98 GB at 160 px): ``DeviceImages``
  gathers each batch from the memory-mapped shards on background threads
  (numpy copies release the GIL), in pinned memory on CUDA, and copies it to the
  device asynchronously, ``PREFETCH`` batches ahead of the step that needs it.
  This reading is part of the training clock, as it would be in any trainer.

The trainer indexes both the same way (``images[index]``, ``images[a:b]``,
``images.shape``), so evaluation code does not know which one it has.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from dawnpipe.data.loader import ShardedArray, Split

PREFETCH = 4  # batches read ahead of the one being trained on


class DeviceImages:
    """A sharded split seen as a uint8 N x C x H x W tensor on ``device``."""

    def __init__(self, array: ShardedArray, device: torch.device, threads: int = PREFETCH):
        self.array, self.device = array, device
        n, h, w, c = array.shape
        self.shape = torch.Size((n, c, h, w))
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shards")

    def gather(self, index: np.ndarray) -> torch.Tensor:
        batch = torch.from_numpy(self.array.take(index))  # N x H x W x C, in memory
        if self.device.type == "cuda":
            batch = batch.pin_memory()
        # NHWC -> a channels_last N x C x H x W view: no copy; the device copy is asynchronous from pinned memory
        return batch.permute(0, 3, 1, 2).to(self.device, non_blocking=True)

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, slice):
            index = np.arange(*index.indices(self.shape[0]))
        elif isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        return self.gather(np.asarray(index))


def device_images(split: Split, device: torch.device):
    """The split's images as the trainer indexes them (see the module docstring)."""
    if isinstance(split.images, ShardedArray):
        return DeviceImages(split.images, device)
    t = torch.from_numpy(np.array(split.images))  # a writable copy of the memory map
    t = t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2).contiguous()
    return t.to(device)


def image_stats(split: Split, images) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of pixel / 255: from the manifest where prepare
    computed them (sharded sets), else over the images in memory."""
    if split.stats is not None:
        return list(split.stats["mean"]), list(split.stats["std"])
    x = images.to(torch.float64) / 255.0
    return x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).tolist()


def epoch_batches(images, labels: torch.Tensor, perm: torch.Tensor, batch: int, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(uint8 images, labels) of each step of one epoch; ``perm`` is the epoch's order (CPU)."""
    if not isinstance(images, DeviceImages):
        perm = perm.to(images.device)
        for step in range(steps):
            idx = perm[step * batch : (step + 1) * batch]
            yield images[idx], labels[idx]
        return
    order = perm.numpy()
    index = [order[step * batch : (step + 1) * batch] for step in range(steps)]
    pending = [images.pool.submit(images.gather, index[s]) for s in range(min(PREFETCH, steps))]
    for step in range(steps):
        x = pending[step].result()
        if step + PREFETCH < steps:
            pending.append(images.pool.submit(images.gather, index[step + PREFETCH]))
        pending[step] = None  # let the batch go once trained on
        yield x, labels[torch.from_numpy(index[step]).to(labels.device)]


def draw_resized_crop(n: int, min_scale: float, gen: torch.Generator) -> torch.Tensor:
    """The random choices of a random resized crop for n items (n x 2 x 3
    affine maps, on the CPU): per item, a crop of ``min_scale``..1 of the area
    with aspect ratio 3/4..4/3, which ``resized_crop`` resizes to ``size`` x
    ``size`` (bilinear) on the device in one ``grid_sample`` call; the ImageNet
    augmentation of the ResNet papers. Data-parallel ranks draw them for the
    whole global batch and each applies its share, so they crop as one process would."""
    area = min_scale + (1.0 - min_scale) * torch.rand(n, generator=gen)
    log_ratio = math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * torch.rand(n, generator=gen)
    w = torch.sqrt(area * torch.exp(log_ratio))  # fractions of the side; w * h = area <= 1
    h = torch.sqrt(area / torch.exp(log_ratio))
    # a side longer than the image: keep the whole side and the area, give up the aspect ratio
    w, h = torch.where(w > 1, 1.0, torch.where(h > 1, area, w)), torch.where(h > 1, 1.0, torch.where(w > 1, area, h))
    cx = (1.0 - w) * (2.0 * torch.rand(n, generator=gen) - 1.0)  # centre, in grid_sample's -1..1 coordinates
    cy = (1.0 - h) * (2.0 * torch.rand(n, generator=gen) - 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = w, cx, h, cy
    return theta


def resized_crop(x: torch.Tensor, size: int, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta.to(x.device, x.dtype), [x.shape[0], x.shape[1], size, size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
