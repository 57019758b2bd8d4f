"""The regression gate: this run's metrics against a committed baseline.

Metrics are named ``train.<key>`` (from the train stage's metrics.json) and
``eval.<key>`` (the eval stage's). ``regression.tolerances`` gives
each gated metric its allowed change from the baseline, in the direction that
is worse: ``{max_drop: N}`` (higher is better, e.g. precision) or
``{max_rise: N}`` (lower is better, e.g. loss); params.py refuses the wrong
direction for a metric whose name says it. The gate fails when a metric moves
past its tolerance, when a gated metric is missing from the run or from the
baseline, when the run produced no metrics at all, or when a baseline is set
and nothing is gated; it prints a Markdown table either way.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .files import read_small_file, write_text_atomic
from .errors import PipelineError
from .eval_files import (FLOAT32_MAX, loads_once, refuse_other_loss, refuse_other_model,
                         refuse_other_predictions)
from .param_types import Tolerance, parse_tolerance

class RegressionError(PipelineError):
    """The gate failed; the message holds the table."""


METRICS_LIMIT = 16 << 20  # bytes: a metrics file is a few KB


def read_json_object(path: Path, fix: str) -> dict:
    """A JSON file whose top level is an object, or one line naming the file, what was
    expected and found, and ``fix`` (what to do)."""
    try:
        data = loads_once(read_small_file(path, METRICS_LIMIT).decode("utf-8"))
    except IsADirectoryError:
        raise PipelineError(f"{path}: a folder, expected a JSON file; {fix}") from None
    except FileNotFoundError:
        raise PipelineError(f"{path}: no such file; {fix}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({str(exc)[:100]}); {fix}") from None
    except OSError as exc:  # a FIFO, a device (/dev/zero), a loop of links, a huge file
        raise PipelineError(f"{path}: {exc.strerror}, expected a JSON file of metrics; "
                            f"{fix}") from None
    if not isinstance(data, dict):
        raise PipelineError(f"{path}: expected a JSON object of metrics, found a "
                            f"{type(data).__name__}; {fix}")
    return data


def collect_metrics(files: dict[str, Path]) -> dict[str, float]:
    """The run's numeric metrics, flat: ``{"eval.precision_at_1": 0.81, ...}``."""
    out: dict[str, float] = {}
    for group, path in files.items():
        if not os.path.lexists(path):  # anything else there (a FIFO, a folder) is named
            continue
        data = read_json_object(path, "rerun the stage that writes it")
        # its figures as its own files give them (a hand edit not): the eval stage writes
        # its CSVs with every metrics.json, the train stage its loss curve
        if group == "eval":
            refuse_other_predictions(path.parent, data, path, "rerun the eval stage (`dvc "
                                     "repro eval`)", True)
        elif group == "train":
            refuse_other_loss(path.parent, data, path, "rerun the train stage (`dvc repro "
                                                       "train`)")
        for key, value in data.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # a figure no run gives (a loss below 0, a precision of 1.5) is an edit:
                # gated, or written as a baseline, it would let every later run pass
                expected = _impossible(key, float(value))
                if expected:
                    raise PipelineError(f"{path}: {key} is {value!r}, expected {expected}; "
                                        f"rerun the stage that writes it")
                out[f"{group}.{key}"] = float(value)
    if {"train", "eval"} <= set(files) and all(os.path.lexists(files[k]) for k in
                                               ("train", "eval")):
        # the evaluation is of the model the run trained
        refuse_other_model(Path(files["train"]).parent, Path(files["eval"]).parent,
                           "rerun the eval stage (`dvc repro eval`)",
                           "rerun the train stage (`dvc repro train`)")
    return out


@dataclass
class Row:
    metric: str
    baseline: Optional[float]
    now: Optional[float]
    allowed: float
    ok: bool
    note: str = ""

    @property
    def change(self) -> Optional[float]:
        if self.baseline is None or self.now is None:
            return None
        return self.now - self.baseline


