"""Imported first by every stage script: the stage runs the code of its own tree.

DVC hashes this tree's `src/` (each stage's `deps:`), so that is the code that must run,
whatever else is installed: the package of another clone (`pip install -e` there), or this
tree's original while `dvc exp run --temp`/`--queue` runs a copy of it under `.dvc/tmp`.
This puts the tree's `src/` first on `sys.path` and stops if the package still comes from
elsewhere.
"""
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

import cifar10_tutorial  # noqa: E402

_found = Path(cifar10_tutorial.__file__).resolve().parent
if _found != SRC / "cifar10_tutorial":
    sys.exit(f"error: the stage imported cifar10_tutorial from {_found}, not from this tree's "
             f"{SRC / 'cifar10_tutorial'}; run the stage with `python stages/NAME.py` (or "
             f"`dvc repro`) from a checkout that has src/.")
