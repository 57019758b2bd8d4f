"""The GPU run on this project's lent GPU machine: a machine with no network, given one
command of at most 10 minutes (all tries together about 15, its start included), with the
checkout and a JPEG zip carried along (``.carry/``). So the dev split is built on the spot
from the zip (with the same tool that made it here, ``make_dev_archive.py``, copied beside
the zip), and the run is fitted to a budget counted from the command's start:

    PYTHONPATH=src python devtools/gpu_check.py --zip .carry/cifar10-train-jpeg.zip --budget-s 300

Every other option is the GPU run's own (``python benchmarks/gpu_run.py --help``). Users
run ``python benchmarks/gpu_run.py --data`` on data they prepared with
``dvc repro preprocess``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from cifar10_tutorial.cli import run_stage
from cifar10_tutorial.data.datasets import get_dataset
from cifar10_tutorial.data.preprocess import prepare
from cifar10_tutorial.errors import PipelineError

TOOL = "make_dev_archive.py"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_run  # noqa: E402  (benchmarks/: the GPU run, a script folder beside devtools/)


def build_dev_data(zip_path: Path, work: Path, train: int = 40_000, test: int = 10_000,
                   tool: Optional[Path] = None) -> tuple[Path, dict]:
    """The dev split (``train`` training and ``test`` held-out images of the JPEG zip, in the
    official binary layout) made by ``make_dev_archive.py`` (beside the zip, or in
    ../shared/tools) and prepared as the preprocess stage prepares it; its folder and how it
    was made. The same zip and sizes give the same archive md5 on any machine."""
    zip_path = Path(zip_path)
    if not zip_path.is_file():
        raise PipelineError(f"{zip_path}: no such file; copy ../shared/data/cifar10-train-jpeg.zip "
                            f"there first (docs/benchmark.md, 'The prepared GPU run')")
    found = [p for p in ([tool] if tool else [zip_path.with_name(TOOL), Path("../shared/tools") / TOOL])
             if p is not None and Path(p).is_file()]
    if not found:
        raise PipelineError(f"{TOOL}: not beside {zip_path} nor in ../shared/tools; copy "
                            f"../shared/tools/{TOOL} beside the zip (docs/benchmark.md)")
    t = time.perf_counter()
    spec = get_dataset("cifar10")
    archive = Path(work) / spec.archive_name  # its name is in meta.json: the data hash
    proc = subprocess.run([sys.executable, str(found[0]), str(archive), "--zip", str(zip_path),
                           "--train", str(train), "--test", str(test)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise PipelineError(f"{found[0]} failed on {zip_path}: {proc.stderr.strip()[-500:]}")
    md5 = proc.stdout.strip().splitlines()[-1].split()[-1]
    made = Path(work) / "prepared"
    prepare(archive, made, spec)
    archive.unlink()
    return made, {"zip": zip_path.name, "archive_md5": md5, "train": train, "test": test,
                  "build_seconds": time.perf_counter() - t}


def main(argv=None) -> None:
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    ap.add_argument("--zip", type=Path, required=True, help="the JPEG zip, with "
                    "make_dev_archive.py beside it")
    ap.add_argument("--split", default="40000,10000", help="training,held-out images "
                    "(default 40000,10000, the project's dev split)")
    a, rest = ap.parse_known_args(argv)
    train_n, test_n = (int(x) for x in a.split.split(","))
    with tempfile.TemporaryDirectory(prefix="gpu_check-data-") as tmp:
        data, made = build_dev_data(a.zip, Path(tmp), train_n, test_n)
        print(f"built the dev split from {a.zip} in {made['build_seconds']:.0f} s "
              f"(archive md5 {made['archive_md5']})", flush=True)
        gpu_run.main(rest, built=(data, made), t0=t0)


if __name__ == "__main__":
    run_stage(main)
