"""Writing results so that nothing half-written ever looks complete: each writer writes a
temporary file beside the target, then renames it into place."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

# bytes of a name kept whole in the hidden names built beside it (``.NAME.staging-PID-xxxx``,
# ``.NAME.<random>.tmp``, ``.NAME.HOST.run-lock``): with what they add, within the 255
# bytes a file system allows a name
NAME_ROOM = 150


def hidden_stem(name: str) -> str:
    """``name`` as the hidden names built beside it hold it: whole where it fits in
    ``NAME_ROOM`` bytes, else its first bytes and a digest of the whole (still one stem
    per name, the same each run), so that a long output name is no error in a name of
    ours. Writers and the clean-ups that find their leftovers use it alike."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= NAME_ROOM:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return raw[:NAME_ROOM - 17].decode("utf-8", "ignore") + "~" + digest


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine still runs (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HELD: dict = {}  # folder -> the open descriptor whose lock says "in use" while we live


def hold_folder(folder: Path) -> None:
    """Lock ``folder`` (one this process made, to write in) for as long as this process
    lives, or until :func:`release_folder`: the kernel drops the lock when the process ends,
    kill -9 included. A sweep of leftovers asks :func:`folder_held`, which holds whatever PID
    namespace the two processes run in (a container sharing the temporary folder sees
    other PIDs: the PID in a folder's name can look dead while its process runs)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the PID in the name is all there is
        return
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _HELD[str(folder)] = fd


def release_folder(folder: Path) -> None:
    fd = _HELD.pop(str(folder), None)
    if fd is not None:
        os.close(fd)


def folder_held(folder: Path) -> bool:
    """Whether a running process holds ``folder`` (:func:`hold_folder`)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # EWOULDBLOCK: held
        return True
    finally:
        os.close(fd)  # (closing drops the probe's own lock)
    return False


def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    """The md5 of a file's bytes, read in chunks (archives, prepared tensors)."""
    return _digest_of(hashlib.md5(), path, chunk)


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, read in chunks: what a command records of the files it
    wrote, to know them later as its own (:func:`listed_as_written`)."""
    return _digest_of(hashlib.sha256(), path, chunk)


def _digest_of(h, path: Path, chunk: int) -> str:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def write_listing(folder: Path, listing: str, names: list[str], indent: int = 2,
                  **fields) -> None:
    """``folder``'s list of the files ``names`` a command wrote there, ``{"files": {name:
    sha256}}`` (and ``fields``), written once they are all there: what
    :func:`listed_as_written` later knows as the command's own."""
    files = {name: sha256_of(folder / name) for name in names}
    (folder / listing).write_text(json.dumps({**fields, "files": files}, indent=indent) + "\n")


def listed_as_written(folder: Path, listing: str, names: Callable[[str], bool]) -> set[str]:
    """The files in ``folder`` its list ``listing`` (``{"files": {name: sha256}}``) names,
    each a regular file still as written (its sha256) and of a name the command gives its
    files (``names``), and the list itself; nothing when the list is missing, a link or not
    readable. A file edited since, or one the command never writes, is not its own."""
    path = folder / listing
    if path.is_symlink() or not path.is_file():
        return set()
    try:
        files = json.loads(path.read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {str(n) for n, digest in files.items()
            if names(str(n)) and (folder / str(n)).is_file() and not (folder / str(n)).is_symlink()
            and sha256_of(folder / str(n)) == digest} | {listing}


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
    errno.ENAMETOOLONG: "a name in the path is longer than the file system takes (255 bytes, "
                        "most often): give a shorter path",
    errno.ELOOP: "a loop of symbolic links, which leads nowhere: give a path without it",
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
    """``write(tmp)`` a new file beside ``path`` (``.NAME.<random><suffix>``, made with
    O_EXCL: never an existing file, link or folder), then rename it over ``path``, which
    must not be a link: the file replaces it, never what it points to. A kill -9 between
    the two leaves only that hidden temporary file."""
    import tempfile

    from .errors import PipelineError

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise PipelineError(f"{path}: a link, where this run writes a file of its own (it "
                            f"would replace the link, and {os.path.realpath(path)} would no "
                            f"longer be written); move the link away, then rerun")
    fd, name = tempfile.mkstemp(prefix=f".{hidden_stem(path.name)}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # a new file's usual mode, not mkstemp's 0600
    try:
        with writing(tmp, path):
            write(tmp)
        os.replace(tmp, path)  # a folder at ``path`` refuses it: nothing left beside it
    except BaseException:
        tmp.unlink(missing_ok=True)  # this write's own file: no partial file left beside
        raise
    name_killed_writes(path)


def name_killed_writes(path: Path) -> None:
    """A writer killed outright (kill -9, power) between its temporary file and the rename
    leaves ``.NAME.<random>.tmp`` beside ``path``; nothing records it as any run's, so it
    is named (on stderr), never removed."""
    pattern = re.compile(re.escape(f".{hidden_stem(path.name)}.") + r"[a-z0-9_]{8}\.tmp(\.png)?")
    try:
        left = sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name)
                      and p.is_file() and not p.is_symlink())
    except OSError:
        return
    for p in left:
        print(f"note: {p} ({p.stat().st_size:,} bytes) is the temporary file of a write of "
              f"{path.name} that was killed; delete it once nothing writes {path.name}",
              file=sys.stderr)


