"""Checkpoint files: what a train run stores about itself, and a checkpoint read back and
checked field by field. The ground below training (which writes checkpoints) and the eval
stage (whose ``--watch`` evaluates each new one), so that neither imports the other.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import torch

from .errors import TrainingError
from .model_files import is_state_dict
from .params import Params, to_dict

# Keys the train stage reads that cannot change its DVC outputs (model.pt, metrics, plots):
# they are left out of the resume signature. Every other key it reads is in it. Only
# train.device (the signature has the kind of device instead); the run section is not in
# run_params at all.
NOT_RUN_DEFINING = {"train": {"device"}}

DROP_IT = "delete this file to resume from the checkpoint before it"


def run_params(params: Params) -> dict:
    """The params the train stage reads, as plain data: stored in checkpoints and model.pt
    (keys the stage does not declare in dvc.yaml must not reach its outputs: the
    run section's are left out)."""
    ev = params.eval
    return {"model": to_dict(params.model), "input": to_dict(params.input),
            "train": to_dict(params.train), "fast": to_dict(params.fast),
            "eval": {"batch_size": ev.batch_size, "every_steps": ev.every_steps,
                     "targets": list(ev.targets)}}


def run_defining(run: dict) -> dict:
    """``run_params`` without the keys that cannot change the run's outputs."""
    return {section: {k: v for k, v in values.items()
                      if k not in NOT_RUN_DEFINING.get(section, ())}
            for section, values in run.items()}


def list_checkpoints(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("ckpt-*.pt"))


def load_checkpoint(path: Path, device="cpu", data: Optional[bytes] = None) -> dict:
    """Load a checkpoint without unpickling code, checked for what every reader takes from
    it (the weights, their averages, the step); a damaged file is one clear line.
    ``data``: the file's bytes, received from another rank (``path`` names it)."""
    try:
        ckpt = torch.load(io.BytesIO(data) if data is not None else path, map_location=device,
                          weights_only=True)
    except Exception as exc:  # torch raises several types; its text may advise unsafe loading
        raise TrainingError(f"{path}: cannot be loaded as a checkpoint ({type(exc).__name__}): "
                            f"it is damaged or truncated. Delete this file to resume from the "
                            f"checkpoint before it.") from None
    problem = _checkpoint_problem(ckpt)
    if problem:
        raise TrainingError(f"{path}: not a checkpoint of this project ({problem}); {DROP_IT}")
    return ckpt


def _checkpoint_problem(ckpt) -> Optional[str]:
    if not isinstance(ckpt, dict):
        return f"expected a dict of fields, found a {type(ckpt).__name__}"
    for key in ("model", "ema"):
        if not is_state_dict(ckpt.get(key)):
            return f"{key}: expected a dict of tensors, found {type(ckpt.get(key)).__name__}"
    step = ckpt.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"step: expected a whole number >= 0, found {step!r}"
    return None
