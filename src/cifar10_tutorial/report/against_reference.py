"""The report's section "Against the reference implementation": the tutorial's own
TensorFlow code run on the same dev split (how: docs/reference.md,
"The reference implementation on the dev split"), its records in
``reports/tf_reference/<run>.json``:
its 10K-step runs against the baseline's seed band, its 100K-step run's curve beside
``tutorial_100k``'s, the operation-level check (``opcheck.json``, devtools/tf_opcheck.py),
and what the gap to the tutorial's 86% is made of, as far as the measurements go."""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Optional

import pandas as pd

from ..curves import held_out_curve
from ..errors import PipelineError
from ..eval_files import loads_once
from ..files import read_small_file
from .reference import ref
from .results import REPRODUCTION, Results, in_repository, markdown_table, pct, plot

SHORT, LONG = 10_000, 100_000  # the reference's runs: two of 10K steps, one of 100K
STEPS_LIMIT = 10 ** 9  # no run of the reference's is planned longer: a record past it is none
REFERENCE_EVAL_BATCH = 128  # cifar10.py's batch_size, cifar10_eval.py's batches
IMAGE_COUNTS = ("train_images", "held_out_images", "evaluated_images")  # of a record's data
OPCHECK = "opcheck.json"  # beside the runs' records: the operation-level check


def load_reference_runs(folder: Optional[Path]) -> dict[str, dict]:
    """run name -> its record, checked; {} without a folder or records."""
    runs = {}
    for path in sorted(Path(folder).glob("*.json")) if folder and Path(folder).is_dir() else []:
        if path.name == OPCHECK:
            continue
        try:  # a FIFO or a device among them: one line, never a read without end
            rec = loads_once(read_small_file(path, 16 << 20))
            evals = _evaluations(rec)
        except OSError as exc:
            raise PipelineError(f"{path}: expected a reference run's record, found "
                                f"{exc.strerror}; remove it or remake it with "
                                f"devtools/tf_reference.py collect") from None
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise PipelineError(f"{path}: expected a reference run's record (steps_planned, "
                                f"evaluations with step, precision_at_1, precision_at_1_raw): "
                                f"{exc}; remake it "
                                f"with devtools/tf_reference.py collect") from None
        if not evals and int(rec.get("steps_planned", 0)) <= int(rec.get("reached_step", 0)):
            raise PipelineError(f"{path}: a finished run without evaluations; remake it with "
                                f"devtools/tf_reference.py collect")
        # a run counts once: a record copied or renamed (its own name inside it, what
        # devtools/tf_reference.py collect writes) would weigh as another run of the reference
        named = rec.get("run", path.stem)
        twin = next((other for other, seen in runs.items() if _same_run(seen, rec)), None)
        if named != path.stem or twin is not None:
            raise PipelineError(f"{path}: expected the record of run {path.stem}, found "
                                + (f"the record of run {named!r}" if named != path.stem else
                                   f"a record of the same run as {twin}.json (the same "
                                   f"start of training or loss curve)")
                                + " (a copy or a rename counts one run twice); remove it, or "
                                  "remake it with devtools/tf_reference.py collect")
        runs[path.stem] = {**rec, "evals": evals}
    # the runs compare on one data set: where their archives differ, the record of the
    # fewest runs' is the odd one (of two records, the first is named, the other said)
    groups = {}
    for name, run in runs.items():  # (each names its archive: _evaluations)
        data = run["data"]
        groups.setdefault((data["archive_md5"], *(data.get(k) for k in IMAGE_COUNTS)),
                          []).append(name)
    if len(groups) > 1 and len({md5 for md5, *_ in groups}) == 1:
        # one archive, and the runs disagree on the images they trained on or evaluated
        counts, odd = min(groups.items(), key=lambda group: len(group[1]))
        other = next(c for c in groups if c != counts)
        key = next(k for k, a, b in zip(IMAGE_COUNTS, counts[1:], other[1:]) if a != b)
        raise PipelineError(f"{Path(folder) / (odd[0] + '.json')}: data.{key} is "
                            f"{counts[1 + IMAGE_COUNTS.index(key)]!r}, where "
                            f"{groups[other][0]}.json gives "
                            f"{other[1 + IMAGE_COUNTS.index(key)]!r} of the same archive: "
                            f"one data set's runs evaluate the same images; remake it with "
                            f"devtools/tf_reference.py collect, or remove it")
    groups = {md5: [n for c, names in groups.items() if c[0] == md5 for n in names]
              for md5 in dict.fromkeys(c[0] for c in groups)}
    if len(groups) > 1:
        md5, odd = min(groups.items(), key=lambda group: len(group[1]))
        rest = [(other, names) for other, names in groups.items() if other != md5]
        said = "; ".join(f"{', '.join(n + '.json' for n in names)} "
                         f"give{'s' if len(names) == 1 else ''} {other!r}"
                         for other, names in rest)
        raise PipelineError(f"{Path(folder) / (odd[0] + '.json')}: data.archive_md5 is "
                            f"{md5!r}, where {said}: the reference's runs compare only on one "
                            f"data set; remake the one of other data with "
                            f"devtools/tf_reference.py collect, or remove it")
    return runs


