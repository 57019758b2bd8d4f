"""Exercise 5's speed question on one machine, with the same cores for both: the train
stage at 1 process x batch 128 (all cores as its threads) against 2 processes x batch 64
(torchrun; the cores shared among them), a few short runs of each, alternating.

    python benchmarks/devices_timing.py --data PREPARED --out reports/devices_timing.json
        [--steps 400] [--repeats 3] [--params params.yaml]

The exercise variants (`baseline`, `devices_2x64`) answer whether the two set-ups learn
the same; their speeds may come from different machines and loads (runs paused and
continued elsewhere, two runs side by side), so the report takes the speed answer from
this file, measured with the machine otherwise idle. Each run is the real train stage in a
scratch folder (held-out evaluation off, no checkpoints); its examples/sec is what the
stage itself logs. sec/batch is computed as cifar10_multi_gpu_train.py prints it: the
step time divided by the number of devices. A benchmark: run it on an idle machine.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from datetime import datetime, timezone
from typing import Optional

from cifar10_tutorial.cli import given_path, run_stage
from scratch import package_env, scratch_train_project
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.param_types import load_yaml12
from cifar10_tutorial.files import write_text_atomic

SETUPS = {"1 x 128": {"num_devices": 1, "batch_size": 128},
          "2 x 64": {"num_devices": 2, "batch_size": 64}}


def _project(root: Path, params_file: Path, data_dir: Path, setup: dict, steps: int) -> Path:
    raw = load_yaml12(params_file.read_text()) or {}  # as DVC and the stages read it
    raw.setdefault("train", {}).update(max_steps=steps, seed=0, device="cpu",
                                       log_every=max(1, steps // 4), **setup)
    raw.setdefault("run", {}).update(checkpoint_every=10 ** 9, summary_every=10 ** 9)
    raw.setdefault("eval", {}).update(every_steps=0)
    return scratch_train_project(Path(tempfile.mkdtemp(prefix="timing-", dir=root)), data_dir, raw)


def one_run(root: Path, params_file: Path, data_dir: Path, name: str, steps: int) -> dict:
    """The train stage once in the set-up ``name``: its logged examples/sec and sec/batch."""
    proj = _project(root, params_file, data_dir, SETUPS[name], steps)
    env = package_env({k: v for k, v in os.environ.items()
                       if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    proc = subprocess.run([sys.executable, "stages/train.py", "--data", "prepared", "--out",
                           "run", "--live", "live"], cwd=proj, env=env, capture_output=True,
                          text=True)
    try:
        if proc.returncode != 0:
            raise PipelineError(f"the train stage failed in the set-up {name}: "
                                f"{proc.stderr.strip()[-600:]}")
        m = json.loads((proj / "live" / "speed.json").read_text())
        made = json.loads((proj / "live" / "provenance.json").read_text())
    finally:
        shutil.rmtree(proj, ignore_errors=True)
    world, batch = made["world_size"], made["global_batch_size"]
    eps = m["examples_per_sec"]
    return {"examples_per_sec": eps, "sec_per_batch": batch / eps / world,
            "device": made["device"], "world_size": world, "global_batch_size": batch}


def measure(params_file: Path, data_dir: Path, steps: int, repeats: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="devices-timing-"))
    runs: dict[str, list[dict]] = {name: [] for name in SETUPS}
    try:
        for i in range(repeats):  # alternating, so a drift of the machine hits both
            for name in SETUPS:
                runs[name].append(one_run(root, params_file, data_dir, name, steps))
                print(f"{name} #{i + 1}: {runs[name][-1]['examples_per_sec']:,.0f} examples/sec",
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    from cifar10_tutorial.provenance import code_version, cpu_model

    out = {"steps": steps, "repeats": repeats, "machine": cpu_model(),
           "cores": os.cpu_count(), "load": list(os.getloadavg()),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           **code_version(), "setups": {}}
    for name, rs in runs.items():
        eps = [r["examples_per_sec"] for r in rs]
        out["setups"][name] = {
            "examples_per_sec_median": statistics.median(eps),
            "examples_per_sec_spread": max(eps) - min(eps),
            "sec_per_batch_median": statistics.median(r["sec_per_batch"] for r in rs),
            "device": rs[0]["device"], "world_size": rs[0]["world_size"], "runs": rs}
    a, b = (out["setups"][n]["examples_per_sec_median"] for n in SETUPS)
    out["speed_2x64_vs_1x128"] = b / a
    return out


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--data", type=Path, required=True, help="the prepared data (the preprocess stage's output)")
    ap.add_argument("--out", type=given_path, required=True, help="the JSON file to write")
    ap.add_argument("--steps", type=int, default=400, help="steps of each run")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each set-up")
    args = ap.parse_args(argv)
    if args.steps < 20 or args.repeats < 1:
        raise PipelineError("--steps must be at least 20 and --repeats at least 1")
    from cifar10_tutorial.ownership import json_with, refuse_foreign_file

    refuse_foreign_file(args.out, "--out", "a devices timing record (JSON)",
                        json_with("setups", "speed_2x64_vs_1x128"), feeds=(("report", "--devices-timing"),))
    out = measure(args.params, args.data, args.steps, args.repeats)
    write_text_atomic(args.out, json.dumps(out, indent=2) + "\n")
    print(f"2 x 64 runs at {out['speed_2x64_vs_1x128']:.2f}x the speed of 1 x 128 on "
          f"{out['machine']} ({out['cores']} cores); wrote {args.out}")


if __name__ == "__main__":
    run_stage(main)
