"""One ablation variant: train it under the shared budget, evaluate it both ways
(averaged and raw weights: exercise 4), and write its results: ``metrics.json`` (numbers
only, the train run's under ``train``, the evaluation's under ``eval``) and ``variant.json``
(what the variant is: its settings, data set and device, for the report)."""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Callable

from ..training.paths import VariantPaths, kept_past_workspace, training_work
from ..training.deadline import NONE, Continuation, from_stage
from ..training.mirror import run_ended
from ..training.distributed import launched_by_torchrun, relaunch_on_devices, this_process
from ..evaluation.evaluate import evaluate
from ..files import write_text_atomic
from ..ownership import hold_run_lock
from ..params import AblationParams, Params, load_params, variant_params
from ..data.prepared import Prepared
from ..training.train import train

log = logging.getLogger(__name__)


def trial_held_out(ablation: AblationParams, data: Prepared) -> Prepared:
    """``data`` with its held-out split cut to the first ``ablation.trial_eval_images``
    images in a trial (``ablation.trial_steps`` set): a trial checks that every variant
    runs, and evaluating 10,000 images twice (averaged and raw weights) would be most of
    its time. Outside a trial, or with ``trial_eval_images`` null, ``data`` itself."""
    keep, trial = ablation.trial_eval_images, ablation.trial_steps  # both read, set or not
    if trial is None or keep is None or keep >= len(data.test_labels):
        return data
    counts = {**data.meta.get("counts", {}), "test": keep}
    return dataclasses.replace(data, test_images=data.test_images[:keep],
                               test_labels=data.test_labels[:keep],
                               meta={**data.meta, "counts": counts})


def run_variant(params: Params, name: str, data: Prepared, paths: VariantPaths,
                progress=None, continuation: Continuation = NONE) -> dict | None:
    """Train and evaluate variant ``name``; rank 0 returns (and writes) its metrics.
    ``continuation``: the train run's deadline and mirror (:mod:`.deadline`); the
    mirror is cleared once the results are written."""
    vp = variant_params(params, name)
    data = trial_held_out(params.ablation, data)
    made: dict = {}  # the held-out evaluation of the last step: the eval below need not repeat it
    tm = train(vp, data, paths.train, progress=progress, continuation=continuation,
               final_evaluation=made)
    if not this_process().main:
        return None  # under torchrun, evaluation runs once, on rank 0
    run = json.loads((paths.train.live_dir / "provenance.json").read_text())
    em = evaluate(data, paths.train.model, paths.eval_dir, vp.eval.batch_size,
                  "cpu" if run["device_type"] == "cpu" else vp.train.device, vp.eval.flip_tta,
                  made=made)
    metrics = {"train": tm, "eval": em}
    variant = {"variant": name, "dataset": data.meta["dataset"], "device": run["device"],
               "device_type": run["device_type"], "world_size": run["world_size"],
               "global_batch_size": run["global_batch_size"], "schedule": vp.train.schedule,
               "batch_size": vp.train.batch_size, "seed": vp.train.seed,
               "num_train": int(len(data.train_labels)), "shuffle": vp.input.shuffle,
               "min_fraction_of_examples_in_queue": vp.input.min_fraction_of_examples_in_queue,
               "head": vp.model.head, "output": vp.model.output, "lrn": vp.model.lrn}
    write_text_atomic(paths.variant, json.dumps(variant, indent=2) + "\n")
    write_text_atomic(paths.metrics, json.dumps(metrics, indent=2) + "\n")
    run_ended(continuation)
    return metrics


def run_variant_stage(args, script: str, load_data: Callable[[Params], Prepared]) -> None:
    """The body of the stages ``ablation@NAME`` and ``dataset_ablation@NAME``: hold the
    run's lock on the folders it writes, relaunch under torchrun when the variant asks for
    several devices, get its data (``load_data(params)``), then :func:`run_variant`.
    ``args``: the stage's parsed command line (params, name, work, trial_work, out,
    stop_at, mirror); a trial trains in ``trial_work`` (:func:`.paths.training_work`), a queued
    DVC experiment below the repository's folder (:func:`.paths.kept_past_workspace`);
    ``script``: the stage script's ``__file__``, which torchrun runs again."""
    params = load_params(args.params)
    work = training_work(params.ablation, args.name, args.work, args.trial_work)
    trial = work != args.work  # its mirror folder apart too: a full run's there stays
    cont = from_stage(args.stop_at, args.mirror, f"trials/{args.name}" if trial else args.name)
    variant = variant_params(params, args.name)
    if (kept := kept_past_workspace(work)) != work:
        log.info("queued experiment %s: model, checkpoints and TensorBoard logs in %s (they "
                 "outlive DVC's temporary workspace)", kept.name, kept)
        work = kept
    if not launched_by_torchrun():  # the launching process holds them for its ranks
        command = " ".join(["stages/" + Path(script).name, *sys.argv[1:]])
        # --work's lock too in a trial: a full run there writes the same --out (and data);
        # and --out's, which two variants of other --work must not share
        for folder in dict.fromkeys((args.work, work, args.out)):
            hold_run_lock(folder, command)
    relaunch_on_devices(variant.train, variant.run, script, sys.argv[1:])
    run_variant(params, args.name, load_data(params), VariantPaths(work, args.out),
                continuation=cont)
