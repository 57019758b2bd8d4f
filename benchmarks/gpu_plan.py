"""How much the GPU run measures: its full sizes, tiny ones (``--dry``), or sizes fitted
to a time budget (``--budget-s``: a rented GPU by the minute, a batch job's wall time),
each part shrunk to its share of the time left."""
from __future__ import annotations

import dataclasses
import time
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much of each part to run (the full GPU run, ``--dry``, or fitted to a budget)."""

    check_steps: int = 50
    short_steps: int = 2000
    batches: tuple = (128, 256, 512, 1024)
    windows: int = 5
    window_steps: int = 50
    compiled_batches: int = 4  # how many of ``batches`` are also timed compiled (GPU only)
    fast_epochs: float = 40
    tutorial_steps: int = 100_000
    tutorial_seconds: float = 150.0
    eval_every: int = 5000
    parallel: int = 4
    parallel_steps: int = 3000
    multi_steps: int = 300  # each throughput run on 1 and on every device
    weight_steps: int = 30  # 1 x 128 against 2 x 64, at a low rate
    cpu_processes: int = 2  # the "devices" of a run on a CPU (gloo)
    stage_steps: int = 500  # the train stage's own loop at each batch, eager and captured


DRY = Sizes(check_steps=6, short_steps=20, batches=(32, 64), windows=2, window_steps=3,
            compiled_batches=2, fast_epochs=2, tutorial_steps=40, tutorial_seconds=30.0, eval_every=20, parallel=2,
            parallel_steps=10, multi_steps=6, weight_steps=4, stage_steps=8)

TARGETS = [0.80, 0.84, 0.86]  # held-out precisions timed by the schedule parts

# each part's share of the time left once the data is there (every device's part only
# where 2 or more are visible: the shares are of the parts that run)
SHARES = {"correctness": 0.10, "throughput": 0.25, "train_stage": 0.10, "fast": 0.30,
          "tutorial": 0.20, "side_by_side": 0.15, "multi_device": 0.15}
COMPILE_SECONDS = 45.0  # what one torch.compile(mode="reduce-overhead") takes, about
START_SECONDS = 15.0  # a train stage's process start (python, torch, CUDA), about


def fit(sizes: Sizes, seconds: float, steps_per_sec: float, batch: int,
        steps_per_epoch: float, eval_seconds: float = 0.0, devices: int = 1) -> Sizes:
    """``sizes`` shrunk so that each part takes about its share of ``seconds`` when the train
    step runs ``steps_per_sec`` at batch ``batch`` and one held-out evaluation (averaged and
    raw weights) takes ``eval_seconds`` (both measured or estimated first); never grown. A
    larger batch is assumed to cost its size in time (pessimistic on a GPU: it fits less).
    ``devices``: those visible; with 2 or more, every device's part takes its share too."""
    sps, ev = steps_per_sec, eval_seconds
    total = sum(v for k, v in SHARES.items() if k != "multi_device" or devices >= 2)

    def share(part: str) -> float:
        return SHARES[part] / total * seconds

    # each batch size: the input pipeline and the fixed batch; the first also in the other
    # precision and with cuDNN's autotuner (the compiled step: below, from what is left)
    per_batch = lambda b: ((4 if b == sizes.batches[0] else 2)  # noqa: E731
                           * (3 + sizes.windows * sizes.window_steps) * b / batch / sps)
    batches, spent = [], 0.0
    for b in sizes.batches:  # eager with the input pipeline and on a fixed batch
        if batches and spent + per_batch(b) > share("throughput"):
            break
        batches.append(b)
        spent += per_batch(b)
    left = max(0.0, share("throughput") - spent)
    n = sizes.parallel  # side by side: one alone, then n at once, each ending with an evaluation
    # the train stage's loop: each batch size eager and captured, a start of a second each
    stage_step = 2 * sum(b / batch for b in batches) / sps
    return dataclasses.replace(
        sizes,
        stage_steps=int(min(sizes.stage_steps, max(20, (share("train_stage")
                                                        - 2 * len(batches)) / stage_step))),
        short_steps=int(min(sizes.short_steps,
                            max(100, 0.6 * sps * (share("correctness") - ev)))),
        batches=tuple(batches),
        compiled_batches=int(min(sizes.compiled_batches, len(batches), left // COMPILE_SECONDS)),
        fast_epochs=float(min(sizes.fast_epochs, max(1, int(
            0.8 * share("fast") / (steps_per_epoch / sps + ev))))),
        tutorial_seconds=min(sizes.tutorial_seconds,
                             0.8 * share("tutorial") / (1 + sps * ev / sizes.eval_every)),
        parallel_steps=int(min(sizes.parallel_steps, max(50, sps * (
            share("side_by_side") - 2 * START_SECONDS - (1 + n) * ev) / (1 + n)))),
        # five train stages: three throughput runs, two short weight runs
        multi_steps=int(min(sizes.multi_steps, max(20, sps * (
            share("multi_device") - 5 * START_SECONDS) / 3 - sizes.weight_steps))))


class Budget:
    """The time a run may take, counted from ``t0`` (the command's start); None: no limit."""

    def __init__(self, seconds: Optional[float], t0: float):
        self.seconds, self.t0 = seconds, t0

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        return self.seconds - (time.perf_counter() - self.t0)
