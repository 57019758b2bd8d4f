"""torch.compile against eager: why the train stage has no compile option
(docs/departures.md, "No `torch.compile`").

For fp32 and bf16 autocast, on one fixed batch: the eager step, the step with its forward
pass compiled (what the removed ``train.compile`` did) and the whole step compiled, timed
in interleaved windows after their warm-up (compilation included in ``compile_s``), and
the profiler's milliseconds per step outside convolutions and matrix products, eager and
forward-compiled: Inductor generates that part, the rest runs in the same oneDNN and BLAS
calls either way.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from cifar10_tutorial.data.prepared import Prepared
from cifar10_tutorial.params import Params
from .steps import project_step, time_breakdown, window

SETUPS = {"eager": {}, "forward_compiled": {"compile_forward": True},
          "step_compiled": {"compile_mode": "default"}}


def compiled_against_eager(params: Params, data: Prepared, device: torch.device, x, y, sync,
                           warmup: int, windows: int, steps: int,
                           precisions: tuple = ("fp32", "bf16")) -> dict:
    """Per precision: examples/sec windows and the median of each set-up, each compiled
    set-up's median against eager, its compile (and warm-up) seconds, and the milliseconds
    per step outside the counted arithmetic."""
    out = {}
    for precision in precisions:
        p = dataclasses.replace(params, train=dataclasses.replace(params.train, precision=precision))
        fns, res = {}, {"windows": {}, "compile_s": {}}
        for name, options in SETUPS.items():
            t = time.perf_counter()
            _, step = project_step(p, data, device, **options)
            for _ in range(warmup):
                step(x, y)
            sync()
            res["compile_s"][name] = time.perf_counter() - t
            fns[name] = step
            res["windows"][name] = []
        for w in range(windows):  # interleaved, the order turned each window
            names = list(fns) if w % 2 == 0 else list(reversed(fns))
            for name in names:
                res["windows"][name].append(window(lambda: fns[name](x, y), len(y), steps, sync))
        med = {k: statistics.median(v) for k, v in res["windows"].items()}
        res["median_examples_per_sec"] = med
        res["vs_eager"] = {k: v / med["eager"] for k, v in med.items() if k != "eager"}
        res["other_ms_per_step"] = {
            name: time_breakdown(p, data, device, x, y, **SETUPS[name])["other_ms_per_step"]
            for name in ("eager", "forward_compiled")}
        out[precision] = res
    return out
