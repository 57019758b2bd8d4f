"""Evaluation (cifar10_eval.py): precision @ 1 over every test image exactly once,
with the moving-average weights and with the raw weights; the reference's watch
mode; per-class accuracy and a confusion matrix."""
from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import provenance
from ..checkpoint_files import list_checkpoints, load_checkpoint, run_defining
from ..devices import pick_device
from ..errors import PipelineError
from ..ownership import refuse_foreign
from ..files import (ending_signals_unwind, recover_swapped_folder, save_figure_atomic,
                     staging_folder, swap_in_folder, write_text_atomic, writing)
from ..model_files import REMAKE, load_model_file, model_from_state
from ..scoring import precision_at_1
from ..data.prepared import Prepared

log = logging.getLogger(__name__)


def evaluate_checkpoint(ckpt: dict, images: torch.Tensor, labels: torch.Tensor,
                        batch_size: int, device, flip_tta: bool = False,
                        source: str = "the checkpoint") -> dict:
    """:func:`.scoring.precision_at_1` of a checkpoint or model.pt, averaged weights and
    raw weights (each checked against the network its params describe)."""
    def model(key: str):
        # "ema" is the whole averaged state; checkpoints before 2026-12-02 held the averaged
        # entries only, which then replace those of the raw state
        state = {**ckpt["model"], **ckpt[key]}
        return model_from_state(ckpt["params"], int(ckpt["num_classes"]), state, device, source)

    return precision_at_1(((suffix, model(key)) for suffix, key in (("", "ema"), ("_raw", "model"))),
                          images, labels, batch_size, flip_tta)


def confusion_matrix(actual: np.ndarray, predicted: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(actual * k + predicted, minlength=k * k).reshape(k, k)


def _csv(rows: list) -> str:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def plot_confusion(cm: np.ndarray, classes: list[str], path: Path, title: str) -> None:
    from matplotlib.figure import Figure  # not pyplot: no GUI backend to pick, a faster import

    fig = Figure(figsize=(7, 6))
    ax = fig.subplots()
    rates = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    im = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    ax.set_title(title)
    if len(classes) <= 20:
        for i in range(len(classes)):
            for j in range(len(classes)):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if rates[i, j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, label="fraction of the actual class")
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=100)


# what an evaluation writes in its folder: all a variant's persisted eval/ output may hold
EVAL_NAMES = {"metrics.json", "per_class.csv", "predictions.csv", "confusion.png",
              "provenance.json"}
BUILDING = ".eval-building"  # the first file in the folder an evaluation builds


def _eval_own(folder: Path) -> set[str]:
    """The files in ``folder`` (one an interrupted evaluation left beside --out) that the
    evaluation may remove: in a folder it was building, its mark (written before any other
    file) and the eval's files; in one without the mark, nothing (a folder named so by
    someone else, whatever its files are called); in an old set put aside, the eval's where
    it holds the record an evaluation writes last (provenance.json: the set was whole),
    else nothing (a user's folder of that name)."""
    import re

    if re.search(r"\.staging-[0-9]+-[^.]*$", folder.name):
        mark = folder / BUILDING
        return EVAL_NAMES | {BUILDING} if mark.is_file() and not mark.is_symlink() else set()
    record = folder / "provenance.json"
    return EVAL_NAMES if record.is_file() and not record.is_symlink() else set()


def _refuse_other_record(path: Path) -> None:
    """provenance.json in --out is an evaluation's record (it names the model evaluated);
    without it, the folder holds none of the eval's files: those would be someone else's
    (a user's own metrics.json), or an interrupted evaluation's, which is said."""
    if not path.is_file():
        theirs = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else []
        if theirs:
            raise PipelineError(f"{path.parent}: holds {', '.join(theirs)} but no evaluation's "
                                f"record (provenance.json), so they are not known to be an "
                                f"evaluation's, and the eval stage would replace them; give "
                                f"--out a folder of its own (or delete them if an evaluation "
                                f"was stopped there). Nothing was changed.")
        return
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("model"), str):
        raise PipelineError(f"{path}: not an evaluation's record (it names no model), and "
                            f"the eval stage would replace it; give --out a folder of its "
                            f"own. Nothing was changed.")


