"""The device a stage computes on, from the param that names it (``train.device``,
``eval.device``): shared by training, evaluation and the benchmark."""
from __future__ import annotations

import torch

from .errors import PipelineError


def pick_device(name: str, local_rank: int = 0, key: str = "train.device") -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu`` or ``cuda`` (GPU ``local_rank``); ``key``
    names the param that chose it, for the error."""
    if name == "cuda" and not torch.cuda.is_available():
        raise PipelineError(f"{key} is cuda but no CUDA device is available; "
                            f"use {key}=auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}" if name == "cuda" else name)
