"""The tutorial's image distortions (cifar10_input.py's distorted_inputs), vectorised
over the batch (the evaluation crop, which training shares, is in :mod:`.scoring`).

All work is batched tensor arithmetic on uint8 images already on the training device
(no per-image Python, no PIL). The random draws are made on the CPU from generators
seeded by integers (the seed, the step...), so a run is reproducible from
``train.seed`` on any device and resumes exactly from a checkpoint.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..scoring import CROP

MAX_BRIGHTNESS_DELTA = 63.0
CONTRAST_RANGE = (0.2, 1.8)


# The streams of random draws, each seeded by (train.seed, stream, ...): 1 the example
# order, 2 and 4 the distortions (permutation, queue), 3 the queue's picks, and
# STEP_DRAWS the draws of the network itself in a step (dropout), by rank and step.
STEP_DRAWS = 5


def derive_seed(*ints: int) -> int:
    """A well-mixed 32-bit seed from a tuple of non-negative integers."""
    return int(np.random.SeedSequence([int(i) for i in ints]).generate_state(1)[0])


def cpu_generator(*ints: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*ints))


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (indices, draws) on the training device without a host sync:
    on CUDA through pinned memory, so that the copy is truly asynchronous."""
    if t.device == torch.device(device):
        return t
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class Draws:
    """The random draws of the training distortions for a run of examples."""

    oy: torch.Tensor  # crop offsets, 0..32-24
    ox: torch.Tensor
    flip: torch.Tensor  # bool
    delta: torch.Tensor  # brightness, uniform in [-63, 63]
    factor: torch.Tensor  # contrast, uniform in [0.2, 1.8]

    def __getitem__(self, idx) -> "Draws":
        return Draws(*(t[idx] for t in (self.oy, self.ox, self.flip, self.delta, self.factor)))

    def to(self, device) -> "Draws":
        return Draws(*(to_device(t, device)
                       for t in (self.oy, self.ox, self.flip, self.delta, self.factor)))


def draw_distortions(n: int, gen: torch.Generator, size: int = 32, crop: int = CROP,
                     flip: bool = True) -> Draws:
    """Draw on the CPU, in a fixed order, the parameters of ``n`` train distortions."""
    span = size - crop + 1
    oy = torch.randint(0, span, (n,), generator=gen)
    ox = torch.randint(0, span, (n,), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    if not flip:
        flips = torch.zeros(n, dtype=torch.bool)
    delta = (torch.rand(n, generator=gen) * 2 - 1) * MAX_BRIGHTNESS_DELTA
    lo, hi = CONTRAST_RANGE
    factor = lo + torch.rand(n, generator=gen) * (hi - lo)
    return Draws(oy, ox, flips, delta, factor)


def random_crops(images: torch.Tensor, d: Draws, crop: int = CROP) -> torch.Tensor:
    """uint8 N x C x H x W -> uint8 N x C x crop x crop at the drawn offsets, flipped
    left-right where drawn (a strided view of every window, one gather, no host sync)."""
    windows = images.unfold(2, crop, 1).unfold(3, crop, 1)  # N, C, H', W', crop, crop
    x = windows[torch.arange(len(images), device=images.device), :, d.oy, d.ox]
    return torch.where(d.flip[:, None, None, None], x.flip(-1), x)


def apply_distortions(images: torch.Tensor, d: Draws, crop: int = CROP) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 N x C x crop x crop: crop, flip, brightness,
    contrast, standardization, in the tutorial's order.

    Computed in closed form rather than step by step (same function, tested
    against the step-by-step reference): with crop x, channel means m_c, their
    mean m, contrast factor f and brightness delta, the contrast output is
    f (x - m_c) + m_c + delta; standardization subtracts its mean m + delta
    (so the brightness delta cancels) and divides by
    max(sqrt(mean_c(f^2 var_c + (m_c - m)^2)), 1/sqrt(num_values)). That is one
    affine map per image and channel, applied in a single pass. The channel
    means and variances come from exact integer sums of the uint8 pixels.
    """
    d = d.to(images.device)
    x = random_crops(images, d, crop)
    n, c = x.shape[:2]
    k = crop * crop
    v = x.reshape(n, c, k).int()
    s1 = v.sum(-1, keepdim=True).double()  # exact: at most k x 255
    s2 = (v * v).sum(-1, keepdim=True).double()  # exact: at most k x 255^2 < 2^31
    m_c = s1 / k
    var_c = s2 / k - m_c * m_c
    m = m_c.mean(dim=1, keepdim=True)
    f = d.factor.double()[:, None, None]
    std = (f * f * var_c + (m_c - m) ** 2).mean(dim=1, keepdim=True).sqrt()
    inv = 1.0 / std.clamp_min(1.0 / math.sqrt(c * k))
    scale, shift = (f * inv).float(), (((1 - f) * m_c - m) * inv).float()
    return torch.addcmul(shift[..., None], x.float(), scale[..., None])
