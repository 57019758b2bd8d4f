"""The project's one evaluation, shared by the eval stage, the held-out points while
training, publishing and predictions: the evaluation input (central crop, standardized),
the logits of a batch of images in order, and precision @ 1 with averaged and raw weights.
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from .model import CifarNet

CROP = 24  # the side of the tutorial's crops: random while training, central at evaluation


def per_image_standardization(x: torch.Tensor) -> torch.Tensor:
    """TF's per_image_standardization: (x - mean) / max(std, 1/sqrt(num_values)), per image."""
    n = x[0].numel()
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    std = x.std(dim=(1, 2, 3), keepdim=True, correction=0)
    return (x - mean) / std.clamp_min(1.0 / math.sqrt(n))


def eval_images(images: torch.Tensor, crop: int = CROP) -> torch.Tensor:
    """uint8 N x C x H x W -> the central crop, standardized (the eval input)."""
    h, w = images.shape[-2:]
    top, left = (h - crop) // 2, (w - crop) // 2
    return per_image_standardization(images[:, :, top:top + crop, left:left + crop].float())


@torch.no_grad()
def predict_logits(model: CifarNet, images: torch.Tensor, batch_size: int = 250) -> torch.Tensor:
    """Logits for uint8 N x 3 x 32 x 32 images (central crop, standardized), in order."""
    out = []
    for i in range(0, len(images), batch_size):
        x = eval_images(images[i:i + batch_size]).contiguous(memory_format=torch.channels_last)
        out.append(model.logits(x).float())
    return torch.cat(out)


def precision_at_1(models, images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                   flip_tta: bool = False) -> dict:
    """The project's one evaluation (the eval stage, the held-out points while training,
    publish): for each ``(suffix, model)`` of ``models`` (an iterable, so that one module can
    be loaded with each set of weights in turn: ``""`` averaged, ``"_raw"`` raw),
    ``precision_at_1{suffix}``, ``loss{suffix}``, ``predictions{suffix}`` and
    ``seconds{suffix}``; with ``flip_tta`` also the precision of the mean of the
    probabilities of each image and its mirror image (``precision_at_1{suffix}_flip``)."""
    out = {}
    for suffix, model in models:
        t = time.perf_counter()
        logits = predict_logits(model, images, batch_size)
        p, loss, pred = score(logits, labels)
        out.update({f"precision_at_1{suffix}": p, f"loss{suffix}": loss,
                    f"predictions{suffix}": pred.cpu(), f"seconds{suffix}": time.perf_counter() - t})
        if flip_tta:
            mirrored = predict_logits(model, images.flip(-1), batch_size)
            probs = (logits.softmax(dim=1) + mirrored.softmax(dim=1)) / 2
            out[f"precision_at_1{suffix}_flip"] = (probs.argmax(dim=1) == labels).float().mean().item()
    return out


def score(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """(precision @ 1, mean cross-entropy, predictions); each example counted once."""
    pred = logits.argmax(dim=1)
    return (pred == labels).float().mean().item(), F.cross_entropy(logits, labels).item(), pred