def refuse_another_models_evaluation(out_dir: Path, model_path: Path) -> bool:
    """An evaluation run by hand into a folder that holds another model's evaluation (its
    provenance.json names another model.pt; the folder given directly or through a link):
    swapping this one in would lose that one, which may be a variant's or one you kept;
    one line naming both. The same model's (re-evaluated after more training, or spelled
    another way) is this evaluation's to replace. True where the record may be another
    checkout's model of the same path, step and params: :func:`evaluate` then replaces it
    only with the same figures (``same_figures_only``), which lose nothing."""
    record_path = Path(out_dir) / "provenance.json"
    if not record_path.is_file():
        return False  # none: _refuse_other_record says what else the folder holds
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        theirs = record.get("model")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False  # not a record: _refuse_other_record's to refuse
    if not isinstance(theirs, str):
        return False  # no model named: _refuse_other_record's to refuse
    same_file = os.path.realpath(theirs) == os.path.realpath(model_path)
    # a relative path names a model from the folder it was evaluated in: this one only
    # where the results lie inside it (a folder outside, say /tmp/kept, may hold another
    # checkout's evaluation of its own data/train/model.pt), or where the record is of
    # this model as it is now (its step and run params: re-evaluated, not retrained)
    here = os.path.realpath(os.getcwd())
    inside = os.path.realpath(out_dir).startswith(here.rstrip(os.sep) + os.sep)
    if same_file and (os.path.isabs(theirs) or inside):
        return False
    if same_file:
        # of the same step and params, a model of another checkout (other weights) still
        # looks alike: only its figures tell, once this evaluation has made its own
        ckpt = load_model_file(Path(model_path), torch.device("cpu"))
        if (record.get("steps") == int(ckpt["step"]) and record.get("params_hash")
                == provenance.params_hash(run_defining(ckpt["params"]))):
            return True
    where = "" if os.path.isabs(theirs) or inside else (
        f" (a path from the folder it was evaluated in, which need not be {here}, as "
        f"--out lies outside it)")
    raise PipelineError(f"{record_path}: holds the evaluation of {theirs}{where}, not known to "
                        f"be of {model_path}, and this one would replace it; give --out a "
                        f"folder of its own (or delete that folder if you mean to replace "
                        f"it). Nothing was changed.")


def evaluate(data: Prepared, model_path: Path, out_dir: Path, batch_size: int = 250,
             device_name: str = "auto", flip_tta: bool = False,
             speed_in_metrics: bool = True, made: Optional[dict] = None,
             same_figures_only: bool = False) -> dict:
    """The evaluate stage: metrics.json, per_class.csv, predictions.csv, confusion.png.
    ``speed_in_metrics=False`` (the eval stage): examples/sec goes to provenance.json, so
    that DVC's metrics hold what runs are compared by. ``made``: this evaluation, already
    made by the training run that wrote ``model_path`` (``train``'s ``final_evaluation``,
    the same weights and images): written out, not computed again, when its step is the
    model's. ``same_figures_only``: the evaluation in ``out_dir`` is replaced only by one of
    the same figures (:func:`refuse_another_models_evaluation`)."""
    # before anything is computed or written: a folder where a file goes fails only later,
    # and a folder of another stage's results (the train stage's --live, published weights)
    # is not the eval's to write over
    refuse_foreign(out_dir, EVAL_NAMES, "eval", "--out", frozenset(EVAL_NAMES))
    _refuse_other_record(Path(out_dir) / "provenance.json")
    device = pick_device(device_name, key="eval.device")
    ckpt = load_model_file(Path(model_path), device)
    check_fits(ckpt, data, model_path)
    images = torch.from_numpy(data.test_images).to(device)
    labels = torch.from_numpy(data.test_labels).to(device)
    if made and made["step"] == int(ckpt["step"]) and ("precision_at_1_flip" in made) == flip_tta:
        r = made
    else:
        r = evaluate_checkpoint(ckpt, images, labels, batch_size, device, flip_tta, str(model_path))
    n, classes, k = len(labels), data.classes, data.num_classes
    metrics = {"precision_at_1": r["precision_at_1"], "precision_at_1_raw": r["precision_at_1_raw"],
               "loss": r["loss"], "loss_raw": r["loss_raw"], "num_examples": n,
               "examples_per_sec": n / r["seconds"]}  # the model's step: provenance.json
    if flip_tta:  # reported beside, never instead of, the single-view figures
        metrics["precision_at_1_flip"] = r["precision_at_1_flip"]
        metrics["precision_at_1_raw_flip"] = r["precision_at_1_raw_flip"]
    speed = {} if speed_in_metrics else {"examples_per_sec": metrics.pop("examples_per_sec")}
    record = provenance.record(data.content_hash, run_defining(ckpt["params"]), device,
                               steps=int(ckpt["step"]), model=str(model_path),
                               eval_seconds=r["seconds"] + r["seconds_raw"], **speed)
    # on the folder itself, never through a link: the swap renames what is at its path
    _write_results(Path(os.path.realpath(out_dir)), r, metrics, record, labels.cpu().numpy(),
                   classes, k, int(ckpt["step"]), same_figures_only, str(model_path))
    log.info("%s: precision @ 1 = %.3f (averaged weights), %.3f (raw weights), over %d images",
             datetime.now().strftime("%Y-%m-%d %H:%M:%S"), metrics["precision_at_1"],
             metrics["precision_at_1_raw"], n)
    return metrics


