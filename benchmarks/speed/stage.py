"""The train stage itself against its fixed-batch step: the benchmark's ``train_stage``.

``project`` in the benchmark is the train step with its input pipeline and weight
averages; the stage does more around it: the log line and DVCLive row every
``train.log_every`` steps, TensorBoard summaries (histograms of every weight, gradient and
activation) every ``run.summary_every`` steps, checkpoints. Here :func:`train.train` runs
``runs`` times, each for ``warmup`` + ``run.summary_every`` steps with the params' own
cadence (so one summary in its timed steps, as the stage has; held-out evaluations off:
the stage's figure leaves them out too), in a scratch folder, and each run's speed is read
from its own DVCLive rows after the warm-up: every example over every second of the timed
log windows. A window of the fixed batch comes before the first run and after each, and
each run is compared with the mean of the two windows beside it: the machine's speed
drifts by more than the gap over the minute a single long run would take.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import statistics
import tempfile
from pathlib import Path

from cifar10_tutorial.data.prepared import Prepared
from cifar10_tutorial.params import Params
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.training.train import train
from .steps import window


def train_stage_speed(params: Params, data: Prepared, fixed_step, batch: int, steps: int,
                      sync, warmup: int = 10, runs: int = 5) -> dict:
    """{examples_per_sec (all runs), gap (the median of the runs' gaps), runs (each: its
    examples_per_sec, the fixed-batch windows before and after it, its gap), fixed_batch
    (the windows), steps (per run), timed_steps (all runs), log_every, summary_every}.
    ``fixed_step()`` runs one step on the fixed batch; a window is ``steps`` of them."""
    run = params.run
    n = warmup + run.summary_every
    stage = dataclasses.replace(
        params, train=dataclasses.replace(params.train, max_steps=n, max_epochs=None),
        eval=dataclasses.replace(params.eval, every_steps=0),
        run=dataclasses.replace(run, checkpoint_every=n))
    fixed = [window(fixed_step, batch, steps, sync)]
    timed_runs = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="train-stage-") as tmp:
            paths = TrainPaths(Path(tmp) / "train", Path(tmp) / "live")
            with contextlib.redirect_stdout(io.StringIO()):  # its log lines
                train(stage, data, paths, progress=False)
            rows = _rows(paths.live_dir / "plots" / "metrics" / "train" / "examples_per_sec.tsv")
        fixed.append(window(fixed_step, batch, steps, sync))
        timed, seconds = _timed(rows, warmup, batch)
        speed = timed * batch / seconds
        timed_runs.append({"examples_per_sec": speed, "timed_steps": timed, "seconds": seconds,
                           "fixed_before": fixed[-2], "fixed_after": fixed[-1],
                           "gap": 1 - speed / ((fixed[-2] + fixed[-1]) / 2)})
    timed = sum(r["timed_steps"] for r in timed_runs)
    return {"examples_per_sec": timed * batch / sum(r["seconds"] for r in timed_runs),
            "gap": statistics.median(r["gap"] for r in timed_runs), "runs": timed_runs,
            "fixed_batch": fixed, "steps": n, "timed_steps": timed,
            "log_every": params.train.log_every, "summary_every": run.summary_every}


def _timed(rows: list[tuple[int, float]], warmup: int, batch: int) -> tuple[int, float]:
    """(steps, seconds) of the log windows that start at or after ``warmup``: each row
    holds the speed of the steps since the row before."""
    timed, last, seconds = 0, 0, 0.0
    for step, eps in rows:
        if last >= warmup:
            timed += step - last
            seconds += (step - last) * batch / eps
        last = step
    return timed, seconds


def _rows(path: Path) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["examples_per_sec"]))
                for r in csv.DictReader(f, delimiter="\t")]
