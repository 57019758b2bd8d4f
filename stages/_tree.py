"""Imported first by every stage script: the stage runs the code of its own tree.

DVC hashes this tree's `src/` (each stage's `deps:`), so that is the code that must run,
whatever else is installed: the package of another clone (`pip install -e` there), or this
tree's original while `dvc exp run --temp`/`--queue` runs a copy of it under `.dvc/tmp`.
This puts the tree's `src/` first on `sys.path` and stops if the package still comes from
elsewhere. (A folder of stage scripts without `src/` beside them runs the installed package.)

Nothing else of the tree's stages/ and src/ is imported: Python puts the script's folder
first on `sys.path`, and a stray module there or in `src/` (a `tqdm.py`) would run in place
of an installed package, outside the files DVC hashes. The stage folder leaves `sys.path`
once this module is imported, and a module beside the package in `src/` stops the stage.
"""
import os
import sys

# first, before any import that searches sys.path (pathlib is one): os and sys are loaded
# with the interpreter
_STAGES = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _STAGES]

from pathlib import Path  # noqa: E402

STAGES = Path(_STAGES)
SRC = STAGES.parent / "src"


def _importable_strays(src: Path) -> list[str]:
    """What ``import NAME`` would find in ``src`` besides the package: modules, extension
    modules and regular packages (a folder without ``__init__.py`` never shadows one that
    is installed)."""
    return sorted(p.name for p in src.iterdir() if p.name != "cifar10_tutorial" and (
        (p.is_file() and p.suffix in (".py", ".pyc", ".so", ".pyd"))
        or (p.is_dir() and (p / "__init__.py").exists())))


if (SRC / "cifar10_tutorial").is_dir():
    if _strays := _importable_strays(SRC):
        sys.exit(f"error: {SRC / _strays[0]}: src/ holds the package cifar10_tutorial only; a "
                 f"module beside it would be imported by every stage in place of an installed "
                 f"one, outside what DVC hashes; move it out of src/")
    sys.path.insert(0, str(SRC))

    import cifar10_tutorial  # noqa: E402

    _found = Path(cifar10_tutorial.__file__).resolve().parent
    if _found != (SRC / "cifar10_tutorial").resolve():
        sys.exit(f"error: the stage imported cifar10_tutorial from {_found}, not from this "
                 f"tree's {SRC / 'cifar10_tutorial'}; run the stage as `python stages/NAME.py` "
                 f"(or through `dvc repro`) in this tree.")
