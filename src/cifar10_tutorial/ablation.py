"""One ablation variant: train it under the shared budget, evaluate it both ways
(averaged and raw weights: exercise 4), and write one metrics file."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .files import write_text_atomic
from .evaluate import evaluate
from .params import Params, variant_params
from .prepare import Prepared
from .train import TrainPaths, train

TRAIN_KEYS = ("steps", "final_loss_avg", "examples_per_sec", "examples_per_sec_per_device",
              "wall_time_s", "time_to_first_batch_s", "num_params", "macs_per_image",
              "world_size", "global_batch_size", "device")
EVAL_KEYS = ("precision_at_1", "precision_at_1_raw", "loss", "loss_raw", "num_examples")


@dataclass(frozen=True)
class VariantPaths:
    name: str
    data_root: Path = Path("data/ablations")
    report_root: Path = Path("reports/ablations")

    @property
    def train(self) -> TrainPaths:
        return TrainPaths(self.data_root / self.name, self.report_root / self.name / "train")

    @property
    def eval_dir(self) -> Path:
        return self.report_root / self.name / "eval"

    @property
    def metrics(self) -> Path:
        return self.report_root / self.name / "metrics.json"


def dataset_variant_paths(name: str) -> VariantPaths:
    """A data-set variant keeps its data apart and its results beside the other variants'."""
    return VariantPaths(name, Path("data/dataset_ablations"), Path("reports/ablations"))


def prepare_variant_data(params: Params, name: str, paths: VariantPaths) -> Prepared:
    """Download and preprocess the data set of a dataset variant into its own folders."""
    from .download import fetch_dataset
    from .prepare import load_prepared, prepare_dataset

    data = variant_params(params, name).data
    root = paths.data_root / name
    if int(os.environ.get("RANK", "0")) == 0:
        fetch_dataset(data, root / "raw", Path("data/.downloads"))
        prepare_dataset(root / "raw", root / "prepared", data)
    else:  # the other ranks wait for rank 0's files
        import time
        while not (root / "prepared" / "meta.json").is_file():
            time.sleep(1)
    return load_prepared(root / "prepared")


def run_variant(params: Params, name: str, data: Prepared, paths: VariantPaths | None = None,
                progress=None) -> dict | None:
    """Train and evaluate variant ``name``; rank 0 returns (and writes) its metrics."""
    paths = paths or VariantPaths(name)
    vp = variant_params(params, name)
    tm = train(vp, data, paths.train, progress=progress)
    if int(os.environ.get("RANK", "0")) != 0:
        return None  # under torchrun, evaluation runs once, on rank 0
    em = evaluate(data, paths.train.model, paths.eval_dir, vp.eval.batch_size,
                  "cpu" if tm["device"] == "cpu" else vp.train.device, vp.eval.flip_tta)
    metrics = {"variant": name, "dataset": data.meta["dataset"], **{k: tm[k] for k in TRAIN_KEYS}, **{k: em[k] for k in EVAL_KEYS},
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
