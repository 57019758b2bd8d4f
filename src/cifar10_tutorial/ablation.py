"""One ablation variant: train it under the shared budget, evaluate it both ways
(averaged and raw weights: exercise 4), and write one metrics file."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from .checkpoints import TrainPaths
from .devices import this_process
from .evaluate import evaluate
from .files import write_text_atomic
from .params import Params, variant_params
from .prepare import Prepared
from .train import train

TRAIN_KEYS = ("steps", "final_loss_avg", "examples_per_sec", "examples_per_sec_per_device",
              "wall_time_s", "time_to_first_batch_s", "num_params", "macs_per_image",
              "world_size", "global_batch_size", "device")
EVAL_KEYS = ("precision_at_1", "precision_at_1_raw", "loss", "loss_raw", "num_examples")


@dataclass(frozen=True)
class VariantPaths:
    """Where variant results go (``out``: metrics.json, eval/, train/, in git) and where its
    model, checkpoints, TensorBoard logs (and a data-set variant's data) stay (``work``,
    outside DVC). The stage gets both from reports/dvc.yaml."""

    work: Path
    out: Path

    @property
    def train(self) -> TrainPaths:
        return TrainPaths(self.work, self.out / "train")

    @property
    def eval_dir(self) -> Path:
        return self.out / "eval"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.json"


def prepare_variant_data(params: Params, name: str, work: Path, partial: Path) -> Prepared:
    """Download and preprocess the data set of a data-set variant into ``work``/raw and
    ``work``/prepared (rank 0; the other ranks of a torchrun job wait for its files)."""
    from .download import fetch_dataset
    from .prepare import load_prepared, prepare_dataset

    data = variant_params(params, name).data
    if this_process().main:
        fetch_dataset(data, work / "raw", partial)
        prepare_dataset(work / "raw", work / "prepared", data)
    else:
        while not (work / "prepared" / "meta.json").is_file():
            time.sleep(1)
    return load_prepared(work / "prepared")


def run_variant(params: Params, name: str, data: Prepared, paths: VariantPaths,
                progress=None) -> dict | None:
    """Train and evaluate variant ``name``; rank 0 returns (and writes) its metrics."""
    vp = variant_params(params, name)
    tm = train(vp, data, paths.train, progress=progress)
    if not this_process().main:
        return None  # under torchrun, evaluation runs once, on rank 0
    em = evaluate(data, paths.train.model, paths.eval_dir, vp.eval.batch_size,
                  "cpu" if tm["device"] == "cpu" else vp.train.device, vp.eval.flip_tta)
    metrics = {"variant": name, "dataset": data.meta["dataset"],
               **{k: tm[k] for k in TRAIN_KEYS}, **{k: em[k] for k in EVAL_KEYS},
               "eval_examples_per_sec": em["examples_per_sec"],
               "batch_size": vp.train.batch_size, "num_train": int(len(data.train_labels)),
               "epochs": tm["steps"] * tm["global_batch_size"] / len(data.train_labels),
               "min_fraction_of_examples_in_queue": vp.input.min_fraction_of_examples_in_queue,
               "shuffle": vp.input.shuffle, "head": vp.model.head, "output": vp.model.output,
               "lrn": vp.model.lrn, "schedule": vp.train.schedule}
    for key in ("precision_at_1_flip", "precision_at_1_raw_flip"):
        if key in em:
            metrics[key] = em[key]
    for key in ("time_to_target", "train_seconds", "held_out_eval_seconds"):
        if key in tm:  # with eval.every_steps > 0: the held-out curve and time to targets
            metrics[key] = tm[key]
    write_text_atomic(paths.metrics, json.dumps(metrics, indent=2) + "\n")
    return metrics