def _same_run(seen: dict, rec: dict) -> bool:
    """Whether two records are one run's: the same record but for its name, or a segment
    started on one host at the same second, or the same loss curve (a copy with one date or
    one figure changed is still the run whose training it records)."""
    if {k: v for k, v in seen.items() if k not in ("run", "evals")} \
            == {k: v for k, v in rec.items() if k != "run"}:
        return True
    starts = [{(s["start"], str(s.get("host"))) for s in r.get("segments") or []
               if isinstance(s.get("start"), str)} for r in (seen, rec)]
    losses = [r.get("loss_every_1000") for r in (seen, rec)]
    return bool(starts[0] & starts[1]) or (bool(losses[0]) and losses[0] == losses[1])


def _evaluations(rec) -> list[tuple]:
    """(step, precision, raw precision) of each of a record's evaluations, in the kinds
    devtools/tf_reference.py collect writes them: steps whole numbers up to the step the run
    reached, each evaluated once, precisions fractions from 0 to 1; else a ValueError
    saying what is found instead."""
    def count(value, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} is {json.dumps(value)[:40]}, expected a whole number")
        return value

    def fraction(value, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError(f"{key} is {json.dumps(value)[:40]}, expected a fraction from 0 "
                             f"to 1")
        return float(value)

    if not isinstance(rec, dict):
        raise ValueError(f"a JSON {type(rec).__name__}")
    if not isinstance(rec.get("data"), dict) or not isinstance(
            rec["data"].get("evaluated_images", 0), int):
        raise ValueError(f"data is {json.dumps(rec.get('data'))[:40]}, expected the data set's "
                         f"record (archive_md5, train_images, held_out_images, "
                         f"evaluated_images)")
    if not isinstance(rec.get("tensorflow", ""), str):
        raise ValueError(f"tensorflow is {json.dumps(rec['tensorflow'])[:40]}, expected its "
                         f"version")
    if not isinstance(rec.get("segments") or [], list) or not all(
            isinstance(seg, dict) for seg in rec.get("segments") or []):
        raise ValueError("segments is not a list of records")
    images = {k: count(rec["data"][k], f"data.{k}") for k in
              ("train_images", "held_out_images", "evaluated_images") if k in rec["data"]}
    held, evaluated = images.get("held_out_images"), images.get("evaluated_images")
    if held is not None and evaluated is not None \
            and not held <= evaluated < held + REFERENCE_EVAL_BATCH:
        # cifar10_eval.py runs whole batches over the held-out images: all of them, and the
        # queue's wrap-around to the next whole batch (less than one batch more)
        raise ValueError(f"data.evaluated_images is {evaluated:,}, "
                         f"{'fewer than' if evaluated < held else 'a batch or more past'} "
                         f"held_out_images {held:,} (cifar10_eval.py evaluates whole batches "
                         f"of {REFERENCE_EVAL_BATCH}): its evaluations were not of the "
                         f"held-out images")
    md5 = rec["data"].get("archive_md5")
    if md5 is None:  # collect records it: without it, the data the run saw is unknown
        raise ValueError("no data.archive_md5, the archive the run was trained on (every "
                         "record names it)")
    if not (isinstance(md5, str) and re.fullmatch(r"[0-9a-f]{32}", md5)):
        raise ValueError(f"data.archive_md5 is {json.dumps(md5)[:40]}, expected the archive's "
                         f"md5 (32 lower-case hexadecimal digits, as md5sum writes it)")
    planned = count(rec["steps_planned"], "steps_planned")
    if planned > STEPS_LIMIT:
        raise ValueError(f"steps_planned is a number of {len(str(planned))} digits, expected "
                         f"at most {STEPS_LIMIT:,}")
    reached = count(rec.get("reached_step", planned), "reached_step")
    if reached > planned:
        raise ValueError(f"reached_step is {reached}, past steps_planned {planned}")
    if not isinstance(rec["evaluations"], list) or not all(
            isinstance(e, dict) for e in rec["evaluations"]):
        raise ValueError(f"evaluations is {json.dumps(rec['evaluations'])[:40]}, expected a "
                         f"list of records")
    evals = [(count(e["step"], "an evaluation's step"),
              fraction(e["precision_at_1"], "an evaluation's precision_at_1"),
              fraction(e["precision_at_1_raw"], "an evaluation's precision_at_1_raw"))
             for e in rec["evaluations"]]
    steps = [step for step, _, _ in evals]
    late = [step for step in steps if step > reached]
    if late or len(set(steps)) != len(steps):
        raise ValueError(f"an evaluation at step {late[0]}, past the step the run reached "
                         f"({reached})" if late else "two evaluations of one step")
    if steps != sorted(steps):  # collect writes them as the run made them, step by step
        back = next(i for i in range(1, len(steps)) if steps[i] < steps[i - 1])
        raise ValueError(f"an evaluation at step {steps[back]:,} after one at step "
                         f"{steps[back - 1]:,}, where a run evaluates in step order")
    return evals


def _at(run: dict, step: int) -> Optional[tuple]:
    return next(((p, raw) for s, p, raw in run["evals"] if s == step), None)


def _band(r: Results) -> Optional[pd.DataFrame]:
    seeds = r.seeds
    if seeds is None or not len(seeds) or int(seeds["steps"].max()) != SHORT:
        return None
    return seeds


def read_reference(folder: Optional[Path]) -> dict[str, dict]:
    """The reference's runs in ``folder`` (:func:`load_reference_runs`), the folder checked
    first: one named is read, or refused (a mistyped one would drop the section silently,
    as a missing --equivalence or --devices-timing is refused). The report calls it before
    it writes anything, and again where it writes the section."""
    if folder is not None and not os.path.lexists(folder):
        raise PipelineError(f"--tf-reference {folder}: not found, where the reference "
                            f"implementation's runs are read from; give their folder (the "
                            f"project's: reports/tf_reference), or leave the option out. "
                            f"Nothing was written.")
    if folder is not None and not Path(folder).is_dir():
        raise PipelineError(f"--tf-reference {folder}: not a folder (a file, or a link that "
                            f"leads to none), where the reference implementation's runs are "
                            f"read from; give their folder. Nothing was written.")
    return load_reference_runs(folder)


def against_reference(r: Results, folder: Optional[Path]) -> list[str]:
    runs = read_reference(folder)
    md = ["## Against the reference implementation", ""]
    if not runs:
        where = "none was given" if folder is None else f"`{in_repository(Path(folder))}/`"
        return md + [f"No runs of the reference implementation yet ({where}): "
                     f"docs/reference.md says how they are made.", ""]
    other = _other_data(r, runs, Path(folder))
    if other is not None:  # another data set than the baseline's: nothing to compare
        return md + [other, ""] + _opcheck(Path(folder) / OPCHECK)
    any_run = next(iter(runs.values()))
    md += [f"The tutorial's own TensorFlow code (tensorflow/models, `tutorials/image/cifar10`, "
           f"TensorFlow {any_run.get('tensorflow', '?')} through `tensorflow.compat.v1`, the "
           f"changes listed in docs/reference.md) trained on the same dev split and evaluated "
           f"by its own `cifar10_eval.py` on the same held-out images "
           f"({any_run['data'].get('evaluated_images', 10112):,} with the queue's wrap-around, "
           f"to three decimals), with the averaged and with the raw weights.", ""]
    short = {k: v for k, v in runs.items() if v.get("steps_planned") == SHORT and _at(v, SHORT)}
    long = {k: v for k, v in runs.items() if v.get("steps_planned") == LONG}
    md += _short_runs(r, short)
    md += _long_run(r, long)
    return md + _set_aside(runs, short, next(iter(long), None)) + _opcheck(Path(folder) / OPCHECK)


def _set_aside(runs: dict, short: dict, long: Optional[str]) -> list[str]:
    """A line naming each record the tables above do not show, and why: a record is never
    dropped from the comparison unsaid."""
    why = []
    for name, run in runs.items():
        if name in short or name == long:
            continue
        planned, reached = run["steps_planned"], run.get("reached_step", run["steps_planned"])
        if planned == SHORT:
            said = f"under way, at step {reached:,} of {planned:,}"
        elif planned == LONG:
            said = f"a second run of {LONG:,} steps: the section follows one"
        else:
            said = f"a run of {planned:,} steps: the section compares runs of {SHORT:,} and {LONG:,}"
        why.append(f"`{name}` ({said})")
    return [f"Not compared: {'; '.join(why)}.", ""] if why else []


def _other_data(r: Results, runs: dict, folder: Path) -> Optional[str]:
    """The section compares the reference with this project's runs on the same images: a
    record of a run on another number of training or held-out images than the baseline's
    (the committed records beside your own data set, say) makes a note saying so in place
    of any comparison; None where they agree."""
    base = r.base
    if base is None:
        return None
    ours = {"train_images": base.get("num_train"), "held_out_images": base.get("num_examples")}
    for name, run in runs.items():
        for key, value in ours.items():
            theirs = run["data"].get(key)
            if theirs is not None and value is not None and not pd.isna(value) \
                    and theirs != int(value):
                what = "training" if key == "train_images" else "held-out"
                return (f"Not compared: the reference's runs were made on other data than "
                        f"the baseline's (`{in_repository(folder / (name + '.json'))}`: "
                        f"{theirs:,} {what} images, the baseline {int(value):,}). "
                        f"docs/reference.md says how to make them on this data.")
    return None


def _opcheck(path: Path) -> list[str]:
    """The operation-level check: the same weights and images through both networks."""
    if not path.is_file():
        return []
    try:
        return _opcheck_text(json.loads(read_small_file(path, 16 << 20)), path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError) as exc:
        raise PipelineError(f"{path}: expected the operation-level check's record (checks "
                            f"with what, max_rel_diff, tolerance, ok; checkpoint_step, images, "
                            f"same_predictions_held_out), found one that cannot be read "
                            f"({str(exc)[:80]}); remake it with devtools/tf_opcheck.py") from None


def _opcheck_text(c: dict, path: Path) -> list[str]:
    worst = max(c["checks"], key=lambda row: row["max_rel_diff"])
    failed = [row["what"] for row in c["checks"] if not row["ok"]]
    verdict = (f"each within {worst['max_rel_diff']:.1e} of TensorFlow's, relative to the "
               f"tensor's largest value (the largest: {worst['what']})" if not failed else
               f"**outside the tolerance of {worst['tolerance']:.0e}: {', '.join(failed)}**")
    return ["### Operation by operation", "",
            f"With the weights of the reference run's checkpoint at step "
            f"{c['checkpoint_step']:,} loaded into both networks and the same "
            f"{c['images']['train']} training images with the same distortion draws, this "
            f"project computes the distorted inputs, the logits, the loss with weight decay and "
            f"the gradient of every variable ({len(c['checks'])} tensors in all) {verdict}; with "
            f"the moving averages it predicts the same class as the reference for "
            f"{c['same_predictions_held_out']:.0%} of {c['images']['held_out']} held-out images "
            f"(`{in_repository(path)}`, devtools/tf_opcheck.py). The optimizer's and the moving averages' "
            f"updates and the input queue are not part of this check.", ""]


def _short_runs(r: Results, runs: dict) -> list[str]:
    if not runs:
        return ["No 10,000-step run of the reference has finished yet.", ""]
    band = _band(r)
    rows = [{"run": f"reference `{k}`", "precision @ 1": pct(_at(v, SHORT)[0]),
             "raw weights": pct(_at(v, SHORT)[1])} for k, v in runs.items()]
    md = [f"### {SHORT:,} steps: the reference against the baseline's seeds", ""]
    if band is not None:
        rows += [{"run": f"this project, `{n}`", "precision @ 1": pct(row["precision_at_1"]),
                  "raw weights": pct(row["precision_at_1_raw"])} for n, row in band.iterrows()]
    md += [markdown_table(pd.DataFrame(rows)), ""]
    if band is None:
        return md + ["The baseline's seeds have no results at 10,000 steps to compare with.", ""]
    lo, hi = band["precision_at_1"].min(), band["precision_at_1"].max()
    ref_p = [_at(v, SHORT)[0] for v in runs.values()]
    gap = sum(ref_p) / len(ref_p) - band["precision_at_1"].mean()
    spread = max(hi - lo, max(ref_p) - min(ref_p))
    verdict = ("within the seed-to-seed spread: noise, no difference shown" if abs(gap) <= spread
               else f"{'above' if gap > 0 else 'below'} this project's by more than the "
                    f"seed-to-seed spread ({pct(spread)})")
    runs_text = ("The reference's run reads" if len(ref_p) == 1
                 else f"The reference's {len(ref_p)} runs average")
    return md + [f"{runs_text} {pct(sum(ref_p) / len(ref_p))}, "
                 f"this project's {len(band)} seeds {pct(lo)}-{pct(hi)} (mean "
                 f"{pct(band['precision_at_1'].mean())}): a difference of "
                 f"{100 * gap:+.1f} points, {verdict}.", ""]


def _long_run(r: Results, runs: dict) -> list[str]:
    if not runs:
        return ["No 100,000-step run of the reference yet.", ""]
    run = next(iter(runs.values()))
    reached = int(run.get("reached_step") or max(s for s, _, _ in run["evals"]))
    if not run["evals"]:
        return [f"### The reference's {LONG:,}-step run", "",
                f"Under way: it has reached step {reached:,} of {LONG:,} (it continues from "
                f"machine to machine, runs/README.md); its first evaluation comes at "
                f"{SHORT:,} steps.", ""]
    ours = held_out_curve(r.root / REPRODUCTION / "train") if r.has(REPRODUCTION) else None
    rows = []
    for s, p, raw in run["evals"]:
        row = {"step": f"{s:,}", "reference": pct(p), "reference, raw": pct(raw)}
        if ours is not None and (ours["step"] == s).any():
            o = ours[ours["step"] == s].iloc[0]
            row[f"`{REPRODUCTION}`"] = pct(o["precision_at_1"])
            if "precision_at_1_raw" in o:
                row[f"`{REPRODUCTION}`, raw"] = pct(o["precision_at_1_raw"])
        rows.append(row)
    png = r.plots / "against_reference.png"

    def draw(ax):
        if ours is not None:
            ax.plot(ours["step"], ours["precision_at_1"], marker="o", label=f"{REPRODUCTION} (this project)")
        steps = [s for s, _, _ in run["evals"]]
        ax.plot(steps, [p for _, p, _ in run["evals"]], marker="s", label="reference (TensorFlow)")
        ax.plot(steps, [raw for _, _, raw in run["evals"]], marker="s", linestyle=":",
                label="reference, raw weights")

    drew = plot(png, (7, 4), draw, "Held-out precision @ 1 on the dev split", "step",
                "precision @ 1", legend=True)
    md = [f"### The reference's {LONG:,}-step run beside `{REPRODUCTION}`", "",
          markdown_table(pd.DataFrame(rows)), ""]
    if drew:
        md += [f"![against the reference](plots/{png.name})", ""]
    md += [_gap(r, run, reached), ""]
    return md


def _gap(r: Results, run: dict, reached: int) -> str:
    tutorial = f"~{ref('precision_target')}%"
    if reached < LONG:
        return (f"The run has reached step {reached:,} of {LONG:,} (it continues from machine to "
                f"machine, runs/README.md): what the gap to the tutorial's "
                f"{tutorial} is made of is answered at 100,000 steps.")
    p = _at(run, LONG)[0]
    mine = r.reproduction["precision_at_1"] if r.reproduction is not None else None
    parts = [f"At {LONG:,} steps the reference reads {pct(p)} on the dev split, where the "
             f"tutorial reports {tutorial} on the official test set"]
    if mine is not None:
        spread = r.spread("precision_at_1") if _band(r) is not None else None
        weighed = ("" if spread is None else
                   f", {'within' if abs(p - mine) <= spread else 'beyond'} the "
                   f"{100 * spread:.1f}-point spread of the baseline's seeds at 10,000 steps"
                   + (": noise, no difference between them shown" if abs(p - mine) <= spread
                      else ""))
        parts.append(f"this project's `{REPRODUCTION}` reads {pct(mine)} on the same images. "
                     f"Of the gap to the tutorial's figure, the part between it and {pct(p)} is "
                     f"the reference's own on this data (the data and the split, not the code), "
                     f"and {100 * abs(p - mine):.1f} points lie between the two implementations "
                     f"({'this project' if mine >= p else 'the reference'} the higher; one run "
                     f"each{weighed})")
    return "; ".join(parts) + "."
