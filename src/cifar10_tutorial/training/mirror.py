"""The checkpoint mirror: a durable copy of a run's newest checkpoint, where another machine
can continue it.

``--mirror`` / ``CIFAR10_CHECKPOINT_MIRROR`` is an fsspec URL of a durable file system (a
folder, ``s3://...``, ``gs://...``). Each run keeps its newest checkpoint and its curves
so far in a folder of its own below it (``<mirror>/train``, ``<mirror>/<variant>``),
replaced at each checkpoint and removed when the run ends. A run with no local checkpoint
starts from the mirror's, through the same checks as a local one.

A run writes into its folder only after claiming it: ``mirror.json``, written before
anything else, names the run (its signature), the files it wrote there and the process
writing them (host, pid, last write). The run replaces and removes only the files that
manifest lists; a folder holding a run's files without a manifest this run can read, or
another run's (another signature, or another live process), stops the run at its start
in one line, the folder untouched.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Optional

from .checkpoints import signature_differences
from .distributed import this_process
from ..checkpoint_files import list_checkpoints, load_checkpoint
from ..errors import PipelineError, TrainingError
from ..files import process_alive
from ..ownership import hold_run_lock

log = logging.getLogger(__name__)

MIRROR_ENV = "CIFAR10_CHECKPOINT_MIRROR"

CHECKPOINT = "checkpoint.pt"
STATE = "mirror.json"
CURVES = "plots"
# What a run writes in its folder: found there without a manifest, they are another run's
RUN_NAMES = {CHECKPOINT, CHECKPOINT + ".tmp", STATE + ".tmp", CURVES}
# A process on another host that wrote its folder this recently may still be running
LEASE_FRESH_S = 120.0
# fsspec protocols of durable storage a mirror may be on (a plain path is the local disk);
# memory:// dies with the process, and the others (zip, http, github, ...) are read-only
# or not storage at all
DURABLE = {"file", "local", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs",
           "webhdfs", "sftp", "ssh", "oci", "oss", "dbfs", "box", "dropbox"}
WHICH = f"the checkpoint mirror (--mirror or {MIRROR_ENV})"


def check_mirror_url(url: str) -> str:
    """``url`` as given, when a mirror can live there; else one line: blank, a protocol
    that is not durable storage, a ``file://`` URL naming another host."""
    from urllib.parse import urlsplit

    if not url or not url.strip():
        raise PipelineError(f"{WHICH} is blank; give a folder or an fsspec URL (s3://bucket/runs)")
    protocol = url.split("://", 1)[0].lower() if "://" in url else None
    if protocol == "memory":
        raise PipelineError(f"{url}: {WHICH} is in memory, which goes with this process: it "
                            f"could not continue the run anywhere; give a folder or a bucket")
    if protocol is not None and protocol not in DURABLE:
        raise PipelineError(f"{url}: {WHICH} is on {protocol}://, expected durable storage a "
                            f"run can write ({', '.join(sorted(DURABLE - {'local'}))}://, or a "
                            f"folder); give one of those")
    if protocol == "file" and urlsplit(url).netloc not in ("", "localhost"):
        raise PipelineError(f"{url}: {WHICH} names the host {urlsplit(url).netloc!r}, which "
                            f"this machine cannot write; give a folder of this machine "
                            f"(file:///path) or a bucket")
    return url



