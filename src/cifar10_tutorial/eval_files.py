"""What an evaluation's files say of each other. The eval stage writes its figures
(metrics.json), one row an image (predictions.csv) and one row a class (per_class.csv) as one
set: the report, publish and the regression gate state a precision only where the files
beside it give the same one (a figure edited alone, or two evaluations' files mixed, is one
line naming both). A training run's final averaged loss is checked the same way against the
last point of the loss curve the same run logged."""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Optional

from .errors import PipelineError
from .files import read_small_file

# per_class.csv's precisions are written to four decimals: each class's count of right
# answers from it is off by at most its count x 0.00005
PER_CLASS_DECIMALS = 5e-5
PREDICTIONS = ["actual", "predicted"]
PER_CLASS = ["class", "count", "precision_at_1", "precision_at_1_raw"]


def refuse_other_predictions(eval_dir: Path, ev: dict, metrics: Path, rerun: str,
                             whole: bool) -> None:
    """``eval_dir``'s predictions.csv and per_class.csv against ``ev`` (the evaluation's
    figures, as ``metrics`` records them: precision_at_1, precision_at_1_raw,
    num_examples). ``whole``: the folder is an evaluation's set, so a file missing from it
    was removed since (else a missing one is older results, not checked). ``rerun``: how
    the user makes the evaluation again."""
    said = {k: ev.get(k) for k in ("precision_at_1", "precision_at_1_raw")}
    images = ev.get("num_examples")
    path = eval_dir / "predictions.csv"
    rows = _csv_rows(path, PREDICTIONS, rerun, whole)
    if rows is not None:
        right = sum(actual == predicted for actual, predicted in rows) / max(len(rows), 1)
        _compare(path, [(len(rows), "images"), (right, "precision_at_1")], images, said,
                 0.5 / max(len(rows), 1), metrics, rerun)
    predictions = rows
    path = eval_dir / "per_class.csv"
    rows = _csv_rows(path, PER_CLASS, rerun, whole)
    if rows is None:
        return
    try:  # a class without test images has no precision ("nan"): it counts for nothing
        counts = [int(c) for _, c, _, _ in rows]
        fractions = [[float(p) for p in row[2:]] if c else [0.0, 0.0]
                     for c, row in zip(counts, rows)]
        if any(c < 0 for c in counts) or not all(
                math.isfinite(p) and 0 <= p <= 1 for pair in fractions for p in pair):
            raise ValueError("a negative count, or a precision outside 0 to 1")
    except ValueError as exc:
        raise PipelineError(f"{path}: expected whole counts and precisions from 0 to 1, found "
                            f"{str(exc)[:60]}; {rerun}.") from None
    if predictions is not None:  # one evaluation: each class's images, counted alike
        listed = {name: c for (name, *_), c in zip(rows, counts)}
        seen = {}
        for actual, predicted in predictions:
            seen[actual] = seen.get(actual, 0) + 1
            odd = next((n for n in (actual, predicted) if n not in listed), None)
            if odd is not None:
                raise PipelineError(f"{eval_dir / 'predictions.csv'}: the class {odd[:40]!r}, "
                                    f"which {path} does not list: the files are not one "
                                    f"evaluation's; {rerun}.")
        off = next((n for n, c in listed.items() if seen.get(n, 0) != c), None)
        if off is not None:
            raise PipelineError(f"{eval_dir / 'predictions.csv'}: {seen.get(off, 0):,} test "
                                f"images of {off[:40]!r}, where {path} counts "
                                f"{listed[off]:,}: the files are not one evaluation's; "
                                f"{rerun}.")
        # each class's precision (averaged weights) is its right answers over its images,
        # as predictions.csv gives them, to per_class.csv's four decimals
        right = {}
        for actual, predicted in predictions:
            right[actual] = right.get(actual, 0) + (actual == predicted)
        for (name, *_), c, pair in zip(rows, counts, fractions):
            if c and abs(right.get(name, 0) / c - pair[0]) > PER_CLASS_DECIMALS + 1e-9:
                raise PipelineError(f"{path}: {name[:40]!r} has precision_at_1 {pair[0]:.4f}, "
                                    f"where {eval_dir / 'predictions.csv'} gives "
                                    f"{right.get(name, 0) / c:.4f} ({right.get(name, 0):,} of "
                                    f"its {c:,} images right): the files are not one "
                                    f"evaluation's; {rerun}.")
    n = sum(counts)
    found = [(n, "images")] + [
        (sum(c * pair[i] for c, pair in zip(counts, fractions)) / max(n, 1), key)
        for i, key in enumerate(("precision_at_1", "precision_at_1_raw"))]
    _compare(path, found, images, said, PER_CLASS_DECIMALS + 0.5 / max(n, 1), metrics, rerun)