def _write_results(out_dir: Path, r: dict, metrics: dict, record: dict, actual: np.ndarray,
                   classes: list[str], k: int, step: int, same_figures_only: bool = False,
                   model: str = "") -> None:
    """The evaluation's files, built in a folder beside ``out_dir`` and swapped in whole (a
    kill at any moment leaves the old set or the new one, never a mix of two evaluations);
    what an interrupted one left beside it goes first. Two at once on one folder: each
    swaps in its whole set, and the last one's stays."""
    pred, pred_raw = r["predictions"].numpy(), r["predictions_raw"].numpy()
    rows = [["class", "count", "precision_at_1", "precision_at_1_raw"]]
    for c in range(k):
        mask = actual == c
        cnt = int(mask.sum())
        acc = float((pred[mask] == c).mean()) if cnt else float("nan")
        acc_raw = float((pred_raw[mask] == c).mean()) if cnt else float("nan")
        rows.append([classes[c], cnt, f"{acc:.4f}", f"{acc_raw:.4f}"])
    texts = {"per_class.csv": _csv(rows),  # quoted: 'air,plane' stays one field
             "predictions.csv": _csv([["actual", "predicted"]]
                                     + [[classes[a], classes[p]] for a, p in zip(actual, pred)]),
             "metrics.json": json.dumps(metrics, indent=2) + "\n"}
    if same_figures_only:
        _refuse_other_figures(out_dir, metrics, texts["predictions.csv"], model)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with ending_signals_unwind():
        for line in recover_swapped_folder(out_dir, EVAL_NAMES, "provenance.json", _eval_own):
            log.warning("note: %s", line)
        staged = staging_folder(out_dir)
        try:
            with writing(staged, out_dir):  # a full disk: the output named, not the staging
                (staged / BUILDING).touch()  # first: what a later run may take as its own
                plot_confusion(confusion_matrix(actual, pred, k), classes, staged / "confusion.png",
                               f"precision @ 1 = {metrics['precision_at_1']:.3f} (averaged "
                               f"weights, step {step})")
                for name, text in texts.items():
                    write_text_atomic(staged / name, text)
                provenance.write(staged, record)  # last: the record of a whole set
            (staged / BUILDING).unlink()  # whole: what goes in place holds the eval's only
            old = {p.name for p in out_dir.iterdir()} & EVAL_NAMES if out_dir.is_dir() else set()
            kept = swap_in_folder(staged, out_dir, old)
            if kept is not None:  # refused before the run, so only if it changed meanwhile
                log.warning("note: the folder %s held before is kept as %s: it holds files the "
                            "evaluation did not write; look through it, then delete it",
                            out_dir, kept)
        finally:
            if staged.is_dir():  # not swapped in (or the old set, kept): only its own files
                recover_swapped_folder(out_dir, EVAL_NAMES, "provenance.json", _eval_own)


def _refuse_other_figures(out_dir: Path, metrics: dict, predictions: str, model: str) -> None:
    """The evaluation in ``out_dir`` against this one: every figure (precisions and losses,
    with both weights; its speed aside, which differs run to run) and the prediction for
    every image the same, or it is another model's (another checkout's of the same path,
    step and params) and is kept; one line naming both figures."""
    files = [out_dir / "metrics.json", out_dir / "predictions.csv"]
    try:
        if not all(f.is_file() and not f.is_symlink() for f in files):  # never a FIFO's read
            raise ValueError("not the evaluation's files")
        theirs = json.loads(files[0].read_text(encoding="utf-8"))
        if not isinstance(theirs, dict):
            raise ValueError("not a mapping")
        differs = _first_difference(theirs, metrics, files[1].read_text(encoding="utf-8"),
                                    predictions)
    except (OSError, UnicodeDecodeError, ValueError):
        differs = "figures that cannot be read, where this model gives precision @ 1 " \
                  f"{metrics['precision_at_1']:.4f}"
    if differs is not None:
        raise PipelineError(f"{out_dir / 'provenance.json'}: holds the evaluation of {model} "
                            f"as another folder evaluated it (a path from that folder, "
                            f"outside this one), with {differs}: another checkout's model, "
                            f"and this one would replace it; give --out a folder of its own "
                            f"(or delete that folder if you mean to replace it). Nothing was "
                            f"changed.")


