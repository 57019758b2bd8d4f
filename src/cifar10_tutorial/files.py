"""Writing results so that nothing half-written ever looks complete: each writer writes a
temporary file beside the target, then renames it into place."""
from __future__ import annotations

import errno
import hashlib
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

# Where the code lives in a checkout: the folder that holds the package (what a subprocess
# needs on PYTHONPATH) and the stage scripts beside it.
SRC_DIR = Path(__file__).resolve().parents[1]
STAGES_DIR = SRC_DIR.parent / "stages"


def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    """The md5 of a file's bytes, read in chunks (archives, prepared tensors)."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


FULL_BELOW = 4 << 20  # bytes free under which a failed write is taken for a full disk


@contextmanager
def writing(path: Path, name: Optional[Path] = None):
    """Around code that writes ``path``: a full disk, however the writer reports it (numpy
    raises OSError without an errno, torch a RuntimeError), becomes ``OSError(ENOSPC)``
    naming the file (``name``: the output to name instead, e.g. the folder a temporary one
    becomes), which the stages print as one line (:func:`.cli.run_stage`)."""
    shown = str(name or path)
    try:
        yield
    except (OSError, RuntimeError) as exc:
        code = getattr(exc, "errno", None)
        if code == errno.ENOSPC or (code is None and _disk_full(Path(path))):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), shown) from None
        if code in WRITE_HINTS and not getattr(exc, "filename", None):
            raise OSError(code, exc.strerror, shown) from None
        raise


def _disk_full(path: Path) -> bool:
    import shutil

    folder = path if path.is_dir() else path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW
    except OSError:
        return False


def _replace_with(path: Path, write, suffix: str = ".tmp") -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + suffix)
    try:
        with writing(tmp, path):
            write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no partial file left beside the output
        raise
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path``."""
    _replace_with(path, lambda tmp: tmp.write_text(text))


def torch_save_atomic(obj, path: Path) -> None:
    """``torch.save(obj)`` into ``path`` (checkpoints, model.pt)."""
    import torch

    _replace_with(path, lambda tmp: torch.save(obj, tmp))


def save_figure_atomic(fig, path: Path, **savefig_args) -> None:
    """A matplotlib figure into ``path`` (a PNG), then the figure is closed (one that pyplot
    made; a bare ``Figure`` needs no closing)."""
    try:  # the temporary name keeps the .png suffix: savefig picks the format from it
        _replace_with(path, lambda tmp: fig.savefig(tmp, **savefig_args), ".tmp.png")
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close(fig)


def refuse_foreign(folder: Path, ours: set[str], stage: str, option: str = "--out") -> None:
    """Stop before anything is touched when ``folder`` (a stage's output, which the stage
    replaces or prunes) holds entries the stage does not make (``ours``: their names)."""
    from .errors import PipelineError

    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise PipelineError(f"{folder}: the {stage} stage's {option} must be a folder, found a "
                            f"file; give {option} a folder of its own (see dvc.yaml)")
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in ours)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise PipelineError(f"{folder}: holds {shown}, which the {stage} stage did not make and "
                            f"would delete; give {option} a folder of its own (as in dvc.yaml), "
                            f"or move those elsewhere first. Nothing was changed.")


# errors of writing outputs that the user fixes outside the project (what to do, one
# phrase each): the stages' one-line errors (cli.run_stage) and ensure_writable
WRITE_HINTS = {
    errno.ENOSPC: "free disk space there (or point the stage's output elsewhere)",
    errno.EDQUOT: "free space within your quota (or point the stage's output elsewhere)",
    errno.EROFS: "the file system is read-only: point the stage's output at a writable folder",
    errno.EACCES: "make the folder writable (chmod u+w) or point the stage's output elsewhere",
    errno.EPERM: "the folder refuses writes (immutable? chattr -i) or point the stage's output "
                 "elsewhere",
}


def ensure_writable(*folders: Path) -> None:
    """Stop before a run removes or replaces anything when it could not write its outputs
    back: each folder (or, where it does not exist yet, the nearest folder above it that
    does) must take a new file. Probed with a real file, not ``os.access``, which root
    passes and which knows nothing of read-only mounts or immutable folders."""
    import tempfile

    from .errors import PipelineError

    for folder in folders:
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():  # one line, not FileExistsError
            raise PipelineError(f"{folder}: a file, where the run needs a folder to write "
                                f"into; give another path, or move that file; nothing was changed")
        probe = folder
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            fd, name = tempfile.mkstemp(prefix=".write-probe-", dir=probe)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            hint = WRITE_HINTS.get(exc.errno, WRITE_HINTS[errno.EACCES])
            raise PipelineError(f"{probe}: cannot write there ({exc.strerror}), and the run "
                                f"writes {folder}; nothing was changed or removed. {hint[0].upper()}"
                                f"{hint[1:]}, then rerun.") from None


RUN_LOCK_SUFFIX = ".run-lock"
_held: dict = {}  # folder -> its open lock file, held until the process ends


def hold_run_lock(folder: Path, command: str, host: Optional[str] = None) -> None:
    """One run per output folder: an exclusive lock on ``.<folder name>.run-lock`` beside
    ``folder``, held until this process ends (the kernel releases it on any exit, kill -9
    included, so a killed run never leaves it stuck). A second run on the same folder stops
    at once with one line naming the first (its pid, start and command). ``host``: one lock
    per machine (``.<folder name>.<host>.run-lock``), for the nodes of one job that share
    the folder on a network file system."""
    import fcntl
    import time

    folder = Path(folder)
    path = folder.parent / f".{folder.name}{'.' + host if host else ''}{RUN_LOCK_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        from .errors import PipelineError
        raise PipelineError(f"{folder}: another run is writing there ({holder}); wait for it "
                            f"to end, or give this one another output folder") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: {command}\n")
    f.flush()
    _held[str(folder)] = f

