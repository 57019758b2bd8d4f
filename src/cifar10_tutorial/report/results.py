"""What the report's sections share: the variants' results (metrics, curves, provenance)
loaded as tables, percentages, Markdown tables and plots written atomically; and the
report's first section, which says how the results were made."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from ..errors import PipelineError
from ..files import die_with_parent, read_small_file, restore_from_git, save_figure_atomic
from ..curves import read_curve
from ..param_types import load_yaml12
from ..eval_files import (FLOAT32_MAX, loads_once, logged_curve, refuse_other_loss,
                          refuse_other_model, refuse_other_predictions)


def _shown(path) -> str:
    """A path as a line of an error shows it: quoted where it holds a newline or another
    character that would split or hide the line."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def _refuse_linked(folder: Path) -> None:
    """A variant's folder that is a link (to another variant's, say): its results would be
    reported as this variant's; one line naming it."""
    if folder.is_symlink():
        raise PipelineError(f"{_shown(folder)}: a link (to {_shown(os.readlink(folder))}), where "
                            f"the variant's stage writes a folder of its own: its results "
                            f"would be reported as {_shown(folder.name)}'s; remove the link. "
                            f"Nothing was written.")


def _refuse_other_size(described: Path, variant: dict, metrics: Path, train: dict) -> None:
    """The training set's size and global batch that variant.json records against the
    run's own figures: its steps of that batch over that many images are its epochs (one
    run writes both files). One edited alone states a training set the run never had."""
    numbers = [variant.get("num_train"), variant.get("global_batch_size"), train.get("step"),
               train.get("epochs")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)
               and n > 0 for n in numbers):
        return
    images, batch, steps, epochs = numbers
    if not math.isclose(steps * batch / images, epochs, rel_tol=1e-6):
        raise PipelineError(f"{described}: num_train is {images:,} and global_batch_size "
                            f"{batch:,}, where {metrics} gives {steps:,} steps as {epochs} "
                            f"epochs ({steps * batch / epochs:,.0f} training images): one run "
                            f"writes both, so the records are not one run's; "
                            f"{_rerun_variant(described, variant)}")
    # each held-out point's epoch is its step's, at that batch over those images (the
    # run logs both); a damaged file is the held-out checks' to name
    try:
        logged = read_curve(described.parent / "train", "epoch", "held_out")
    except (OSError, ValueError):
        logged = None
    if logged is None or list(logged.columns) != ["step", "epoch"]:
        return
    for at, epoch in zip(pd.to_numeric(logged["step"], errors="coerce"),
                         pd.to_numeric(logged["epoch"], errors="coerce")):
        if math.isfinite(at) and math.isfinite(epoch) and not math.isclose(
                at * batch / images, epoch, rel_tol=1e-6, abs_tol=1e-9):
            raise PipelineError(f"{described.parent / 'train/plots/metrics/held_out/epoch.tsv'}"
                                f": epoch {epoch:g} at step {at:,.0f}, where {described}'s "
                                f"{images:,} training images at a global batch of {batch:,} "
                                f"give {at * batch / images:g}: one run writes both; "
                                f"{_rerun_variant(described, variant)}")


