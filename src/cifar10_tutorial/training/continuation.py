"""Runs that outlive their machine: a deadline, a durable mirror of the newest checkpoint,
and the record of the segments a run was trained in.

None of these is a param: they cannot change what a run computes (a paused and continued
run ends bit-identical to an uninterrupted one on the same machine), so they change no
hash. Each comes from the stage's command line or from the environment, which also
reaches ``dvc repro`` and every process of a torchrun job:

- ``--stop-at`` / ``CIFAR10_STOP_AT``: a duration from now (``2h30m``, ``90m``, ``45s``,
  ``3600``) or a moment (``18:20``, ``2026-12-01T18:20``, UTC unless it names its zone).
  At the deadline the run writes a checkpoint, says ``paused at step N of M; run the same
  command to continue`` and exits with :data:`PAUSED_EXIT`, writing no final outputs.
  Under torchrun, whose agent restarts a job any of whose processes exits non-zero, the
  processes end with 0 and rank 0 leaves a mark in the file ``CIFAR10_PAUSE_MARK`` names;
  the stage's launcher (:func:`.devices.relaunch_on_devices`) turns it into
  :data:`PAUSED_EXIT` (:func:`.devices.exit_paused`).
- ``--mirror`` / ``CIFAR10_CHECKPOINT_MIRROR``: an fsspec URL (a folder, ``s3://...``,
  ``gs://...``). Each run keeps its newest checkpoint and its curves so far in a folder of
  its own below it (``<mirror>/train``, ``<mirror>/<variant>``), replaced at each
  checkpoint and removed when the run ends. A run with no local checkpoint starts from
  the mirror's, through the same checks as a local one.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional

from .checkpoints import (list_checkpoints, load_checkpoint, queued_experiment,
                          signature_differences)
from .distributed import PAUSED_EXIT, launched_by_torchrun, this_process  # noqa: F401 (PAUSED_EXIT: the status named here)
from ..errors import PipelineError, TrainingError

log = logging.getLogger(__name__)

STOP_AT_ENV = "CIFAR10_STOP_AT"
MIRROR_ENV = "CIFAR10_CHECKPOINT_MIRROR"

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
    base = mirror or os.environ.get(MIRROR_ENV)
    if mirror:
        os.environ[MIRROR_ENV] = mirror
    if (exp := queued_experiment()) is not None:  # queued experiments run side by side
        run_name = f"{run_name}/queued/{exp}"
    return Continuation(deadline, f"{base.rstrip('/')}/{run_name}" if base else None)


def run_ended(cont: Continuation) -> None:
    """The run's final outputs are written: remove what it kept in the mirror (rank 0)."""
    if cont.mirror and this_process().main:
        Mirror(cont.mirror).clear()


# ----------------------------------------------------------------------------- the mirror

CHECKPOINT = "checkpoint.pt"
STATE = "mirror.json"
CURVES = "plots"


