"""Writing results so that nothing half-written ever looks complete: each writer writes a
temporary file beside the target, then renames it into place."""
from __future__ import annotations

import os
from pathlib import Path


def _replace_with(path: Path, write, suffix: str = ".tmp") -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + suffix)
    write(tmp)
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path``."""
    _replace_with(path, lambda tmp: tmp.write_text(text))


def torch_save_atomic(obj, path: Path) -> None:
    """``torch.save(obj)`` into ``path`` (checkpoints, model.pt)."""
    import torch

    _replace_with(path, lambda tmp: torch.save(obj, tmp))


def save_figure_atomic(fig, path: Path, **savefig_args) -> None:
    """A matplotlib figure into ``path`` (a PNG), then the figure is closed."""
    import matplotlib.pyplot as plt

    try:  # the temporary name keeps the .png suffix: savefig picks the format from it
        _replace_with(path, lambda tmp: fig.savefig(tmp, **savefig_args), ".tmp.png")
    finally:
        plt.close(fig)
