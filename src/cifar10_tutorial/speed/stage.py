"""The train stage itself against its fixed-batch step: the benchmark's ``train_stage``.

``project`` in the benchmark is the train step with its input pipeline and weight
averages; the stage does more around it: the log line and DVCLive row every
``train.log_every`` steps, TensorBoard summaries (histograms of every weight, gradient and
activation) every ``run.summary_every`` steps, checkpoints. Here :func:`train.train` runs
for ``warmup`` + ``intervals`` x ``run.summary_every`` steps with the params' own cadence
(held-out evaluations off: the stage's figure leaves them out too), in a scratch folder,
and its speed is read from its own DVCLive rows after the warm-up: every example over
every second of the timed log windows. The fixed-batch step is timed just before and just
after, so the gap is against the machine's speed of the same minutes.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import statistics
import tempfile
from pathlib import Path

from ..data.prepared import Prepared
from ..params import Params
from ..training.checkpoints import TrainPaths
from ..training.train import train
from .steps import window


def train_stage_speed(params: Params, data: Prepared, fixed_step, batch: int, steps: int,
                      windows: int, sync, warmup: int = 10, intervals: int = 3) -> dict:
    """{examples_per_sec, fixed_batch (half of ``windows`` before, half after), gap, steps,
    timed_steps, log_every, summary_every}. ``fixed_step()`` runs one step on the fixed
    batch."""
    run = params.run
    n = warmup + intervals * run.summary_every
    stage = dataclasses.replace(
        params, train=dataclasses.replace(params.train, max_steps=n, max_epochs=None),
        eval=dataclasses.replace(params.eval, every_steps=0),
        run=dataclasses.replace(run, checkpoint_every=n))
    around = max(1, windows // 2)
    before = [window(fixed_step, batch, steps, sync) for _ in range(around)]
    with tempfile.TemporaryDirectory(prefix="train-stage-") as tmp:
        paths = TrainPaths(Path(tmp) / "train", Path(tmp) / "live")
        with contextlib.redirect_stdout(io.StringIO()):  # its log lines
            train(stage, data, paths, progress=False)
        rows = _rows(paths.live_dir / "plots" / "metrics" / "train" / "examples_per_sec.tsv")
    after = [window(fixed_step, batch, steps, sync) for _ in range(around)]
    timed, last, seconds = 0, 0, 0.0
    for step, eps in rows:  # each row: the window of steps since the row before
        if last >= warmup:
            timed += step - last
            seconds += (step - last) * batch / eps
        last = step
    speed = timed * batch / seconds
    fixed = statistics.median(before + after)
    return {"examples_per_sec": speed, "fixed_batch": {"before": before, "after": after},
            "gap": 1 - speed / fixed, "steps": n, "timed_steps": timed,
            "log_every": params.train.log_every, "summary_every": run.summary_every}


def _rows(path: Path) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["examples_per_sec"]))
                for r in csv.DictReader(f, delimiter="\t")]
