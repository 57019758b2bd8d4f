"""One ablation variant: train it under the shared budget, evaluate it both ways
(averaged and raw weights: exercise 4), and write its results: ``metrics.json`` (numbers
only, the train run's under ``train``, the evaluation's under ``eval``) and ``variant.json``
(what the variant is: its settings, data set and device, for the report)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Optional

from ..training.paths import (VariantPaths, kept_past_workspace, refuse_foreign_outputs,
                              training_work)
from ..training.deadline import NONE, Continuation, from_stage
from ..training.mirror import run_ended
from ..training.distributed import launched_by_torchrun, relaunch_on_devices, this_process
from ..evaluation.evaluate import EVAL_NAMES, evaluate
from ..files import read_small_file, write_text_atomic
from ..ownership import (folders_apart, hold_run_lock, local_folder, refuse_foreign,
                         refuse_foreign_place, refuse_in_the_way, refuse_linked_folders)
from ..errors import PipelineError
from ..param_types import read_params_yaml
from ..params import (EXERCISES, AblationParams, Params, check_variant_name, load_params,
                      refuse_twin_on_data, variant_params)
from ..data.prepared import Prepared, train_file_counts
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


def _refuse_other_results(paths: VariantPaths, name: str) -> None:
    """--out's metrics.json and variant.json, which the run replaces: a run of this
    variant's (its variant.json names it: DVC keeps the results in place until the stage
    has run), or refused in one line naming them, before anything runs (a user's files of
    those names, or another variant's results)."""
    present = [p.name for p in (paths.metrics, paths.variant) if os.path.lexists(p)]
    if not present:
        return
    try:
        named = json.loads(read_small_file(paths.variant, 1 << 20).decode("utf-8")).get("variant")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        named = None
    if named != name:
        whose = (f"its variant.json names {str(named)[:64]!r}" if isinstance(named, str)
                 else "no variant.json naming a variant" if "variant.json" not in present
                 else "its variant.json names no variant")
        raise PipelineError(f"{paths.out}: holds {' and '.join(present)}, not the results of a "
                            f"run of {name} ({whose}), which the "
                            f"{paths.owner or 'ablation@' + name} stage would "
                            f"replace; give --out a folder of its own (as reports/dvc.yaml "
                            f"gives it), or move them away. Nothing was changed.")


def _refuse_what_is_not_its_own(paths: VariantPaths, name: str) -> None:
    """What the run replaces in --out, checked before it writes anything (and by the
    launching process before torchrun starts its ranks, which would each refuse and be
    restarted): DVC leaves the variant's results in place until it has run (persist
    outputs) and then records the folder whole, so a file the evaluation does not write,
    something in the way of metrics.json or variant.json, or results that are no run of
    this variant's are refused in one line; so are files in its training folders (--out's
    train/, --work) that no run made, and a link at train/ or eval/ (the run would replace
    what it points to: another run's record, a user's folder)."""
    stage = paths.owner or f"ablation@{name}"
    refuse_linked_folders([paths.train.live_dir, paths.eval_dir], stage)
    refuse_foreign_outputs(paths.train)
    refuse_foreign(paths.eval_dir, EVAL_NAMES, stage, "--out", EVAL_NAMES)
    refuse_in_the_way([paths.metrics, paths.variant], stage)
    _refuse_other_results(paths, name)


def run_variant(params: Params, name: str, data: Prepared, paths: VariantPaths,
                progress=None, continuation: Continuation = NONE) -> dict | None:
    """Train and evaluate variant ``name``; rank 0 returns (and writes) its metrics.
    ``continuation``: the train run's deadline and mirror (:mod:`.deadline`); the
    mirror is cleared once the results are written."""
    vp = variant_params(params, name)
    if this_process().main:  # rank 0 writes them; other ranks could see its writes begun
        _refuse_what_is_not_its_own(paths, name)
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


# In reports/dvc.yaml's commands, the variant's name: the stage's own (ablation@NAME, from
# DVC_STAGE), never written into a command, so that no shell ever reads a name
VARIANT = "{variant}"
# the stage of each group of variants in reports/dvc.yaml, and its script
STAGES = {"ablations": ("ablation", "stages/ablation.py"),
          "dataset_ablations": ("dataset_ablation", "stages/dataset_ablation.py")}


def dvc_stage_variant(stage: str, address: str | None = None) -> str | None:
    """The variant NAME when DVC runs ``stage@NAME`` (its address in ``address``, by default
    DVC_STAGE, e.g. ``reports/dvc.yaml:ablation@baseline``); None for any other stage, or
    outside DVC."""
    address = os.environ.get("DVC_STAGE") if address is None else address
    if not address:
        return None
    _, found, name = address.partition("dvc.yaml:")
    group, at, variant = (name if found else address).partition("@")
    return variant if group == stage and at else None


def variant_name(given: str | None, group: str) -> str:
    """The variant a stage of ``group`` runs: ``given`` on its command line (by hand), else
    the one of the DVC stage running it; checked against the name rule before any path or
    params use it, and against the DVC stage's when both are known."""
    stage, script = STAGES[group]
    from_dvc = dvc_stage_variant(stage)
    if given is None and from_dvc is None:
        raise PipelineError(f"no variant given: run `python {script} NAME ...` (NAME: a key "
                            f"of `{group}:` in reports/params.yaml), or `dvc repro "
                            f"reports/dvc.yaml:{stage}@NAME`")
    name = given if given is not None else from_dvc
    check_variant_name(name, group)
    if from_dvc is not None and given is not None and from_dvc != given:
        raise PipelineError(f"variant {given} given, but DVC runs the stage {stage}@{from_dvc}; "
                            f"give the same name, or none")
    return name


def _for_variant(path: Path | None, name: str) -> Path | None:
    return None if path is None else Path(str(path).replace(VARIANT, name))


def _apart(args, mirror: Optional[str] = None, stage: str = "") -> None:
    """--out, --work, --trial-work, --data and the run's mirror folder are folders apart: a
    model and checkpoints among the results would be committed with them, results inside
    the prepared data would change it (and every stage after it); and none is another
    stage's output than the variant's own (``stage``, ablation@NAME): one line, before
    anything is written."""
    named = [(f"--{o.replace('_', '-')}", getattr(args, o, None))
             for o in ("out", "work", "trial_work", "data", "partial")]
    folders_apart(named + [("--mirror", local_folder(mirror))],
                  "results; model and checkpoints; a trial's; the prepared data; partial "
                  "downloads; the checkpoint mirror")
    written = [n for n in named if n[0] != "--data"]  # the prepared data is only read
    for option, folder in written + [("--mirror", local_folder(mirror))]:
        if folder is not None:
            refuse_foreign_place(Path(folder), option, "as reports/dvc.yaml gives them",
                                 (stage,))


def run_variant_stage(args, script: str, load_data: Callable[[Params], Prepared],
                      group: str = "ablations",
                      data_size: Callable[[Params], tuple] = lambda params: (None, None)
                      ) -> None:
    """The body of the stages ``ablation@NAME`` and ``dataset_ablation@NAME`` (``group``:
    the params section of their variants): hold the run's lock on the folders it writes,
    relaunch under torchrun when the variant asks for several devices, get its data
    (``load_data(params)``), then :func:`run_variant`.
    ``args``: the stage's parsed command line (params, name, work, trial_work, out,
    stop_at, mirror); the name, when not given, is the DVC stage's
    (:func:`variant_name`), and ``{variant}`` in a path stands for it. A trial trains in
    ``trial_work`` (:func:`.paths.training_work`), a queued
    DVC experiment below the repository's folder (:func:`.paths.kept_past_workspace`);
    ``script``: the stage script's ``__file__``, which torchrun runs again;
    ``data_size(params)``: what is known of its data before it loads them (training
    images, default flips, records per training file; None where not known), to refuse a
    twin before anything runs."""
    args.name = variant_name(args.name, group)
    for option in ("work", "trial_work", "out"):
        setattr(args, option, _for_variant(getattr(args, option), args.name))
    _apart(args, stage=f"{STAGES[group][0]}@{args.name}")
    params = load_params(args.params, EXERCISES)
    other = "dataset_ablations" if group == "ablations" else "ablations"
    # which group holds the name, from the file as written: not a param the variant reads
    # (its hash covers ablations.NAME only, and the other group's variants are not its own)
    raw = read_params_yaml(args.params) or {}
    if args.name not in (raw.get(group) or {}) and args.name in (raw.get(other) or {}):
        stage, script_name = STAGES[other]
        raise PipelineError(f"{args.name} is a variant of `{other}:`; run it with `dvc repro "
                            f"reports/dvc.yaml:{stage}@{args.name}` ({script_name})")
    if args.name not in (raw.get(group) or {}):  # named with the group this stage runs
        defined = ", ".join(map(str, raw.get(group) or {})) or "none"
        example = ("{data: {dataset: svhn}}" if group == "dataset_ablations"
                   else "{model: {lrn: false}}")
        raise PipelineError(f"no variant {args.name!r} under `{group}:` of {args.params} "
                            f"(defined there: {defined}); add it there, e.g. "
                            f"`{args.name}: {example}`")
    work = training_work(params.ablation, args.name, args.work, args.trial_work)
    trial = work != args.work  # its mirror folder apart too: a full run's there stays
    cont = from_stage(args.stop_at, args.mirror, f"trials/{args.name}" if trial else args.name)
    # a mirror among the results would be committed with them
    _apart(args, cont.mirror, f"{STAGES[group][0]}@{args.name}")
    variant = variant_params(params, args.name)
    # before a lock, a launch or a download: a twin what is known of its data reveals
    known = data_size(params)
    refuse_twin_on_data(params, args.name, *known)
    if (kept := kept_past_workspace(work)) != work:
        log.info("queued experiment %s: model, checkpoints and TensorBoard logs in %s (they "
                 "outlive DVC's temporary workspace)", kept.name, kept)
        work = kept
    if not launched_by_torchrun():  # the launching process holds them for its ranks
        words = [w.replace(VARIANT, args.name) for w in sys.argv[1:]]
        command = " ".join(["stages/" + Path(script).name,
                            *([] if args.name in words else [args.name]), *words])
        # --work's lock too in a trial: a full run there writes the same --out (and data);
        # and --out's, which two variants of other --work must not share
        for folder in dict.fromkeys((args.work, work, args.out)):
            hold_run_lock(folder, command)
    paths = VariantPaths(work, args.out, f"{STAGES[group][0]}@{args.name}")
    if not launched_by_torchrun():
        _refuse_what_is_not_its_own(paths, args.name)
    relaunch_on_devices(variant.train, variant.run, script, sys.argv[1:])
    data = load_data(params)
    if known[0] is None:  # a data-set variant's data, fetched only now: their size is known
        refuse_twin_on_data(params, args.name, len(data.train_labels),
                            bool(data.meta.get("flip", True)), train_file_counts(data))
    run_variant(params, args.name, data, paths, continuation=cont)
