"""What the report's sections share: the variants' results (metrics, curves, provenance)
loaded as tables, percentages, Markdown tables and plots written atomically; and the
report's first section, which says how the results were made."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from .errors import PipelineError
from .files import save_figure_atomic


def load_variants(root: Path) -> pd.DataFrame:
    """One row per variant: what it is (variant.json) and its results (metrics.json: the
    train run's figures, ``loss_avg`` as ``final_loss_avg`` and ``step`` as ``steps``,
    and the evaluation's)."""
    rows = []
    for path in sorted(Path(root).glob("*/metrics.json")):
        described = path.with_name("variant.json")
        if not described.is_file():
            raise PipelineError(f"{described}: missing beside {path.name} (results of an older "
                                f"version of the code); rerun the variant "
                                f"(`dvc repro -f reports/dvc.yaml:ablation@{path.parent.name}`).")
        m = json.loads(path.read_text())
        train = dict(m["train"])
        train["steps"], train["final_loss_avg"] = train.pop("step"), train.pop("loss_avg")
        train.pop("loss"), train.pop("held_out", None)
        ev = {("eval_examples_per_sec" if k == "examples_per_sec" else k): v
              for k, v in m["eval"].items()}
        rows.append({**json.loads(described.read_text()), **train, **ev})
    if not rows:
        raise PipelineError(f"{root}: no ablation results (*/metrics.json); run the ablation "
                            f"stages first (`dvc repro reports/dvc.yaml:report`).")
    return pd.DataFrame(rows).set_index("variant")


def load_provenance(root: Path, name: str) -> Optional[dict]:
    """A variant's provenance.json (written by its training run), or None (older results)."""
    path = Path(root) / name / "train" / "provenance.json"
    return json.loads(path.read_text()) if path.is_file() else None


def load_curve(root: Path, name: str, metric: str = "loss_avg",
               group: str = "train") -> Optional[pd.DataFrame]:
    path = Path(root) / name / "train" / "plots" / "metrics" / group / f"{metric}.tsv"
    return pd.read_csv(path, sep="\t") if path.is_file() else None


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
          ylabel: str, legend: bool = False, grid_axis: str = "both") -> None:
    """One PNG: ``draw(ax)`` on a fresh figure, then the shared axis set-up."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    draw(ax)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    ax.grid(axis=grid_axis, alpha=0.3)
    save_figure_atomic(fig, path, dpi=100, bbox_inches="tight")


@dataclass
class Results:
    """What every section reads: the variants' metrics and where tables and plots go."""

    df: pd.DataFrame  # every variant
    exercises: pd.DataFrame  # those without a held-out curve (the exercises' budget)
    timed: pd.DataFrame  # those with one (eval.every_steps > 0)
    root: Path
    tables: Path
    plots: Path

    @property
    def base(self):
        return self.df.loc["baseline"] if "baseline" in self.df.index else None

    def has(self, name: str) -> bool:
        return name in self.df.index


def provenance_section(r: Results) -> list[str]:
    """Which code, data and budget made each variant; in words when they differ."""
    rows, found = [], {}
    for name in r.df.index:
        p = load_provenance(r.root, name)
        steps = f"{int(r.df.loc[name, 'steps']):,}"
        if p is None:
            rows.append([name, "not recorded", "", steps, ""])
            continue
        found[name] = p
        commit = (p.get("commit") or "outside git")[:10] + (" + changes" if p.get("dirty") else "")
        rows.append([name, commit, p["data_hash"][:12], steps, p["device"]])
    t = pd.DataFrame(rows, columns=["variant", "commit", "data", "steps", "device"])
    md = ["## How these results were made", "", markdown_table(t), ""]
    notes = []
    if len(found) < len(r.df):
        notes.append(f"{len(r.df) - len(found)} of {len(r.df)} variants have no provenance "
                     f"record (made by an older version of the code): which code made them "
                     f"is unknown.")
    for key, what in (("commit", "commits of the code"), ("data_hash", "prepared data sets")):
        values = {(p.get(key), p.get("dirty")) if key == "commit" else p.get(key)
                  for p in found.values()}
        if len(values) > 1:
            notes.append(f"The variants were made by {len(values)} different {what}.")
    if r.exercises["steps"].nunique() > 1:
        notes.append(f"The exercise variants ran at {r.exercises['steps'].nunique()} different "
                     f"budgets (steps); compare them with care.")
    return md + ([" ".join(["**Not made in one piece.**", *notes]), ""] if notes else
                 ["All variants were made by one commit, on the same data, at one budget.", ""])