class Mirror:
    """One run's folder at an fsspec URL: ``checkpoint.pt`` (the newest checkpoint),
    ``plots/`` (the DVCLive curves up to at least its step) and ``mirror.json`` (its step,
    written last). Nothing else there is touched: a README beside them stays."""

    def __init__(self, url: str):
        import fsspec

        self.url = url
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:  # s3:// without s3fs, an unknown protocol
            raise PipelineError(f"{url}: the checkpoint mirror (--mirror or {MIRROR_ENV}) "
                                f"cannot be opened: {exc}") from None

    def _p(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @classmethod
    def writable(cls, url: str) -> "Mirror":
        mirror = cls(url)
        mirror.check_writable()
        return mirror

    def check_writable(self) -> None:
        """Write and remove a probe file in the run's folder, so that a mirror that cannot
        be written (a file, a read-only place, a server that is not there) stops the run at
        its start, not at its first checkpoint."""
        probe = self._p(".write-probe")
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            with self.fs.open(probe, "w") as f:
                f.write("probe\n")
            self.fs.rm(probe)
        except Exception as exc:  # fsspec backends raise many kinds (OS, HTTP, client errors)
            detail = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise PipelineError(f"{self.url}: the checkpoint mirror (--mirror or {MIRROR_ENV}) "
                                f"cannot be written ({type(exc).__name__}: {detail}); give a "
                                f"folder or bucket this machine can write") from None

    def state(self) -> Optional[dict]:
        try:
            with self.fs.open(self._p(STATE), "r") as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as exc:
            log.info("%s: %s is unreadable (%s): ignoring the mirror", self.url, STATE, exc)
            return None
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            log.info("%s: %s holds no step (found %s): ignoring the mirror", self.url, STATE,
                     str(state)[:60])
            return None
        return state

    def fetch_for(self, paths, signature: dict) -> None:
        """Rank 0, before a run with ``signature`` trains in ``paths`` (a TrainPaths): this
        mirror's checkpoint and curves into it when it has no checkpoint (a damaged one is
        dropped: the run starts afresh). A mirror that holds another run's checkpoint (other
        data, params or devices: a run paused to continue later) stops the run, untouched:
        the run's first checkpoint would replace that run's only durable copy."""
        state = self.state()
        if state and "signature" in state and signature_differences(state["signature"],
                                                                     signature):
            raise self.holds_another_run(state, state["signature"], signature)
        if list_checkpoints(paths.checkpoints):
            return  # a local checkpoint comes first
        pulled = self.pull(paths.checkpoints, paths.live_dir)
        if pulled is None:
            return
        log.info("no checkpoint in %s: fetched %s's (step %s)", paths.checkpoints, self.url,
                 pulled.name[5:-3].lstrip("0") or "0")
        try:
            ckpt = load_checkpoint(pulled)
        except TrainingError:
            log.info("the checkpoint of %s is damaged or truncated: starting afresh", self.url)
            pulled.unlink()
            return
        if ckpt.get("signature") != signature:  # a mirror.json without the signature
            pulled.unlink()
            raise self.holds_another_run(state, ckpt.get("signature"), signature)

    def holds_another_run(self, state: Optional[dict], theirs, ours: dict) -> TrainingError:
        """The error of a run whose mirror folder holds another run's checkpoint, which its
        first checkpoint would replace: that run's step (``state``: its mirror.json) and
        what differs between its signature (``theirs``) and this run's."""
        steps = state.get("max_steps") if state else None
        at = "" if not state else f"step {state['step']:,}" + (
            f" of {steps:,}" if isinstance(steps, int) else "") + "; "
        diff = ("; ".join(signature_differences(theirs, ours)) if isinstance(theirs, dict)
                else "a checkpoint without a signature")
        return TrainingError(f"{self.url}: holds the checkpoint of another run ({at}{diff}), "
                             f"which this run would replace; give this run a mirror folder of "
                             f"its own (--mirror or {MIRROR_ENV}), or remove {self.url} if "
                             f"that run is no longer wanted")

    def push(self, checkpoint: Path, live_dir: Path, state: dict) -> None:
        """Replace the mirrored checkpoint and curves by ``checkpoint`` and ``live_dir``'s.
        Curves first, the checkpoint next, ``mirror.json`` last: the curves are never
        behind the checkpoint (rows past it are cut on resume)."""
        fs = self.fs
        fs.makedirs(self.root, exist_ok=True)
        plots = live_dir / CURVES
        if plots.is_dir():
            for tsv in sorted(plots.rglob("*.tsv")):
                rel = tsv.relative_to(plots).as_posix()
                fs.makedirs(self._p(CURVES, *rel.split("/")[:-1]), exist_ok=True)
                _put_atomic(fs, str(tsv), self._p(CURVES, rel))
        _put_atomic(fs, str(checkpoint), self._p(CHECKPOINT))
        with fs.open(self._p(STATE + ".tmp"), "w") as f:
            json.dump(state, f, indent=2)
            f.write("\n")
        fs.mv(self._p(STATE + ".tmp"), self._p(STATE))

    def pull(self, checkpoints: Path, live_dir: Path) -> Optional[Path]:
        """The mirrored checkpoint into ``checkpoints`` (as ``ckpt-<step>.pt``) and its curves
        into ``live_dir``/plots (replacing the local ones); the local file, or None when the
        mirror holds none."""
        state = self.state()
        if state is None or not self.fs.exists(self._p(CHECKPOINT)):
            return None
        checkpoints.mkdir(parents=True, exist_ok=True)
        dest = checkpoints / f"ckpt-{int(state['step']):08d}.pt"
        tmp = dest.with_name(dest.name + ".tmp")
        self.fs.get(self._p(CHECKPOINT), str(tmp))
        os.replace(tmp, dest)
        local = live_dir / CURVES
        if local.exists():
            shutil.rmtree(local)
        if self.fs.isdir(self._p(CURVES)):
            for remote in self.fs.find(self._p(CURVES)):
                if not remote.endswith(".tsv"):
                    continue
                rel = remote[len(self._p(CURVES)) + 1:]
                target = local / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get(remote, str(target))
        return dest

    def clear(self) -> None:
        """Remove what the run wrote to the mirror (the run ended: its results are its
        outputs now); anything else in the folder stays."""
        for name in (STATE, CHECKPOINT):
            if self.fs.exists(self._p(name)):
                self.fs.rm(self._p(name))
        if self.fs.isdir(self._p(CURVES)):
            self.fs.rm(self._p(CURVES), recursive=True)
        try:  # the run's own folder, once empty (object stores have no folders to remove)
            if self.fs.isdir(self.root) and not self.fs.ls(self.root):
                self.fs.rmdir(self.root)
        except (OSError, NotImplementedError):
            pass


def _put_atomic(fs, local: str, remote: str) -> None:
    fs.put_file(local, remote + ".tmp")
    fs.mv(remote + ".tmp", remote)


# ----------------------------------------------------------------------------- segments


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
