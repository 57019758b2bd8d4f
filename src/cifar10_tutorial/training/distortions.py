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
                     flip: bool = True, brightness: bool = True) -> Draws:
    """Draw on the CPU, in a fixed order, the parameters of ``n`` train distortions.
    ``brightness=False``: the deltas are left as drawn (uniform in [0, 1)), for callers
    that only :func:`standardize`, in which the delta cancels; every other draw is the
    same."""
    span = size - crop + 1
    oy = torch.randint(0, span, (n,), generator=gen)
    ox = torch.randint(0, span, (n,), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    if not flip:
        flips = torch.zeros(n, dtype=torch.bool)
    delta = torch.rand(n, generator=gen)
    if brightness:
        delta = (delta * 2 - 1) * MAX_BRIGHTNESS_DELTA
    lo, hi = CONTRAST_RANGE
    factor = lo + torch.rand(n, generator=gen) * (hi - lo)
    return Draws(oy, ox, flips, delta, factor)


def pack_draws(d: Draws, idx: torch.Tensor, size: int = 32, crop: int = CROP) -> np.ndarray:
    """What :func:`distort_batch` needs of examples ``idx`` with draws ``d``, one int64 row
    each (:data:`COLUMNS`): the example, its source (1: the mirrored image, where a flip
    is drawn), the crop's offsets in that source (a flip of a crop at ``ox`` is the crop of
    the mirrored image at ``size - crop - ox``) and the contrast factor (float64, as bits).
    Made with NumPy on the CPU, so that a batch's draws reach the device as one tensor."""
    flip = d.flip.numpy()
    ox = d.ox.numpy()
    return np.stack([idx.numpy().astype(np.int64), flip.astype(np.int64), d.oy.numpy(),
                     np.where(flip, size - crop - ox, ox),
                     d.factor.numpy().astype(np.float64).view(np.int64)], axis=1)


COLUMNS = ("idx", "src", "oy", "ox", "factor")  # of a packed row (pack_draws)


def crop_windows(images: torch.Tensor, flip: bool = True, crop: int = CROP) -> torch.Tensor:
    """Every ``crop`` x ``crop`` window of every image, as a strided view
    ``[S, N, C, H', W', crop, crop]``: S = 2 with flips (source 1: the images mirrored
    left-right, a copy made once), else 1. A batch's crops are then one gather."""
    sources = torch.stack([images, images.flip(-1)]) if flip else images[None]
    return sources.unfold(3, crop, 1).unfold(4, crop, 1)


def distort_batch(windows: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The distorted images and the labels of a batch, ``rows`` its packed draws
    (:func:`pack_draws`) on the images' device: one gather of the crops (flips included),
    then :func:`standardize`."""
    idx, src, oy, ox, factor = rows.unbind(1)
    x = windows[src, idx, :, oy, ox]
    return standardize(x, factor.view(torch.float64)), labels[idx]


def apply_distortions(images: torch.Tensor, d: Draws, crop: int = CROP) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 N x C x crop x crop: crop, flip, brightness,
    contrast, standardization, in the tutorial's order, with draws ``d`` (one each)."""
    rows = pack_draws(d, torch.arange(len(images)), images.shape[-1], crop)
    windows = crop_windows(images, bool(d.flip.any()), crop)  # no flip drawn: no mirror
    return distort_batch(windows, torch.empty(len(images), device=images.device),
                         to_device(torch.from_numpy(rows), images.device))[0]


def standardize(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """uint8 crops N x C x h x w and their contrast factors (float64) -> float32: the
    tutorial's brightness, contrast and per-image standardization.

    Computed in closed form rather than step by step (same function, tested
    against the step-by-step reference): with crop x, channel means m_c, their
    mean m, contrast factor f and brightness delta, the contrast output is
    f (x - m_c) + m_c + delta; standardization subtracts its mean m + delta
    (so the brightness delta cancels) and divides by
    max(sqrt(mean_c(f^2 var_c + (m_c - m)^2)), 1/sqrt(num_values)). That is one
    affine map per image and channel, applied in a single pass. The channel
    means and variances come from exact sums of the pixels (integers below 2^53
    in float64). Each conversion happens inside an arithmetic kernel (no copy
    of its own): the pixels to float64 in a product, the map's coefficients to
    float32 as they are written.
    """
    n, c = x.shape[:2]
    k = x.shape[2] * x.shape[3]
    v = x * _one(x.device)  # float64
    s1 = v.sum((2, 3), keepdim=True)  # N x C x 1 x 1, exact: at most k x 255
    s2 = (v * v).sum((2, 3), keepdim=True)  # exact: at most k x 255^2
    m_c = s1 / k
    var_c = s2 / k - m_c * m_c
    m = m_c.mean(dim=1, keepdim=True)
    f = factor.view(n, 1, 1, 1)
    std = (f * f * var_c + (m_c - m) ** 2).mean(dim=1, keepdim=True).sqrt()
    inv = torch.reciprocal(std.clamp_min(1.0 / math.sqrt(c * k)))
    scale = torch.mul(f, inv, out=torch.empty(inv.shape, device=x.device))  # float32
    shift = torch.mul((1 - f) * m_c - m, inv, out=torch.empty(m_c.shape, device=x.device))
    return torch.addcmul(shift, x, scale)


_ONES: dict = {}


def _one(device: torch.device) -> torch.Tensor:
    """A float64 1 on ``device``, made once: multiplied by it, uint8 pixels become float64
    in the product's own kernel."""
    if device not in _ONES:
        _ONES[device] = torch.ones((), dtype=torch.float64, device=device)
    return _ONES[device]
