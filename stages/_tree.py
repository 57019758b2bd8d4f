"""Imported first by every stage script: the stage runs the code of its own tree.

DVC hashes this tree's `src/` (each stage's `deps:`), so that is the code that must run,
whatever else is installed: the package of another clone (`pip install -e` there), or this
tree's original while `dvc exp run --temp`/`--queue` runs a copy of it under `.dvc/tmp`.
This puts the tree's `src/` first on `sys.path` and stops if the package still comes from
elsewhere. (A folder of stage scripts without `src/` beside them runs the installed package.)
"""
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if (SRC / "cifar10_tutorial").is_dir():
    sys.path.insert(0, str(SRC))

    import cifar10_tutorial  # noqa: E402

    _found = Path(cifar10_tutorial.__file__).resolve().parent
    if _found != (SRC / "cifar10_tutorial").resolve():
        sys.exit(f"error: the stage imported cifar10_tutorial from {_found}, not from this "
                 f"tree's {SRC / 'cifar10_tutorial'}; run the stage as `python stages/NAME.py` "
                 f"(or through `dvc repro`) in this tree.")
