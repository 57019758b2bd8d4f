"""When a run pauses, and where it keeps its newest checkpoint for another machine: a run
that outlives its machine.

Neither is a param: they cannot change what a run computes (a paused and continued run
ends bit-identical to an uninterrupted one on the same machine), so they change no hash.
Each comes from the stage's command line or from the environment, which also reaches
``dvc repro`` and every process of a torchrun job:

- ``--stop-at`` / ``CIFAR10_STOP_AT``: a duration from now (``2h30m``, ``90m``, ``45s``,
  ``3600``) or a moment (``18:20``, ``2026-12-01T18:20``, UTC unless it names its zone).
  At the deadline the run writes a checkpoint, says ``paused at step N of M; run the same
  command to continue`` and exits with ``PAUSED_EXIT``, writing no final outputs.
  Under torchrun, whose agent restarts a job any of whose processes exits non-zero, the
  processes end with 0 and rank 0 leaves a mark in the file ``CIFAR10_PAUSE_MARK`` names;
  the stage's launcher (:func:`.distributed.relaunch_on_devices`) turns it into
  ``PAUSED_EXIT`` (:func:`.distributed.exit_paused`).
- ``--mirror`` / ``CIFAR10_CHECKPOINT_MIRROR``: the checkpoint mirror (:mod:`.mirror`).
"""
from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from .distributed import launched_by_torchrun
from .mirror import MIRROR_ENV, check_mirror_url
from .paths import queued_experiment
from ..errors import PipelineError

STOP_AT_ENV = "CIFAR10_STOP_AT"

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_deadline(text: str, now: Optional[float] = None) -> float:
    """The deadline ``text`` names, as a POSIX time: a duration from ``now`` (``2h30m``,
    ``90m``, ``45s``, ``3600``), ``@<POSIX time>``, or a moment (``18:20``: the next 18:20
    UTC; ``2026-12-01T18:20``, UTC unless it gives an offset). A moment already past, a
    number that is not finite, and ``2h30`` (minutes or seconds?) are refused; ``@<time>``,
    the form a stage exports to its torchrun processes, is taken as it is (past: pause at
    the first step, as a zero duration does)."""
    now = time.time() if now is None else now
    at = _deadline(text.strip(), now)
    if at is None or not math.isfinite(at):
        raise PipelineError(f"the deadline {text!r} (--stop-at or {STOP_AT_ENV}) is not a duration "
                            f"(2h30m, 90m, 45s, 3600) or a moment (18:20, 2026-12-01T18:20 UTC); "
                            f"give one of these forms")
    if at < now and not _DURATION.match(text.strip()) and not text.strip().startswith("@"):
        when = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        raise PipelineError(f"the deadline {text!r} (--stop-at or {STOP_AT_ENV}) is {when}, "
                            f"which has passed; give a later moment or a duration (2h30m)")
    return at


def _deadline(s: str, now: float) -> Optional[float]:
    if s.startswith("@"):
        try:
            return float(s[1:])
        except ValueError:
            return None
    if s and (m := _DURATION.match(s)) and any(m.groups()):
        if re.search(r"[hm]\d+(\.\d+)?$", s):  # 2h30: a unit is missing, not seconds
            raise PipelineError(f"the deadline {s!r} (--stop-at or {STOP_AT_ENV}) ends in a "
                                f"number without its unit: write {s}m or {s}s")
        h, mins, secs = (float(g) if g else 0.0 for g in m.groups())
        return now + 3600 * h + 60 * mins + secs
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", s)
    if clock:
        hh, mm, ss = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        if not (hh < 24 and mm < 60 and ss < 60):
            return None
        day = datetime.fromtimestamp(now, timezone.utc)
        at = day.replace(hour=hh, minute=mm, second=ss, microsecond=0)
        return (at + timedelta(days=1) if at.timestamp() <= now else at).timestamp()
    try:
        at = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


@dataclass(frozen=True)
class Continuation:
    """When to pause (``deadline``, a POSIX time, or None) and where the newest checkpoint
    is mirrored (``mirror``, an fsspec URL of this run's own folder, or None)."""

    deadline: Optional[float] = None
    mirror: Optional[str] = None

    def due(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline


NONE = Continuation()


def from_stage(stop_at: Optional[str], mirror: Optional[str], run_name: str) -> Continuation:
    """The stage's continuation settings: its options, else the environment. A relative
    deadline is fixed here, once, and exported as ``@<time>``: the processes a torchrun
    relaunch starts (and restarts) keep the same deadline. The mirror folder is
    ``<mirror>/<run_name>``, a queued DVC experiment's ``<mirror>/<run_name>/queued/<name>``
    (several run at once, each with params of its own)."""
    text = os.environ.get(STOP_AT_ENV) if launched_by_torchrun() else (
        stop_at or os.environ.get(STOP_AT_ENV))
    deadline = parse_deadline(text) if text else None
    if deadline is not None:
        os.environ[STOP_AT_ENV] = f"@{deadline:.3f}"
    base = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    if base is not None:  # an empty variable is no mirror; an empty --mirror is refused
        base = check_mirror_url(base)
    if mirror:
        os.environ[MIRROR_ENV] = mirror
    if (exp := queued_experiment()) is not None:  # queued experiments run side by side
        run_name = f"{run_name}/queued/{exp}"
    return Continuation(deadline, f"{base.rstrip('/')}/{run_name}" if base else None)