def _first_difference(theirs: dict, ours: dict, their_predictions: str,
                      our_predictions: str) -> Optional[str]:
    """The first figure (speed aside) or the predictions where two evaluations differ, said
    with both values; None where they agree."""
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        if key != "examples_per_sec" and theirs.get(key, "absent") != ours.get(key, "absent"):
            return (f"another {key[:40]!r} in its metrics.json ({str(theirs.get(key, 'absent'))[:40]}, "
                    f"where this model gives {str(ours.get(key, 'absent'))[:40]})")
    if their_predictions != our_predictions:
        a, b = their_predictions.splitlines(), our_predictions.splitlines()
        n = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
        return (f"the same figures but other predictions in its predictions.csv ({n} of "
                f"{max(len(a), len(b)) - 1} images' lines differ)")
    return None


def _newest_readable(ckpts: list[Path], evaluated: set, damaged: set, device) -> Optional[dict]:
    """The newest checkpoint not yet evaluated that loads (marked evaluated); a damaged one
    is said once and passed over for the one before it; None when there is nothing new."""
    for path in reversed(ckpts):
        if path in evaluated:
            return None
        try:
            ckpt = load_checkpoint(path, device)
        except PipelineError:
            if path.exists() and path not in damaged:  # not deleted while we read it
                damaged.add(path)
                log.info("%s is damaged or truncated: passing over it for the checkpoint "
                         "before it", path)
            continue
        evaluated.add(path)
        return ckpt
    return None


def check_fits(ckpt: dict, data: Prepared, source) -> None:
    """A model (or checkpoint) of the prepared data's classes, in their order: else its
    precision would be measured against other labels, every class named wrongly."""
    if int(ckpt["num_classes"]) != data.num_classes:
        raise PipelineError(f"{source}: a model of {ckpt['num_classes']} classes, but the "
                            f"prepared data have {data.num_classes}; {REMAKE}.")
    if list(ckpt["classes"]) != list(data.classes):
        first = next(i for i, (a, b) in enumerate(zip(ckpt["classes"], data.classes)) if a != b)
        raise PipelineError(f"{source}: a model of other classes than the prepared data's "
                            f"(class {first}: {ckpt['classes'][first]!r} in the model, "
                            f"{data.classes[first]!r} in the data); evaluate it on the data it "
                            f"was trained for, or {REMAKE}.")


def watch(data: Prepared, checkpoints: Path, tensorboard: Path, interval_secs: float,
          batch_size: int = 250, device_name: str = "auto",
          max_evals: Optional[int] = None) -> list[dict]:
    """Re-evaluate the newest checkpoint every ``interval_secs`` (the reference's eval loop)."""
    from torch.utils.tensorboard import SummaryWriter

    device = pick_device(device_name, key="eval.device")
    images = torch.from_numpy(data.test_images).to(device)
    labels = torch.from_numpy(data.test_labels).to(device)
    writer = SummaryWriter(str(tensorboard / "eval"))
    results = []
    evaluated, damaged = set(), set()
    try:
        while max_evals is None or len(results) < max_evals:
            ckpts = list_checkpoints(checkpoints)
            ckpt = _newest_readable(ckpts, evaluated, damaged, device)
            if ckpt is not None:
                if "num_classes" in ckpt and "classes" in ckpt:  # a run's checkpoints hold both
                    check_fits(ckpt, data, ckpts[-1].parent / f"ckpt-{int(ckpt['step']):08d}.pt")
                r = evaluate_checkpoint(ckpt, images, labels, batch_size, device)
                step = int(ckpt["step"])
                for key in ("precision_at_1", "precision_at_1_raw", "loss", "loss_raw"):
                    writer.add_scalar(f"eval/{key}", r[key], step)
                writer.flush()
                log.info("%s: step %d, precision @ 1 = %.3f (raw weights %.3f)",
                         datetime.now().strftime("%Y-%m-%d %H:%M:%S"), step,
                         r["precision_at_1"], r["precision_at_1_raw"])
                results.append({"step": step, "precision_at_1": r["precision_at_1"],
                                "precision_at_1_raw": r["precision_at_1_raw"]})
                continue
            elif not ckpts:
                log.info("no checkpoint in %s yet; waiting", checkpoints)
            if max_evals is not None and len(results) >= max_evals:
                break
            time.sleep(interval_secs)
    finally:
        writer.close()
    return results