def _csv_rows(path: Path, header: list[str], rerun: str,
              required: bool) -> Optional[list[list[str]]]:
    """The rows under ``header`` of an evaluation's CSV file, each of its width; None
    where the file is not there and not ``required``."""
    if not os.path.lexists(path):
        if not required:
            return None
        raise PipelineError(f"{path}: missing beside {path.parent / 'metrics.json'}, which the "
                            f"evaluation writes with it as one set; {rerun}.")
    try:
        rows = list(csv.reader(io.StringIO(read_small_file(path, 64 << 20).decode("utf-8"))))
    except OSError as exc:  # a folder in its place, a file too large to be an evaluation's
        found = "a folder" if isinstance(exc, IsADirectoryError) else exc.strerror or exc
        raise PipelineError(f"{path}: expected the evaluation's {','.join(header)} rows, found "
                            f"{found}; {rerun}.") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise PipelineError(f"{path}: cannot be read ({type(exc).__name__}: {str(exc)[:60]}); "
                            f"expected the evaluation's {','.join(header)} rows; {rerun}.") \
            from None
    bad = next((r for r in rows[1:] if len(r) != len(header)), None)
    if not rows or rows[0] != header or bad is not None:
        found = ("nothing" if not rows else
                 "a byte-order mark before the header (as a spreadsheet saves one)"
                 if rows[0] and rows[0][0].startswith("\ufeff") else
                 f"the header {','.join(rows[0])[:60]}" if rows[0] != header else
                 f"the row {','.join(bad)[:60]}" if bad else "an empty row")
        raise PipelineError(f"{path}: expected the evaluation's rows under the header "
                            f"{','.join(header)}, found {found}; {rerun}.")
    return rows[1:]


def _compare(path: Path, found: list, images, said: dict, within: float, metrics: Path,
             rerun: str) -> None:
    """Each (value, key) ``path`` gives against the figure ``metrics`` states."""
    for value, key in found:
        if key == "images":
            if isinstance(images, int) and value != images:
                raise PipelineError(f"{path}: {value:,} test images, where {metrics} gives "
                                    f"eval.num_examples {images:,}: the files are not one "
                                    f"evaluation's; {rerun}.")
            continue
        ours = said.get(key)  # one not finite is no figure of a run: its readers say so
        if isinstance(ours, (int, float)) and math.isfinite(ours) and abs(value - ours) > within:
            raise PipelineError(f"{metrics}: eval.{key} is {ours:.4f}, where its {path} gives "
                                f"{value:.4f}: one evaluation writes both, so the figures are "
                                f"not this run's (edited, or two runs' records mixed); {rerun}.")


def logged_curve(live: Path, metric: str, metrics: Path, why: str, rerun: str
                 ) -> tuple[Path, list[list[str]]]:
    """The rows (``step``, value: each line's fields) of the curve of ``metric`` that the
    run logged in ``live`` (plots/metrics/train/<metric>.tsv) beside ``metrics``, which
    states a figure of it (``why``: which, and how the curve gives it). The curve is
    required beside the figure, as the evaluation's CSVs are beside its: without it an
    edited figure could not be told; missing or unreadable is one line naming it."""
    path = Path(live) / "plots" / "metrics" / "train" / f"{metric}.tsv"
    if not os.path.lexists(path):
        raise PipelineError(f"{path}: missing beside {metrics}, whose {why} (the run writes "
                            f"both); {rerun}.")
    try:
        lines = read_small_file(path, 64 << 20).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        found = ("a folder" if isinstance(exc, IsADirectoryError) else
                 "bytes that are not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else
                 getattr(exc, "strerror", None) or f"{type(exc).__name__}: {str(exc)[:60]}")
        raise PipelineError(f"{path}: expected the training run's curve (step, {metric}), "
                            f"found {found}; {rerun}.") from None
    rows = [line.split("\t") for line in lines[1:]]
    if not rows:  # the run logs its last step at least
        raise PipelineError(f"{path}: holds no {metric} (only "
                            f"{'a header' if lines else 'nothing'}), where the run logs one at "
                            f"each of its log steps, its last included; {rerun}.")
    return path, rows