def _runs_python(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs Python (a train run is a Python process):
    a pid that the system gave to another program since (init, a shell) holds no lease.
    True where the system does not say (no /proc)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"python" in cmdline.lower()

class Mirror:
    """One run's folder at an fsspec URL: ``checkpoint.pt`` (the newest checkpoint),
    ``plots/`` (the DVCLive curves up to at least its step) and ``mirror.json`` (the
    manifest: the run's signature, the files it wrote, its step, the process writing;
    written first and last). Nothing the manifest does not list is touched."""

    def __init__(self, url: str):
        import fsspec

        self.url = check_mirror_url(url)
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except Exception as exc:  # s3:// without s3fs, an unknown protocol, a bad URL
            detail = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise PipelineError(f"{url}: {WHICH} cannot be opened: {detail}") from None
        self.files: set[str] = set()  # what this run wrote (or took over) here
        self.manifest: dict = {}  # as this run last wrote it: no read back at each checkpoint

    def _p(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def local(self) -> bool:
        return "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple)
                          else (self.fs.protocol,))

    @classmethod
    def writable(cls, url: str, paths=None) -> "Mirror":
        """The mirror at ``url``, checked before anything is written there: apart from the
        run's outputs (``paths``, a TrainPaths), and writable."""
        mirror = cls(url)
        if paths is not None:
            mirror._refuse_outputs(paths)
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
            raise PipelineError(f"{self.url}: {WHICH} cannot be written ({type(exc).__name__}: "
                                f"{detail}); give a folder or bucket this machine can "
                                f"write") from None

    def state(self) -> Optional[dict]:
        """The manifest, or None where there is none. One that cannot be read, or that
        holds no whole step where it names one, proves nothing: refused, not passed over."""
        try:
            with self.fs.open(self._p(STATE), "r") as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise self.unproven(f"its {STATE} cannot be read ({type(exc).__name__})")
        if not isinstance(state, dict):
            raise self.unproven(f"its {STATE} holds a {type(state).__name__}, not a manifest")
        step = state.get("step")
        if "step" in state and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise self.unproven(f"its {STATE} holds no step (found {str(step)[:30]!r})")
        return state

    def unproven(self, why: str) -> TrainingError:
        return TrainingError(f"{self.url}: {why}, so nothing shows whose files are there, and "
                             f"this run would replace them; give this run a mirror folder of "
                             f"its own (--mirror or {MIRROR_ENV}), or remove {self.url} if "
                             f"what is there is no longer wanted")

    def _entries(self) -> list[str]:
        try:
            return sorted(Path(p).name for p in self.fs.ls(self.root, detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def fetch_for(self, paths, signature: dict) -> None:
        """Rank 0, before a run with ``signature`` trains in ``paths`` (a TrainPaths): check
        that the folder is this run's to write (:meth:`claim`), then this mirror's
        checkpoint and curves into it when it has no checkpoint (a damaged one is dropped:
        the run starts afresh). A mirror that holds another run's files stops the run,
        untouched: its first checkpoint would replace that run's only durable copy."""
        self._refuse_outputs(paths)  # again: a caller may have made it without the paths
        state = self.claim(signature)
        if state is None or "step" not in state or list_checkpoints(paths.checkpoints):
            return  # nothing to fetch, or a local checkpoint comes first
        pulled = self.pull(paths.checkpoints, paths.live_dir, state)
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
        if ckpt.get("signature") != signature:  # a manifest of older code, without it
            pulled.unlink()
            raise self.holds_another_run(state, ckpt.get("signature"), signature)

    def _refuse_outputs(self, paths) -> None:
        """The mirror may not be, hold or sit in a folder of the run's own outputs: the end
        of the run would remove them, or they would remove the mirror."""
        if not self.local:
            return
        root = Path(os.path.realpath(self.root))
        out_option, live_option = paths.options
        for name, out in ((out_option, paths.out_dir), (live_option, paths.live_dir),
                          ("checkpoints", paths.checkpoints), ("TensorBoard", paths.tensorboard)):
            out = Path(os.path.realpath(out))
            if root == out or root in out.parents or out in root.parents:
                raise PipelineError(f"{self.url}: {WHICH} is, holds or lies in the run's "
                                    f"{name} folder {out}; give it a folder apart from the "
                                    f"pipeline's outputs")

    def claim(self, signature: dict) -> Optional[dict]:
        """Make the folder this run's: refused when it holds a run's files and no manifest,
        another run's manifest (another signature), or a manifest of another process still
        writing; else the manifest is (re)written with this run's signature and process
        before anything else, and returned as it was."""
        if self.local:  # one run at a time on a folder of this machine, from the start
            hold_run_lock(Path(self.root), "the checkpoint mirror of a run")
        state = self.state()
        found = sorted(RUN_NAMES & set(self._entries()))
        if state is None:
            if found:
                raise self.unproven(f"holds {', '.join(found)} without a {STATE}")
        else:
            theirs = state.get("signature")
            if theirs is None and "step" in state and CHECKPOINT in found:
                theirs = self._checkpoint_signature(state, signature)  # older code's manifest
            elif theirs is None and found:
                raise self.unproven(f"its {STATE} names no run")
            if theirs is not None and signature_differences(theirs, signature):
                raise self.holds_another_run(state, theirs, signature)
            self._refuse_live_lease(state.get("lease"))
            listed = state.get("files")
            self.files = (set(listed) if isinstance(listed, list) else
                          {CHECKPOINT, *(f"{CURVES}/{n}" for n in self._curves())})
        self._write_state({**(state or {}), "signature": signature, "lease": self._lease(),
                           "files": sorted(self.files)})
        return state

    def _curves(self) -> list[str]:
        """The TSV files under ``plots/``, relative to it (a manifest of older code lists
        none: they are the run's all the same)."""
        base = self._p(CURVES)
        if not self.fs.isdir(base):
            return []
        return sorted(f[len(base.rstrip("/")) + 1:] for f in self.fs.find(base)
                      if f.endswith(".tsv"))

    def _checkpoint_signature(self, state: dict, ours: dict) -> dict:
        """The signature inside the mirrored checkpoint, for a manifest without one."""
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / CHECKPOINT
            self.fs.get(self._p(CHECKPOINT), str(local))
            try:
                theirs = load_checkpoint(local).get("signature")
            except TrainingError:
                raise self.unproven(f"its {CHECKPOINT} cannot be read and its {STATE} names "
                                    f"no run") from None
        if not isinstance(theirs, dict):
            raise self.holds_another_run(state, None, ours)
        return theirs

    def _refuse_live_lease(self, lease) -> None:
        if not isinstance(lease, dict):
            return
        host, pid, when = lease.get("host"), lease.get("pid"), lease.get("heartbeat")
        age = time.time() - when if isinstance(when, (int, float)) and math.isfinite(when) \
            else None
        if host == socket.gethostname():  # this machine: is that process a run of ours?
            alive = (isinstance(pid, int) and pid != os.getpid() and process_alive(pid)
                     and _runs_python(pid))
            how = "stop that process, or"
        else:  # another machine: its heartbeat, renewed at each checkpoint, must be recent
            # (ahead of this clock: another clock's skew, but a day ahead is no clock's,
            # a damaged or forged lease, which would never lapse)
            alive = age is not None and -86400 < age < LEASE_FRESH_S
            how = (f"if that run is gone, wait until its heartbeat is {LEASE_FRESH_S:,.0f} s "
                   f"old (the lease then lapses), or")
        if alive:
            beat = "" if age is None else (f", heartbeat {age:,.0f} s ago" if age >= 0 else
                                           f", heartbeat {-age:,.0f} s ahead of this clock")
            raise TrainingError(f"{self.url}: another run is writing there (host {host}, pid "
                                f"{pid}{beat}); wait for it to end, {how} give this run a "
                                f"mirror folder of its own (--mirror or {MIRROR_ENV})")

    @staticmethod
    def _lease() -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": time.time()}

    def _write_state(self, state: dict) -> None:
        self.fs.makedirs(self.root, exist_ok=True)

        def write(tmp: str) -> None:
            with self.fs.open(tmp, "w") as f:
                json.dump(state, f, indent=2)
                f.write("\n")
        _replace_remote(self.fs, self._p(STATE), write)
        self.manifest = state

    def holds_another_run(self, state: Optional[dict], theirs, ours: dict) -> TrainingError:
        """The error of a run whose mirror folder holds another run's checkpoint, which its
        first checkpoint would replace: that run's step (``state``: its mirror.json) and
        what differs between its signature (``theirs``) and this run's."""
        step, steps = (state or {}).get("step"), (state or {}).get("max_steps")
        at = "" if not isinstance(step, int) else f"step {step:,}" + (
            f" of {steps:,}" if isinstance(steps, int) else "") + "; "
        diff = ("; ".join(signature_differences(theirs, ours)) if isinstance(theirs, dict)
                else "a checkpoint without a signature")
        return TrainingError(f"{self.url}: holds the checkpoint of another run ({at}{diff}), "
                             f"which this run would replace; give this run a mirror folder of "
                             f"its own (--mirror or {MIRROR_ENV}), or remove {self.url} if "
                             f"that run is no longer wanted")

    def push(self, checkpoint: Path, live_dir: Path, state: dict) -> None:
        """Replace the mirrored checkpoint and curves by ``checkpoint`` and ``live_dir``'s,
        each listed in the manifest before it is written. Curves first, the checkpoint next,
        the manifest's step last: the curves are never behind the checkpoint (rows past it
        are cut on resume)."""
        fs = self.fs
        fs.makedirs(self.root, exist_ok=True)
        plots = live_dir / CURVES
        tsvs = sorted(plots.rglob("*.tsv")) if plots.is_dir() else []
        names = {f"{CURVES}/{t.relative_to(plots).as_posix()}" for t in tsvs} | {CHECKPOINT}
        base = {k: v for k, v in self.manifest.items() if k != "files"}
        if not names <= self.files:  # listed before written: the manifest never lags
            self.files |= names
            self._write_state({**base, "files": sorted(self.files), "lease": self._lease()})
        for tsv in tsvs:
            rel = tsv.relative_to(plots).as_posix()
            fs.makedirs(self._p(CURVES, *rel.split("/")[:-1]), exist_ok=True)
            _put_atomic(fs, str(tsv), self._p(CURVES, rel))
        _put_atomic(fs, str(checkpoint), self._p(CHECKPOINT))
        self._write_state({**base, **state, "files": sorted(self.files), "lease": self._lease()})

    def release(self) -> None:
        """The run stops writing (a pause, a failure): the manifest keeps its files and
        step, without the lease, so another machine may continue at once."""
        try:
            state = self.state()
        except TrainingError:
            return
        if state is not None and isinstance(state.get("lease"), dict) \
                and state["lease"].get("pid") == os.getpid():
            self._write_state({**state, "lease": None})

    def pull(self, checkpoints: Path, live_dir: Path, state: dict) -> Optional[Path]:
        """The mirrored checkpoint into ``checkpoints`` (as ``ckpt-<step>.pt``) and its curves
        into ``live_dir``/plots (replacing the local ones); the local file, or None when the
        mirror holds none."""
        if not self.fs.exists(self._p(CHECKPOINT)):
            return None
        checkpoints.mkdir(parents=True, exist_ok=True)
        dest = checkpoints / f"ckpt-{int(state['step']):08d}.pt"
        tmp = dest.with_name(dest.name + ".tmp")
        self.fs.get(self._p(CHECKPOINT), str(tmp))
        os.replace(tmp, dest)
        local = live_dir / CURVES
        if local.exists():
            shutil.rmtree(local)
        for name in sorted(self.files):
            if name.startswith(CURVES + "/") and name.endswith(".tsv") \
                    and self.fs.exists(self._p(name)):
                target = live_dir / name
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get(self._p(name), str(target))
        return dest

    def clear(self) -> None:
        """Remove what the run wrote to the mirror, as its manifest lists (the run ended: its
        results are its outputs now), the manifest last; anything else stays, and so do
        the folders that still hold it."""
        try:
            state = self.state()
        except TrainingError:
            return  # not provably ours any more: leave it
        listed = (state or {}).get("files")
        names = set(listed) if isinstance(listed, list) else set()
        for name in sorted(names | self.files):
            if self.fs.exists(self._p(name)) and not self.fs.isdir(self._p(name)):
                self.fs.rm(self._p(name))
        if self.fs.exists(self._p(STATE)):
            self.fs.rm(self._p(STATE))
        folders = sorted({"/".join(n.split("/")[:i]) for n in names
                          for i in range(1, n.count("/") + 1)}, key=len, reverse=True)
        for folder in [*folders, ""]:  # deepest first; object stores have no folders
            path = self._p(folder) if folder else self.root
            try:
                if self.fs.isdir(path) and not self.fs.ls(path):
                    self.fs.rmdir(path)
            except (OSError, NotImplementedError):
                pass



def _put_atomic(fs, local: str, remote: str) -> None:
    _replace_remote(fs, remote, lambda tmp: fs.put_file(local, tmp))


def _replace_remote(fs, remote: str, write) -> None:
    """``write(tmp)`` a temporary file beside ``remote``, then rename it into place. A failed
    write (a full mirror disk) leaves no temporary file and names the mirror's file, not
    the local one it was copied from."""
    tmp = remote + ".tmp"
    try:
        write(tmp)
    except (OSError, RuntimeError) as exc:
        try:
            if fs.exists(tmp):
                fs.rm(tmp)
        except OSError:
            pass
        code = getattr(exc, "errno", None)
        if isinstance(exc, OSError) and code is not None:
            raise OSError(code, exc.strerror or os.strerror(code), remote) from None
        raise
    fs.mv(tmp, remote)


def run_ended(cont) -> None:
    """The run's final outputs are written: remove what it kept in the mirror (rank 0)."""
    if cont.mirror and this_process().main:
        Mirror(cont.mirror).clear()
