"""The roofline: what fraction of the machine's arithmetic peak each pipeline gets.

The peak is the machine's own ``torch.mm`` of two 2048 x 2048 matrices in float32 and in
bfloat16, on the same threads; each pipeline's GFLOP/s come from its examples/sec and
the network's own count of operations (:func:`.model.train_flops_per_image`: 2 x (3 x the
forward multiply-adds - conv1's input gradient), 105.3 MFLOP per training example of the
tutorial's network; 2 x the forward multiply-adds per evaluated image).
"""
from __future__ import annotations

import statistics
import time

import torch

from ..model import build_model, macs_per_image, train_flops_per_image
from ..params import Params


def matmul_peak(dtype: torch.dtype, device: torch.device, n: int = 2048, reps: int = 7) -> float:
    """GFLOP/s of ``torch.mm`` of two n x n matrices (median of ``reps``): what this machine's
    BLAS gets from its cores at this precision, the roofline the pipelines are measured on."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        torch.mm(a, b)
        sync()
        times.append(time.perf_counter() - t)
    return 2 * n ** 3 / statistics.median(times) / 1e9


PIPELINE_PRECISION = {"project": None, "fixed_batch": None, "project_bf16": "bf16",
                      "typical": "fp32", "tensorflow": "fp32", "eval": None}


def roofline(results: dict, params: Params, num_classes: int, device: torch.device,
             peak_size: int = 2048) -> dict:
    """Each measured pipeline's GFLOP/s and its fraction of the matmul peak of its precision."""
    m = params.model
    model = build_model(num_classes, m.head, m.output, m.lrn)
    flops = {"train": train_flops_per_image(model), "eval": 2 * macs_per_image(model)}
    peak = {"fp32": matmul_peak(torch.float32, device, peak_size),
            "bf16": matmul_peak(torch.bfloat16, device, peak_size)}
    out = {"peak_gflops": peak, "flops_per_example": flops, "pipelines": {}}
    for key, eps in results["median_examples_per_sec"].items():
        precision = PIPELINE_PRECISION[key] or params.train.precision
        gflops = eps * flops["eval" if key == "eval" else "train"] / 1e9
        out["pipelines"][key] = {"precision": precision, "gflops": gflops,
                                 "fraction_of_peak": gflops / peak[precision]}
    return out
