"""The record of the segments a run was trained in: for each stretch trained in one process
(one machine), its code, machine, steps and wall time; carried in every checkpoint and
listed in the run's provenance.json."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

@dataclass
class Segments:
    """The run's segments: for each stretch trained in one process (one machine), its code
    (commit), machine (CPU model and threads, or GPU), steps from-to and wall time. Carried
    in every checkpoint, listed in the run's provenance.json."""

    done: list = field(default_factory=list)
    current: dict = field(default_factory=dict)

    @classmethod
    def start(cls, ckpt: Optional[dict], step: int, device, world: int) -> "Segments":
        from .. import provenance

        done = json.loads(ckpt["segments"]) if ckpt is not None else []
        current = {**provenance.code_version(), "device": provenance.device_description(device),
                   "world_size": world, "torch": _torch_version(),
                   "started_utc": _utc_now(), "from_step": step, "to_step": step,
                   "wall_time_s": 0.0}
        segs = cls(done, current)
        segs._t0 = time.perf_counter()
        return segs

    def at(self, step: int) -> list:
        """Every segment, this one up to ``step``."""
        self.current.update(to_step=step, wall_time_s=round(time.perf_counter() - self._t0, 3),
                            ended_utc=_utc_now())
        return [*self.done, dict(self.current)]

    def to_checkpoint(self, step: int) -> str:
        """As stored in a checkpoint (a JSON string: checkpoints load without unpickling)."""
        return json.dumps(self.at(step))


def _torch_version() -> str:
    import torch

    return torch.__version__


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
