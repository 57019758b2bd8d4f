"""Provenance of a result: which code, data, params and machine made it.

Written as ``provenance.json`` beside a stage's ``metrics.json``, apart from the numeric
metrics, so that ``dvc metrics diff`` and ``dvc exp show`` stay readable: the git commit
of the code and whether the tree had uncommitted changes, the torch version, the device
(CPU model and threads, or GPU name) and the machine's load average, the prepared
data's content hash, a hash of the run-defining params, and the run's steps, epochs and
wall time.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Optional

import torch

from . import devices
from .files import write_text_atomic


def code_version(root: Path = Path(".")) -> dict:
    """The commit checked out in ``root`` and whether tracked files differ from it (None
    for both outside a git repository)."""
    def git(*args: str) -> Optional[str]:
        try:
            proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    changes = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit.strip() if commit else None,
            "dirty": bool(changes.strip()) if changes is not None else None}


def _cpuinfo(field: str) -> Optional[str]:
    """The value of ``field`` in Linux's /proc/cpuinfo (its first processor), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> Optional[set]:
    """The CPU's feature flags (Linux's /proc/cpuinfo), or None where they cannot be read."""
    flags = _cpuinfo("flags")
    return set(flags.split()) if flags is not None else None


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"{cpu_model()}, {n} thread{'' if n == 1 else 's'}"


def params_hash(params: dict) -> str:
    """A short, stable hash of plain-data params (key order does not matter)."""
    text = json.dumps(params, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def record(data_hash: str, run_params: dict, device: torch.device, code: Optional[dict] = None,
           **run: object) -> dict:
    """The provenance of a result; ``code``: the commit and dirty flag of the code that ran,
    as read when it started (by default read now); ``run``: steps, epochs, wall_time_s and
    the like."""
    threads = ({"cpu_threads": torch.get_num_threads(), "cpu_threads_from": devices.THREADS_FROM}
               if device.type == "cpu" else {})
    return {**(code or code_version()), "torch": torch.__version__,
            "device": device_description(device), **threads, "cpu_load": _load(),
            "data_hash": data_hash, "params_hash": params_hash(run_params), **run}


def _load() -> Optional[list[float]]:
    """The machine's load average (1, 5, 15 minutes) as the result was written: above the
    thread count, other work shared the cores and slowed the timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def write(folder: Path, rec: dict) -> Path:
    path = Path(folder) / "provenance.json"
    write_text_atomic(path, json.dumps(rec, indent=2) + "\n")
    return path