def as_tolerances(tolerances: dict) -> dict[str, Tolerance]:
    """``regression.tolerances`` as params.py checked them (a mapping given in code, e.g.
    ``{"eval.precision_at_1": {"max_drop": 0.02}}``, is checked the same way)."""
    return {m: t if isinstance(t, Tolerance) else parse_tolerance(m, t)
            for m, t in tolerances.items()}


def compare(now: dict[str, float], baseline: dict[str, float],
            tolerances: dict) -> list[Row]:
    rows = []
    for metric, tolerance in as_tolerances(tolerances).items():
        tol = tolerance.signed
        base, cur = baseline.get(metric), now.get(metric)
        if cur is None:
            rows.append(Row(metric, base, None, tol, False, "missing from this run"))
        elif not math.isfinite(cur):  # a NaN or infinite metric never passes
            rows.append(Row(metric, base, cur, tol, False, f"not a finite number ({cur})"))
        elif base is None:
            rows.append(Row(metric, None, cur, tol, False, "missing from the baseline"))
        elif not math.isfinite(base):
            rows.append(Row(metric, base, cur, tol, False, f"the baseline is not finite ({base})"))
        else:
            change = cur - base
            ok = change >= tol if tol < 0 else change <= tol
            note = "" if ok else ("dropped more than allowed" if tol < 0 else "rose more than allowed")
            rows.append(Row(metric, base, cur, tol, ok, note))
    return rows


def _fmt(v: Optional[float], signed: bool = False) -> str:
    if v is None:
        return "-"
    if math.isfinite(v) and abs(v) >= 1e6:  # no run's figure: shown, not spelled out
        return f"{v:+.4e}" if signed else f"{v:.4e}"
    return f"{v:+.4f}" if signed else f"{v:.4f}"


def markdown_table(rows: list[Row]) -> str:
    lines = ["| metric | baseline | now | change | allowed | |", "|---|---|---|---|---|---|"]
    for r in rows:
        allowed = f">= {r.allowed:+.4f}" if r.allowed < 0 else f"<= {r.allowed:+.4f}"
        verdict = "ok" if r.ok else f"**FAIL**: {r.note}"
        lines.append(f"| {r.metric} | {_fmt(r.baseline)} | {_fmt(r.now)} | "
                     f"{_fmt(r.change, signed=True)} | {allowed} | {verdict} |")
    return "\n".join(lines)


