"""``cifar10 repro``: ``dvc repro`` for runs that pause at a deadline and continue later.

Under plain ``dvc repro`` a training stage that pauses (exit status 75, docs/continuing.md)
looks like a crash: DVC prints "failed to reproduce ... exited with 75" and exits 255,
which a batch scheduler cannot tell from a failure. This runs ``dvc repro`` with the
user's arguments and:

- ``--stop-at WHEN`` becomes one deadline for the whole command (a duration counts from
  this command's start, not from each stage's), handed to the stages as
  ``CIFAR10_STOP_AT=@<POSIX time>``; ``--mirror URL`` becomes ``CIFAR10_CHECKPOINT_MIRROR``;
- a stage that paused ends the command with status 75 and one line saying so, in place of
  DVC's error for it; DVC has recorded nothing for that stage, so the same command, here
  or on another machine with the same mirror, continues it;
- any other outcome keeps DVC's output and exit status (0: everything up to date);
- ``dvc repro`` and its stages never outlive this command: Ctrl-C, SIGTERM or SIGHUP here
  stop them (a training stage checkpoints first: the same command continues it), and so
  does a kill -9 of this command (:mod:`.guard`).
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Optional

from .cli import dvc_executable
from .guard import group_alive, kill_group, start_guarded, stop_group, stop_guarded
from .training.mirror import MIRROR_ENV
from .training.deadline import STOP_AT_ENV, parse_deadline
from .training.distributed import PAUSED_EXIT

PAUSED_LINE = re.compile(r"paused at step (\d+) of (\d+)")
DVC_PAUSED = re.compile(r"failed to reproduce '([^']+)'.*exited with %d" % PAUSED_EXIT)


def stage_env(stop_at: Optional[str], mirror: Optional[str], env=None) -> dict:
    """The environment for ``dvc repro``: one deadline for every stage it runs."""
    env = dict(os.environ if env is None else env)
    if stop_at is not None:
        env[STOP_AT_ENV] = f"@{parse_deadline(stop_at):.3f}"
    if mirror is not None:
        env[MIRROR_ENV] = mirror
    return env


GRACE = 120.0  # seconds a stopped stage gets to write its checkpoint before SIGKILL


def repro(dvc_args: list[str], env: dict, out=None) -> int:
    """Run ``dvc repro DVC_ARGS``, passing its output on; 75 when a stage paused, 128 + the
    signal's number when a signal stopped it."""
    out = out or sys.stdout or open(os.devnull, "w")  # stdout closed (`>&-`): nowhere
    proc = start_guarded([dvc_executable(), "repro", *dvc_args], GRACE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         bufsize=1)
    got = []

    def forward(signum, _frame):  # to the guard, which stops the group once
        got.append(signum)
        stop_guarded(proc)

    def watch() -> None:  # the guard itself killed (kill -9): its group stopped here
        if proc.wait() < 0 and group_alive(proc.pid):
            got.append(-proc.returncode)
            stop_group(proc.pid, GRACE)

    threading.Thread(target=watch, daemon=True).start()
    # a signal ignored here stays ignored (nohup's SIGHUP: a closed terminal stops nothing)
    ending = [sig for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
              if signal.getsignal(sig) is not signal.SIG_IGN]
    old = {sig: signal.signal(sig, forward) for sig in ending}
    paused, stage = None, None
    try:
        for line in proc.stdout:
            if m := PAUSED_LINE.search(line):
                paused = (int(m[1]), int(m[2]))
            if paused and (m := DVC_PAUSED.search(line)):
                stage = m[1]  # DVC's "failed" for a pause: said below in our own words
                continue
            _say(out, line.rstrip("\n"))  # the reader gone (`| head`): the run goes on
        code = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if group_alive(proc.pid):  # a stage DVC left behind: none outlives this command
            kill_group(proc.pid)
    if got:
        whose = "its guard killed by signal" if code < 0 else "stopped by signal"
        _say(out, f"cifar10 repro: {whose} {got[0]}; its stages were stopped (a training "
                  f"stage writes its checkpoint first, as its last lines above say): run the "
                  f"same command again to continue; the outputs DVC removed before the "
                  f"stopped stage ran come back with `dvc checkout` (those DVC caches) or "
                  f"`git checkout -- PATH` (those git tracks)")
        return 128 + got[0]
    if code and stage:
        _say(out, f"cifar10 repro: stage {stage!r} paused at step {paused[0]} of {paused[1]} "
                  f"(its checkpoint is kept; DVC recorded nothing for it): run the same "
                  f"command again to continue; exit status {PAUSED_EXIT}")
        return PAUSED_EXIT
    return code


def _say(out, line: str) -> None:
    """A line of output; a reader gone (`| head`) stops the output, not the run, and changes
    no exit status."""
    try:
        out.write(line + "\n")
        out.flush()
    except BrokenPipeError:  # no more output there, and none at exit either (Python's docs)
        if out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="cifar10 repro", description=__doc__.split("\n\n")[0],
        epilog="Every other argument goes to `dvc repro` (targets, -f, ...). Exit status: 0 "
               "done, 75 paused (run it again), else DVC's. e.g. `cifar10 repro --stop-at "
               "3h50m --mirror s3://my-bucket/runs reports/dvc.yaml`")
    ap.add_argument("--stop-at", metavar="WHEN",
                    help="pause every training stage at this deadline: a duration from now "
                         "(3h50m) or a moment (18:20, 2026-12-01T18:20 UTC)")
    ap.add_argument("--mirror", metavar="URL",
                    help="keep each run's newest checkpoint here too (a folder, s3://...)")
    a, rest = ap.parse_known_args(argv)
    sys.exit(repro(rest, stage_env(a.stop_at, a.mirror)))
