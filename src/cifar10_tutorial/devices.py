"""The device a stage computes on, from the param that names it (``train.device``,
``eval.device``), and the CPU threads it may use: shared by training, evaluation and the
benchmark."""
from __future__ import annotations

import math
import os
from pathlib import Path

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


def granted_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """The CPUs this process may use, and what set the number: its affinity mask (taskset,
    Slurm's --cpus-per-task, a container's cpuset) and its cgroup's CPU quota (a
    container's --cpus, Kubernetes' limits.cpu), whichever is fewer."""
    try:
        n, why = len(os.sched_getaffinity(0)), "CPU affinity"
    except (AttributeError, OSError):
        n, why = os.cpu_count() or 1, "cores"
    for quota_file, period_file in (("cpu.max", None),  # cgroup v2: "QUOTA PERIOD" or "max ..."
                                    ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):  # v1
        try:
            fields = (cgroup / quota_file).read_text().split()
            quota = fields[0]
            period = fields[1] if period_file is None else (cgroup / period_file).read_text().strip()
            if quota not in ("max", "-1") and int(quota) > 0 and int(period) > 0:
                q = max(1, math.ceil(int(quota) / int(period)))
                if q < n:
                    n, why = q, "cgroup CPU quota"
            break
        except (OSError, ValueError, IndexError):
            continue
    return n, why


def set_cpu_threads(processes_on_node: int = 1) -> str:
    """Threads for this process's CPU kernels, and why: ``OMP_NUM_THREADS`` when it is set
    (the user's or the scheduler's word), else the CPUs granted (:func:`granted_cpus`)
    shared among the processes on this node."""
    global THREADS_FROM
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        torch.set_num_threads(int(env))
        THREADS_FROM = f"OMP_NUM_THREADS={env}"
    else:
        n, why = granted_cpus()
        torch.set_num_threads(max(1, n // processes_on_node))
        share = f" / {processes_on_node} processes" if processes_on_node > 1 else ""
        THREADS_FROM = f"{n} CPUs ({why}){share}"
    return THREADS_FROM


THREADS_FROM = None  # what set_cpu_threads based the thread count on (provenance records it)
