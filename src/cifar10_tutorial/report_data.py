"""What the report's sections share: the variants' results (metrics and curves) loaded as
tables, percentages, Markdown tables and plots written atomically."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from .errors import PipelineError
from .files import save_figure_atomic


def load_variants(root: Path) -> pd.DataFrame:
    rows = [json.loads(path.read_text()) for path in sorted(Path(root).glob("*/metrics.json"))]
    if not rows:
        raise PipelineError(f"{root}: no ablation results (*/metrics.json); run the ablation "
                            f"stages first (`dvc repro reports/dvc.yaml:report`).")
    return pd.DataFrame(rows).set_index("variant")


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
