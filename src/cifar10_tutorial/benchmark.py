"""Throughput benchmark: the project's train step against the usual PyTorch pipeline.

Measured one after another in one invocation, each as the median of several
timed windows after a warm-up:

* ``project``: the train step with the project's input pipeline (shuffle queue,
  distortions vectorised on the device, banded-convolution LRN, channels_last);
* ``fixed_batch``: the same step on one batch distorted once (no input work);
* ``typical``: a torchvision-style Dataset of PIL images with per-image
  transforms of the same distortions, a DataLoader with 2 workers, and the same
  network built the usual way (``nn.LocalResponseNorm``, NCHW);
* ``eval``: evaluation throughput over the test split (central crop).

``python stages/benchmark.py`` prints a table and writes ``reports/benchmark.json``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .evaluate import predict_logits
from .inputs import CONTRAST_RANGE, MAX_BRIGHTNESS_DELTA
from .model import build_model
from .params import Params
from .prepare import Prepared
from .train import WeightAverage, loss_terms, make_batches, pick_device


def _windows(step: Callable[[], None], batch: int, warmup: int, windows: int, steps: int,
             sync: Callable[[], None]) -> list[float]:
    """Examples/sec of ``windows`` timed windows of ``steps`` steps after ``warmup`` steps."""
    for _ in range(warmup):
        step()
    sync()
    out = []
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        out.append(batch * steps / (time.perf_counter() - t))
    return out


def _train_step(model, optimizer, ema, weight_decay: float, lr: float = 0.1):
    state = {"n": 0}

    def step(x, y):
        logits = model(x, return_logits=True)
        ce, wd = loss_terms(model, logits, y, weight_decay)
        optimizer.zero_grad(set_to_none=True)
        (ce + wd).backward()
        optimizer.step()
        state["n"] += 1
        if ema is not None:
            ema.update(model, state["n"])
    return step


class TutorialJitter:
    """Per-image brightness, contrast and standardization of a uint8 CHW tensor
    (the tutorial's distortions written as a typical per-sample transform)."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        x = img.float() + float(np.random.uniform(-MAX_BRIGHTNESS_DELTA, MAX_BRIGHTNESS_DELTA))
        mean = x.mean(dim=(1, 2), keepdim=True)
        x = (x - mean) * float(np.random.uniform(*CONTRAST_RANGE)) + mean
        return (x - x.mean()) / x.std(correction=0).clamp_min(1.0 / x.numel() ** 0.5)


class PILImages(torch.utils.data.Dataset):
    """CIFAR images as PIL images, transformed one at a time, as in most tutorials."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        from PIL import Image

        self.images = [Image.fromarray(im.transpose(1, 2, 0)) for im in images]
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), int(self.labels[i])


def typical_model(num_classes: int) -> torch.nn.Module:
    """The same network with torch's stock LocalResponseNorm (alpha*size convention), NCHW."""
    model = build_model(num_classes)
    model.norm1 = torch.nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
    model.norm2 = torch.nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
    return model


def run_benchmark(params: Params, data: Prepared, warmup: int = 10, windows: int = 5,
                  steps: int = 20, typical_workers: int = 2, out: Path | None = None) -> dict:
    """Measure every pipeline; return (and write to ``out``) the figures and ratios."""
    import torchvision.transforms as T

    tr = params.train
    device = pick_device(tr.device)
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    batch = tr.batch_size
    torch.manual_seed(tr.seed)
    images = torch.from_numpy(data.train_images).to(device)
    labels = torch.from_numpy(data.train_labels).to(device)
    results: dict = {"device": str(device), "batch_size": batch, "threads": torch.get_num_threads(),
                     "warmup_steps": warmup, "windows": windows, "steps_per_window": steps}

    def fresh():
        model = build_model(data.num_classes, params.model.head, params.model.output,
                            params.model.lrn).to(device).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=tr.initial_lr)
        return model, _train_step(model, opt, WeightAverage(model, tr.moving_average_decay),
                                  tr.weight_decay)

    # the project's step with its real input pipeline
    model, step = fresh()
    batches = make_batches(params, data, images, labels, None)
    counter = {"i": 0}

    def project_step():
        x, y = batches.get(counter["i"])
        counter["i"] += 1
        step(x.contiguous(memory_format=torch.channels_last), y)
    try:
        t0 = time.perf_counter()
        batches.get(0)  # the queue's fill, reported apart
        results["queue_fill_s"] = time.perf_counter() - t0
        counter["i"] = 1
        results["project"] = _windows(project_step, batch, warmup, windows, steps, sync)
    finally:
        batches.close()

    # the same step on a fixed batch
    model, step = fresh()
    perm = dataclasses.replace(params, input=dataclasses.replace(params.input, shuffle="permutation"))
    fixed = make_batches(perm, data, images, labels, None)
    x0, y0 = fixed.get(0)
    fixed.close()
    x0 = x0.contiguous(memory_format=torch.channels_last)
    results["fixed_batch"] = _windows(lambda: step(x0, y0), batch, warmup, windows, steps, sync)

    # the typical pipeline: PIL images, per-sample transforms, DataLoader workers, stock LRN
    transform = T.Compose([T.RandomCrop(24), T.RandomHorizontalFlip(), T.PILToTensor(),
                           TutorialJitter()])
    loader = torch.utils.data.DataLoader(
        PILImages(data.train_images, data.train_labels, transform), batch_size=batch,
        shuffle=True, num_workers=typical_workers, drop_last=True,
        persistent_workers=typical_workers > 0, pin_memory=device.type == "cuda")
    tmodel = typical_model(data.num_classes).to(device)
    topt = torch.optim.SGD(tmodel.parameters(), lr=tr.initial_lr)
    tstep = _train_step(tmodel, topt, WeightAverage(tmodel, tr.moving_average_decay), tr.weight_decay)
    it = iter(loader)

    def typical_step():
        nonlocal it
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        tstep(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
    results["typical"] = _windows(typical_step, batch, warmup, windows, steps, sync)
    del it, loader

    # evaluation over the whole test split
    model.eval()
    test = torch.from_numpy(data.test_images).to(device)
    evals = []
    for _ in range(3):
        t = time.perf_counter()
        predict_logits(model, test, params.eval.batch_size)
        sync()
        evals.append(len(test) / (time.perf_counter() - t))
    results["eval"] = evals

    med = {k: statistics.median(results[k]) for k in ("project", "fixed_batch", "typical", "eval")}
    results["median_examples_per_sec"] = med
    results["ratios"] = {
        "project_vs_typical": med["project"] / med["typical"],
        "input_pipeline_overhead": 1 - med["project"] / med["fixed_batch"],
        "eval_seconds_per_10000": 10000 / med["eval"],
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(results, indent=2) + "\n")
        os.replace(tmp, out)
    return results


def format_table(r: dict) -> str:
    med = r["median_examples_per_sec"]
    rows = [("project: real input pipeline", med["project"]),
            ("project: fixed batch (no input work)", med["fixed_batch"]),
            ("typical: PIL Dataset + DataLoader(2) + nn.LocalResponseNorm", med["typical"]),
            ("evaluation (images/sec)", med["eval"])]
    lines = [f"{'pipeline':<62} {'examples/sec':>12}", "-" * 75]
    lines += [f"{name:<62} {v:>12,.0f}" for name, v in rows]
    ra = r["ratios"]
    lines += ["-" * 75,
              f"project / typical: {ra['project_vs_typical']:.2f}x; input pipeline overhead: "
              f"{100 * ra['input_pipeline_overhead']:.1f}% of the step; "
              f"evaluation of 10,000 images: {ra['eval_seconds_per_10000']:.1f} s; "
              f"queue fill: {r['queue_fill_s']:.2f} s ({r['device']}, {r['threads']} threads)"]
    return "\n".join(lines)
