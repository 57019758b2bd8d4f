"""The roofline: what fraction of the machine's arithmetic peak each pipeline gets.

The peak of a precision is the faster of two compute-bound kernels on the same threads:
``torch.mm`` of two 2048 x 2048 matrices (torch's BLAS) and a 3 x 3 convolution of 256 to
256 channels on 28 x 28, batch 32, channels_last (the convolution library: oneDNN on a
CPU, cuDNN on a GPU). Either alone can miss the machine's peak: on an AMD EPYC with
full-width AVX-512 torch's MKL ran ``torch.mm`` at about a third of the rate oneDNN gets
from the same cores, and the network's own convolutions ran above that "peak". Each
pipeline's GFLOP/s come from its examples/sec and the network's own count of operations
(:func:`cifar10_tutorial.model.train_flops_per_image`: 2 x (3 x the forward multiply-adds - conv1's input
gradient), 105.3 MFLOP per training example of the tutorial's network; 2 x the forward
multiply-adds per evaluated image).
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from cifar10_tutorial.model import build_model, macs_per_image, train_flops_per_image
from cifar10_tutorial.params import Params, to_dict

CONV_SHAPE = (32, 256, 28, 3)  # batch, channels (in = out), height = width, kernel size


def _rate(fn, flops: float, device: torch.device, reps: int) -> float:
    """GFLOP/s of ``fn`` (``flops`` operations a call): the median of ``reps`` timed calls
    after two untimed ones."""
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9


def matmul_peak(dtype: torch.dtype, device: torch.device, n: int = 2048, reps: int = 7) -> float:
    """GFLOP/s of ``torch.mm`` of two n x n matrices (median of ``reps``): what torch's BLAS
    gets from these cores at this precision."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return _rate(lambda: torch.mm(a, b), 2 * n ** 3, device, reps)


def conv_peak(dtype: torch.dtype, device: torch.device, shape: tuple = CONV_SHAPE,
              reps: int = 7) -> float:
    """GFLOP/s of a compute-bound convolution (``shape``: batch, channels in = out,
    height = width, kernel size; "same" padding, channels_last; median of ``reps``): what
    the convolution library gets from these cores at this precision."""
    batch, c, hw, k = shape
    x = torch.randn(batch, c, hw, hw, device=device).to(dtype)
    w = torch.randn(c, c, k, k, device=device).to(dtype)
    x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    return _rate(lambda: F.conv2d(x, w, padding=k // 2), 2 * batch * hw * hw * c * c * k * k,
                 device, reps)


def peaks(device: torch.device, peak_size: int = 2048, shape: tuple = CONV_SHAPE) -> dict:
    """{precision: {"mm": GFLOP/s, "conv": GFLOP/s}} in fp32 and bf16."""
    return {name: {"mm": matmul_peak(dtype, device, peak_size),
                   "conv": conv_peak(dtype, device, shape)}
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}


PIPELINE_PRECISION = {"project": None, "fixed_batch": None, "project_bf16": "bf16",
                      "typical": "fp32", "tensorflow": "fp32", "eval": None}


def roofline(results: dict, params: Params, num_classes: int, device: torch.device,
             peak_size: int = 2048, conv_shape: tuple = CONV_SHAPE) -> dict:
    """Each measured pipeline's GFLOP/s and its fraction of the peak of its precision (the
    faster of the matmul and the convolution, both kept in ``peak_kernels``)."""
    model = build_model(num_classes, **to_dict(params.model))
    flops = {"train": train_flops_per_image(model), "eval": 2 * macs_per_image(model)}
    kernels = peaks(device, peak_size, conv_shape)
    peak = {name: max(k.values()) for name, k in kernels.items()}
    out = {"peak_gflops": peak, "peak_kernels": kernels, "peak_matrix_size": peak_size,
           "conv_shape": list(conv_shape), "flops_per_example": flops, "pipelines": {}}
    for key, eps in results["median_examples_per_sec"].items():
        precision = PIPELINE_PRECISION[key] or params.train.precision
        gflops = eps * flops["eval" if key == "eval" else "train"] / 1e9
        out["pipelines"][key] = {"precision": precision, "gflops": gflops,
                                 "fraction_of_peak": gflops / peak[precision]}
    return out
