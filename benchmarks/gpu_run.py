"""The prepared GPU run: one command that checks and measures the project on a GPU.

    python benchmarks/gpu_run.py --data data/prepared            # on a GPU, ~9 minutes
    python benchmarks/gpu_run.py --data data/prepared --budget-s 300
    python benchmarks/gpu_run.py --data data/prepared --dry --device cpu   # the tests

``--budget-s`` fits the whole run in that many seconds (:mod:`gpu_plan`): the sizes are shrunk to each part's share of the
time left, planned at the train step's rate measured first, and a part that would start
after the budget is out is skipped. It writes ``reports/gpu/<gpu name>.json`` (``--out``)
after each part, so a run cut short leaves the parts it finished, and prints a table of
four parts:

1. correctness (:mod:`gpu_parts`, as part 2): step 1's loss and gradients on the device
   against the CPU's from the same weights and batch (TF32 off; within
   :data:`gpu_parts.STEP1_RTOL`), then the first 50 steps' losses from the same seed and
   batches, their difference from the CPU's within :data:`gpu_parts.DRIFT_FACTOR` times
   the CPU's own drift (the same run in the other memory layout, measured in the same
   call), so that healthy float drift passes and a bug fails; host syncs per step on the real GPU path (CUDA's sync
   debug mode: there must be none between log steps), and held-out precision @ 1 after a
   short run, averaged and raw weights;
2. throughput of the train step at batch 128 and larger: eager, on a fixed batch and with
   the real input pipeline; the step under ``torch.compile(mode="reduce-overhead")`` (CUDA
   graphs; GPU only); the typical torchvision DataLoader pipeline on the same device (at
   the first batch size);
3. time to held-out 80%, 84% and 86% with the ``fast`` schedule, and as many of the
   tutorial's 100K steps as fit in the time left, with the held-out learning curve;
4. every visible device (:mod:`gpu_multi`): the train stage at 1 and at N devices
   under torchrun (NCCL), exercise 5's 2 x 64 against 1 x 128, and whether 2 x 64 and
   1 x 128 end with the same weights (on a CPU: 2 processes, gloo);
5. several experiments at once on one device (``--parallel`` train stages side by side,
   as `dvc queue start -j N` runs them): total examples/sec against one alone.

A part, or one of correctness's measurements, that raises leaves ``{"error": "<exception
type>: <message>"}`` in its place (the traceback on stderr) and the run goes on; the command
then ends with status 1, naming what failed. Throughput's other-precision column keeps its
error in its cell, as the compiled step's does.

``--dry`` shrinks every size so the whole script runs in about a minute on a CPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

# The package of this checkout, as the stage scripts run it (stages/_tree.py), whatever
# else is installed; the GPU machine has no install at all.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import dataclasses
import json
import os
import re
import subprocess
import tempfile
import time
from typing import Optional

import torch

from speed.steps import window
from cifar10_tutorial.cli import given_path, run_stage, stage_output
from scratch import package_env, scratch_train_project
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.param_types import load_yaml12
from cifar10_tutorial.files import write_text_atomic
from cifar10_tutorial.params import Params, load_params, to_dict
from cifar10_tutorial.data.prepared import Prepared, load_prepared
from cifar10_tutorial.curves import held_out_curve
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.devices import pick_device
from gpu_multi import multi_device, visible_devices
from gpu_plan import DRY, TARGETS, Budget, Sizes, fit
from gpu_parts import (attempt, host_syncs_per_step, input_step, losses_against_cpu, short_run,
                       syncer, throughput, with_sections)
from gpu_table import format_table
from cifar10_tutorial.training.inputs import run_shape
from cifar10_tutorial.training.optimization import schedule
from cifar10_tutorial.training.train import train

# --------------------------------------------------------------------------- 3. time to accuracy


def _curve(live: Path) -> list[dict]:
    c = held_out_curve(live)
    if c is None:
        return []
    return [{"step": int(row.step), "precision_at_1": float(row.precision_at_1),
             "precision_at_1_raw": float(row.precision_at_1_raw)} for row in c.itertuples()]


def train_stage(params: Params, data: Prepared, sizes: Sizes, root: Path) -> list[dict]:
    """The train stage's own loop (:func:`train`: the input pipeline, the step, the
    averages, the log lines) at each batch size, eager and with its step captured
    (``run.capture_step`` never and always): examples/sec over ``sizes.stage_steps`` steps,
    no held-out evaluation, one checkpoint at the end. Each mode is measured on its own:
    one that fails leaves the others."""
    rows = []
    for batch in sizes.batches:
        row = {"batch_size": batch}
        for mode, key in (("never", "eager"), ("always", "captured")):
            p = with_sections(params, train={"batch_size": batch, "max_steps": sizes.stage_steps,
                                             "log_every": max(1, sizes.stage_steps // 5)},
                              run={"checkpoint_every": 10 ** 9, "summary_every": 10 ** 9,
                                   "capture_step": mode},
                              eval={"every_steps": 0})
            where = root / f"stage-{batch}-{key}"

            def measure(p=p, where=where) -> dict:
                m = train(p, data, TrainPaths(where, where.with_name(where.name + "-live")),
                          progress=False)
                return {k: m[k] for k in ("examples_per_sec", "time_to_first_batch_s",
                                          "loss_avg", "wall_time_s")}
            row[key] = attempt(measure)
        rows.append(row)
    return rows


def fast_schedule(params: Params, data: Prepared, sizes: Sizes, root: Path) -> dict:
    # the run's own shape and schedule (its processes' global batch included)
    shape = run_shape(params, len(data.train_labels), world=params.train.num_devices)
    steps_per_epoch = schedule(params, shape.num_train, shape.global_batch).steps_per_epoch
    p = with_sections(params, train={"schedule": "fast", "max_epochs": sizes.fast_epochs,
                             "log_every": 100}, run={"checkpoint_every": 10 ** 9},
              eval={"every_steps": max(1, round(steps_per_epoch)), "targets": TARGETS})
    t = time.perf_counter()
    m = train(p, data, TrainPaths(root / "fast", root / "fast-live"), progress=False)
    return {"epochs": sizes.fast_epochs, "steps": m["step"], "seconds": time.perf_counter() - t,
            "train_seconds": m["train_seconds"], "reached": m.get("time_to_target", {}),
            "final_precision_at_1": m["held_out"]["precision_at_1"],
            "final_precision_at_1_raw": m["held_out"]["precision_at_1_raw"],
            "curve": _curve(root / "fast-live")}


def tutorial_schedule(params: Params, data: Prepared, sizes: Sizes, steps_per_sec: float,
                      root: Path) -> dict:
    steps = int(min(sizes.tutorial_steps, steps_per_sec * sizes.tutorial_seconds))
    steps = max(sizes.eval_every, steps - steps % sizes.eval_every)
    p = with_sections(params, train={"max_steps": steps, "log_every": 1000},
              run={"checkpoint_every": 10 ** 9},
              eval={"every_steps": sizes.eval_every, "targets": TARGETS})
    t = time.perf_counter()
    m = train(p, data, TrainPaths(root / "tutorial", root / "tutorial-live"), progress=False)
    return {"steps": m["step"], "of_steps": sizes.tutorial_steps,
            "seconds": time.perf_counter() - t, "train_seconds": m["train_seconds"],
            "examples_per_sec": m["examples_per_sec"], "reached": m.get("time_to_target", {}),
            "curve": _curve(root / "tutorial-live")}


# --------------------------------------------------------------------------- 4. side by side


def side_by_side(params_file: Path, data_dir: Path, device: str, n: int, steps: int,
                 root: Path) -> dict:
    """``n`` train stages at once on one device, against one alone: total examples/sec."""
    env = package_env(dict(os.environ))

    def project(i: int) -> Path:
        raw = yaml_load(params_file)
        raw.setdefault("train", {}).update(max_steps=steps, seed=i, device=device,
                                           log_every=max(1, steps // 5))
        raw.setdefault("run", {}).update(checkpoint_every=10 ** 9)
        return scratch_train_project(root / f"exp{i}", data_dir, raw)

    def run(projects: list[Path]) -> dict:
        t = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "stages/train.py", "--data", "prepared",
                                  "--out", "run", "--live", "live"], cwd=p, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env) for p in projects]
        errs = [proc.communicate()[1] for proc in procs]
        wall = time.perf_counter() - t
        for proc, err in zip(procs, errs):
            if proc.returncode:
                raise PipelineError(f"a side-by-side train stage failed:\n{err[-2000:]}")
        each = [json.loads((p / "live" / "speed.json").read_text())["examples_per_sec"]
                for p in projects]
        return {"processes": len(projects), "wall_s": wall, "examples_per_sec_each": each,
                "examples_per_sec_total": sum(each)}

    alone = run([project(0)])
    together = run([project(i) for i in range(1, n + 1)])
    return {"steps_each": steps, "alone": alone, "together": together,
            "speedup": together["examples_per_sec_total"] / alone["examples_per_sec_total"]}


def yaml_load(path: Path) -> dict:
    return load_yaml12(Path(path).read_text()) or {}  # as DVC and the stages read it


# --------------------------------------------------------------------------- the run


def gpu_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def quick_rate(params: Params, data: Prepared, device: torch.device) -> float:
    """Steps/sec of the train step with its input pipeline at the params' batch, in a few
    seconds: what a budget is planned with."""
    with input_step(params, data, device) as (step, _):
        for _ in range(5):
            step()
        return window(step, 1, 20, syncer(device))  # a "batch" of 1: steps, not examples


def run(params: Params, params_file: Path, data_dir: Path, device_name: str, dry: bool,
        out_dir: Path, budget: Optional[Budget] = None, made: Optional[dict] = None) -> dict:
    """Every part in turn, the JSON rewritten after each (a run cut short leaves the parts it
    finished); with a ``budget``, the sizes fitted to the time left and a part that would
    start after it is out skipped."""
    budget = budget or Budget(None, time.perf_counter())
    sizes = DRY if dry else Sizes()
    device = pick_device(device_name)
    params = with_sections(params, train={"device": device.type})
    data = load_prepared(data_dir)
    result = {"device": gpu_name(device), "torch": torch.__version__, "dry": dry,
              "budget_s": budget.seconds, "finished": False, "params": to_dict(params.train),
              "data": {"dir": str(data_dir), "content_hash": data.content_hash,
                       "train": len(data.train_labels), "test": len(data.test_labels),
                       **({"built": made} if made else {})}}
    slug = re.sub(r"[^A-Za-z0-9]+", "-", result["device"]).strip("-").lower()
    out = out_dir / f"{slug}{'-dry' if dry else ''}.json"
    result["written"] = str(out)

    def save() -> None:
        result["total_seconds"] = time.perf_counter() - budget.t0
        write_text_atomic(out, json.dumps(result, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="gpu_run-") as tmp:
        root = Path(tmp)
        if budget.seconds is not None and budget.left() > 0:
            rate = quick_rate(params, data, device)
            batch = params.train.batch_size  # an evaluation pass runs ~2x the train step's
            sizes = fit(sizes, budget.left(), rate, batch, len(data.train_labels) / batch,
                        eval_seconds=len(data.test_labels) / (batch * rate),
                        devices=visible_devices(device.type, sizes.cpu_processes))
            result["planned_at_steps_per_sec"] = rate
        result["sizes"] = dataclasses.asdict(sizes)
        parts = {
            "correctness": lambda: {
                "losses": attempt(lambda: losses_against_cpu(params, data, device,
                                                             sizes.check_steps)),
                "host_syncs_per_step": attempt(lambda: host_syncs_per_step(
                    params, data, device, sizes.check_steps)),
                "short_run": attempt(lambda: short_run(params, data, sizes.short_steps, root))},
            "throughput": lambda: throughput(params, data, device, sizes),
            "train_stage": lambda: train_stage(params, data, sizes, root),
            "fast": lambda: fast_schedule(params, data, sizes, root),
            "tutorial": lambda: tutorial_schedule(
                params, data, sizes,
                _steps_per_sec(result, params) or quick_rate(params, data, device), root),
            "multi_device": lambda: multi_device(
                params_file, data_dir, device.type,
                visible_devices(device.type, sizes.cpu_processes), sizes.multi_steps,
                sizes.weight_steps, root),
            "side_by_side": lambda: side_by_side(params_file, data_dir, device.type,
                                                 sizes.parallel, sizes.parallel_steps, root)}
        for name, part in parts.items():
            if budget.left() <= 0:
                result.setdefault("skipped", []).append(name)
                continue
            t = time.perf_counter()
            result[name] = attempt(part)
            result["failed"] = result.get("failed", []) + failures(name, result[name])
            result.setdefault("part_seconds", {})[name] = time.perf_counter() - t
            save()
    result["finished"] = True
    save()
    return result


def failures(name: str, out) -> list[str]:
    """``[name]`` where the part failed, else its measurements that did (``name.key``, or
    ``name.BATCH.key`` in a part measured at each batch size)."""
    if isinstance(out, list) and name == "train_stage":  # a stage that failed is a failure
        return [f"{name}.{row.get('batch_size')}.{k}" for row in out if isinstance(row, dict)
                for k, v in row.items() if isinstance(v, dict) and "error" in v]
    if not isinstance(out, dict):
        return []
    if "error" in out:
        return [name]
    return [f"{name}.{k}" for k, v in out.items() if isinstance(v, dict) and "error" in v]


def _failed(v) -> bool:
    """A measurement that is missing or raised (``{"error": ...}``)."""
    return not isinstance(v, dict) or "error" in v


def _steps_per_sec(result: dict, params: Params) -> Optional[float]:
    """The train stage's own loop at the params' batch as it runs by default (captured
    where ``run.capture_step: auto`` captures), else the eager step with its input
    pipeline at the params' batch (or the first measured), else the rate the budget was
    planned at; None where none was measured."""
    stage = result.get("train_stage")
    for row in stage if isinstance(stage, list) else []:
        best = row.get("captured") if not _failed(row.get("captured")) else row.get("eager")
        if row["batch_size"] == params.train.batch_size and not _failed(best):
            return best["examples_per_sec"] / row["batch_size"]
    rows = result.get("throughput")
    rows = rows if isinstance(rows, list) else []
    base = next((r for r in rows if r["batch_size"] == params.train.batch_size),
                rows[0] if rows else None)
    if base is None:
        return result.get("planned_at_steps_per_sec")
    return base["eager_input_pipeline"]["examples_per_sec"] / base["batch_size"]


def main(argv=None, built: Optional[tuple[Path, dict]] = None, t0: Optional[float] = None) -> None:
    """The command; ``built``: data made by the caller (its folder, and how it was made, which
    the JSON records) instead of ``--data``."""
    t0 = time.perf_counter() if t0 is None else t0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="prepared data (default: the preprocess stage's "
                    "output in dvc.yaml)")
    ap.add_argument("--budget-s", type=float, help="fit the whole run in this many seconds "
                    "(default: the full sizes, ~9 minutes on one GPU)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --dry)")
    ap.add_argument("--dry", action="store_true", help="tiny sizes: checks the script end to end")
    ap.add_argument("--out", type=given_path, default=Path("reports/gpu"))
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise PipelineError("no CUDA device here: run this where a CUDA GPU is visible, or "
                            "check the script with --dry --device cpu")
    if a.budget_s is not None and not a.budget_s > 0:
        raise PipelineError(f"--budget-s {a.budget_s:g}: give a number of seconds above 0")
    data, made = built if built is not None else (a.data or stage_output("preprocess"), None)
    r = run(load_params(a.params), a.params, data, a.device, a.dry, a.out, Budget(a.budget_s, t0),
            made)
    print(format_table(r))
    if r.get("failed"):
        raise PipelineError(f"failed: {', '.join(r['failed'])}; each one's error is in "
                            f"{r['written']}, the traceback above")


if __name__ == "__main__":
    run_stage(main)