def write_new_file(path: Path, data: bytes) -> None:
    """``data`` into ``path``, a name nothing holds: written to a temporary file beside it,
    then linked into place, which fails (``FileExistsError``) rather than replace what
    appeared there meanwhile, a dangling link included. The temporary file is removed
    whatever happens: a full disk, a file-size limit or an interruption leaves no partial
    ``path`` (a kill -9 leaves only the temporary ``.NAME.*.tmp``)."""
    import tempfile

    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{hidden_stem(path.name)}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with writing(tmp, path), os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a new file's usual mode, not mkstemp's 0600
        try:
            os.link(tmp, path)  # never replaces: EEXIST whatever is at ``path``
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP):
                raise
            # a file system without hard links: a rename, having looked first
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
            os.rename(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    name_killed_writes(path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``):
    an interruption leaves each name holding one whole folder. False where the system or
    file system has no such call; the caller then renames in two steps."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if call(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _aside(dest: Path, *kinds: str) -> list[Path]:
    """The folders an interrupted swap at ``dest`` left (``.NAME.KIND-PID-*``), but those of
    a process still running: a swap under way there is not a leftover."""
    import glob

    found = []
    for kind in kinds:  # the name taken literally: [ ] * ? in it match only themselves
        for path in dest.parent.glob(f".{glob.escape(hidden_stem(dest.name))}.{kind}-*"):
            # the writer's names only: .NAME.KIND-PID-SUFFIX (mkdtemp's suffix)
            pid, sep, rest = path.name[len(f".{hidden_stem(dest.name)}.{kind}-"):].partition("-")
            if not (re.fullmatch(r"[0-9]{1,10}", pid) and sep and rest):
                continue  # a folder named so by someone else: not a leftover
            # a folder of another process still running (in this PID namespace or another:
            # its lock) is being written; one of this process's, or of a dead one, is left
            if not (int(pid) != os.getpid() and (process_alive(int(pid)) or folder_held(path))):
                found.append(path)
            else:
                import logging

                logging.getLogger(__name__).warning(
                    "note: %s: being written by process %s, which is running: left as it is",
                    path, pid)
    return sorted(found)


def staging_folder(dest: Path) -> Path:
    """A new empty folder beside ``dest`` (same file system) to build it in, for
    :func:`swap_in_folder`; its name (``.NAME.staging-*``) tells :func:`recover_swapped_folder`
    what an interruption left."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=f".{hidden_stem(dest.name)}.staging-{os.getpid()}-", dir=dest.parent))
    hold_folder(path)  # in use while this process lives: no other process's sweep takes it
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)  # a folder's usual mode once in place, not mkdtemp's 0700
    return path


def swap_in_folder(staged: Path, dest: Path, own: set[str]) -> Optional[Path]:
    """``staged`` (a folder built beside ``dest``) becomes ``dest`` whole. A folder already at
    ``dest`` is exchanged with it in one step where the system can (then ``staged`` holds the
    old one), else renamed aside to ``.NAME.replaced-*`` first; of the old folder only the
    files named in ``own`` are removed, and it only when nothing else is in it. Whatever
    moment an interruption comes, ``dest`` holds the old folder or the new one, or (two-step
    rename only) the old one waits beside it for :func:`recover_swapped_folder`. Returns
    the old folder where it was kept (it held more than ``own``), for the caller to name."""
    staged, dest = Path(staged), Path(dest)
    if not dest.exists():
        os.rename(staged, dest)
        return None
    if _exchange(staged, dest):
        old = staged
    else:
        import tempfile

        old = Path(tempfile.mkdtemp(prefix=f".{hidden_stem(dest.name)}.replaced-{os.getpid()}-",
                                    dir=dest.parent))
        old.rmdir()  # a free name beside dest, on the same file system
        os.rename(dest, old)
        try:
            os.rename(staged, dest)
        except OSError:
            os.rename(old, dest)
            raise
    return None if _remove_own(old, own) else old


def _temporary_of(name: str, own: set[str]) -> bool:
    """Whether ``name`` is the temporary file :func:`_replace_with` writes beside a file of
    ``own`` before renaming it into place (``.NAME.<8 random characters>.tmp``, a figure's
    with ``.png`` after): a writer killed before that rename leaves it."""
    import re

    match = re.fullmatch(r"\.(.+)\.[A-Za-z0-9_]{8}\.tmp(?:\.png)?", name)
    return match is not None and match.group(1) in {hidden_stem(o) for o in own}


def _remove_own(folder: Path, own: set[str]) -> bool:
    """The files of ``own`` in ``folder`` (and the temporary files of their writes), then
    ``folder`` itself when that left it empty; False (and nothing removed) when it holds
    anything else."""
    if folder.is_symlink() or not folder.is_dir():  # never through a link
        return False
    entries = {p.name for p in folder.iterdir()}
    if not all(n in own or _temporary_of(n, own) for n in entries) \
            or any((folder / n).is_symlink() or (folder / n).is_dir() for n in entries):
        return False
    for name in entries:
        (folder / name).unlink()
    folder.rmdir()
    return True


def _holds_only(folder: Path, own: set[str]) -> bool:
    return all(p.name in own and p.is_file() and not p.is_symlink() for p in folder.iterdir())


def recover_swapped_folder(dest: Path, own: set[str], marker: str,
                           owned: Optional[Callable[[Path], set[str]]] = None) -> list[str]:
    """Before a folder is swapped in at ``dest``: what an interrupted
    :func:`swap_in_folder` left beside it. A folder renamed aside while ``dest`` is gone is
    renamed back; folders being built, or an old folder whose replacement is in place, are
    removed when they hold only files of ``own``, an old folder only once ``dest`` holds a
    complete replacement (its ``marker``, a file the writer writes last, and only files of
    ``own``). ``owned``: for a leftover folder, the names in it that are the writer's as
    it wrote them (say, checked against its manifest); by default ``own``. Returns a line
    for each thing done or left (one that holds anything else is named, never removed)."""
    dest = Path(dest)
    if owned is not None:
        own_in = owned
    else:
        def own_in(_folder: Path) -> set[str]:
            return own
    said = []
    replaced = _aside(dest, "replaced")
    # an old folder is removed only once its replacement is in place: dest holds a file of
    # the writer's; restored only when it is the one candidate for an empty name
    in_place = (dest.is_dir() and not dest.is_symlink() and _holds_only(dest, own)
                and (dest / marker).is_file())
    for old in replaced:
        if not dest.exists() and not dest.is_symlink() and len(replaced) == 1 \
                and not old.is_symlink() and old.is_dir() and _holds_only(old, own_in(old)):
            os.rename(old, dest)
            said.append(f"{dest}: restored from {old.name}, where an interrupted swap left it")
        elif not in_place and not old.is_symlink() and old.is_dir():
            said.append(f"{old}: the folder an interrupted swap set aside, and {dest} holds no "
                        f"replacement for it (or several were set aside); left as it is: "
                        f"move the one to keep to {dest.name}")
        else:
            said.append(_remove_leftover(old, own_in, "the folder an interrupted swap replaced"))
    for built in _aside(dest, "staging", "publishing"):
        said.append(_remove_leftover(built, own_in, "a folder an interrupted swap left half built"))
    return said


def _remove_leftover(folder: Path, own_in: Callable[[Path], set[str]], what: str) -> str:
    """Remove ``folder``, left by an interrupted swap, when it is a folder holding only
    files of ``own_in(folder)``; a line saying what was done or why it was left."""
    if folder.is_symlink() or not folder.is_dir():
        return (f"{folder}: a link or a file where an interrupted swap leaves a folder; not one "
                f"it made: left as it is")
    if _remove_own(folder, own_in(folder)):
        return f"{folder}: removed, {what}"
    return (f"{folder}: left by an interrupted swap, and holds files it did not write; left as "
            f"it is: move it away once you have looked at it")


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


def remove_dead_scratch(prefix: str, mark: str) -> None:
    """The scratch folders (:func:`scratch_folder`) that killed commands left in the
    system's temporary folder: named ``PREFIX-PID-*`` with PID no longer running, and
    holding ``mark`` (or nothing: one killed in its own clean-up, after the mark, which goes
    last). A kill -9 runs no clean-up, and each can hold hundreds of MB; any other folder
    of such a name is not a command's, and stays."""
    import glob
    import shutil
    import tempfile

    for folder in Path(tempfile.gettempdir()).glob(f"{glob.escape(prefix)}-*-*"):
        pid = folder.name[len(prefix) + 1:].split("-")[0]
        if not pid.isdigit() or process_alive(int(pid)) or folder.is_symlink() \
                or not folder.is_dir() or folder_held(folder):  # (another PID namespace's)
            continue
        marked = folder / mark
        if marked.is_file() and not marked.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
        elif not any(folder.iterdir()):
            folder.rmdir()


@contextmanager
def scratch_folder(prefix: str, mark: str, what: str):
    """A scratch folder ``PREFIX-PID-*`` in the system's temporary folder, holding ``mark``
    (a file saying it is ``what``'s) before anything else is written in it; the dead ones
    of earlier commands are removed first. At the end it is emptied, the mark last, so that
    a kill at any moment leaves it marked or empty. A command that keeps the folder for its
    user (a log to read) removes the mark first: then it is left as it is, and no later
    sweep touches it."""
    import shutil
    import tempfile

    remove_dead_scratch(prefix, mark)
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-"))
    hold_folder(tmp)  # in use while this process lives, whatever PID namespace sweeps
    (tmp / mark).write_text(f"the scratch folder of {what}\n")
    try:
        yield tmp
    finally:
        release_folder(tmp)
        if (tmp / mark).is_file():  # not kept
            for entry in tmp.iterdir():
                if entry.name == mark:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            if not any(e.name != mark for e in tmp.iterdir()):  # else: marked, for later
                (tmp / mark).unlink()
                tmp.rmdir()


# the signals that end a command from outside: Ctrl-C, `kill`/timeout/Slurm/docker stop, a
# closed terminal
ENDING_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextmanager
def signals_held():
    """The ending signals held back while the block runs (a few renames that put a set of
    outputs in place), then raised again: a stop asked for meanwhile acts once the set is
    whole. Only a kill -9 can land inside. Python runs signal handlers in the main thread
    only (and a process's signal may reach any of its threads, so masking one thread holds
    nothing back): the handlers are swapped for one that notes the signal. Outside the
    main thread the block just runs."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def note(signum, _frame):
        came.append(signum)

    previous = {}
    for name in ENDING_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, note)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        for sig in dict.fromkeys(came):  # each once, in the order they came
            signal.raise_signal(sig)


@contextmanager
def ending_signals_unwind():
    """While the block runs, SIGTERM and SIGHUP end the command as Ctrl-C does, by an
    exception (``SystemExit(128 + signal)``, the exit status a shell gives a killed
    command), so that its clean-up runs: their default ends the process at once and leaves
    half-built outputs behind. Outside the main thread (no handlers there) the block just
    runs."""
    import signal
    import threading

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in ENDING_SIGNALS[1:]:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            previous[sig] = signal.signal(sig, stop)  # a handler the caller set is kept
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def restore_from_git(path: Path) -> str:
    """", or restore it (`git checkout -- PATH`)" for a path inside a git checkout: advice
    that outside one (a copy in /tmp, /dev/null) names a command that cannot work."""
    real = Path(os.path.abspath(path))
    if any((folder / ".git").exists() for folder in real.parents):
        return f", or restore it (`git checkout -- {path}`)"
    return ""


def die_with_parent(sig: int = 15) -> None:
    """In a child process, before it runs (``preexec_fn``): ``sig`` (SIGTERM by default)
    when the process that started it ends, however it ends, ``kill -9`` included; so no
    child goes on writing, or holding a lock, after the command that owns it. Linux only
    (prctl); elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sig)