def refuse_other_loss(live: Path, train: dict, metrics: Path, rerun: str) -> None:
    """``train``'s ``loss_avg`` and ``step`` (as ``metrics`` states them) against what the
    same run wrote beside them in ``live``: its loss curve (plots/metrics/train/
    loss_avg.tsv), which every run logs at its last step too, and its record
    (provenance.json: the steps it trained), where there. The curve is required beside the
    figures, as the evaluation's CSVs are beside its: without it, or without a point at
    the run's step, an edited figure could not be told; an edited figure, or two runs'
    files mixed, is one line naming both."""
    step, said = train.get("step"), train.get("loss_avg")
    if isinstance(step, bool) or not isinstance(step, int) or isinstance(said, bool) \
            or not isinstance(said, (int, float)):
        raise PipelineError(f"{metrics}: expected the training run's step and loss_avg (whole "
                            f"steps, a number), found step {step!r:.40} and loss_avg "
                            f"{said!r:.40}; {rerun}.")
    record = Path(live) / "provenance.json"
    if os.path.isfile(record):  # the run's own record of its length
        try:
            made = json.loads(read_small_file(record, 1 << 20).decode("utf-8"))
            steps, epochs = made.get("steps"), made.get("epochs")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
            steps = epochs = None  # a damaged record: named where it is read as a whole
        if isinstance(steps, int) and not isinstance(steps, bool) and steps != step:
            raise PipelineError(f"{metrics}: train.step is {step}, where {record} records "
                                f"{steps} steps: the figures are not this run's; {rerun}.")
        said_epochs = train.get("epochs")
        if all(isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e)
               for e in (epochs, said_epochs)) \
                and not math.isclose(epochs, said_epochs, rel_tol=1e-9, abs_tol=1e-9):
            raise PipelineError(f"{metrics}: train.epochs is {said_epochs}, where {record} "
                                f"records {epochs} epochs: the figures are not this run's; "
                                f"{rerun}.")
    path, rows = logged_curve(live, "loss_avg", metrics, "train.loss_avg is the curve's "
                              "point at the run's last step", rerun)
    value = None
    for fields in reversed(rows):
        try:
            if len(fields) == 2 and int(float(fields[0])) == step:
                value = float(fields[1])
                break
        except (ValueError, OverflowError):
            continue
    if value is None or not math.isfinite(value):
        raise PipelineError(f"{path}: {'no point' if value is None else 'no finite point'} at "
                            f"the run's last step ({step:,}), where the run logs its loss and "
                            f"{metrics} states {said:.4f}: the files are not one run's; "
                            f"{rerun}.")
    if not math.isfinite(said) or abs(value - said) > 1e-6 * max(1.0, abs(value)):
        raise PipelineError(f"{metrics}: train.loss_avg is {said:.4f}, where {path} gives "
                            f"{value:.4f} at the run's last step ({step:,}): one run "
                            f"writes both, so the figures are not this run's (edited, or two "
                            f"runs' records mixed); {rerun}.")


def loads_once(text):
    """``json.loads`` of a record, refusing a key written twice (ValueError): which one
    counts would be the parser's accident, and a reader of the file sees the first while
    the figures stated would be the last."""
    def once(pairs):
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise ValueError(f"the key {twice!r:.40} twice")
        return dict(pairs)

    return json.loads(text, object_pairs_hook=once)


# a loss is computed in float32: no run's lies past its largest number (numpy.finfo)
FLOAT32_MAX = 3.4028234663852886e38

# what names a model in the records of its run and of its evaluation (provenance.record)
MODEL_KEYS = ("steps", "data_hash", "params_hash")


def refuse_other_model(train_dir: Path, eval_dir: Path, rerun: str,
                       rerun_train: Optional[str] = None) -> None:
    """The evaluation's record (``eval_dir``/provenance.json) names the step, the data and
    the params (their hash) of the model it evaluated: the training run's own
    (``train_dir``/provenance.json). Both records are required, as the run and the
    evaluation always write them: without one, an evaluation of another run's model
    could not be told. One missing, damaged, or naming another model (another variant's,
    or one of another step or data) is one line naming it. ``rerun_train``: how the user
    makes the training run's record again, where not as ``rerun`` the evaluation's."""
    records = []
    for folder, whose, fix in ((train_dir, "the training run's", rerun_train or rerun),
                               (eval_dir, "the evaluation's", rerun)):
        path = Path(folder) / "provenance.json"
        if not os.path.lexists(path):
            raise PipelineError(f"{path}: missing, where {whose} record of the model (its "
                                f"step, data and params) is written with its figures; "
                                f"{fix}.")
        try:
            rec = loads_once(read_small_file(path, 1 << 20).decode("utf-8"))
        except OSError as exc:  # a folder, a FIFO, a file too large to be a record
            found = ("a folder" if isinstance(exc, IsADirectoryError)
                     else exc.strerror or type(exc).__name__)
            raise PipelineError(f"{path}: expected {whose} record (a JSON object), found "
                                f"{found}; {fix}.") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise PipelineError(f"{path}: expected {whose} record (a JSON object), found "
                                f"no JSON ({type(exc).__name__}: {str(exc)[:60]}); "
                                f"{fix}.") from None
        absent = (next((f"no {k}" for k in MODEL_KEYS if k not in rec), None)
                  if isinstance(rec, dict) else f"a {type(rec).__name__}")
        if absent is not None:
            raise PipelineError(f"{path}: expected {whose} record with "
                                f"{', '.join(MODEL_KEYS)}, found {absent}; {fix}.")
        for key, kind, words in (("steps", int, "whole steps"), ("data_hash", str, "a string"),
                                 ("params_hash", str, "a string")):
            if isinstance(rec[key], bool) or not isinstance(rec[key], kind):
                raise PipelineError(f"{path}: {key} is {json.dumps(rec[key])[:40]}, not of "
                                    f"the kind {whose} record holds ({words}); {fix}.")
        records.append(rec)
    train, ev = records
    for key, what in (("steps", "the step of the model"), ("data_hash", "the data"),
                      ("params_hash", "the model (its params)")):
        if train[key] != ev[key]:
            raise PipelineError(f"{Path(eval_dir) / 'provenance.json'}: {key} is "
                                f"{ev[key]!r:.40}, where {Path(train_dir) / 'provenance.json'}"
                                f" records {train[key]!r:.40}: {what} evaluated is not the "
                                f"run's, so the files are of two runs; {rerun}.")
