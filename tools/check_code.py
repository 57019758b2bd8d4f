"""``cifar10 check-code``: does the workspace's code still train bit-identically to the
commit that made the committed exercise results? If it does, the results stand for this
code, and the exercise lock may say so.

A change of code in a variant's dependencies (a refactor, a comment, a new option that
is off by default) makes every variant stale in ``dvc status reports/dvc.yaml``, and
``dvc repro reports/dvc.yaml`` would retrain all of them. This trains one short, fixed
configuration (a synthetic archive the command makes, or ``--data``, prepared data of
your own) twice, with one thread: once with the code of ``--against`` (by default the
commit that last recorded ``reports/dvc.lock``) and once with the workspace's code as it
is, uncommitted edits included; then compares the raw and averaged weights of the two
models tensor for tensor.

Only when they are equal, and only when nothing but code changed for the variants (no
param, no data, no result: ``dvc status reports/dvc.yaml``), it records their stages as
up to date (``dvc commit -f`` of each); the report stage, whose own code writes the
report, is rerun instead (``dvc repro -s reports/dvc.yaml:report``, seconds). Any other
difference is one the variants' results do depend on: retraining them is then the honest
answer.

    cifar10 check-code                      # against the commit of reports/dvc.lock
    cifar10 check-code --against v1.2 --data data/prepared --no-record
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
import tempfile
from typing import Optional

import yaml

from cifar10_tutorial.cli import dvc_executable
from cifar10_tutorial.errors import PipelineError

LOCK = Path("reports/dvc.lock")
# the fixed configuration: short, every part of a step exercised (queue input,
# distortions, the averages), the rest of the params at each code's defaults
FIXED = {"train": {"max_steps": 24, "batch_size": 32, "log_every": 12, "device": "cpu"},
         "input": {"min_fraction_of_examples_in_queue": 0.1},
         "eval": {"every_steps": 0}}  # only keys older code knows too (no `run:` section)
CODE = ("src", "stages")  # what of a tree the check runs


def _git(*args: str, cwd: Path = Path(".")) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise PipelineError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout.strip()


def lock_commit(root: Path) -> str:
    """The commit that last recorded the exercise lock."""
    commit = _git("log", "-1", "--format=%H", "--", str(LOCK), cwd=root)
    if not commit:
        raise PipelineError(f"{LOCK}: never committed here; give --against COMMIT")
    return commit


def _tree_of(commit: str, root: Path, dest: Path) -> Path:
    """The code (src/, stages/) of ``commit`` in ``dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, *CODE], cwd=root, capture_output=True)
    if archive.returncode:
        raise PipelineError(f"--against {commit}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def _workspace_tree(root: Path, dest: Path) -> Path:
    """The workspace's code (src/, stages/) as it is, in ``dest``."""
    for part in CODE:
        shutil.copytree(root / part, dest / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def _fixed_data(tmp: Path, data: Optional[Path]) -> Path:
    if data is not None:
        if not (Path(data) / "meta.json").is_file():
            raise PipelineError(f"--data {data}: not prepared data (no meta.json); give the "
                                f"folder the preprocess stage writes (its output in dvc.yaml)")
        return Path(data).resolve()
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import prepare
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    make_cifar10_archive(tmp / "fixed.tar.gz", train_per_batch=100, test=50, seed=7)
    prepare(tmp / "fixed.tar.gz", tmp / "prepared", CIFAR10)
    return tmp / "prepared"


def train_with(tree: Path, data: Path, params: dict, what: str) -> dict:
    """Train the fixed configuration with the code in ``tree``; its model's tensors."""
    import torch

    (tree / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(tree / "src")}
    env.pop("CIFAR10_STOP_AT", None)
    env.pop("CIFAR10_CHECKPOINT_MIRROR", None)
    proc = subprocess.run([sys.executable, "stages/train.py", "--params", "params.yaml",
                           "--data", str(data), "--out", "run", "--live", "live"],
                          cwd=tree, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PipelineError(f"the fixed configuration did not train with {what}: {last}")
    model = torch.load(tree / "run" / "model.pt", map_location="cpu", weights_only=True)
    return {f"{k}.{n}": t for k in ("model", "ema") for n, t in model[k].items()}


def differences(a: dict, b: dict) -> list[str]:
    """The tensors of ``a`` and ``b`` that are not equal bit for bit (by name)."""
    import torch

    names = sorted(set(a) | set(b))
    return [n for n in names if n not in a or n not in b or a[n].shape != b[n].shape
            or not torch.equal(a[n], b[n])]


VARIANT = "reports/dvc.yaml:ablation@"  # the stages whose training the check covers


def stale_variants(root: Path) -> tuple[list[str], str]:
    """The variant stages ``dvc status reports/dvc.yaml`` finds changed in code files only,
    and what else it found, in words (a changed param, data or result; a data-set
    variant, whose data preparation the check does not run)."""
    proc = subprocess.run([dvc_executable(), "status", "--json", "reports/dvc.yaml"],
                          cwd=root, capture_output=True, text=True)
    if proc.returncode:
        return [], f"dvc status failed: {proc.stderr.strip()}"
    stages, other = [], []
    for stage, changes in json.loads(proc.stdout or "{}").items():
        if stage == "reports/dvc.yaml:report":
            continue  # rerun, not recorded: its code writes the report itself (seconds)
        found = [f"{stage}: {change}" for change in changes if not isinstance(change, dict)]
        for change in changes:
            for kind, paths in (change.items() if isinstance(change, dict) else []):
                for path, state in (paths.items() if isinstance(paths, dict) else []):
                    if not (kind == "changed deps" and state == "modified"
                            and path.split("/")[0] in CODE):
                        found.append(f"{stage}: {path} {state}")
        if not stage.startswith(VARIANT):
            found.append(f"{stage}: not a variant the check trains")
        other += found
        stages += [] if found else [stage]
    return stages, "; ".join(other[:3]) + (" ..." if len(other) > 3 else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 check-code", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="the commit to compare with (default: the commit that "
                    "last recorded reports/dvc.lock)")
    ap.add_argument("--data", type=Path, help="prepared data to train on (default: a "
                    "synthetic archive the command makes)")
    ap.add_argument("--no-record", action="store_true",
                    help="only compare; never touch reports/dvc.lock")
    args = ap.parse_args(argv)
    root = Path.cwd()
    missing = [n for n in CODE if not (root / n).is_dir()]
    if missing:  # the workspace's code is the code of the folder it runs in
        raise PipelineError(f"check-code: {root} is not the repository root of a checkout of "
                            f"this project (no {', '.join(f'{n}/' for n in missing)}); run it "
                            f"from the folder that holds src/ and stages/")
    against = args.against or lock_commit(root)
    short = _git("rev-parse", "--short", against, cwd=root)
    with tempfile.TemporaryDirectory(prefix="cifar10-check-") as tmp:
        tmp = Path(tmp)
        data = _fixed_data(tmp, args.data)
        print(f"training the fixed configuration ({FIXED['train']['max_steps']} steps, one "
              f"thread) with the code of {short}, then with the workspace's", flush=True)
        theirs = train_with(_tree_of(against, root, tmp / "theirs"), data, FIXED, short)
        ours = train_with(_workspace_tree(root, tmp / "ours"), data, FIXED, "the workspace")
    differ = differences(theirs, ours)
    if differ:
        raise PipelineError(
            f"the workspace's code does not train as {short}'s: {len(differ)} of "
            f"{len(set(theirs) | set(ours))} tensors differ ({', '.join(differ[:3])}); "
            f"the committed results are not this code's: retrain the variants that read "
            f"the changed code (dvc repro reports/dvc.yaml)")
    print(f"identical: the raw and averaged weights of the workspace's code equal "
          f"{short}'s, tensor for tensor ({len(ours)} tensors)")
    if args.no_record:
        return
    stages, other = stale_variants(root)
    if other:
        raise PipelineError(f"{LOCK} left as it is: more than code changed for the exercise "
                            f"pipeline ({other}); a changed param or data is a change the "
                            f"results depend on, and missing data must be prepared first "
                            f"(docs/exercises.md)")
    if stages:
        subprocess.run([dvc_executable(), "commit", "-f", "-q", *stages], cwd=root, check=True)
    print(f"recorded {len(stages)} variant stage(s) of {LOCK} as up to date for this code; "
          f"commit it with your change (`dvc repro -s reports/dvc.yaml:report` reruns the "
          f"report where its own code changed)")

if __name__ == "__main__":
    from cifar10_tutorial.cli import run_stage

    run_stage(main)
