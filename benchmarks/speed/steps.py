"""The train step as the benchmark times it: a fresh network's step on given batches
(optionally compiled), timed windows of it, and where its time goes (torch.profiler)."""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from cifar10_tutorial.data.prepared import Prepared
from cifar10_tutorial.params import Params
from cifar10_tutorial.training.optimization import (WeightAverage, averaging_decay, make_optimizer, make_step,
                                     step_options, training_model)


def window(step: Callable[[], None], batch: int, steps: int, sync: Callable[[], None]) -> float:
    """Examples/sec of ``steps`` consecutive steps."""
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch * steps / (time.perf_counter() - t)


def measure_windows(step: Callable[[], None], batch: int, warmup: int, windows: int, steps: int,
             sync: Callable[[], None]) -> list[float]:
    """Examples/sec of ``windows`` timed windows of ``steps`` steps after ``warmup`` steps."""
    for _ in range(warmup):
        step()
    return [window(step, batch, steps, sync) for _ in range(windows)]


def project_step(params: Params, data: Prepared, device: torch.device, with_loss: bool = False,
                 compile_mode: Optional[str] = None, compile_forward: bool = False):
    """A fresh network, optimizer and weight averages; ``step(x, y)`` as the train loop does it
    (returning the loss with ``with_loss``; the whole step compiled with ``compile_mode``, or
    only the forward pass with ``compile_forward``: what the train stage's removed
    ``train.compile`` did)."""
    tr = params.train
    torch.manual_seed(tr.seed)
    model = training_model(params, data.num_classes, device)
    optimizer = make_optimizer(model, params)
    ema = WeightAverage(model, averaging_decay(params))
    net = torch.compile(model) if compile_forward else model
    train_step = make_step(net, model, optimizer, device, **step_options(params))
    if compile_mode is not None:
        train_step = torch.compile(train_step, mode=compile_mode)
    count = {"n": 0}

    def step(x, y):
        loss = train_step(x, y)[0]
        count["n"] += 1
        ema.update(model, count["n"])
        return loss if with_loss else None
    return model, step


GEMM_OPS = ("conv", "mm", "linear", "matmul")  # op names that run the counted arithmetic


def time_breakdown(params: Params, data: Prepared, device: torch.device, x, y,
                   steps: int = 10, **compiled) -> dict:
    """Where a fixed-batch step's time goes (torch.profiler, self time per op): the share in
    convolutions and matrix products (the counted arithmetic), the milliseconds per step
    outside them, and the largest other ops; ``compiled``: :func:`project_step`'s options."""
    from torch.profiler import ProfilerActivity, profile

    _, step = project_step(params, data, device, **compiled)
    for _ in range(3):
        step(x, y)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step(x, y)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops = [(e.key, getattr(e, attr)) for e in prof.key_averages()]
    ops = [(k, t) for k, t in ops if t > 0 and not k.startswith("ProfilerStep")]
    total = sum(t for _, t in ops)
    gemm = sum(t for k, t in ops if any(g in k.lower() for g in GEMM_OPS))
    others = sorted(((k, t) for k, t in ops if not any(g in k.lower() for g in GEMM_OPS)),
                    key=lambda kt: -kt[1])[:6]
    return {"gemm_share": gemm / total, "other_ms_per_step": (total - gemm) / steps / 1000,
            "top_other_ops": [{"op": k, "share": t / total} for k, t in others]}