def _variant_name(folder: Path, variant: Optional[dict] = None) -> str:
    """The name of the variant whose results ``folder`` holds, as a line's rerun advice
    gives it: the one its variant.json records (``variant``, or read from the folder), a
    copy's folder may be named otherwise; its folder's where none is recorded or the one
    recorded is not a variant's name (which would reach the advice's command as typed)."""
    if variant is None:
        try:
            variant = json.loads((Path(folder) / "variant.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            variant = None
    named = variant.get("variant") if isinstance(variant, dict) else None
    return (named if isinstance(named, str)
            and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,63}", named) else Path(folder).name)


def _rerun_variant(described: Path, variant: dict) -> str:
    """How to rerun the variant whose variant.json is ``described`` (the name it records,
    else its folder's), as the timing checks' lines end."""
    return (f"rerun it (`dvc repro -f reports/dvc.yaml:ablation@"
            f"{_variant_name(described.parent, variant)}`)")


def _refuse_other_speed(described: Path, variant: dict, metrics: Path, train: dict) -> None:
    """The run's speed against its own figures: its examples/sec are the examples of its
    last session's steps (at most its ``step``, of ``global_batch_size``) over that
    session's training time, which began with the ``time_to_first_batch_s`` before its
    first step, so at most step x batch / that time; and each device's share is the
    speed over ``world_size``. A speed beyond them was not measured by the run: the
    report would compare it as one (the devices exercise)."""
    rerun = _rerun_variant(described, variant)
    timed = ("examples_per_sec", "examples_per_sec_per_device", "time_to_first_batch_s")
    for key in timed:  # measured by the run, which writes each: a finite number from 0
        value = train.get(key, "missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not (math.isfinite(value) and value >= 0):
            found = "missing" if value == "missing" else f"{str(value)[:40]}"
            raise PipelineError(f"{metrics}: train.{key} is {found}, expected what a run "
                                f"measures and writes: a finite number from 0 up; {rerun}")
    if train["examples_per_sec"] > 0:
        _refuse_speed_beyond_curve(described.parent, train, metrics, train["examples_per_sec"],
                                   rerun)
    numbers = [train.get(k) for k in ("step", *timed)] + [
        variant.get("global_batch_size"), variant.get("world_size")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)
               and n >= 0 for n in numbers):
        return  # a record of another kind: said by the checks of its kinds
    steps, speed, per_device, first, batch, world = numbers
    if first == 0 and speed > 0:  # no batch this session (a run resumed at its end): none
        raise PipelineError(f"{metrics}: train.examples_per_sec is {speed:,.6g}, where its "
                            f"time_to_first_batch_s 0 says its last session trained no step: "
                            f"not a speed this run measured; {rerun}")
    if speed * first > steps * batch * (1 + 1e-6):
        raise PipelineError(f"{metrics}: train.examples_per_sec is {speed:,.6g}, beyond what "
                            f"the run's {steps:,} steps of {batch:,} images allow in the "
                            f"{first:.3g} s it took to its first batch (at most "
                            f"{steps * batch / first:,.6g} a second): not a speed this run "
                            f"measured; {rerun}")
    if world > 0 and not math.isclose(per_device * world, speed, rel_tol=1e-6, abs_tol=1e-9):
        raise PipelineError(f"{metrics}: train.examples_per_sec_per_device is "
                            f"{per_device:,.6g}, where examples_per_sec {speed:,.6g} over the "
                            f"{world} device(s) {described} records is {speed / world:,.6g}: "
                            f"one run writes both; {rerun}")
    if first > 0 and speed == 0:  # its last session trained steps: in some time
        raise PipelineError(f"{metrics}: train.examples_per_sec is 0, where its "
                            f"time_to_first_batch_s {first:.3g} says its last session trained: "
                            f"not a speed this run measured; {rerun}")


# what a run's provenance.json and its variant.json both record (the stage writes the
# second from the first)
RECORDED_TWICE = ("world_size", "global_batch_size", "schedule", "device_type", "device")
# a resumed run's speed is its last session's steps over that session's training time,
# which its segment's wall time holds (with the resume's set-up before it, the final
# save after it, and its evaluations): so at least those steps over the segment's time;
# room for the moments each is taken at. No bound from above: the set-up and the save
# take what they take (a short last session is mostly them)
SESSION_ROOM = 0.01


def _refuse_other_timing(described: Path, variant: dict, metrics: Path, train: dict) -> None:
    """The run's times and speed against each other and its record (train/
    provenance.json), as training/train.py computes them: its wall time is its training
    time plus its held-out evaluations', and the record's; a run of one session (no
    segments, or the last from step 0) trained its steps in its training time, so its
    speed is steps x global batch over that time; a resumed run's speed is at least its
    last segment's steps over that segment's wall time (the speed curve bounds it from
    above). And what variant.json copies from the record (world size, batch, schedule,
    device) is the record's. A figure they contradict is not the run's: one line naming
    both."""
    rerun = _rerun_variant(described, variant)
    steps, batch = train.get("step"), variant.get("global_batch_size")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (steps, batch)):
        return  # a record of another kind: said by the checks of its kinds
    record = described.parent / "train" / "provenance.json"
    try:
        made = json.loads(read_small_file(record, 1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        made = None  # missing or damaged: said where the record is read as a whole
    made = made if isinstance(made, dict) else {}
    for key in RECORDED_TWICE:
        if key in made and key in variant and made[key] != variant[key] \
                and type(made[key]) is type(variant[key]):  # else its kind is said
            raise PipelineError(f"{described}: {key} is {json.dumps(variant[key])[:60]}, where "
                                f"{record} records {json.dumps(made[key])[:60]}: the stage "
                                f"writes one from the other, so the records are not one "
                                f"run's; {rerun}")

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= 0

    wall, trained, evaluating = (train.get(k) for k in ("wall_time_s", "train_seconds",
                                                         "held_out_eval_seconds"))
    for key, value in (("wall_time_s", wall), ("train_seconds", trained),
                       ("held_out_eval_seconds", evaluating)):
        if (key == "wall_time_s" or value is not None) and not number(value):
            raise PipelineError(f"{metrics}: train.{key} is {str(value)[:40]}, expected what "
                                f"a run measures and writes: a finite number from 0 up; "
                                f"{rerun}")
    if made and "wall_time_s" not in made:  # every run records it (its card states it)
        raise PipelineError(f"{record}: no wall_time_s, which every training run records "
                            f"beside its metrics.json's; {rerun}")
    if isinstance(train.get("held_out"), dict) and trained is None:
        raise PipelineError(f"{metrics}: train.held_out without train.train_seconds and "
                            f"held_out_eval_seconds, which a run with held-out evaluations "
                            f"records beside it (its training time apart from theirs); "
                            f"{rerun}")
    if "wall_time_s" in made and made["wall_time_s"] != wall:
        raise PipelineError(f"{metrics}: train.wall_time_s is {wall:,.6g}, where {record} "
                            f"records {str(made['wall_time_s'])[:40]}: one run writes both; "
                            f"{rerun}")
    if (trained is None) != (evaluating is None) or (trained is not None and not math.isclose(
            trained + evaluating, wall, rel_tol=1e-9, abs_tol=1e-6)):
        raise PipelineError(f"{metrics}: train.train_seconds {trained} and "
                            f"held_out_eval_seconds {evaluating} do not add up to its "
                            f"wall_time_s {wall:,.6g}, as the run writes them; {rerun}")
    speed, time = train["examples_per_sec"], trained if trained is not None else wall
    segments = made.get("segments")
    last = segments[-1] if isinstance(segments, list) and segments else None
    if last is None or (isinstance(last, dict) and last.get("from_step") == 0):
        expected = steps * batch / time if time > 0 else math.inf
        if not math.isclose(speed, expected, rel_tol=1e-4):
            raise PipelineError(f"{metrics}: train.examples_per_sec is {speed:,.6g}, where the "
                                f"run's {steps:,} steps of {batch:,} images in its "
                                f"{time:,.6g} s of training (its "
                                f"{'train_seconds' if trained is not None else 'wall_time_s'}) "
                                f"give {expected:,.6g} a second, as the run computes it: not "
                                f"a speed this run measured; {rerun}")
        return
    try:
        done, seconds = last["to_step"] - last["from_step"], float(last["wall_time_s"])
        lowest = done * batch / seconds * (1 - SESSION_ROOM)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return  # a damaged record: said where it is read as a whole
    if speed < lowest:
        raise PipelineError(f"{metrics}: train.examples_per_sec is {speed:,.6g}, where the "
                            f"last session {record} records ({done:,} steps of {batch:,} "
                            f"images in {seconds:,.6g} s, its set-up, evaluations and final "
                            f"save included) gives at least {lowest:,.6g} a second: not a "
                            f"speed this run measured; {rerun}")


# the run's speed against its own speed curve: the session's average lies within the
# speeds of its log intervals, which count the held-out evaluations' time too (hence that
# share added), with room for the intervals' own start and end
SPEED_ROOM = 1.25


def _refuse_speed_beyond_curve(folder: Path, train: dict, metrics: Path, speed: float,
                               rerun: str) -> None:
    """``speed`` (train.examples_per_sec: the examples of the run's last session over its
    training time) against the speeds the same run logged at its log steps
    (train/plots/metrics/train/examples_per_sec.tsv: each interval's examples over its
    time, held-out evaluations included): the session's average is no faster than its
    fastest interval, but for the evaluations' share. A speed beyond that was not
    measured by the run; one line naming both files."""
    path, rows = logged_curve(folder / "train", "examples_per_sec", metrics,
                              "train.examples_per_sec the run measured over the steps it logs "
                              "there", rerun)
    logged = []
    for fields in rows:
        try:
            value = float(fields[1]) if len(fields) == 2 else math.nan
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value > 0:
            logged.append(value)
    trained, evaluating = train.get("train_seconds"), train.get("held_out_eval_seconds")
    share = (evaluating / trained if all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                         and math.isfinite(v) and v >= 0 for v in
                                         (trained, evaluating)) and trained > 0 else 0.0)
    most = max(logged, default=0.0) * (1 + share) * SPEED_ROOM
    if speed > most:
        fastest = (f"its fastest logged interval ran {max(logged):,.6g} a second"
                   if logged else "it logs no speed")
        raise PipelineError(f"{metrics}: train.examples_per_sec is {speed:,.6g}, where {path}, "
                            f"the speeds the same run logged, allows at most {most:,.6g} "
                            f"({fastest}): not a speed this run measured; {rerun}")


def refuse_other_network(root: Path, df: pd.DataFrame, networks: dict) -> None:
    """Each variant's train.num_params and train.macs_per_image against its network: the
    ``model`` section of reports/params.yaml with the variant's overrides (``networks``:
    name -> that section): :func:`refuse_other_network_of`."""
    for name, model in networks.items():
        if name in df.index:
            refuse_other_network_of(Path(root) / name, name, {
                key: df.at[name, key] for key in ("num_params", "macs_per_image")}, model,
                "reports/params.yaml's model section with its overrides")


def refuse_other_network_of(folder: Path, name: str, said: dict, model: dict,
                            source: str) -> None:
    """A variant's num_params and macs_per_image (``said``, as its metrics.json's train
    records them) against its network: ``model``, a model section (``source`` says whose),
    built for the classes its evaluation scored (eval/per_class.csv, one row each) as the
    run builds it. Both figures follow from the network alone, so a figure the network
    does not give is not the run's: one line naming the file."""
    from ..model import build_model, macs_per_image, num_params

    text = read_small_file(folder / "eval" / "per_class.csv", 64 << 20).decode("utf-8")
    classes = len(list(csv.reader(io.StringIO(text)))) - 1  # checked as the row was read
    net = build_model(classes, **model)
    want = {"num_params": num_params(net), "macs_per_image": macs_per_image(net)}
    # the parameters grow by one head row a class: where the run's figures are this
    # network's for another number of classes, the rows of per_class.csv are what changed
    step = num_params(build_model(classes + 1, **model)) - want["num_params"]
    stated = said.get("num_params")  # as a table holds it: a numpy or a float whole number
    try:
        stated = (int(stated) if not isinstance(stated, (bool, str)) and math.isfinite(stated)
                  and float(stated).is_integer() else None)
    except (TypeError, ValueError, OverflowError):
        stated = None
    if (stated is not None and stated != want["num_params"]
            and step > 0 and (stated - want["num_params"]) % step == 0):
        theirs = classes + (stated - want["num_params"]) // step
        other = build_model(theirs, **model) if 2 <= theirs <= 100_000 else None
        if other is not None and num_params(other) == stated \
                and macs_per_image(other) == said.get("macs_per_image"):  # both its figures
            raise PipelineError(
                f"{folder / 'eval' / 'per_class.csv'}: lists {classes} classes, where the "
                f"run's train.num_params {stated:,} is its network's for {theirs} classes: the "
                f"rows are not its evaluation's; rerun it (`dvc repro "
                f"reports/dvc.yaml:ablation@{name}`, or dataset_ablation@{name})")
    for key, value in want.items():
        if said.get(key) != value:
            raise PipelineError(
                f"{folder / 'metrics.json'}: train.{key} is {said.get(key)}, where {name}'s "
                f"network ({source}, {json.dumps(model, sort_keys=True)[:200]}, for the "
                f"{classes} classes of eval/per_class.csv) has {value:,}: the figure is not "
                f"its run's; rerun it (`dvc repro reports/dvc.yaml:ablation@{name}`, or "
                f"dataset_ablation@{name})")


def check_results_folder(folder: Path, metrics: dict, variant: dict) -> None:
    """One variant's results folder (``metrics``: its metrics.json, with train and eval;
    ``variant``: its variant.json) checked as one run's: every figure a number, the
    variant's keys of their kinds, its training set's size, its speed and times against
    the run's own figures and record, and its evaluation against its held-out curves.
    What the report reads and publish publishes, checked alike: one line naming the file."""
    path, described = folder / "metrics.json", folder / "variant.json"
    _numbers_only(path, metrics)
    _typed(described, variant)
    _refuse_other_size(described, variant, path, metrics["train"])
    _refuse_other_speed(described, variant, path, metrics["train"])
    check_one_evaluation(folder, metrics)
    _refuse_other_timing(described, variant, path, metrics["train"])


def load_variants(root: Path) -> pd.DataFrame:
    """One row per variant: what it is (variant.json) and its results (metrics.json: the
    train run's figures, ``loss_avg`` as ``final_loss_avg`` and ``step`` as ``steps``,
    and the evaluation's)."""
    rows, folders = [], {}
    if not Path(root).is_dir():  # a mistyped folder: running the stages would not help
        raise PipelineError(f"{root}: {'not a folder' if os.path.lexists(root) else 'not found'}"
                            f", where every variant's results are expected (the folder the "
                            f"ablation stages write into, as reports/dvc.yaml names it); give "
                            f"that folder. Nothing was written.")
    if (Path(root) / "variant.json").is_file() or (Path(root) / "metrics.json").is_file():
        raise PipelineError(f"{root}: one variant's results, where the folder of every "
                            f"variant's is expected (the one the ablation stages write into, "
                            f"each variant in a folder of its own); give that folder")
    for path in sorted(Path(root).glob("*/metrics.json")):
        _refuse_linked(path.parent)
        described = path.with_name("variant.json")
        if not described.is_file():
            raise PipelineError(f"{described}: missing beside {path.name} (results of an older "
                                f"version of the code, or a copy); if {path.parent.name} is "
                                f"a variant of reports/params.yaml, rerun it (`dvc repro -f "
                                f"reports/dvc.yaml:ablation@{path.parent.name}`), else (a "
                                f"backup) move {path.parent} out of {root}.")
        m = _record(path, ("train", "eval"))
        variant = _record(described, ("variant",))  # whose results, before what they say
        check_results_folder(path.parent, m, variant)
        folders.setdefault(variant.get("variant"), []).append(path.parent)
        train = dict(m["train"])
        train["steps"], train["final_loss_avg"] = train.pop("step"), train.pop("loss_avg")
        train.pop("loss"), train.pop("held_out", None)
        if "train_seconds" in train:  # held-out points: a run that reached no target has none
            train.setdefault("time_to_target", {})
        ev = {("eval_examples_per_sec" if k == "examples_per_sec" else k): v
              for k, v in m["eval"].items()}
        rows.append(_device_read({**variant, **train, **ev}))
    if not rows:
        raise PipelineError(f"{root}: no ablation results (*/metrics.json); run the ablation "
                            f"stages first (`dvc repro reports/dvc.yaml:report`).")
    for name, where in folders.items():
        if len(where) > 1:  # the folder named after the variant is its own; another a copy
            own = [f for f in where if f.name == name] or where[:1]
            copy = next(f for f in where if f != own[0])
            raise PipelineError(f"{_shown(copy)}: its variant.json names {name}, whose folder "
                                f"is {_shown(own[0])}; expected one results folder a variant; "
                                f"remove the copy")
    return pd.DataFrame(rows).set_index("variant")


def refuse_untimed_targets(root: Path, params) -> None:
    """A variant's train.time_to_target times the held-out precisions of its own
    eval.targets (training/monitoring.py HeldOut): a precision it does not list is no
    time its run measured (a column of its own in the report's tables, "not reached" for
    every other variant); and one it lists that its held-out curve reaches has its time
    (the run records the first evaluation at or above it: "not reached" would contradict
    the curve). One line naming the file and the targets."""
    from ..params import variant_params

    for name in [*params.ablations, *params.dataset_ablations]:
        path = Path(root) / name / "metrics.json"
        if not path.is_file():
            continue
        train = _record(path, ("train",), name)["train"]
        # a run that reached no target leaves the key out (DVC warns about an empty {})
        reached = (train.get("time_to_target", {}) if isinstance(train, dict) else None)
        if isinstance(train, dict) and not isinstance(reached, dict):
            raise PipelineError(f"{_shown(path)}: train.time_to_target is "
                                f"{json.dumps(reached)[:40]}, expected a mapping of the "
                                f"targets reached to their step, epoch and train_seconds (the "
                                f"run's record; none reached: no key at all); rerun it "
                                f"(`dvc repro -f reports/dvc.yaml:ablation@{name}`, or "
                                f"dataset_ablation@{name})")
        if not isinstance(reached, dict):
            continue
        targets = variant_params(params, name).eval.targets
        rerun = (f"rerun it (`dvc repro -f reports/dvc.yaml:ablation@{name}`, or "
                 f"dataset_ablation@{name})")
        curve = _held_out(Path(root) / name, rerun, train.get("step"))
        untimed = [f"{t:g}" for t in targets if f"{t:g}" not in reached and curve is not None
                   and bool((curve["precision_at_1"] >= t).any())]
        if untimed:
            raise PipelineError(f"{_shown(path)}: train.time_to_target has no time for "
                                f"{', '.join(untimed)}, which {name}'s eval.targets lists "
                                f"and its held-out curve (train/plots/metrics/held_out/) "
                                f"reaches: the run records both, so the figures are not "
                                f"this run's; {rerun}")
        listed = {f"{t:g}" for t in targets}
        odd = sorted(str(t) for t in reached if str(t) not in listed)
        if odd:
            raise PipelineError(f"{_shown(path)}: train.time_to_target times {', '.join(odd)}, "
                                f"which {name}'s eval.targets ({', '.join(map(str, targets))} "
                                f"in reports/params.yaml) does not list: not a time its run "
                                f"measured; rerun it (`dvc repro -f reports/dvc.yaml:"
                                f"ablation@{name}`, or dataset_ablation@{name})")


def refuse_twins_across_groups(root: Path, params) -> None:
    """The loader compares each group of variants within itself (the ablations' data are
    the pipeline's, which reports/params.yaml does not name). Here both groups' runs are
    known: a data-set variant whose training run recorded an ablation variant's data (the
    same data_hash in train/provenance.json) and which computes what that variant computes
    trained bit-identically to it; its table would show that variant's figures as the
    other data set's. So did a data-set variant whose run recorded the data of one before
    it (two archives of the same bytes, reached by paths the loader cannot tell apart).
    One line naming both."""
    from ..data.datasets import DATASETS
    from ..params import twin_on_the_same_data, variant_params

    hashes = {}
    for name in [*params.ablations, *params.dataset_ablations]:
        record = load_provenance(root, name) if (Path(root) / name).is_dir() else None
        if record is not None:
            hashes[name] = record["data_hash"]
    dataset = list(params.dataset_ablations)
    for i, name in enumerate(dataset):
        # an ablation variant, or a data-set variant before it whose archive was other
        # bytes of the same data (two paths, no md5: the loader could not tell)
        for other in [*params.ablations, *dataset[:i]]:
            if name not in hashes or hashes.get(other) != hashes[name]:
                continue
            # the same bytes: the data set the variant names (its flips by default) and the
            # training images its run recorded, as its stage compares on the data
            try:
                made = json.loads((Path(root) / name / "variant.json").read_text())
                num_train = made.get("num_train") if isinstance(made, dict) else None
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                num_train = None
            if not (isinstance(num_train, int) and not isinstance(num_train, bool)
                    and num_train > 0):
                num_train = None
            spec = DATASETS.get(variant_params(params, name).data.dataset)
            line = twin_on_the_same_data(params, name, other, num_train,
                                         spec.flip if spec is not None else None)
            if line is not None:
                group = "ablations" if other in params.ablations else "dataset_ablations"
                raise PipelineError(
                    f"{_shown(Path(root) / name / 'train' / 'provenance.json')}: trained on "
                    f"the data of {group}.{other} (data_hash {hashes[name][:12]}): {line} "
                    f"(in reports/params.yaml)")


def check_one_evaluation(folder: Path, metrics: dict) -> None:
    """A variant's results folder holds one run's figures: each precision of its
    metrics.json a fraction from 0 to 1, and its eval/ and train/ metrics (written by the
    same run) the same figures as metrics.json's. A folder a killed or stray run half
    rewrote, or a hand edit, is one line naming the variant to rerun (the one its
    variant.json names: a copy's folder may be named otherwise)."""
    name = _variant_name(folder)
    rerun = (f"rerun it (`dvc repro -f reports/dvc.yaml:ablation@{name}`; "
             f"dataset_ablation@{name} for a data-set variant)")
    for key, value in metrics["eval"].items():
        if key.startswith("precision_at_1") and not (
                isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1):
            raise PipelineError(f"{folder / 'metrics.json'}: eval.{key} is {value}, expected a "
                                f"fraction of the test images from 0 to 1; {rerun}.")
    images = metrics["eval"].get("num_examples")
    if images is not None and not (isinstance(images, int) and not isinstance(images, bool)
                                   and images > 0):
        raise PipelineError(f"{folder / 'metrics.json'}: eval.num_examples is "
                            f"{str(images)[:40]}, expected the count of test images the run "
                            f"evaluated (a whole number from 1); {rerun}.")
    if images is not None:
        for key, value in metrics["eval"].items():  # each a count of right images over them
            if key.startswith("precision_at_1") and \
                    abs(value * images - round(value * images)) > 0.01:
                raise PipelineError(f"{folder / 'metrics.json'}: eval.{key} is {value}, "
                                    f"{value * images:,.2f} of its {images:,} test images, "
                                    f"where a precision counts whole images right; {rerun}.")
    # a loss, computed in float32, lies from 0 to its largest number (a run that diverged
    # records inf or NaN: stated as it is)
    for part in ("train", "eval"):
        for key, value in metrics[part].items():
            if key.startswith("loss") and isinstance(value, (int, float)) \
                    and not isinstance(value, bool) and math.isfinite(value) \
                    and not 0 <= value <= FLOAT32_MAX:
                raise PipelineError(f"{folder / 'metrics.json'}: {part}.{key} is {value}, "
                                    f"expected a loss: a number from 0 to {FLOAT32_MAX:.4g} "
                                    f"(float32's largest); {rerun}.")
    for part in ("eval", "train"):
        # the variant's stage writes both beside metrics.json, as one run's (a folder
        # without them holds figures that nothing could be checked against)
        path = folder / part / "metrics.json"
        if not os.path.lexists(path):
            raise PipelineError(f"{path}: missing beside {folder / 'metrics.json'}, whose "
                                f"{part} figures the variant's run writes there too; {rerun}.")
        try:
            theirs = loads_once(path.read_text())
        except OSError as exc:  # a folder in its place (its message: the whole path again)
            found = "a folder" if isinstance(exc, IsADirectoryError) else exc.strerror or exc
            raise PipelineError(f"{path}: expected the variant's run's {part} figures (a JSON "
                                f"object), found {found}; {rerun}.") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise PipelineError(f"{path}: cannot be read as JSON ({type(exc).__name__}: "
                                f"{str(exc)[:60]}), where the variant's run writes its "
                                f"{part} figures; {rerun}.") from None
        if not isinstance(theirs, dict):  # a damaged file, not a second run's
            raise PipelineError(f"{path}: expected the variant's run's {part} figures (a JSON "
                                f"object), found a {type(theirs).__name__}; {rerun}.")
        absent = [k for k in theirs if k not in metrics[part]]
        if absent:  # metrics.json lost a figure the run wrote: that file is the damaged one
            raise PipelineError(f"{folder / 'metrics.json'}: expected {part}.{absent[0]}, "
                                f"found none (its {path} has it); {rerun}.")
        differ = [k for k in theirs if metrics[part][k] != theirs[k]]
        if part == "eval":
            differ += [k for k in metrics["eval"] if k not in theirs]
        if differ:
            key = differ[0]
            values = (f" ({key}: {json.dumps(theirs.get(key))[:30]} here, "
                      f"{json.dumps(metrics[part].get(key))[:30]} there)")
            raise PipelineError(f"{path}: {', '.join(differ[:3])} not what {folder / 'metrics.json'}"
                                f" gives{values}; the two are written by one run of the "
                                f"variant, so the folder holds parts of two runs (one stopped, "
                                f"or an evaluation of another model); {rerun}.")
    _refuse_other_final_evaluation(folder, metrics, rerun)
    _refuse_other_targets(folder, metrics, rerun)
    refuse_other_model(folder / "train", folder / "eval", rerun)
    refuse_other_loss(folder / "train", metrics["train"], folder / "metrics.json", rerun)
    # the evaluation writes its files as one set: beside its metrics.json, a missing one
    # was removed since
    refuse_other_predictions(folder / "eval", metrics["eval"], folder / "metrics.json", rerun,
                             True)


# the evaluation and the run's held-out evaluation of its last step score the same weights
# on the same images: they may part by a tie between two logits, never by more
SAME_EVALUATION = 1e-3


def _held_out(folder: Path, rerun: str, last: Optional[int] = None):
    """The run's held-out curve (:func:`.curves.held_out_curve`; None where it logs none),
    each of its files checked first: readable, a step at each point, its precisions
    fractions from 0 to 1 and its epochs from 0, as the run logs them. A damaged file, or
    a point that is none of those (``nan``, 1.5, a line without its tab), is one line
    naming it, not a point skipped as if absent; so are steps that do not rise from one
    point to the next, or lie past the run's ``last`` step (its train.step)."""
    from ..curves import held_out_curve

    where = folder / "train" / "plots" / "metrics" / "held_out"
    # one held-out evaluation logs all three (training/monitoring.py HeldOut): each a file,
    # all of them or none (a curve gone would leave the run's figures unchecked, unsaid)
    files = {key: where / f"{key}.tsv" for key in ("precision_at_1", "precision_at_1_raw",
                                                   "epoch")}
    odd = next((p for p in files.values() if os.path.lexists(p) and not p.is_file()), None)
    if odd is not None:
        raise PipelineError(f"{odd}: not a regular file (a folder, FIFO, device or a broken "
                            f"link), where the run logs its held-out curve; {rerun}.")
    present = [key for key, p in files.items() if p.is_file()]
    if present and len(present) < len(files):
        gone = next(key for key in files if key not in present)
        raise PipelineError(f"{files[gone]}: missing beside {', '.join(f'{k}.tsv' for k in present)}"
                            f" (one held-out evaluation logs all three), so the curve is not "
                            f"the run's whole; {rerun}.")
    for key, what, most in (("precision_at_1", "a fraction from 0 to 1", 1.0),
                            ("precision_at_1_raw", "a fraction from 0 to 1", 1.0),
                            ("epoch", "the epochs trained, from 0", math.inf)):
        path = where / f"{key}.tsv"
        try:
            logged = read_curve(folder / "train", key, "held_out")
        except (OSError, ValueError) as exc:
            found = ("bytes that are not UTF-8 text" if isinstance(exc, UnicodeDecodeError)
                     else f"what cannot be read ({type(exc).__name__}: {str(exc)[:60]})")
            raise PipelineError(f"{path}: expected the run's held-out {key} (step<TAB>{key} "
                                f"per line, as the run writes them), found {found}; "
                                f"{rerun}.") from None
        if logged is None:
            continue
        if list(logged.columns) != ["step", key]:
            raise PipelineError(f"{path}: expected the header step<TAB>{key} (as the run "
                                f"writes it), found {'<TAB>'.join(map(str, logged.columns))[:60]}"
                                f"; {rerun}.")
        for column in ("step", key):  # a step at each point, and its figure
            values = pd.to_numeric(logged[column], errors="coerce")
            bad = logged[~((values >= 0) & (values <= (most if column == key else math.inf)))]
            if len(bad):
                said = "a whole step from 0" if column == "step" else what
                raise PipelineError(f"{path}: expected the run's held-out {key} at each step "
                                    f"it evaluated ({column}: {said}), found "
                                    f"{str(bad[column].iloc[0])[:20]} in row "
                                    f"{int(bad.index[0]) + 2}; {rerun}.")
        steps = pd.to_numeric(logged["step"]).tolist()
        # the run evaluates at rising steps up to its last (a resumed run's curves are cut
        # back to its step first)
        back = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
        past = next((i for i, v in enumerate(steps) if isinstance(last, int)
                     and not isinstance(last, bool) and v > last), None)
        if back is not None:
            raise PipelineError(f"{path}: expected the run's held-out {key} at rising steps, "
                                f"as the run evaluates, found step {steps[back]:g} after "
                                f"{steps[back - 1]:g} in row {back + 2}; {rerun}.")
        if past is not None:
            raise PipelineError(f"{path}: a point at step {steps[past]:g} (row {past + 2}), "
                                f"past the run's last step {last:,} (its train.step): not "
                                f"one of its evaluations; {rerun}.")
    # one evaluation writes a point to each file: the files hold the same steps (a point
    # missing from one, or moved, is a file edited or of another run)
    first = None
    for key in ("precision_at_1", "precision_at_1_raw", "epoch"):
        logged = read_curve(folder / "train", key, "held_out")
        if logged is None:
            continue
        steps = pd.to_numeric(logged["step"]).tolist()
        if first is None:
            first = (key, steps)
        elif steps != first[1]:
            extra = sorted(set(steps) ^ set(first[1]))
            said = (f"step {extra[0]:g} is in one of them only" if extra else
                    f"{len(steps)} points against {len(first[1])}")
            raise PipelineError(f"{where / f'{key}.tsv'}: expected its points at the steps of "
                                f"{where / f'{first[0]}.tsv'} (one held-out evaluation writes "
                                f"a point to each), found other steps ({said}); {rerun}.")
    try:
        return held_out_curve(folder / "train")
    except (OSError, ValueError, KeyError) as exc:  # files of different steps' kinds
        raise PipelineError(f"{where}: expected the run's held-out curves (step<TAB>metric "
                            f"per line, as the run writes them), found what cannot be read "
                            f"({type(exc).__name__}: {str(exc)[:60]}); {rerun}.") from None


def _refuse_other_final_evaluation(folder: Path, metrics: dict, rerun: str) -> None:
    """The run's own held-out evaluation of its last step (train.held_out, and its curve's
    point at that step) against the evaluation's figures: the same model on the same
    images; and its step against the one its provenance records. A copy whose figures
    were edited (the curves left as they were) states figures its own records contradict;
    one line naming the two."""
    step = metrics["train"].get("step")
    try:  # the run's own record of its length (a damaged one: the model card names it)
        steps = json.loads((folder / "train" / "provenance.json").read_text()).get("steps")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        steps = None
    if isinstance(steps, int) and steps != step:
        raise PipelineError(f"{folder / 'metrics.json'}: train.step is {step}, where "
                            f"{folder / 'train' / 'provenance.json'} records {steps} steps: "
                            f"the figures are not this run's; {rerun}.")
    held = metrics["train"].get("held_out")
    if "held_out_eval_seconds" in metrics["train"] and not isinstance(held, dict):
        # a run with held-out evaluations records the last one's figures beside their time
        raise PipelineError(f"{folder / 'metrics.json'}: train.held_out_eval_seconds without "
                            f"train.held_out, the figures of the run's last held-out "
                            f"evaluation, which every such run records; {rerun}.")
    said = {k: metrics["eval"].get(k) for k in ("precision_at_1", "precision_at_1_raw")}
    found = []
    if isinstance(held, dict):
        found += [(f"train.held_out.{k}", held.get(k), k) for k in said]
    curve = _held_out(folder, rerun, step)
    if curve is not None and isinstance(step, (int, float)):
        at = curve[curve["step"] == step]
        found += [(f"its held-out curve at step {int(step):,} ({k})", at[k].iloc[-1], k)
                  for k in said if k in at and len(at)]
    for what, value, key in found:
        ours = said[key]
        if isinstance(value, (int, float)) and isinstance(ours, (int, float)) \
                and math.isfinite(value) and abs(value - ours) > SAME_EVALUATION:
            raise PipelineError(f"{folder / 'metrics.json'}: eval.{key} is {ours:.4f}, where "
                                f"{what} is {value:.4f}: the same weights on the same "
                                f"images, so the figures are not this run's (edited, or two "
                                f"runs' records mixed); {rerun}.")


def _refuse_other_targets(folder: Path, metrics: dict, rerun: str) -> None:
    """train.time_to_target (when the averaged weights first reached each of eval.targets)
    against the held-out curve of the same evaluations (training/monitoring.py HeldOut
    times the targets on them): each target reached at the first point of the curve at or
    above it. A time moved or a target added that the curve contradicts is one line."""
    reached = metrics["train"].get("time_to_target")
    if not isinstance(reached, dict) or not reached:
        return
    curve = _held_out(folder, rerun, metrics["train"].get("step"))
    said = folder / "metrics.json"
    if curve is None:
        raise PipelineError(f"{said}: train.time_to_target times held-out precisions "
                            f"({', '.join(map(str, reached))}) the run's held-out curve "
                            f"(train/plots/metrics/held_out/) does not hold: the run writes "
                            f"both; {rerun}.")
    times = []  # (step, train_seconds, target)
    for target, at in reached.items():
        try:
            level, step = float(target), at["step"]
            if not _of_kind(step, (int,)):  # the run counts whole steps
                raise TypeError(step)
        except (TypeError, ValueError, KeyError):
            raise PipelineError(f"{said}: train.time_to_target.{str(target)[:20]} is "
                                f"{json.dumps(at)[:60]}, expected a precision reached at a "
                                f"step (the run's record); {rerun}.") from None
        first = curve[curve["precision_at_1"] >= level]["step"]
        if not len(first) or int(first.iloc[0]) != step:
            where = (f"first reaches it at step {int(first.iloc[0]):,}" if len(first)
                     else "never reaches it")
            raise PipelineError(f"{said}: train.time_to_target has {target} reached at step "
                                f"{step}, where the run's held-out curve {where}: one run "
                                f"records both, so the figures are not this run's; {rerun}.")
        # the run's training time when the target was reached: within its whole training
        # time (both count the sessions before a resume), and later for a later step
        seconds, total = at.get("train_seconds"), metrics["train"].get("train_seconds")
        epoch = at.get("epoch")
        if seconds is None or not (_of_kind(epoch, (int, float)) and math.isfinite(epoch)
                                   and epoch >= 0):
            raise PipelineError(f"{said}: train.time_to_target.{target} is "
                                f"{json.dumps(at)[:80]}, expected the step, epoch and "
                                f"train_seconds of the run's record (the report states all "
                                f"three); {rerun}.")
        if not (
                _of_kind(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0
                and (not _of_kind(total, (int, float)) or seconds <= total * (1 + 1e-9) + 1e-6)):
            raise PipelineError(f"{said}: train.time_to_target has {target} reached after "
                                f"{str(seconds)[:20]} s of training, where the run trained "
                                f"{total if _of_kind(total, (int, float)) else '?'} s in all "
                                f"(its train.train_seconds): one run records both, so the "
                                f"figures are not this run's; {rerun}.")
        times.append((step, seconds, target))
        if "epoch" in curve:
            logged = curve[curve["step"] == step]["epoch"].iloc[0]
            if not (_of_kind(epoch, (int, float)) and abs(float(epoch) - float(logged))
                    <= 1e-6 * max(1.0, abs(float(logged)))):
                raise PipelineError(f"{said}: train.time_to_target has {target} reached at "
                                    f"epoch {str(epoch)[:20]}, where the run's held-out "
                                    f"epoch.tsv gives {float(logged):g} at its step {step:,}: "
                                    f"one run records both, so the figures are not this "
                                    f"run's; {rerun}.")
    # one training clock: targets reached at one evaluation share its time, and a later
    # evaluation comes after more training (its steps took time)
    times.sort(key=lambda t: (t[0], t[1]))
    for (s0, t0, a0), (s1, t1, a1) in zip(times, times[1:]):
        if (s0 == s1 and t0 != t1) or (s0 < s1 and t1 <= t0):
            raise PipelineError(f"{said}: train.time_to_target has {a0} reached at step "
                                f"{s0:,} after {t0:g} s and {a1} at step {s1:,} after "
                                f"{t1:g} s: one run's training clock gives "
                                f"{'one time at one step' if s0 == s1 else 'a later step a later time'}"
                                f", so the figures are not this run's; {rerun}.")
    # the speed curve times the windows of steps from one log line to the next, held-out
    # evaluations inside them (training/monitoring.py), all within the training clock: a
    # target's time is at least the windows before its step less every evaluation's time
    # (a resume may count part of one window twice: room for that)
    windows = _logged_windows(folder, rerun)
    evals = metrics["train"].get("held_out_eval_seconds", 0)
    if windows is None or not (_of_kind(evals, (int, float)) and math.isfinite(evals)):
        return
    for step, seconds, target in times:
        before = sum(t for s, t in windows if s <= step)
        least = before * (1 - WINDOW_ROOM) - evals - 10.0
        if seconds < least:
            raise PipelineError(f"{said}: train.time_to_target has {target} reached at step "
                                f"{step:,} after {seconds:g} s of training, where the run's "
                                f"speed curve (train/plots/metrics/train/examples_per_sec.tsv) "
                                f"logs {before:,.0f} s of steps up to it, of which its held-out "
                                f"evaluations took at most {evals:,.0f} s: one run records "
                                f"both, so the figures are not this run's; {rerun}.")


# a resumed run's first window counts the steps from the log line before its checkpoint
WINDOW_ROOM = 0.05


def _logged_windows(folder: Path, rerun: str) -> Optional[list[tuple[int, float]]]:
    """(step, seconds) of each window of steps the run's speed curve logs: the steps since
    the line before, times the global batch (variant.json) over the examples/sec logged;
    None where the run logged no speed curve. A curve or batch not as the run writes them
    (steps out of order, a speed that is no positive number, no batch) is one line: the
    times it bounds would go unchecked."""
    path = folder / "train" / "plots" / "metrics" / "train" / "examples_per_sec.tsv"
    if os.path.lexists(path) and not path.is_file():  # never read as absent (nor waited on)
        raise PipelineError(f"{path}: not a regular file (a folder, FIFO, device or broken "
                            f"link), where the run logs its speed curve; {rerun}.")
    try:
        curve = read_curve(folder / "train", "examples_per_sec", "train")
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{path}: cannot be read as the run's speed curve "
                            f"({type(exc).__name__}: {str(exc)[:60]}); {rerun}.") from None
    if curve is None:
        return None
    try:
        variant = json.loads(read_small_file(folder / "variant.json", 1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        variant = None  # damaged or missing: said where variant.json is read as a whole
    batch = variant.get("global_batch_size") if isinstance(variant, dict) else None
    if isinstance(variant, dict) and not (_of_kind(batch, (int,)) and batch > 0):
        raise PipelineError(f"{folder / 'variant.json'}: global_batch_size is "
                            f"{json.dumps(batch)[:40] if 'global_batch_size' in variant else 'missing'}"
                            f", where the run writes its global batch (a whole number from 1), "
                            f"by which its speed curve times its steps; {rerun}.")
    if batch is None:
        return None
    if list(curve.columns) != ["step", "examples_per_sec"]:
        raise PipelineError(f"{path}: expected the header step<TAB>examples_per_sec (as the "
                            f"run writes it), found {'<TAB>'.join(map(str, curve.columns))[:60]}; "
                            f"{rerun}.")
    if curve.empty:  # the run writes the header with its first speed
        raise PipelineError(f"{path}: a header and no speed, where the run logs one at each "
                            f"log line; {rerun}.")
    rows = curve.drop_duplicates("step", keep="last")  # a resume's steps logged again
    steps, speeds = rows["step"].tolist(), rows["examples_per_sec"].tolist()
    odd = next((f"step {str(s)[:20]}" for s in steps if not (_of_kind(s, (int,)) and s >= 1)),
               None) or next((f"speed {str(v)[:20]}" for v in speeds if not (
                   _of_kind(v, (int, float)) and math.isfinite(v) and v > 0)), None)
    if odd is None and steps != sorted(steps):
        later = next(a for a, b in zip(steps, steps[1:]) if b < a)
        odd = f"step {later} before a step below it"
    if odd is not None:
        raise PipelineError(f"{path}: {odd}, where the run logs its examples/sec at rising "
                            f"whole steps, each a positive number; {rerun}.")
    return [(s, (s - prev) * batch / v) for s, prev, v in zip(steps, [0, *steps], speeds)]


def _record(path: Path, keys: tuple, variant: Optional[str] = None) -> dict:
    """A variant's JSON record (metrics.json, variant.json, provenance.json), with ``keys``;
    else one line naming the file and the stage that writes it again (``variant``: its
    name, where the file is not in the variant's own folder)."""
    rerun = f"`dvc repro -f reports/dvc.yaml:ablation@{variant or _variant_name(path.parent)}`"
    try:
        value = loads_once(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PipelineError(f"{path}: cannot be read as JSON ({type(exc).__name__}: "
                            f"{str(exc)[:80]}); expected the record the variant's stage "
                            f"writes: rerun it ({rerun})") from None
    missing = [k for k in keys if not isinstance(value, dict) or k not in value]
    if missing or not isinstance(value, dict):
        with_keys = f" with {', '.join(keys)}" if keys else ""
        raise PipelineError(f"{path}: expected a record{with_keys}, found "
                            f"{'no ' + missing[0] if isinstance(value, dict) else 'a ' + type(value).__name__}; "
                            f"rerun the variant ({rerun})")
    return value


def _numbers_only(path: Path, metrics: dict) -> None:
    """Every figure of a metrics.json (its train and eval records, nested ones included) is
    a real number, as the stage writes them: a string or a bool there would reach the
    report's formats (``:.1f``) as a traceback; one line naming the file and the key."""
    def walk(value, key: str, expected: str = "a number") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        elif (isinstance(value, bool) or not isinstance(value, (int, float))
              or expected != "a number"):
            found = json.dumps(value) if isinstance(value, (str, bool, type(None))) \
                else f"a {type(value).__name__}"
            raise PipelineError(f"{path}: {key} is {found[:40]}, expected {expected}; rerun "
                                f"the variant (`dvc repro -f "
                                f"reports/dvc.yaml:ablation@{_variant_name(path.parent)}`)")

    for section in ("train", "eval"):
        walk(metrics[section], section, "a record of numbers")


# what the ablation stage writes in a variant.json, by kind: a key of another kind would
# reach the report's tables and formats (a name as a number, a batch size as a string)
_VARIANT_KINDS = {**dict.fromkeys(("variant", "dataset", "device", "device_type", "schedule",
                                   "shuffle", "head", "output"), (str,)),
                  **dict.fromkeys(("world_size", "global_batch_size", "batch_size", "seed",
                                   "num_train"), (int,)),
                  "min_fraction_of_examples_in_queue": (int, float), "lrn": (bool,)}


def _typed(path: Path, record: dict) -> None:
    """Each key of a variant.json of the kind the stage writes (keys it does not know are
    left to the report's readers); one line naming the file, the key and what was found."""
    for key, kinds in _VARIANT_KINDS.items():
        value = record.get(key)
        if key not in record or _of_kind(value, kinds):
            continue
        found = json.dumps(value)[:40] if isinstance(value, (str, bool, int, float, type(None))) \
            else f"a {type(value).__name__}"
        expected = {(str,): "a string", (int,): "a whole number",
                    (bool,): "true or false"}.get(kinds, "a number")
        raise PipelineError(f"{path}: {key} is {found}, expected {expected}; rerun the variant "
                            f"(`dvc repro -f reports/dvc.yaml:ablation@"
                            f"{_variant_name(path.parent, record)}`)")


# what the report reads of a training run's provenance.json, by kind (None: not recorded)
_PROVENANCE_KINDS = {"commit": (str, type(None)), "dirty": (bool,), "device": (str,),
                     "data_hash": (str,), "steps": (int,), "world_size": (int,),
                     "cpu_load": (list, type(None)), "segments": (list, type(None))}
_SEGMENT_KINDS = {"from_step": (int,), "to_step": (int,), "wall_time_s": (int, float, type(None)),
                  "device": (str, type(None)), "commit": (str, type(None)),
                  "ended_utc": (str, type(None))}


def load_provenance(root: Path, name: str) -> Optional[dict]:
    """A variant's provenance.json (written by its training run), or None (older results)."""
    path = Path(root) / name / "train" / "provenance.json"
    if not path.is_file():
        return None
    # a damaged one (cut short, another shape, a value of another kind) is one line naming
    # it, as the other records
    record = _record(path, ("device", "data_hash"), name)
    segments = record.get("segments") if isinstance(record.get("segments"), list) else []
    wrong = [(key, record.get(key)) for key, kinds in _PROVENANCE_KINDS.items()
             if key in record and not _of_kind(record[key], kinds)]
    wrong += [(f"segments[{i}]", seg) for i, seg in enumerate(segments)
              if not isinstance(seg, dict) or not {"from_step", "to_step"} <= set(seg)]
    wrong += [(f"segments[{i}].{key}", seg[key]) for i, seg in enumerate(segments)
              if isinstance(seg, dict) for key, kinds in _SEGMENT_KINDS.items()
              if key in seg and not _of_kind(seg[key], kinds)]
    load = record.get("cpu_load")
    if isinstance(load, list) and not (len(load) == 3 and all(
            _of_kind(v, (int, float)) for v in load)):
        wrong.append(("cpu_load", load))
    if wrong:
        key, value = wrong[0]
        raise PipelineError(f"{path}: {key} is {json.dumps(value)[:40]}, not of the kind the "
                            f"training run writes; rerun the variant (`dvc repro -f "
                            f"reports/dvc.yaml:ablation@{name}`)")
    return _device_read(record)


def _of_kind(value, kinds: tuple) -> bool:
    """``value`` of one of ``kinds``, a bool counting only where bool is named."""
    return isinstance(value, kinds) and (not isinstance(value, bool) or bool in kinds)


def device_text(device: str, processes: int = 1) -> str:
    """A recorded machine as the report and the model card show it, with the number of
    processes of a torchrun job; records written before the device text had a singular
    say "1 threads"."""
    text = re.sub(r"\b1 threads\b", "1 thread", device)
    return f"{text}, x {processes} processes" if processes > 1 else text


def _device_read(record: dict) -> dict:
    """A provenance record with its machine texts (its own and its segments') as shown."""
    processes = int(record.get("world_size") or 1)
    for rec in [record, *(record.get("segments") or [])]:
        if isinstance(rec.get("device"), str):
            rec["device"] = device_text(rec["device"], processes)
    return record


def load_curve(root: Path, name: str, metric: str = "loss_avg",
               group: str = "train") -> Optional[pd.DataFrame]:
    """A DVCLive curve of variant ``name`` under ``root`` (None if it was not logged)."""
    return read_curve(Path(root) / name / "train", metric, group)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines)


def plot(path: Path, figsize: tuple, draw: Callable, title: str, xlabel: Optional[str],
         ylabel: str, legend: bool = False, grid_axis: str = "both") -> bool:
    """One PNG: ``draw(ax)`` on a fresh figure, then the shared axis set-up. Returns False,
    and writes (and leaves) no file, when ``draw`` drew nothing: no blank plots."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    draw(ax)
    if not ax.has_data():
        plt.close(fig)
        return False
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    ax.grid(axis=grid_axis, alpha=0.3)
    save_figure_atomic(fig, path, dpi=100, bbox_inches="tight")
    return True


def marker(points: int) -> Optional[str]:
    """A series of few points is drawn with a marker at each (a line alone hides them)."""
    return "o" if points <= 25 else None


# Under this many steps per exercise variant the report withholds its answers: the
# averages have barely started (window ~ steps / 9) and the loss still falls fast.
MIN_STEPS = 2000
REPRODUCTION = "tutorial_100k"  # the variant that runs the tutorial at its own budget
# The variants the report's sections compare, each section naming its own: a variant of
# any other name (a user's) is in no exercise's table and gets a section of its own
# ("Your variants"), whatever it changes. A variant that changes only the seed counts
# among the seed runs under any name, and one named schedule_* among the schedules of the
# time-to-accuracy section (a longer or shorter `fast` run is a point of its search).
TUTORIAL_VARIANTS = ("baseline", "baseline_seed1", "baseline_seed2", REPRODUCTION, "softmax",
                     "local_head", "queue_fill_10pct", "queue_fill_1pct", "queue_fill_0pct",
                     "devices_2x64", "no_lrn", "precision_bf16")
SCHEDULES = "schedule_"


@dataclass
class Results:
    """What every section reads: the variants' metrics and where tables and plots go.

    ``exercises`` are the variants at the shared budget (ablation.max_steps), precision
    checks aside; ``timed`` those with a budget of their own and a held-out curve (the schedule pair and the 100K-step
    reproduction), ``seeds`` the baseline and the variants that change only its seed."""

    df: pd.DataFrame  # every variant
    exercises: pd.DataFrame
    timed: pd.DataFrame
    root: Path
    tables: Path
    plots: Path
    seeds: pd.DataFrame = None
    yours: pd.DataFrame = None  # the variants of no section of the tutorial's
    overrides: dict = None  # each variant's overrides of the baseline (reports/params.yaml)
    not_run: tuple = ()  # variants of reports/params.yaml `ablations:` without results
    trial_steps: Optional[int] = None  # reports/params.yaml ablation.trial_steps: a trial's cap
    unchecked: Optional[str] = None  # why the results could not be checked against DVC
    baseline_values: Optional[dict] = None  # the baseline's sections (reports/params.yaml)

    @property
    def base(self):
        return self.df.loc["baseline"] if "baseline" in self.df.index else None

    @property
    def reproduction(self):
        return self.df.loc[REPRODUCTION] if REPRODUCTION in self.df.index else None

    def has(self, name: str) -> bool:
        return name in self.df.index

    @property
    def withheld(self) -> bool:
        return bool(len(self.exercises)) and int(self.exercises["steps"].min()) < MIN_STEPS

    def answer(self, text: str) -> str:
        """``*Answer:* text``, or a withheld answer under the minimum budget."""
        if self.withheld:
            return (f"*Answer withheld:* the variants ran fewer than {MIN_STEPS:,} steps "
                    f"(see the banner at the top); the table shows what was measured.")
        return f"*Answer:* {text}"

    def spread(self, column: str, scale: float = 1.0) -> Optional[float]:
        """Max - min of ``column`` over the seed runs (None with fewer than 2)."""
        if self.seeds is None or len(self.seeds) < 2 or column not in self.seeds:
            return None
        return scale * float(self.seeds[column].max() - self.seeds[column].min())

    def noise(self, effect: float, column: str, scale: float = 100.0, unit: str = "points",
              fmt: str = ".1f", of: str = "") -> str:
        """How ``effect`` (in ``scale`` units of ``column``) compares with the seed spread;
        ``of``: what spreads, when not precision (e.g. " in examples/sec")."""
        band = self.spread(column, scale)
        if band is None:
            return "(no seed runs to compare it with: whether it exceeds seed noise is unknown)"
        n = len(self.seeds)
        amount = f"{band:{fmt}}%" if unit == "%" else f"{band:{fmt}} {unit}"
        if abs(effect) <= band:
            return (f"(**not distinguishable from seed noise**: {n} seeds of the baseline "
                    f"spread over {amount}{of})")
        return f"(beyond the {amount.replace(' ', '-')} spread{of} of {n} seeds of the baseline)"


def make_results(df: pd.DataFrame, overrides: dict[str, dict], root: Path, out: Path,
                 not_run: list[str] = (), trial_steps: Optional[int] = None,
                 unchecked: Optional[str] = None) -> Results:
    """Sort the variants: the tutorial's (:data:`TUTORIAL_VARIANTS`, by name) by their
    budget and purpose, from their params overrides, and the rest (``yours``); ``not_run``:
    the variants of ``overrides`` that have no results; ``trial_steps``: the cap of a trial."""
    seeds = [n for n in df.index if n == "baseline" or overrides.get(n) and
             overrides[n] == {"train": {"seed": overrides[n].get("train", {}).get("seed")}}]
    ours = [n for n in df.index
            if n in TUTORIAL_VARIANTS or n.startswith(SCHEDULES) or n in seeds]
    tutorial = df.loc[ours]
    own = [n for n in ours if {"max_steps", "max_epochs"} & set(overrides.get(n, {}).get("train", {}))]
    # timed: evaluated on the held-out split while training (a run that reached no target
    # has no time_to_target at all; older metrics files hold an empty dict)
    timed = df.loc[[n for n in own if pd.notna(df.loc[n].get("train_seconds", float("nan")))]]
    # a variant that changes only the arithmetic's precision is a check of it (the report's
    # bf16 section), not an exercise: it stays out of the exercises' tables and plots
    checks = [n for n in ours if "precision" in overrides.get(n, {}).get("train", {})]
    return Results(df, tutorial.drop(index=[n for n in ours if n in own or n in checks]), timed,
                   root, out / "tables", out / "plots", df.loc[seeds],
                   df.loc[[n for n in df.index if n not in ours]], dict(overrides),
                   tuple(not_run), trial_steps, unchecked)


def banner(r: Results) -> list[str]:
    """Results no DVC stage could vouch for (:func:`refuse_stale_results`' note), then what
    capped the runs, when it makes the report a trial or too short to answer."""
    unchecked = ([f"> **Unchecked.** {r.unchecked[0].upper()}{r.unchecked[1:]}: the figures "
                  f"below are what those files say.", ""] if r.unchecked else [])
    return unchecked + _capped(r)


def _capped(r: Results) -> list[str]:
    short = (f"fewer than the {MIN_STEPS:,} steps below which this report draws no conclusions "
             f"(the moving averages and the loss have barely started). The tables show what "
             f"was measured; every answer is withheld. ")
    if r.trial_steps is not None:
        images = int(r.df["num_examples"].max())
        return [f"> **A trial.** `ablation.trial_steps: {r.trial_steps}` capped every variant "
                f"at {r.trial_steps:,} steps, those with a budget of their own included, and "
                f"each was evaluated on {images:,} held-out images "
                f"(`ablation.trial_eval_images`){'; its steps are ' + short if r.withheld else '. '}"
                f"For the full runs set it back to null: `dvc exp run -S "
                f"reports/params.yaml:ablation.trial_steps=null reports/dvc.yaml:report`.", ""]
    if not r.withheld:
        return []
    return [f"> **Too short to answer.** The exercise variants ran "
            f"{int(r.exercises['steps'].min()):,} steps, {short}"
            f"Raise `ablation.max_steps` (reports/params.yaml) and rerun "
            f"`dvc repro reports/dvc.yaml`.", ""]


def provenance_section(r: Results, equivalence: Optional[Path] = None) -> list[str]:
    """Which code, data and budget made each variant; in words when they differ. Variants
    made at different commits count as made by one training code when ``equivalence`` (the
    record of :mod:`.equivalence`) joins those commits by bit-identical checks."""
    rows, found = [], {}
    for name in r.df.index:
        p = load_provenance(r.root, name)
        steps = f"{int(r.df.loc[name, 'steps']):,}"
        if p is None:
            rows.append([name, "not recorded", "", steps, ""])
            continue
        found[name] = p
        commit = ((p["commit"][:10] if p.get("commit") else "outside git")
                  + (" + changes" if p.get("dirty") else ""))
        rows.append([name, commit, p["data_hash"][:12], steps, p["device"]])
    t = pd.DataFrame(rows, columns=["variant", "commit", "data", "steps", "device"])
    md = ["## How these results were made", "", markdown_table(t), ""]
    notes = []
    if r.not_run:
        names = ", ".join(f"`{n}`" for n in r.not_run)
        total = len(r.df) + len(r.not_run)
        one = len(r.not_run) == 1
        notes.append(f"{len(r.not_run)} of the {total} variants of reports/params.yaml `ablations:` "
                     f"{'has' if one else 'have'} no results (not run): {names}. "
                     f"{'Its section says' if one else 'Their sections say'} so; run "
                     f"{'it' if one else 'them'} with `dvc repro reports/dvc.yaml`.")
    if len(found) < len(r.df):
        notes.append(f"{len(r.df) - len(found)} of {len(r.df)} variants have no provenance "
                     f"record (made by an older version of the code): which code made them "
                     f"is unknown.")
    code = _code_note(found, equivalence)
    if code and not code.startswith("made by"):
        notes.append(code)
    data = {p.get("data_hash") for p in found.values()}
    if len(data) > 1:
        notes.append(f"The variants were made by {len(data)} different prepared data sets.")
    if r.exercises["steps"].nunique() > 1:
        notes.append(f"The exercise variants ran at {r.exercises['steps'].nunique()} different "
                     f"budgets (steps); compare them with care.")
    machines = sorted({machine_of(p.get("device")) for p in found.values()})
    where = (f" The variants ran on {len(machines)} different machines ({', '.join(machines)}): "
             f"speeds are compared only within one machine, and the same training rounds "
             f"differently on another machine's kernels." if len(machines) > 1 else "")
    if notes:
        return md + [" ".join(["**Not made in one piece.**", *notes]) + where, ""]
    return md + [f"All variants were {code or 'made by one commit'}, on the same data; the "
                 f"exercises at one budget.{where}", ""]


def _code_note(found: dict, equivalence: Optional[Path]) -> str:
    """'' for one clean commit; 'made by ...' when several commits train bit-identically by
    the record; otherwise why the code is not one (a note for the report's header)."""
    from .equivalence import load_record, same_training

    commits = {p.get("commit") for p in found.values()}
    dirty = any(p.get("dirty") for p in found.values())
    if len(commits) <= 1 and not dirty:
        return ""
    n = len({(p.get("commit"), p.get("dirty")) for p in found.values()})
    if dirty or None in commits:
        which = ("one commit of the code" if len(commits - {None}) == 1 and None not in commits
                 else f"{len(commits - {None})} commits of the code" if None not in commits
                 else "code outside git")
        return (f"The variants were made by {which}, some of them with uncommitted changes, "
                f"so not all by committed code." if dirty else
                f"The variants were made by {which}, some of them outside git.")
    record = load_record(equivalence) if equivalence is not None else []
    if same_training(commits, record):
        return (f"made by {n} commits of the code whose training was checked bit-identical "
                f"(the fixed-seed pair of the CI's real configuration gives the same weights "
                f"and averages at each; `{in_repository(equivalence)}`)")
    return (f"The variants were made by {n} different commits of the code, not checked to "
            f"train alike (`python devtools/equivalence.py OLD NEW` checks two).")


def speed_ratio(r: Results, ratio: float, variant=None) -> str:
    """A speed ratio against the baseline (``1.25x``), weighed against the seeds' spread of
    speed (the seeds do identical work: their spread is the timing noise of this machine).
    A variant timed on another machine than the baseline and its seeds gets no ratio at all,
    only why."""
    rows = [row for _, row in r.seeds.iterrows()] if r.seeds is not None else [r.base]
    machines = {machine_of(v.device) for v in [*rows, variant] if v is not None}
    if len(machines) > 1:
        return (f"**not comparable**, the runs were timed on {len(machines)} different "
                f"machines ({', '.join(sorted(machines))}) and speeds compare only within one")
    base = r.base.examples_per_sec if r.base is not None else 1.0
    return f"{ratio:.2f}x " + r.noise(100 * (ratio - 1), "examples_per_sec", scale=100 / base,
                                      unit="%", fmt=".0f", of=" in examples/sec")


def in_repository(path: Path) -> str:
    """``path`` as the report names it: from the root of the repository it lies in, so
    that the report reads the same wherever it was run from (else as given)."""
    from ..ownership import repository_root

    real = Path(path).resolve()
    root = repository_root(real)
    return real.relative_to(root).as_posix() if real.is_relative_to(root) else str(path)


def machine_of(device: str) -> str:
    """The CPU model or GPU of a variant's device description ('AMD EPYC, 1 threads')."""
    return str(device).split(",")[0]


# what a variant.json records (the ablation stage writes it from the variant's params), by
# the params key that sets it
RECORDED = {"schedule": ("train", "schedule"), "batch_size": ("train", "batch_size"),
            "seed": ("train", "seed"), "shuffle": ("input", "shuffle"),
            "min_fraction_of_examples_in_queue": ("input", "min_fraction_of_examples_in_queue"),
            "head": ("model", "head"), "output": ("model", "output"), "lrn": ("model", "lrn"),
            "dataset": ("data", "dataset")}


STATUS_TIMEOUT = 600  # seconds `dvc status` of the variants may take (a few on any checkout)


def dvc_status(root: Path, targets: list[str], shown: str, unknown: str):
    """`dvc status TARGETS --json` in the repository ``root``: the process and its answer.
    Bounded (:data:`STATUS_TIMEOUT`: DVC reading a FIFO among its inputs waits for ever);
    no answer, or a failure, is one line naming ``shown`` (the command as the user would
    type it), DVC's cause and the fix, and what cannot be told (``unknown``)."""
    import subprocess

    from ..cli import dvc_executable

    # the files DVC reads first: one that is no file (a FIFO) would hold it to the timeout
    for name in ("dvc.yaml", "dvc.lock", "params.yaml", "reports/dvc.yaml",
                 "reports/dvc.lock", "reports/params.yaml"):
        at = Path(root) / name
        if os.path.lexists(at) and not at.is_file():
            raise PipelineError(f"{at}: not a regular file (a folder, FIFO, device or broken "
                                f"link), where DVC reads the pipeline's {name.rsplit('/', 1)[-1]}"
                                f"; restore it (`git checkout -- {name}`): {unknown} cannot be "
                                f"told. Nothing was written.")
    try:
        # ended with this command, however it ends: DVC waiting on a mount that does not
        # answer would otherwise hold the repository's lock after it
        proc = subprocess.run([dvc_executable(), "status", *targets, "--json"],
                              capture_output=True, text=True, cwd=root, timeout=STATUS_TIMEOUT,
                              preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise PipelineError(f"`{shown}` gave no answer in {STATUS_TIMEOUT} s (a FIFO or a hung "
                            f"mount among its params, code or results?): {unknown} cannot be "
                            f"told; run it by hand to see where it waits. Nothing was "
                            f"written.") from None
    try:
        status = json.loads(proc.stdout) if proc.returncode == 0 else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        # the cause first (an ERROR line, or "'reports/dvc.lock' is invalid."), then
        # context (a YAML line number); warnings before it are not the cause
        said = next((line for line in lines if line.startswith("ERROR")),
                    next((line for line in lines if not line.startswith("WARNING")),
                         "(nothing)"))
        # "... is busy, it is being blocked by:" and who; "... validation failed." and
        # which key; "... is invalid." and where: the line below says what, the quoted
        # file lines ("4 │ cmd: ...") do not
        below = [line for line in lines[lines.index(said) + 1:]
                 if "│" not in line and not line.startswith(("Having any troubles", "WARNING"))
                 ][:1] if said in lines else []
        said = " ".join([said[:200], *below])[:300]
        fix = ("DVC needs git here: `git init` (or `dvc config --local core.no_scm true` in "
               "a copy without git), then rerun" if "not a git repository" in said
               else "another DVC command is running here: rerun once it is done"
               if "is busy" in said or "Unable to acquire lock" in said
               else "fix what it names and rerun")
        raise PipelineError(f"`{shown}` failed (exit {proc.returncode}: {said}): {unknown} "
                            f"cannot be told; {fix}. Nothing was written.")
    return proc, status


def refuse_stale_results(results: Path, dvc_yaml: Path = Path("reports/dvc.yaml"),
                         only: Optional[str] = None,
                         params: Optional[Path] = None) -> Optional[str]:
    """Results are reported (the report, a results page, a model card) as the variants'
    definitions as they are now. DVC says which are not (`dvc status --with-deps`): a
    variant with results in ``results`` (``only``: that one) whose params, deps or command
    changed, or whose recorded outputs were changed, since DVC recorded it, or upstream of
    which a stage changed (the data's URL: `dvc repro` would download, prepare and rerun
    it), stops the command in one line; by hand, and under `dvc repro` too
    (`--single-item` runs the report without the variants before it). A recorded result
    deleted counts (they are kept in git: a clone has them). Results of a stage DVC never
    recorded (run by hand, a lock without it) are refused too, naming how to record them:
    nothing says what they are of. A `dvc status` that fails is one line too, as nothing
    it would have said can be vouched for. ``params``: the variants' definitions the
    command states (the report's --params): each must be the one DVC checked against.

    The repository is the one ``results`` lies in, else the working folder's (``dvc_yaml``:
    relative to its root). Only the ablation stages' own folder there can be checked:
    for any other (a copy, a backup) this returns a note saying so, which the command
    shows where it states the results; so it does where no DVC repository records them."""
    import yaml

    from ..ownership import repository_at, dvc_root, repository_root, stage_paths

    _refuse_unreadable_or_renamed(Path(results))
    # the repository the results lie in: where they resolve (a link to another checkout's
    # results is judged there), else along the path as given (a folder of the project
    # linked to another disk), else the working folder's
    root = repository_at(Path(results).resolve()) or repository_root(Path(results))
    unchecked = (f"the results in {results} were not checked against the variants' "
                 f"definitions as they are now: ")
    if not (root / dvc_yaml).is_file():
        return unchecked + "no DVC pipeline here records them"
    lock = (root / dvc_yaml).with_suffix(".lock")
    if dvc_root(root) is None:  # nothing recorded, unless a lock says otherwise
        if lock.exists():
            raise PipelineError(f"{root}: {dvc_yaml.with_suffix('.lock')} records the variants, "
                                f"but .dvc/ is gone, so DVC cannot say whether the results in "
                                f"{results} are of their definitions as they are now; restore "
                                f"it (`git checkout -- .dvc`, or `dvc init`), then rerun. "
                                f"Nothing was written.")
        return unchecked + f"no DVC repository records them ({root} has no .dvc/)"
    from ..cli import pipeline_stages

    # the variants' stages alone: under `dvc repro` the report stage's own outputs are
    # locked for writing, and a status of the whole pipeline would wait on them
    groups = [g for g in ("ablation", "dataset_ablation") if g in pipeline_stages(root / dvc_yaml)]
    if not groups:
        return unchecked + f"{dvc_yaml} has no ablation stages"
    _refuse_misplaced_sections(root, dvc_yaml)
    pipelines = tuple(root / p for p in ("dvc.yaml", str(dvc_yaml)))
    outputs, reads = stage_paths(pipelines)
    # the folder the stages write each variant's results into (reports/ablations): a
    # copy elsewhere, or a folder of another name in it, is no stage's to ask DVC of
    # (the folder of each variant's metrics.json: a data-set variant's data is no result)
    theirs = {Path(os.path.normpath(Path(*o.parts[:at])))
              for stage, o in outputs if stage.split("@")[0] in groups and "${" in str(o)
              for at in [next(i for i, part in enumerate(o.parts) if "${" in part)]
              if o.parts[at + 1:] == ("metrics.json",)}
    if Path(results).resolve() not in {t.resolve() for t in theirs}:
        shown = ", ".join(sorted(in_repository(t) for t in theirs)) or "none"
        return unchecked + f"they are not the ablation stages' folder ({shown})"
    proc, status = dvc_status(root, [f"{dvc_yaml}:{g}" for g in groups] + ["--with-deps"],
                              f"dvc status --with-deps {dvc_yaml}", f"whether the results in "
                              f"{results} are of their definitions as they are now")
    frozen = [line for line in proc.stderr.splitlines() if "is frozen" in line]
    if frozen:  # DVC says nothing of a frozen stage's deps: never silently
        import sys

        print(f"note: {len(frozen)} of the variants' stages are frozen (`frozen: true` in "
              f"{dvc_yaml}), and DVC does not check what they depend on: their results in "
              f"{results} are read as they are, unchecked", file=sys.stderr)
    # the stages DVC recorded: it calls every dep of one it never ran "modified"
    try:
        locked = yaml.safe_load(lock.read_text(encoding="utf-8"))
        recorded = set((locked or {}).get("stages") or {})
    except FileNotFoundError:
        recorded = set()
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError) as e:
        raise PipelineError(f"{(root / dvc_yaml).with_suffix('.lock')}: expected DVC's "
                            f"lock file, found one that cannot be read ({str(e)[:120]}); "
                            f"restore it (`git checkout -- {dvc_yaml.with_suffix('.lock')}`). "
                            f"Nothing was written.") from None
    if only is not None and (Path(results) / only / "metrics.json").is_file():
        _refuse_undefined(root / dvc_yaml.parent / "params.yaml", only, results)
    if params is not None:
        _refuse_other_definitions(Path(params), root / dvc_yaml.parent / "params.yaml", results)
    # a dep DVC calls deleted: data a clone has not pulled (an output of a stage) says
    # nothing of the results; code or a file kept in git deleted is code changed
    data = [Path(os.path.normpath(root / path)) for _, path in outputs]

    def pulled(dep: str) -> bool:
        at = Path(os.path.normpath(root / dep))
        return any(at == d or d in at.parents for d in data if "${" not in str(d))

    def changed(changes, folder: Optional[Path]) -> list[str]:
        """What of a stage's status says its results are not of it as it is now."""
        what = []
        for change in changes if isinstance(changes, list) else []:
            if change in ("changed command", "changed checksum"):  # the stage's definition
                what.append(f"its stage's {change.split()[1]} changed")
            if not isinstance(change, dict):
                continue
            # a params file's keys (a dict); a file modified, or deleted but for data not
            # pulled ("new": never recorded); an output changed since
            what += [f"{dep} {', '.join(f'{k} {v}' for k, v in how.items())}"
                     if isinstance(how, dict) else f"{dep} {how}"
                     for dep, how in (change.get("changed deps") or {}).items()
                     if isinstance(how, dict) or how == "modified"
                     or (how == "deleted" and not pulled(dep))]
            if folder is None:  # a stage upstream: its outputs are data a clone may lack
                continue
            # a recorded result edited, or deleted (in git: not a clone's missing data)
            what += [f"{out} {how}" for out, how in (change.get("changed outs") or {}).items()
                     if how == "modified" or (how == "deleted" and
                                             (root / out).resolve().is_relative_to(folder.resolve()))]
        return what

    # the stages upstream of the variants that changed (`dvc repro` would rerun them, and
    # the variants after them): each variant reading what they make, directly or not. Only
    # a stage its lock records: DVC calls every dep of one never run "modified" (a clone's
    # download, whose data came with the variants' results or was never fetched)
    upstream = {name: what for stage, changes in status.items()
                for name in [stage.rpartition(":")[2]]
                if name.partition("@")[0] not in ("ablation", "dataset_ablation")
                and _recorded(root, stage)
                for what in [changed(changes, None)] if what}
    made = {}
    for stage, output in outputs:
        made.setdefault(stage, []).append(Path(os.path.normpath(root / output)))
    tainted = set(upstream)
    while True:  # what reads a tainted stage's output is tainted (download -> preprocess ...)
        more = {stage for stage, dep in reads if stage not in tainted and any(
            Path(os.path.normpath(root / dep)) == o or o in Path(os.path.normpath(root / dep)).parents
            for t in tainted for o in made.get(t, []))}
        if not more:
            break
        tainted |= more
    first_upstream = next(iter(upstream.items()), None)

    stale, unrecorded = {}, []
    for stage, changes in status.items():
        name = stage.rpartition(":")[2]
        group, at, variant = name.partition("@")
        folder = Path(results) / variant
        # a variant with results; or a recorded one whose results were deleted, some or all
        # (kept in git: "not run" it is not)
        if group not in ("ablation", "dataset_ablation") or not at \
                or (only is not None and variant != only) \
                or not ((folder / "metrics.json").is_file() or name in recorded):
            continue
        if name not in recorded:  # DVC calls each dep of it "modified": nothing to judge by
            unrecorded.append(name)
            unrecorded.sort()
            continue
        what = changed(changes, folder)
        if what:
            stale.setdefault(variant, []).extend(what)
    # a stage upstream changed: every recorded variant with results reading what it makes,
    # whether or not DVC lists the variant itself (its own deps as they are on disk are
    # unchanged until the stages before it rerun)
    for folder in sorted(Path(results).iterdir()) if first_upstream is not None else []:
        for group in groups:
            name = f"{group}@{folder.name}"
            if (only is None or folder.name == only) and (folder / "metrics.json").is_file() \
                    and name in recorded and (name in tainted or group in tainted):
                stale.setdefault(folder.name, []).append(
                    f"upstream, {first_upstream[0]}: {first_upstream[1][0]}")
    # the data set the main pipeline prepares now (params.yaml data.dataset) against the
    # one each of the ablation group's variants records (variant.json): a clone's download
    # and preprocess are never recorded (their lock is the user's), so DVC cannot say so
    asked = _dataset_asked(root)
    for folder in sorted(Path(results).iterdir()) if asked is not None else []:
        name = f"ablation@{folder.name}"
        if (only is None or folder.name == only) and name in recorded \
                and (folder / "variant.json").is_file() and (folder / "metrics.json").is_file():
            made_of = _record(folder / "variant.json", ()).get("dataset")
            if isinstance(made_of, str) and made_of.lower() != asked.lower():  # as named
                stale.setdefault(folder.name, []).append(
                    f"upstream, params.yaml data.dataset is {asked}, the results are of "
                    f"{made_of}")
    if unrecorded and not lock.exists():  # restored from git, it says what they are of
        raise PipelineError(
            f"{results}: {dvc_yaml.with_suffix('.lock')} is missing, so what the results "
            f"are of cannot be told; restore it (`git checkout -- "
            f"{dvc_yaml.with_suffix('.lock')}`), or rerun the variants (`dvc repro "
            f"{dvc_yaml}`). Nothing was written.")
    if unrecorded:
        raise PipelineError(
            f"{results}: the results of {', '.join(n.partition('@')[2] for n in unrecorded[:5])}"
            f"{' ...' if len(unrecorded) > 5 else ''} were never recorded by DVC "
            f"({dvc_yaml.with_suffix('.lock')} has no "
            f"{unrecorded[0]}), so what they are of cannot be told; rerun them (`dvc repro "
            f"{dvc_yaml}:{unrecorded[0]}`), or, made by hand with the definition as it is now, "
            f"record them (`dvc commit -f {dvc_yaml}:{unrecorded[0]}`). Nothing was written.")
    if stale:
        names = sorted(stale)
        first = names[0]
        raise PipelineError(
            f"{results}: the results of {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} "
            f"are not of their definition as it is now (`dvc status --with-deps {dvc_yaml}`: "
            f"{first}: {'; '.join(stale[first][:3])}); rerun them first: `dvc repro {dvc_yaml}` "
            f"(it writes the report too), or, where only code changed that trains the same, "
            f"`cifar10 check-code`. Nothing was written.")
    return None


def _refuse_misplaced_sections(root: Path, dvc_yaml: Path) -> None:
    """A section of one params file found in the other (``ablations:`` in params.yaml,
    ``data:`` in reports/params.yaml), or a variant's name in both groups: the stages
    refuse it, and so does every command that states the variants' results, rather than
    report them as if the user's variant (or data set) were read, or quote DVC's line
    about two stages' outputs. A file that cannot be read is the stages' to name."""
    import yaml

    from ..files import read_small_file
    from ..params import EXERCISES, MAIN, ParamsError, check_sections

    for path, kind in ((root / "params.yaml", MAIN),
                       (root / dvc_yaml.parent / "params.yaml", EXERCISES)):
        try:
            raw = load_yaml12(read_small_file(path, 1 << 20).decode("utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        other = EXERCISES if kind is MAIN else MAIN
        for key in raw if isinstance(raw, dict) else ():
            if key in other.sections and key not in kind.sections:
                try:  # the stages' own line; the sections the file must have, as present
                    check_sections({**dict.fromkeys(kind.required), key: raw[key]}, kind)
                except ParamsError as exc:
                    raise PipelineError(f"{in_repository(path)}: {exc}. Nothing was "
                                        f"written.") from None
        groups = [raw.get(g) if isinstance(raw, dict) else None
                  for g in ("ablations", "dataset_ablations")]
        both = (sorted(map(str, set(groups[0]) & set(groups[1])))
                if kind is EXERCISES and all(isinstance(g, dict) for g in groups) else [])
        if both:  # two stages writing one results folder: DVC's own line names no name
            raise PipelineError(f"{in_repository(path)}: ablations and dataset_ablations "
                                f"share the names {both}; rename one of each. Nothing was "
                                f"written.")


def _dataset_asked(root: Path) -> Optional[str]:
    """The data set the main pipeline's params (params.yaml at ``root``) name, or None
    where they cannot be read (the stages say why)."""
    import yaml

    from ..files import read_small_file

    try:
        data = (load_yaml12(read_small_file(root / "params.yaml", 1 << 20).decode("utf-8"))
                or {})["data"]
        return data["dataset"] if isinstance(data["dataset"], str) else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None


def _recorded(root: Path, stage: str) -> bool:
    """Whether the lock of its pipeline records ``stage`` (as `dvc status` names it:
    ``name`` of the root's dvc.yaml, ``path/dvc.yaml:name`` of another)."""
    import yaml

    pipeline, _, name = stage.rpartition(":")
    lock = (root / (pipeline or "dvc.yaml")).with_suffix(".lock")
    try:
        locked = yaml.safe_load(lock.read_text(encoding="utf-8")) or {}
        return name in (locked.get("stages") or {})
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError):
        return False  # no lock, or one DVC reads itself (its status said so)


def refuse_not_a_file(path: Optional[Path], option: str) -> None:
    """A record a command is given (``option`` ``path``) that is not there, or is no
    regular file (a folder, a FIFO that would hold the read for ever): one line naming it,
    never read as absent."""
    if path is None or (path.is_file() and path.stat().st_size):
        return
    what = ("an empty file" if path.is_file() else
            "not found" if not os.path.lexists(path) else
            "a folder" if path.is_dir() else
            "a link to nothing" if path.is_symlink() and not path.exists() else
            "not a regular file (a FIFO, socket or device)")
    raise PipelineError(f"{option} {path}: {what}, where this reads a record; give the file "
                        f"(as reports/dvc.yaml names it){restore_from_git(path)}. Nothing was "
                        f"written.")


def refuse_special_files(places, expected: str) -> None:
    """Before DVC hashes them: a FIFO, socket, device or broken link among ``places``
    (files, and folders walked, links not followed) would hold `dvc status` for ever or
    fail its hash, and a name that is no UTF-8 text fails DVC naming no file. One line
    naming the first."""
    for place in map(Path, places):
        if not os.path.lexists(place):
            continue
        paths = [place] if place.is_symlink() or not place.is_dir() else \
            [place, *(Path(at) / name for at, dirs, files in os.walk(place)
                      for name in dirs + files)]
        for path in paths:
            try:
                str(path).encode("utf-8")
            except UnicodeEncodeError:
                shown = str(path).encode("utf-8", "backslashreplace").decode("utf-8")
                raise PipelineError(f"{shown}: a name that is no UTF-8 text, which DVC cannot "
                                    f"hash (its error names no file); rename or remove it. "
                                    f"Nothing was written.") from None
            if not (path.is_file() or path.is_dir()):
                raise PipelineError(f"{path}: expected {expected}, found a FIFO, socket, "
                                    f"device or broken link, which DVC would wait on or fail "
                                    f"to hash; remove it. Nothing was written.")


def _refuse_unreadable_or_renamed(results: Path) -> None:
    """Before DVC hashes them: a FIFO among a variant's results would hold `dvc status` for
    ever (each variant's folder, those with results, links not followed); a variant's
    results in a folder not of its name (a backup, softmax_old) would be reported as that
    variant's, yet checked as no stage's. One line each."""
    variants = [f for f in results.iterdir()
                if os.path.lexists(f / "metrics.json")] if results.is_dir() else []
    for folder in variants:
        _refuse_linked(folder)
        refuse_special_files([folder], "a result file")
        try:
            named = json.loads((folder / "variant.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue  # missing or damaged: said where the results are read
        if isinstance(named, dict) and "variant" in named and named["variant"] != folder.name:
            raise PipelineError(
                f"{_shown(folder)}: holds the results of {str(named['variant'])[:80]!r} (its "
                f"variant.json), in a folder of another name, which no stage of that variant "
                f"writes; move it out of {results} (or name it back). Nothing was written.")


def _refuse_other_definitions(given: Path, checked: Path, results: Path) -> None:
    """The definitions a command states (``given``, the report's --params) must be those
    DVC checked the results against (``checked``, the pipeline's params file): one line
    naming the first variant with results, or else the section, the two define otherwise
    (the `ablation:` budget and trial cap are every variant's). A file that cannot be read
    is said where the params are loaded."""
    import yaml

    from ..files import read_small_file

    if given.resolve() == checked.resolve():
        return

    def parsed(path: Path):
        try:  # a FIFO or /dev/zero given as --params: never a read without end
            data = load_yaml12(read_small_file(path, 1 << 20).decode("utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return None
        return data if isinstance(data, dict) else None

    now, stated = parsed(checked), parsed(given)
    if now is None or stated is None or now == stated:
        return

    def variants(data: dict) -> dict:
        return {n: d for k in ("ablations", "dataset_ablations")
                for n, d in (data.get(k) if isinstance(data.get(k), dict) else {}).items()}

    defined, said = variants(now), variants(stated)
    # a variant with results stated otherwise, or left out (its rows, its seeds, gone)
    differ = [f"variant {name}" for name in sorted({*defined, *said}, key=str)
              if (Path(results) / str(name) / "metrics.json").is_file()
              and said.get(name) != defined.get(name)]
    differ += [f"`{k}:`" for k in sorted({*now, *stated}, key=str)
               if k not in ("ablations", "dataset_ablations") and now.get(k) != stated.get(k)]
    if differ:
        raise PipelineError(f"{given}: defines {differ[0]} otherwise than {checked}, whose "
                            f"definitions DVC checked the results against; give that file "
                            f"(or drop --params). Nothing was written.")


def _refuse_undefined(params: Path, name: str, results: Path) -> None:
    """``name`` with results but defined no more (taken out of reports/params.yaml): DVC
    has no stage to say what its results are of. One line; an unreadable params file is
    said where it is loaded."""
    import yaml

    try:
        defined = load_yaml12(params.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    if not isinstance(defined, dict):
        return
    groups = [defined.get(k) for k in ("ablations", "dataset_ablations")]
    if not any(isinstance(g, dict) and name in g for g in groups):
        raise PipelineError(f"{results}: {name} is no variant of {params} now (neither "
                            f"`ablations:` nor `dataset_ablations:` defines it), so what its "
                            f"results are of cannot be told; define it again and rerun it "
                            f"(`dvc repro reports/dvc.yaml:ablation@{name}`). Nothing was "
                            f"written.")


def refuse_stale_definitions(ablations_root: Path, variants: dict) -> None:
    """Each variant's results were made under its definition as reports/params.yaml gives it
    now: every setting a variant's overrides (``variants``: name -> overrides, both groups)
    give that its variant.json records (network, schedule, batch, seed, queue, data set)
    must be what it records. A definition edited since (the results not rerun) is one line
    naming the variant: its old results would be reported as the answers for the new one.
    (The overrides only: the report's params are the variants', not the baseline's.)"""
    for name, overrides in variants.items():
        path = Path(ablations_root) / name / "variant.json"
        if not path.is_file():  # not run yet, or no file (a FIFO blocks a read): said where
            continue            # the results are read
        try:
            made = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue  # not run yet, or damaged: said where the results are read
        if not isinstance(made, dict) or not isinstance(overrides, dict):
            continue
        changed = [(k, (overrides.get(section) or {})[key]) for k, (section, key) in
                   RECORDED.items() if k in made and isinstance(overrides.get(section), dict)
                   and key in overrides[section] and overrides[section][key] != made[k]]
        if changed:
            k, now = changed[0]
            raise PipelineError(
                f"{path}: {name} was made with {k} {json.dumps(made[k])}, but "
                f"reports/params.yaml now gives it {json.dumps(now)}"
                f"{f' (and {len(changed) - 1} more)' if len(changed) > 1 else ''}: its "
                f"results are not the new definition's; rerun it (`dvc repro "
                f"reports/dvc.yaml:ablation@{name}`, or dataset_ablation@{name}), then the "
                f"report")
