"""A run's curves read back: the DVCLive files that :mod:`.training.monitoring` writes
(``plots/metrics/<group>/<metric>.tsv``), as tables for the report, the model card and the
GPU run."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd


def read_curve(live: Path, metric: str, group: str = "train") -> Optional[pd.DataFrame]:
    """A DVCLive curve (step, metric) of the run logged in ``live`` (None if not logged)."""
    path = Path(live) / "plots" / "metrics" / group / f"{metric}.tsv"
    return pd.read_csv(path, sep="\t") if path.is_file() else None


def held_out_curve(live: Path) -> Optional[pd.DataFrame]:
    """The held-out evaluations while training of the run logged in ``live``: step,
    precision_at_1 and, where logged, precision_at_1_raw and epoch (None if none)."""
    out = read_curve(live, "precision_at_1", "held_out")
    if out is None:
        return None
    out = out[["step", "precision_at_1"]]
    for metric in ("precision_at_1_raw", "epoch"):
        c = read_curve(live, metric, "held_out")
        if c is not None:
            out = out.merge(c[["step", metric]], on="step", how="left")
    return out
