"""Throughput benchmark: the project's train step against the usual PyTorch
and TensorFlow pipelines, on the same machine, in one invocation.

Each figure is the median of several timed windows after a warm-up:

* ``project``: the train stage's own step (:func:`train.make_step`, the
  params' precision and layout) with its input pipeline (shuffle queue,
  distortions vectorised on the device), plus the weight averages;
* ``fixed_batch``: the same step on one batch distorted once (no input work),
  timed in windows interleaved with ``project`` so that drift in the
  machine's speed cancels out of the input pipeline's overhead;
* ``project_bf16``: ``project`` under ``train.precision: bf16`` (when the
  params say fp32);
* ``typical`` (:mod:`.baselines`): a torchvision-style Dataset of PIL images with per-image
  transforms of the same distortions, a DataLoader with 2 workers, and the same
  network built the usual way (``nn.LocalResponseNorm``, NCHW);
* ``tensorflow`` (with ``tf_python``): :mod:`.tf_baseline` (Keras, tf.data)
  run by a Python that has TensorFlow;
* ``eval``: evaluation throughput over the test split (central crop);
* ``train_stage`` (:mod:`.stage`): the train stage's own loop (log lines, DVCLive rows,
  TensorBoard summaries at the params' cadence), a few short runs, each against the fixed
  batch timed just before and after it.

The roofline (:mod:`.roofline`): the machine's own peak in float32 and in bfloat16, on
the same threads (the faster of ``torch.mm`` of two 2048 x 2048 matrices and a 3 x 3
convolution of 256 channels), and for each pipeline
the GFLOP/s it achieves, from the network's own count of operations
(:func:`model.train_flops_per_image`: 2 x (3 x the forward multiply-adds - conv1's
input gradient), 105.3 MFLOP per training example of the tutorial's network;
2 x the forward multiply-adds for evaluation), and its fraction of the peak of
its precision.

``python benchmarks/benchmark.py`` prints a table and writes ``reports/benchmark.json``.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Optional

import torch

from cifar10_tutorial.devices import pick_device
from cifar10_tutorial.files import write_text_atomic
from cifar10_tutorial.provenance import code_version, device_description
from cifar10_tutorial.scoring import predict_logits
from cifar10_tutorial.training.host_memory import keep_freed_memory
from cifar10_tutorial.training.inputs import input_options, make_batches
from cifar10_tutorial.params import Params
from cifar10_tutorial.data.prepared import Prepared
from .baselines import tensorflow_figures, typical_step
from .compiled import compiled_against_eager
from .roofline import CONV_SHAPE, roofline
from .stage import train_stage_speed
from .steps import measure_windows, project_step, time_breakdown, window
from .roofline_table import fraction, peak_words, stage_gaps
from cifar10_tutorial.training.optimization import training_model


def with_input(params: Params, data: Prepared, images, labels, device):
    """(step using the real input pipeline, the pipeline to close, its fill time in seconds)."""
    model, step = project_step(params, data, device)
    batches = make_batches(images, labels, **input_options(params, data))
    t0 = time.perf_counter()
    batches.get(0)  # the queue's fill, reported apart
    fill = time.perf_counter() - t0
    counter = {"i": 1}

    def real_step():
        step(*batches.get(counter["i"]))
        counter["i"] += 1
    return model, real_step, batches, fill


def run_benchmark(params: Params, data: Prepared, warmup: int = 10, windows: int = 7,
                  steps: int = 40, typical_workers: int = 2, out: Path | None = None,
                  tf_python: Optional[str] = None, data_dir: Optional[Path] = None,
                  peak_size: int = 2048, compiled: bool = True, train_stage: int = 5,
                  conv_shape: tuple = CONV_SHAPE) -> dict:
    """Measure every pipeline; return (and write to ``out``) the figures and ratios
    (the peak from ``peak_size`` x ``peak_size`` products and convolutions of
    ``conv_shape``: :mod:`.roofline`; with ``compiled``,
    torch.compile against eager: :mod:`.compiled`; with ``train_stage`` > 0, that many
    short runs of the stage's own loop: :mod:`.stage`)."""
    tr = params.train
    memory_kept = keep_freed_memory()  # as the train stage does
    device = pick_device(tr.device)
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    batch = tr.batch_size
    images = torch.from_numpy(data.train_images).to(device)
    labels = torch.from_numpy(data.train_labels).to(device)
    results: dict = {"device": str(device), "batch_size": batch, "threads": torch.get_num_threads(),
                     "precision": tr.precision, "channels_last": tr.channels_last,
                     "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                     "machine": device_description(device), "torch": torch.__version__,
                     **code_version(), "data_hash": getattr(data, "content_hash", None),
                     "warmup_steps": warmup, "windows": windows, "steps_per_window": steps,
                     "keep_freed_memory": memory_kept}
    x0, y0, fixed_step = _project_against_fixed_batch(params, data, images, labels, device, sync,
                                                      results)
    if train_stage:  # the fixed batch on the step timed above: warm, and no second network
        results["train_stage"] = train_stage_speed(params, data, fixed_step, batch, steps,
                                                   sync, warmup, runs=train_stage)
    if tr.precision != "bf16":  # the same under bf16 autocast
        bf16 = dataclasses.replace(params, train=dataclasses.replace(tr, precision="bf16"))
        _, bf16_step, batches, _ = with_input(bf16, data, images, labels, device)
        try:
            results["project_bf16"] = measure_windows(bf16_step, batch, warmup, windows, steps, sync)
        finally:
            batches.close()
    # the typical pipeline: PIL images, per-sample transforms, DataLoader workers, stock LRN
    typical, close = typical_step(params, data, device, typical_workers)
    try:
        results["typical"] = measure_windows(typical, batch, warmup, windows, steps, sync)
    finally:
        close()
    if tf_python:
        if data_dir is None:
            raise ValueError("the TensorFlow baseline needs data_dir (the prepared data's folder)")
        tf = tensorflow_figures(tf_python, data_dir, batch, warmup, windows, steps)
        results["tensorflow"] = tf["examples_per_sec"]
        results["tensorflow_version"] = tf["tensorflow"]
    results["eval"] = _eval_speed(params, data, device, sync)
    _medians_and_ratios(results)
    results["roofline"] = roofline(results, params, data.num_classes, device, peak_size,
                                   conv_shape)
    results["roofline"]["time_breakdown"] = time_breakdown(params, data, device, x0, y0)
    if compiled:
        results["compiled"] = compiled_against_eager(params, data, device, x0, y0, sync,
                                                     warmup, windows, steps)
    if out is not None:
        write_text_atomic(out, json.dumps(results, indent=2) + "\n")
    return results


def _project_against_fixed_batch(params: Params, data: Prepared, images, labels, device, sync,
                                 results: dict):
    """The project's step with its real input pipeline, in windows interleaved with the same
    step on a fixed batch (no input work), then the input pipeline alone (milliseconds per
    batch: fill, distort, dequeue). Fills ``results``; returns the fixed batch and a
    function that runs one (warmed-up) step on it."""
    batch, warmup = params.train.batch_size, results["warmup_steps"]
    windows, steps = results["windows"], results["steps_per_window"]
    _, real_step, batches, results["queue_fill_s"] = with_input(params, data, images, labels, device)
    positions = iter(range(10 ** 6 + 1, 10 ** 9))  # stream positions far from the timed ones
    try:
        perm = dataclasses.replace(params, input=dataclasses.replace(params.input, shuffle="permutation"))
        fixed = make_batches(images, labels, **input_options(perm, data))
        x0, y0 = fixed.get(0)
        fixed.close()
        _, step = project_step(params, data, device)
        for _ in range(warmup):
            real_step()
            step(x0, y0)
        results["project"], results["fixed_batch"] = [], []
        for w in range(windows):  # paired windows, in alternating order
            for key in (("project", "fixed_batch") if w % 2 == 0 else ("fixed_batch", "project")):
                fn = real_step if key == "project" else (lambda: step(x0, y0))
                results[key].append(window(fn, batch, steps, sync))
        alone = measure_windows(lambda: batches.get(next(positions)), batch, 0, windows, steps, sync)
        results["input_ms_per_batch"] = [1000 * batch / v for v in alone]
    finally:
        batches.close()
    return x0, y0, lambda: step(x0, y0)


def _eval_speed(params: Params, data: Prepared, device, sync) -> list[float]:
    """Images/sec of evaluation over the whole test split, three times."""
    model = training_model(params, data.num_classes, device).eval()
    test = torch.from_numpy(data.test_images).to(device)
    evals = []
    for _ in range(3):
        t = time.perf_counter()
        predict_logits(model, test, params.eval.batch_size)
        sync()
        evals.append(len(test) / (time.perf_counter() - t))
    return evals


def _medians_and_ratios(results: dict) -> None:
    """The median of each pipeline's windows, and the ratios between them."""
    keys = [k for k in ("project", "fixed_batch", "project_bf16", "typical", "tensorflow", "eval")
            if k in results]
    med = {k: statistics.median(results[k]) for k in keys}
    results["median_examples_per_sec"] = med
    # the overhead from paired windows: each project window against the fixed-batch one beside it
    paired = [1 - p / f for p, f in zip(results["project"], results["fixed_batch"])]
    input_ms = statistics.median(results["input_ms_per_batch"])
    ratios = {"project_vs_typical": med["project"] / med["typical"],
              "input_pipeline_overhead": statistics.median(paired),
              "input_ms_per_batch": input_ms,
              "input_share_of_fixed_step": input_ms / (1000 * results["batch_size"] / med["fixed_batch"]),
              "eval_seconds_per_10000": 10000 / med["eval"]}
    if "project_bf16" in med:
        ratios["project_bf16_vs_typical"] = med["project_bf16"] / med["typical"]
        ratios["project_bf16_vs_fp32"] = med["project_bf16"] / med["project"]
    if "tensorflow" in med:
        ratios["project_vs_tensorflow"] = med["project"] / med["tensorflow"]
        if "project_bf16" in med:
            ratios["project_bf16_vs_tensorflow"] = med["project_bf16"] / med["tensorflow"]
    results["ratios"] = ratios


def _train_stage_lines(r: dict) -> list[str]:
    if "train_stage" not in r:
        return []
    t = r["train_stage"]
    return [f"train stage: {t['examples_per_sec']:,.0f} examples/sec over {t['timed_steps']} "
            f"steps in {len(t['runs'])} runs (log every {t['log_every']}, summaries every "
            f"{t['summary_every']}), {100 * t['gap']:.1f}% slower than the fixed batch timed "
            f"beside each run ({stage_gaps(t)})"]


def _compiled_lines(r: dict) -> list[str]:
    if "compiled" not in r:
        return []
    lines = []
    for precision, c in r["compiled"].items():
        other = c["other_ms_per_step"]
        lines.append(f"torch.compile, {precision}: " + ", ".join(
            f"{k.replace('_', ' ')} {v:.2f}x eager" for k, v in c["vs_eager"].items())
            + f" (outside convolutions and matrix products {other['eager']:.1f} ms per step "
            f"eager, {other['forward_compiled']:.1f} forward compiled; compiling "
            f"{c['compile_s']['forward_compiled']:.0f} s)")
    return lines


def format_table(r: dict) -> str:
    med = r["median_examples_per_sec"]
    names = {"project": f"project: real input pipeline ({r['precision']})",
             "fixed_batch": "project: fixed batch (no input work)",
             "project_bf16": "project: real input pipeline, bf16 autocast",
             "typical": "typical: PIL Dataset + DataLoader(2) + nn.LocalResponseNorm",
             "tensorflow": f"TensorFlow {r.get('tensorflow_version', '')}: Keras + tf.data (AUTOTUNE)",
             "eval": "evaluation (images/sec)"}
    roof = r["roofline"]
    lines = [f"{'pipeline':<62} {'examples/sec':>12} {'GFLOP/s':>8} {'of peak':>8}", "-" * 93]
    for k, v in med.items():
        pipe = roof["pipelines"][k]
        lines.append(f"{names[k]:<62} {v:>12,.0f} {pipe['gflops']:>8.1f} "
                     f"{fraction(roof, pipe):>8}")
    ra = r["ratios"]
    vs = [f"project / typical: {ra['project_vs_typical']:.2f}x"]
    if "project_bf16_vs_typical" in ra:
        vs.append(f"bf16 / typical: {ra['project_bf16_vs_typical']:.2f}x")
        vs.append(f"bf16 / fp32: {ra['project_bf16_vs_fp32']:.2f}x")
    if "project_vs_tensorflow" in ra:
        vs.append(f"project / TensorFlow: {ra['project_vs_tensorflow']:.2f}x")
    if "project_bf16_vs_tensorflow" in ra:
        vs.append(f"bf16 / TensorFlow: {ra['project_bf16_vs_tensorflow']:.2f}x")
    if "tensorflow" not in med:
        vs.append("TensorFlow not measured (--tf-python)")
    fl = roof["flops_per_example"]
    lines += ["-" * 93,
              f"roofline: peak {peak_words(roof)}; {fl['train'] / 1e6:.1f} MFLOP per training example, "
              f"{fl['eval'] / 1e6:.1f} per evaluated image (each pipeline against the peak of "
              f"its precision)",
              f"time of a fixed-batch step in convolutions and matrix products: "
              f"{100 * roof['time_breakdown']['gemm_share']:.0f}%; largest others: "
              + ", ".join(f"{o['op']} {100 * o['share']:.0f}%"
                          for o in roof["time_breakdown"]["top_other_ops"][:4]),
              "; ".join(vs),
              f"input pipeline: {100 * ra['input_pipeline_overhead']:.1f}% slower than the fixed "
              f"batch (paired windows); alone {ra['input_ms_per_batch']:.2f} ms per batch = "
              f"{100 * ra['input_share_of_fixed_step']:.1f}% of a fixed-batch step",
              *_train_stage_lines(r),
              *_compiled_lines(r),
              f"evaluation of 10,000 images: {ra['eval_seconds_per_10000']:.1f} s; "
              f"queue fill: {r['queue_fill_s']:.2f} s ({r['machine']}, {r['cpu_capability']}, "
              f"torch {r['torch']})"]
    return "\n".join(lines)
