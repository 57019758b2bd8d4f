"""``cifar10 trial``: the wall time of the exercise trial, as a user runs it.

The trial, ``dvc exp run -S reports/params.yaml:ablation.trial_steps=N
reports/dvc.yaml:report``, trains every variant of ``ablations:`` for N steps, evaluates
each once and writes the report. This runs exactly that command in a throwaway clone of
the checkout as the workspace is (its code and params, edits not yet committed included;
its ``dvc.lock``, DVC cache and the main pipeline's data linked in), so that neither the
workspace nor its committed results change, and prints the wall time, the stages DVC ran
and the slowest of them. ``--out`` keeps the figures with their provenance (a JSON file);
a failed trial keeps its log and names it.

    cifar10 trial                       # 5 steps a variant
    cifar10 trial --steps 200 --out reports/trial_benchmark.json

The main pipeline must have run here (``dvc repro``): the trial reads its prepared data.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import json
import os
import shutil
import subprocess
import time
from typing import Optional

from cifar10_tutorial.cli import EXERCISE_PARAMS, dvc_executable, given_path, stage_output
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import scratch_folder, write_text_atomic

RUNNING = "Running stage '"
DATA_STAGES = ("download", "preprocess")  # the main pipeline's, whose outputs the trial reads




def _link_tree(src: Path, dest: Path) -> None:
    """``src`` into ``dest`` as hard links (copies across file systems)."""
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)
    shutil.copytree(src, dest, copy_function=link, symlinks=True)


def _git_paths(root: Path, *args: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=root, capture_output=True,
                         check=True).stdout.decode()
    return [p for p in out.split("\0") if p]


def clone_for_trial(root: Path, dest: Path) -> Path:
    """A clone of ``root`` in ``dest`` as the workspace is: its HEAD, then every file the
    workspace changed, added (not ignored) or deleted, its dvc.lock and main-pipeline data:
    the trial's starting point, the user's code and params as they are."""
    folders = [stage_output(s, dvc_yaml=root / "dvc.yaml") for s in DATA_STAGES]
    if not (root / "dvc.lock").is_file() or not (root / folders[-1] / "meta.json").is_file():
        raise PipelineError(f"{root}: no dvc.lock or {folders[-1]}/meta.json: run `dvc repro` "
                            f"first (the trial trains on the main pipeline's prepared data)")
    subprocess.run(["git", "clone", "--quiet", "--shared", str(root), str(dest)], check=True)
    deleted = set(_git_paths(root, "--deleted"))
    for name in deleted:
        (dest / name).unlink(missing_ok=True)
    for name in [*_git_paths(root, "--modified", "--others", "--exclude-standard"), "dvc.lock"]:
        if name not in deleted and (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
    for folder in folders:
        if (root / folder).is_dir():
            _link_tree(root / folder, dest / folder)
    # the workspace's DVC cache (holding those outputs since `dvc repro`): without it DVC
    # finds them "not in cache" and runs their stages again. The trial's own outputs are
    # not cached (cache: false), so the cache gains nothing.
    cache = subprocess.run([dvc_executable(), "cache", "dir"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.strip()
    subprocess.run([dvc_executable(), "cache", "dir", "--local", cache], cwd=dest, check=True,
                   capture_output=True)
    return dest


def run_trial(clone: Path, steps: int, log: Path, say=print) -> dict:
    """Time ``dvc exp run -S reports/params.yaml:ablation.trial_steps=STEPS
    reports/dvc.yaml:report`` in
    ``clone``: the wall time, and each stage DVC ran with the seconds until the next began
    (the last: until the command ended). Its output goes to ``log``."""
    cmd = [dvc_executable(), "exp", "run", "-S", f"{EXERCISE_PARAMS}:ablation.trial_steps={steps}",
           "reports/dvc.yaml:report"]
    stages: list[list] = []
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        for line in proc.stdout:
            out.write(line)
            if line.startswith(RUNNING):
                now = time.perf_counter() - t0
                stages.append([line[len(RUNNING):].split("'")[0], now])
                say(f"  {now:6.1f} s  {stages[-1][0]}")
        code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        raise PipelineError(f"the trial failed (`{' '.join(cmd[1:])}` exited with {code}); its "
                            f"output: {log}")
    ends = [s[1] for s in stages[1:]] + [wall]
    return {"command": " ".join(["dvc", *cmd[1:]]), "steps": steps, "wall_s": round(wall, 1),
            "stages": {name: round(end - start, 1) for (name, start), end in zip(stages, ends)},
            "before_first_stage_s": round(stages[0][1], 1) if stages else None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 trial", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="ablation.trial_steps (default 5)")
    ap.add_argument("--out", type=given_path, help="write the figures here (JSON)")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = ap.parse_args(argv)
    from cifar10_tutorial.params import STEPS

    # each refused here, not after the clone and minutes of trial (its figures lost)
    if not STEPS.lo <= args.steps <= STEPS.hi:  # the range ablation.trial_steps takes
        raise PipelineError(f"--steps {args.steps}: expected {STEPS.text(True)} (steps a "
                            f"variant); give a number in that range")
    if args.out is not None:
        from cifar10_tutorial.ownership import ensure_writable, json_with, refuse_foreign_file

        if args.out.is_dir():
            raise PipelineError(f"--out {args.out}: a folder; give the JSON file to write")
        if args.out.is_symlink():  # as write_text_atomic would refuse it, at the end
            raise PipelineError(f"--out {args.out}: a link, where the trial writes a file of "
                                f"its own; give another path (or move the link away)")
        refuse_foreign_file(args.out, "--out", "a trial's record (JSON)",
                            json_with("stages", "wall_s"))
        ensure_writable(args.out.parent)
    root = Path.cwd()
    with scratch_folder(SCRATCH, MARK, "cifar10 trial") as tmp:
        _trial(root, tmp, args)


# its scratch folder's name (cifar10-trial-PID-*) and the mark that says it is the trial's:
# a trial killed with no clean-up (kill -9) leaves a clone of hundreds of MB, which the
# next trial removes
SCRATCH, MARK = "cifar10-trial", ".cifar10-trial"


def _trial(root: Path, tmp: Path, args) -> None:
    from cifar10_tutorial import provenance

    failed = True
    try:
        clone = clone_for_trial(root, tmp / "repo")
        print(f"the trial, {args.steps} steps a variant, in a clone ({clone}):", flush=True)
        result = run_trial(clone, args.steps, tmp / "trial.log")
        slowest = sorted(result["stages"].items(), key=lambda kv: -kv[1])[:3]
        print(f"the trial: {len(result['stages'])} stages in {result['wall_s']:.0f} s "
              f"({result['wall_s'] / 60:.1f} min) on {provenance.cpu_model()}, "
              f"{os.cpu_count()} CPUs; slowest: "
              + ", ".join(f"{n.split(':')[-1]} {s:.0f} s" for n, s in slowest))
        if args.out is not None:
            result["provenance"] = {"code": provenance.code_version(root),
                                    "cpu": provenance.cpu_model(), "cpus": os.cpu_count(),
                                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "data": _data_hash(root)}
            write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
        failed = False
    finally:
        if args.keep:  # the user's now: unmarked, no later trial removes it
            (tmp / MARK).unlink()
            print(f"kept: {tmp}")
        elif failed and (tmp / "trial.log").is_file():  # the log the error names stays
            shutil.rmtree(tmp / "repo", ignore_errors=True)
            (tmp / MARK).unlink()


def _data_hash(root: Path) -> Optional[str]:
    """The prepared data's hash, as the runs' provenance records it."""
    from cifar10_tutorial.data.prepared import load_prepared

    return load_prepared(root / stage_output("preprocess", dvc_yaml=root / "dvc.yaml")).content_hash


if __name__ == "__main__":
    from cifar10_tutorial.cli import run_stage

    run_stage(main)
