"""The checkpoint mirror: a durable copy of a run's newest checkpoint, where another machine
can continue it.

``--mirror`` / ``CIFAR10_CHECKPOINT_MIRROR`` is an fsspec URL (a folder, ``s3://...``,
``gs://...``). Each run keeps its newest checkpoint and its curves so far in a folder of
its own below it (``<mirror>/train``, ``<mirror>/<variant>``), replaced at each
checkpoint and removed when the run ends. A run with no local checkpoint starts from
the mirror's, through the same checks as a local one.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Optional

from .checkpoints import signature_differences
from .distributed import this_process
from ..checkpoint_files import list_checkpoints, load_checkpoint
from ..errors import PipelineError, TrainingError

log = logging.getLogger(__name__)

MIRROR_ENV = "CIFAR10_CHECKPOINT_MIRROR"

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


def run_ended(cont) -> None:
    """The run's final outputs are written: remove what it kept in the mirror (rank 0)."""
    if cont.mirror and this_process().main:
        Mirror(cont.mirror).clear()