def metrics_diff_md(baseline: Path, files: dict[str, Path]) -> str:
    """``dvc metrics diff --md`` of the gate's own metrics files (the train and eval
    stages', not every exercise variant's) against the commit that last changed the
    baseline file, where git history allows (a note saying why not otherwise). The commit
    is named with its subject: in the CI runner's scratch copy it is the snapshot commit,
    whose subject names the commit it copied."""
    try:
        rev, subject = subprocess.run(
            ["git", "log", "-1", "--format=%H%x00%s", "--", str(baseline)],
            capture_output=True, text=True, check=True).stdout.strip().partition("\0")[::2]
    except (OSError, subprocess.CalledProcessError):
        return "(`dvc metrics diff`: no git history here)"
    if not rev:
        return f"(`dvc metrics diff`: {baseline} is not committed yet)"
    targets = [str(p) for p in files.values()]
    proc = subprocess.run(["dvc", "metrics", "diff", "--md", "--targets", *targets, "--", rev],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return f"(`dvc metrics diff --md {rev[:8]}` failed: {proc.stderr.strip()[:200]})"
    return (f"`dvc metrics diff --md --targets {' '.join(targets)} -- {rev[:8]}` against "
            f"{rev[:8]} (\"{subject}\"), the commit that last changed {baseline}:\n\n"
            + (proc.stdout.strip() or "(no metrics committed at that revision to compare with)"))


def gate(baseline_path: Optional[str], tolerances: dict,
         files: dict[str, Path]) -> str:
    """The report (Markdown); raises :class:`RegressionError` with it when the gate fails."""
    tolerances = as_tolerances(tolerances)
    if baseline_path is not None and not tolerances:
        # params.py refuses this too; a caller in code gets the same answer, never a pass
        raise RegressionError(f"regression.tolerances is empty while the baseline "
                              f"{baseline_path} is set: nothing would be compared; give each "
                              f"gated metric a tolerance, e.g. eval.precision_at_1: "
                              f"{{max_drop: 0.02}}")
    now = collect_metrics(files)
    if not now:
        raise RegressionError(
            "no metrics at all: none of " + ", ".join(str(p) for p in files.values())
            + " exists. The pipeline produced nothing to check; run `dvc repro` and look for "
              "the stage that failed.")
    if baseline_path is None:
        lines = ["No baseline set (regression.baseline: null): this run's gated metrics, "
                 "nothing compared.", "", "| metric | now |", "|---|---|"]
        lines += [f"| {m} | {_fmt(now.get(m))} |" for m in tolerances]
        return "\n".join(lines)
    path = Path(baseline_path)
    if not path.exists():
        raise RegressionError(f"{path}: no such baseline file. Create it from this run with "
                              f"`python stages/regression.py --update` and commit it.")
    fix = ("restore it from git, or remake it from a good run with "
           "`python stages/regression.py --update`")
    baseline = read_json_object(path, fix)
    bad = [k for k in tolerances if k in baseline
           and (isinstance(baseline[k], bool) or not isinstance(baseline[k], (int, float)))]
    if bad:
        raise PipelineError(f"{path}: {bad[0]} is {baseline[bad[0]]!r}, expected a number; {fix}")
    # a figure no run makes (a precision of -5, an infinite loss) gates nothing: every run
    # passes against it
    bad = [(k, expected) for k in tolerances if k in baseline
           for expected in [_impossible(k, float(baseline[k]))] if expected]
    if bad:
        (key, expected), = bad[:1]
        raise PipelineError(f"{path}: {key} is {baseline[key]!r}, expected {expected}; {fix}")
    rows = compare(now, {k: float(baseline[k]) for k in tolerances if k in baseline}, tolerances)
    text = f"Regression check against {path}:\n\n{markdown_table(rows)}"
    loose = [k for k in baseline if k not in tolerances]
    if loose:  # a misspelt metric there gates nothing: said, never silently passed over
        text += (f"\n\nNot gated: {', '.join(map(str, loose))} (in the baseline, without a "
                 f"tolerance in regression.tolerances): give it one there, or remove it from "
                 f"{path}.")
    if not all(r.ok for r in rows):
        failed = ", ".join(r.metric for r in rows if not r.ok)
        raise RegressionError(f"{text}\n\nREGRESSION in {failed}. If the change is intended, "
                              f"update the baseline (`python stages/regression.py --update`) and "
                              f"commit it with the change.")
    return text


def is_gate_text(text: str) -> bool:
    """Whether ``text`` is what :func:`gate` writes (its table or its one-paragraph
    refusals): the stage's --out replaces such a file only."""
    return text.startswith(("Regression check against ", "No baseline set ", "no metrics at all",
                            "regression.tolerances is empty")) or (
        "no such baseline file" in text.split("\n", 1)[0])


def _impossible(metric: str, value: float) -> Optional[str]:
    """What a run's ``metric`` can be, where the finite ``value`` is not that: precisions
    are fractions from 0 to 1, losses from 0 to float32's largest number (a run computes
    its loss in float32; beyond that it overflows to inf); None when it can be (a value
    that is not finite fails the gate's row instead: never compared as a number)."""
    name = metric.rsplit(".", 1)[-1]
    if not math.isfinite(value):
        return None
    if "precision" in name and not 0 <= value <= 1:
        return "a fraction from 0 to 1, as a run's precision is"
    if "loss" in name and not 0 <= value <= FLOAT32_MAX:
        return (f"a number from 0 to {FLOAT32_MAX:.4g}, as a run's loss is (computed in "
                f"float32, whose largest number that is)")
    return None


def impossible_in(path: Path) -> Optional[str]:
    """What in the baseline at ``path`` (one :func:`not_a_baseline` takes) no run can give
    (a precision of 95, a loss below 0): said before a run, not after it; None otherwise."""
    data = loads_once(read_small_file(path, METRICS_LIMIT).decode("utf-8"))
    for key, value in data.items():
        if not math.isfinite(float(value)):  # the gate would fail it, after the whole run
            return f"{key} is {value!r}, expected a finite number, as a run's figures are"
        expected = _impossible(key, float(value))
        if expected:
            return f"{key} is {value!r}, expected {expected}"
    return None


def not_a_baseline(path: Path) -> Optional[str]:
    """Why ``path`` may not be written as a baseline, or None: a baseline is a ``.json``
    file outside git's and DVC's own folders, and one that is there already is a regular
    file holding a baseline (a JSON object of numbers, as ``--update`` writes), so that an
    update replaces only a baseline, never another file the path happens to name."""
    path = Path(path)
    if path.suffix != ".json" or {".git", ".dvc"} & set(path.parts):
        return "not a baseline's path (a .json file outside .git/ and .dvc/)"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return f"a {'link' if path.is_symlink() else 'folder or special file'}, not a baseline file"
    if not path.exists():
        return None
    try:
        data = loads_once(read_small_file(path, METRICS_LIMIT).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        twice = str(exc) if str(exc).startswith("the key ") else None
        return f"a file that is not a baseline ({twice or 'not JSON'})"
    if not isinstance(data, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                         for v in data.values()):
        return "a file that is not a baseline (not a JSON object of metric numbers)"
    if not data or not all(str(k).startswith(("train.", "eval.")) for k in data):
        # a stage's own metrics.json holds numbers too, under names of its own
        return ("a file that is not a baseline (its keys are not gated metrics such as "
                "eval.precision_at_1)")
    return None


BASELINES = Path("reports/baseline")  # the regression stage's dep (dvc.yaml): baselines live there


def refuse_untracked_baseline(baseline: str, root: Path = Path(".")) -> None:
    """The gate run by DVC reads regression.baseline where DVC sees it change: under
    reports/baseline/, the folder the regression stage depends on (dvc.yaml), as the path
    is written (a baseline elsewhere could be edited to fail while `dvc status` calls the
    stage's "ok" up to date). By hand, nothing records the verdict: any path is read. One
    line naming it; nothing read or written."""
    where = Path(os.path.normpath(Path.cwd() / root / baseline))
    home = Path(os.path.normpath(Path.cwd() / root / BASELINES))
    if home not in where.parents:
        raise PipelineError(f"regression.baseline {baseline}: outside {BASELINES}/, the folder "
                            f"the regression stage depends on, so DVC would not see the file "
                            f"change and would keep a verdict on its old figures as up to date; "
                            f"put it there (as {BASELINES}/NAME.json) and name that, or run "
                            f"the gate by hand (python stages/regression.py). Nothing was "
                            f"changed.")


def update_baseline(baseline_path: str, tolerances: dict,
                    files: dict[str, Path]) -> dict[str, float]:
    """Write this run's gated metrics to the baseline file (atomically); return them."""
    why = not_a_baseline(Path(baseline_path))
    if why is not None:
        raise PipelineError(f"{baseline_path}: {why}; --update writes only a baseline: set "
                            f"regression.baseline to a path of its own (as "
                            f"reports/baseline/NAME.json). Nothing was written.")
    from .ownership import refuse_foreign_place  # git's, the code's, a stage's output

    refuse_foreign_place(Path(baseline_path), "regression.baseline",
                         "reports/baseline/NAME.json", feeds=(("regression", None),))
    now = collect_metrics(files)
    missing = [m for m in tolerances if m not in now]
    if missing:
        raise PipelineError(f"cannot update the baseline: this run has no {', '.join(missing)}; "
                            f"run `dvc repro` first.")
    values = {m: now[m] for m in tolerances}
    write_text_atomic(Path(baseline_path), json.dumps(values, indent=2, sort_keys=True) + "\n")
    return values
