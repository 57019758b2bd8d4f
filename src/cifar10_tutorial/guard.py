"""A command's child processes die with it: ``dvc repro`` and the stages it starts, under
`cifar10 repro` and the CI runner.

The command runs under a small guard process, in a process group of its own. When the
process that started it dies, even by kill -9 (no clean-up of its own), Linux signals the
guard (its parent-death signal); a SIGTERM sent to the guard does the same. The guard then
sends one SIGTERM to the whole group (a training stage checkpoints and exits on it), waits
for the group to empty, ``grace`` seconds at most, and kills what is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

GUARD = r"""
import ctypes, os, signal, subprocess, sys, time
parent, grace = int(sys.argv[1]), float(sys.argv[2])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass  # not Linux: the group is still stopped on Ctrl-C and SIGTERM
if os.getppid() != parent:  # the command died before the signal was set
    sys.exit(143)
child = subprocess.Popen(sys.argv[3:])
def others():
    # the group's other live members (a stage whose DVC has exited is one of them)
    me, group, found = os.getpid(), os.getpgid(0), []
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue
        if entry.isdigit() and int(entry) != me and stat[0] != "Z" and int(stat[2]) == group:
            found.append(int(entry))
    return found
def stop(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)  # once: a second SIGTERM stops a stage without its checkpoint
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            child.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
        if not os.path.isdir("/proc") or not others():
            break
    if not os.path.isdir("/proc") or others():
        os.killpg(0, signal.SIGKILL)
    os._exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
signal.signal(signal.SIGINT, stop)
rc = child.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def start_guarded(cmd: list[str], grace: float, **popen) -> subprocess.Popen:
    """``cmd`` started under :data:`GUARD`, in a new process group (the guard leads it):
    stopped with this process, or by :func:`stop_guarded`."""
    return subprocess.Popen([sys.executable, "-c", GUARD, str(os.getpid()), str(grace), *cmd],
                            start_new_session=True, **popen)


def stop_guarded(proc: subprocess.Popen) -> None:
    """Ask the guard to stop its group (one SIGTERM to each member, then its grace)."""
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (its ID is not reused while so)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int) -> None:
    """SIGKILL to what is left of group ``pgid``."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(pgid: int, grace: float) -> None:
    """A group whose guard is gone: one SIGTERM to each member (a training stage writes its
    checkpoint on it), then SIGKILL to what is left after ``grace`` seconds."""
    import time

    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    kill_group(pgid)
