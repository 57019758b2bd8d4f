"""The GPU run's part on every visible device: the train stage under torchrun (NCCL on
GPUs, gloo on CPU processes) at 1 and at N devices, each running it as users do
(``train.num_devices``), in scratch folders:

* throughput: N x 128 against 1 x 128, examples/sec in all and the scaling efficiency
  (examples/sec at N / (N x at 1));
* exercise 5 as the tutorial's multi-GPU script poses it: 2 x 64 against 1 x 128, the same
  global batch, examples/sec and sec/batch (the step time / devices, as
  cifar10_multi_gpu_train.py prints it);
* the same weights across world sizes: 2 x 64 and 1 x 128 train on the same global batches
  (``input.shuffle: permutation``; rank r takes slice r), so after a few steps at a low
  rate their weights differ only by the rounding of the gradient's average: the largest
  difference, against :data:`WEIGHTS_ATOL`.

On a CPU (``--dry``) the devices are ``processes`` CPU processes sharing its cores: the
figures then check the part end to end, not the hardware.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from scratch import package_env, scratch_train_project
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.param_types import load_yaml12

WEIGHTS_ATOL = 2e-4  # tests/test_distributed.py: 30 steps at lr 0.02 stay within it on a CPU
WEIGHTS_LR = 0.02


def _yaml(path: Path) -> dict:
    return load_yaml12(Path(path).read_text()) or {}  # as DVC and the stages read it


def train_stage(root: Path, name: str, params_file: Path, data_dir: Path, device: str,
                devices: int, batch: int, steps: int, **train) -> dict:
    """The train stage once in a scratch folder at ``devices`` x ``batch``: its logged
    examples/sec, wall time and the folder (its model at run/model.pt)."""
    raw = _yaml(params_file)
    raw.setdefault("train", {}).update(device=device, num_devices=devices, batch_size=batch,
                                       max_steps=steps, seed=0, log_every=max(1, steps // 4),
                                       **train)
    raw.setdefault("run", {}).update(checkpoint_every=10 ** 9, summary_every=10 ** 9)
    raw.setdefault("eval", {}).update(every_steps=0)
    raw.setdefault("input", {}).update(shuffle="permutation")
    proj = scratch_train_project(root / name, data_dir, raw)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "stages/train.py", "--data", "prepared", "--out", "run",
                           "--live", "live"], cwd=proj, env=package_env(dict(os.environ)),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise PipelineError(f"the train stage at {devices} x {batch} failed: "
                            f"{proc.stderr.strip()[-800:]}")
    speed = json.loads((proj / "live" / "speed.json").read_text())
    eps = speed["examples_per_sec"]
    return {"devices": devices, "batch_size": batch, "steps": steps,
            # the step time (global batch / examples/sec) / devices
            "examples_per_sec": eps, "sec_per_batch": batch / eps,
            "wall_s": time.perf_counter() - t, "folder": str(proj)}


def max_weight_difference(a: Path, b: Path) -> float:
    """The largest difference between two model.pt files' raw and averaged weights."""
    wa, wb = (torch.load(p, map_location="cpu", weights_only=True) for p in (a, b))
    return max(float((wa[k][n].float() - wb[k][n].float()).abs().max())
               for k in ("model", "ema") for n in wa[k])


def multi_device(params_file: Path, data_dir: Path, device: str, devices: int, steps: int,
                 weight_steps: int, root: Path) -> dict:
    """Throughput at 1 and ``devices``, exercise 5 (2 x 64 against 1 x 128) and the weights
    check; ``devices`` < 2: nothing to compare (one device visible)."""
    if devices < 2:
        return {"devices": devices, "skipped": "one device visible"}
    run = lambda name, n, b, s, **kw: train_stage(root, name, params_file, data_dir,  # noqa: E731
                                                  device, n, b, s, **kw)
    one = run("1x128", 1, 128, steps)
    many = run(f"{devices}x128", devices, 128, steps)
    half = run("2x64", 2, 64, steps)
    w1 = run("weights-1x128", 1, 128, weight_steps, initial_lr=WEIGHTS_LR)
    w2 = run("weights-2x64", 2, 64, weight_steps, initial_lr=WEIGHTS_LR)
    diff = max_weight_difference(Path(w1["folder"]) / "run/model.pt",
                                 Path(w2["folder"]) / "run/model.pt")
    return {"devices": devices, "device": device,
            "throughput": {"one": one, "all": many,
                           "scaling_efficiency": many["examples_per_sec"]
                           / (devices * one["examples_per_sec"])},
            "exercise5": {"1x128": one, "2x64": half,
                          "speedup": half["examples_per_sec"] / one["examples_per_sec"]},
            "same_weights": {"steps": weight_steps, "initial_lr": WEIGHTS_LR,
                             "max_abs_diff": diff, "atol": WEIGHTS_ATOL,
                             "ok": diff <= WEIGHTS_ATOL}}


def visible_devices(device: str, cpu_processes: int) -> int:
    """GPUs visible (``cuda``), or the CPU processes a dry run stands them in with."""
    return torch.cuda.device_count() if device == "cuda" else cpu_processes
