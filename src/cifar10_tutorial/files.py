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

def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    """The md5 of a file's bytes, read in chunks (archives, prepared tensors)."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def read_small_file(path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (a params or
    metrics file). A FIFO would block the read for ever, /dev/zero fill the memory, a
    loop of links raise: each is an ``OSError`` naming the file and what it is instead
    (the callers turn it into their one-line error)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "a loop of symbolic links", str(path)) from None
        raise
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit:,} bytes: not a file of this kind",
                      str(path))
    return data


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
