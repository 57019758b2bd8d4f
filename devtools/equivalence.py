"""Do two commits train bit-identically? Results made at different commits count as one
piece only if the training math did not change between them: this runs the CI's fixed-seed
real configuration (``python .ci/ci.py real --keep``: the whole pipeline on
the dev data, at the CI's thread count) at each commit, in git worktrees of its own, compares the raw and
averaged weights of the two ``model.pt`` tensor by tensor, and records the outcome.

    python devtools/equivalence.py 6fd7dee f958593 [--record reports/code_equivalence.json]

The record (a JSON list, one entry per check, newest last) holds both full commits, a
digest of each model's tensors, their held-out precision, the machine and torch of each
run, whether they are identical, and the date. The report reads it (:mod:`cifar10_tutorial.report.equivalence`):
variants made at commits joined by identical checks count as made by one training code.
Exit status 1 when the two differ (the record says so too). A tool of this project's own
development, not of the package: it needs ../shared beside the repository (the dev
archive's tool, ``make_dev_archive.py``), and about 5 minutes per commit on two CPU threads.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from cifar10_tutorial.cli import run_stage, stage_output
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import write_text_atomic
from cifar10_tutorial.report.equivalence import load_record

SHARED = Path("../shared")  # beside the repository: tools/make_dev_archive.py, data/
# The real configuration's archive: 5,000 training and 1,000 held-out images of the dev zip.
REAL_SPLIT = ("--train", "5000", "--test", "1000")

RECORD = Path("reports/code_equivalence.json")
CHECK = "python .ci/ci.py real --keep"
# Both commits train at one thread count: the sums a run makes (and so its weights) depend
# on it. The CI's own count, which .ci/ci.py pins from 20e1537 on (older ones take the
# environment's): a check at another count than its commit's own would compare two counts.
THREADS = "2"


def real_archive(root: Path, scratch: Path) -> Path:
    """The real configuration's archive, made once by the dev archive tool."""
    tool = (root / SHARED / "tools" / "make_dev_archive.py").resolve()
    if not tool.is_file():
        raise PipelineError(f"{tool}: not here; the check needs ../shared beside the repository")
    out = scratch / "ci-real.tar.gz"
    proc = subprocess.run([sys.executable, str(tool), str(out), *REAL_SPLIT],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise PipelineError(f"{tool} failed: {proc.stderr.strip()[-400:]}")
    return out


def tensor_digest(model_file: Path) -> str:
    """sha256 over the raw (``model``) and averaged (``ema``) tensors of a model.pt, in key
    order: equal for the same weights whatever else the file records."""
    import torch

    obj = torch.load(model_file, map_location="cpu", weights_only=True)
    h = hashlib.sha256()
    for part in ("model", "ema"):
        for key in sorted(obj[part]):
            t = obj[part][key].contiguous()
            h.update(f"{part}.{key}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes())
    return h.hexdigest()


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PipelineError(f"git {' '.join(args)}: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()


def run_at(root: Path, commit: str, scratch: Path, archive: Path) -> dict:
    """The CI's real configuration at ``commit`` (a worktree in ``scratch``): its model's
    tensor digest and held-out precision. Commits whose ci.py takes ``--real-archive`` get
    ``archive``; older ones build it themselves from ../shared (linked beside the worktree)."""
    tree = scratch / commit[:12]
    _git(root, "worktree", "add", "-q", "--detach", str(tree), commit)
    try:
        if not (scratch / "shared").exists():
            (scratch / "shared").symlink_to((root / SHARED).resolve())
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": THREADS,
               "MKL_NUM_THREADS": THREADS,
               "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
        script = tree / ".ci" / "ci.py"
        cmd = [sys.executable, str(script), "real", "--keep"]
        if not script.is_file():  # older commits: a module of the package
            script = tree / "src" / "cifar10_tutorial" / "ci.py"
            cmd[1:2] = ["-m", "cifar10_tutorial.ci"]
        if "--real-archive" in script.read_text():
            cmd += ["--real-archive", str(archive)]
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        kept = re.search(r"passed in \d+ s \(scratch kept: (.+)\)", proc.stdout)
        if proc.returncode != 0 or not kept:
            raise PipelineError(f"{CHECK} failed at {commit[:10]} (exit {proc.returncode}): "
                                f"{(proc.stdout + proc.stderr).strip()[-400:]}")
        project = Path(kept.group(1))
        try:  # that commit's pipeline, as its own dvc.yaml names the files
            dvc_yaml = project / "dvc.yaml"
            metrics = json.loads((project / stage_output("eval", "metrics.json", dvc_yaml))
                                 .read_text())
            made = json.loads((project / stage_output("train", "provenance.json", dvc_yaml))
                              .read_text())
            return {"digest": tensor_digest(project / stage_output("train", "model.pt", dvc_yaml)),
                    "device": made.get("device"), "torch": made.get("torch"),
                    "precision_at_1": metrics["precision_at_1"],
                    "precision_at_1_raw": metrics["precision_at_1_raw"]}
        finally:
            shutil.rmtree(project.parent, ignore_errors=True)
    finally:
        _git(root, "worktree", "remove", "--force", str(tree))


def check(root: Path, old: str, new: str) -> dict:
    commits = [_git(root, "rev-parse", "--verify", f"{c}^{{commit}}") for c in (old, new)]
    scratch = Path(tempfile.mkdtemp(prefix="equivalence-"))
    try:
        archive = real_archive(root, scratch)
        runs = [run_at(root, c, scratch, archive) for c in commits]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"commits": commits, "check": CHECK, "threads": int(THREADS),
            "identical": runs[0]["digest"] == runs[1]["digest"], "runs": runs,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="a commit (the earlier)")
    ap.add_argument("new", help="a commit (the later)")
    ap.add_argument("--record", type=Path, default=RECORD,
                    help=f"the JSON list the outcome is added to (default: {RECORD})")
    args = ap.parse_args(argv)
    root = Path(_git(Path("."), "rev-parse", "--show-toplevel"))
    rec = load_record(args.record)
    outcome = check(root, args.old, args.new)
    write_text_atomic(args.record, json.dumps(rec + [outcome], indent=2) + "\n")
    a, b = (c[:10] for c in outcome["commits"])
    if not outcome["identical"]:
        raise PipelineError(f"{a} and {b} train differently (the fixed-seed pair's weights "
                            f"differ; recorded in {args.record}): results made at the two do "
                            f"not count as one piece")
    print(f"{a} and {b} train bit-identically: the fixed-seed pair's raw and averaged weights "
          f"are equal tensor for tensor (recorded in {args.record})")


if __name__ == "__main__":
    run_stage(main)
