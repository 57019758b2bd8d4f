"""What a run may touch: the folders it writes checked before anything in them is replaced
(nothing there it did not make, and a new file can be written), and one run per output
folder (a lock held while it runs)."""
from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from .files import WRITE_HINTS, hidden_stem


def listed(names: list[str], most: int = 5) -> str:
    """``a, b, c`` for an error line, at most ``most`` names and how many more."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most
                                      else "")


def refuse_foreign(folder: Path, ours: set[str], stage: str, option: str = "--out",
                   files: frozenset[str] = frozenset()) -> None:
    """Stop before anything is touched when ``folder`` (a stage's output, which the stage
    replaces or prunes) holds entries the stage does not make (``ours``: their names), or
    a folder where it writes one of its ``files`` (found only once the run is done)."""
    from .errors import PipelineError

    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise PipelineError(f"{folder}: the {stage} stage's {option} must be a folder, found a "
                            f"file; give {option} a folder of its own (see dvc.yaml)")
    linked = sorted(p.name for p in folder.iterdir() if p.is_symlink() and p.is_dir())
    if linked:  # the stage replaces its folders whole: never through a link to elsewhere
        raise PipelineError(f"{folder}: holds {', '.join(linked)}, a symbolic link to a folder, "
                            f"which the {stage} stage would replace; move the link away (the "
                            f"folder it points to stays as it is). Nothing was changed.")
    refuse_in_the_way([folder / name for name in sorted(files)], stage)
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in ours)
    if foreign:
        raise PipelineError(f"{folder}: holds {listed(foreign)}, which the {stage} stage did not make and "
                            f"would delete; give {option} a folder of its own (as in dvc.yaml), "
                            f"or move those elsewhere first. Nothing was changed.")


def refuse_foreign_file(path: Path, option: str, what: str, ours,
                        own_stages: tuple[str, ...] = (),
                        feeds: tuple[tuple[str, Optional[str]], ...] = ()) -> None:
    """Before a command writes the file ``path`` whole: a place that is not its own
    (:func:`refuse_foreign_place`; ``own_stages``: the DVC stages it is; ``feeds``: the
    stage inputs it writes), a link, a folder
    or other special file there, or a file it did not write (``ours(text)`` is false: the
    text is not the kind it writes, ``what``), is refused in one line naming it; nothing
    is replaced."""
    from .errors import PipelineError

    path = Path(path)
    refuse_foreign_place(path, option, own_stages=own_stages, feeds=feeds)
    if not path.is_symlink() and not path.exists():
        ensure_writable(path.parent)  # a folder that cannot be made: now, not after the work
        return
    if path.is_symlink() or not path.is_file():
        kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a file"
        raise PipelineError(f"{option} {path}: {kind}, where this writes {what} of its own; "
                            f"give {option} another path. Nothing was changed.")
    try:
        with open(path, "rb") as f:  # its head only: --out may name a file of any size
            text = f.read(1 << 20).decode("utf-8")
        mine = bool(ours(text))
    except (OSError, UnicodeDecodeError, ValueError):
        mine = False
    if not mine:
        raise PipelineError(f"{option} {path}: holds a file that is not {what}, which this "
                            f"would replace; give {option} another path (or move the file "
                            f"away). Nothing was changed.")


def json_with(*keys: str):
    """``ours`` for :func:`refuse_foreign_file`: a JSON object holding ``keys``."""
    import json

    def ours(text: str) -> bool:
        data = json.loads(text)
        return isinstance(data, dict) and all(k in data for k in keys)
    return ours


def local_folder(url: Optional[str]) -> Optional[str]:
    """The folder of this machine a mirror URL names (a plain path, file://, local://);
    None for a bucket or no mirror."""
    if not url:
        return None
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("file", "local"):  # file:///x, file:/x, local://x: fsspec's local files
        from urllib.parse import urlsplit

        return urlsplit(url).path or None
    return url if "://" not in url else None


def folders_apart(named: list, kinds: str) -> None:
    """The folders ``named`` ((option, path or None) pairs) are apart: none is another, nor
    inside one; else one line naming the two, before anything is written. ``kinds``: what
    each holds, in words."""
    from .errors import PipelineError

    named = [(o, Path(p).resolve()) for o, p in named if p is not None]
    for i, (a, pa) in enumerate(named):
        for b, pb in named[i + 1:]:
            if pa == pb or pa in pb.parents or pb in pa.parents:
                how = "the same folder" if pa == pb else "one inside the other"
                raise PipelineError(f"{a} {pa} and {b} {pb}: {how}; each is a folder of its "
                                    f"own ({kinds}): give them folders apart")


def refuse_in_the_way(paths: list[Path], stage: str) -> None:
    """Stop before a run starts when one of the files it writes at its end (``paths``)
    has a folder, a link, or anything but a file, at its place: the run would fail only
    then (a file is replaced whole, never through a link: :func:`.files.write_text_atomic`)."""
    from .errors import PipelineError

    for path in map(Path, paths):
        if path.is_symlink():
            raise PipelineError(f"{path}: a link (to {os.path.realpath(path)}), where the "
                                f"{stage} stage writes a file of its own when it finishes; "
                                f"move the link away, then rerun. Nothing was changed.")
        if path.is_dir() or (path.exists() and not path.is_file()):
            what = "a folder" if path.is_dir() else "not a regular file"
            raise PipelineError(f"{path}: {what}, where the {stage} stage writes a file when "
                                f"it finishes; move it elsewhere, then rerun. Nothing was "
                                f"changed.")


def refuse_linked_folders(folders: list[Path], stage: str, option: str = "--out") -> None:
    """Stop before a run starts when a folder it makes inside its ``option`` folder (and
    empties or replaces there) is a link: the run would write, and delete, where the link
    points (another run's results, a user's folder), outside the folder it was given."""
    from .errors import PipelineError

    for path in map(Path, folders):
        if path.is_symlink():
            raise PipelineError(f"{path}: a link (to {os.path.realpath(path)}), where the "
                                f"{stage} stage makes a folder of its own in its {option} and "
                                f"replaces what it holds; move the link away (the folder it "
                                f"points to stays as it is), then rerun. Nothing was changed.")


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
        if not probe.is_dir():  # a file above it: the folder can never be made there
            raise PipelineError(f"{probe}: a file, where the run needs a folder to make "
                                f"{folder} in; give another path, or move that file; nothing "
                                f"was changed")
        try:
            fd, name = tempfile.mkstemp(prefix=".write-probe-", dir=probe)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            # a folder that takes no files at all (/proc, /sys: ENOENT, EINVAL ...) cannot be
            # made writable: only another path helps
            hint = WRITE_HINTS.get(exc.errno, "point the stage's output at another folder")
            writes = "in it" if probe == folder else str(folder)
            raise PipelineError(f"{probe}: cannot write there ({exc.strerror}), and the run "
                                f"writes {writes}; nothing was changed or removed. {hint[0].upper()}"
                                f"{hint[1:]}, then rerun.") from None


PUBLISHED_MANIFEST = "published.json"  # in a folder of published weights (tools/publish.py)
# what publish writes beside it, the manifest's ``files`` naming some of them
PUBLISHED_FILES = ("model.pt", "params.yaml", "provenance.json", "metrics.json", "README.md")
RUN_LOCK_SUFFIX = ".run-lock"
LOCK_LINE_LIMIT = 4096  # a lock's line, its command cut to fit: a longer file is no lock
_held: dict = {}  # resolved folder -> its open lock file, held until the process ends


def hold_run_lock(folder: Path, command: str, host: Optional[str] = None) -> None:
    """One run per output folder: an exclusive lock on ``.<folder name>.run-lock`` beside
    ``folder``, held until this process ends (the kernel releases it on any exit, kill -9
    included, so a killed run never leaves it stuck). A second run on the same folder stops
    at once with one line naming the first (its pid, start and command). ``host``: one lock
    per machine (``.<folder name>.<host>.run-lock``), for the nodes of one job that share
    the folder on a network file system.

    The lock belongs to the folder itself, not to the name it is given by: a symlinked
    alias of the folder takes the same lock. The lock file is opened without following a
    link and must be a regular file, so that it never writes into a file it did not make;
    anything else at its path stops the run in one line, nothing changed."""
    import fcntl
    import stat
    import time

    from .errors import PipelineError

    real = Path(os.path.realpath(folder))
    key = f"{real}|{host or ''}"
    if key in _held:  # this process holds it already (--out and --live the same folder)
        return
    path = real.parent / f".{hidden_stem(real.name)}{'.' + host if host else ''}{RUN_LOCK_SUFFIX}"
    ensure_writable(path.parent)  # a folder no file can be made in (/proc): said as such
    path.parent.mkdir(parents=True, exist_ok=True)
    fix = "remove it (or give this run another output folder); nothing was changed"
    try:  # O_NONBLOCK: a FIFO there must not hang the open
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        what = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a folder"}.get(exc.errno, exc.strerror)
        raise PipelineError(f"{path}: the run lock of {folder} is {what}, expected a regular "
                            f"file this project writes; {fix}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PipelineError(f"{path}: the run lock of {folder} is not a regular file (a FIFO, "
                            f"a device or a socket); {fix}")
    if os.fstat(fd).st_nlink > 1:  # a hard link: writing it would write the other name's file
        os.close(fd)
        raise PipelineError(f"{path}: the run lock of {folder} is a hard link (the file has "
                            f"another name too), expected a file of its own; {fix}")
    f = os.fdopen(fd, "r+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_text(f).strip() or "another process"
        f.close()
        raise PipelineError(f"{folder}: another run is writing there ({holder}); wait for it "
                            f"to end, or give this one another output folder") from None
    import re

    held_before = _lock_text(f)
    # a file of that name that is no run lock: the lock's own one line is all it holds
    if held_before and not re.fullmatch(r"pid [0-9]+, since [^\n]*\n?", held_before):
        f.close()
        raise PipelineError(f"{path}: the run lock of {folder} holds something else than a run "
                            f"lock's one line (pid N, since ...), expected a file of its own; "
                            f"{fix}")
    line = f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: {command}"
    data = line.replace("\n", " ").encode(errors="replace")[:LOCK_LINE_LIMIT - 1]
    data = data.decode(errors="ignore").encode() + b"\n"  # a character cut in two dropped
    try:  # unbuffered: a write that fails leaves nothing pending for close() to retry
        os.ftruncate(f.fileno(), 0)
        os.pwrite(f.fileno(), data, 0)
    except OSError as exc:  # a full disk: said of this file, the run's first write
        f.close()
        raise PipelineError(f"{path}: the run lock of {folder} cannot be written "
                            f"({exc.strerror}); nothing else was written: free space there, or "
                            f"give this run another output folder, then rerun") from None
    _held[key] = f


def _lock_text(f) -> str:
    """What a run lock file holds, up to one byte past a lock's longest line (enough to tell
    a longer file), as text whatever its bytes."""
    return os.pread(f.fileno(), LOCK_LINE_LIMIT + 1, 0).decode(errors="replace")


@contextmanager
def run_lock(folder: Path, command: str):
    """:func:`hold_run_lock` for the length of a block, for a command a process may run
    more than once (the report, from a notebook or a test): released when the block ends,
    unless this process held it before."""
    real = Path(os.path.realpath(folder))
    key = f"{real}|"
    held = key in _held
    hold_run_lock(folder, command)
    try:
        yield
    finally:
        if not held and key in _held:
            _held.pop(key).close()


PIPELINES = (Path("dvc.yaml"), Path("reports/dvc.yaml"))  # from the repository root


def stage_outputs(pipelines=PIPELINES) -> list[tuple[str, Path]]:
    """(stage, path) of the outputs of the pipelines' stages: each file's plain paths, and
    the resolved ones its lock records (a ``foreach`` stage's, ``${key}`` filled in);
    relative to the stage's ``wdir``. A pipeline not there gives none; one DVC would refuse
    (a key twice, a stage that is no mapping) is refused here in one line, as the stage
    commands read it; a lock not readable adds nothing (DVC says what is wrong with it)."""
    return stage_paths(pipelines)[0]


def stage_paths(pipelines=PIPELINES) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """The outputs (:func:`stage_outputs`) and, likewise, the files and folders the stages
    read (their ``deps``): each pipeline and lock read once."""
    return stage_places(pipelines)[:2]


def _command_paths(cmd) -> list[tuple[str, str]]:
    """(option, path) of each ``--option PATH`` of a stage's command (a value holding a
    ``/``, not a URL); a ``{...}`` in it (a foreach stage's variant, filled in by the
    stage) stands for any one name, as ``${key}`` does in its outputs."""
    import re
    import shlex

    try:
        tokens = shlex.split(" ".join(cmd) if isinstance(cmd, list) else str(cmd or ""))
    except ValueError:  # an unbalanced quote: DVC's shell would refuse it too
        return []
    pairs = []
    for i, token in enumerate(tokens):
        option, _, value = token.partition("=")
        if not value and i + 1 < len(tokens):
            value = tokens[i + 1]
        if option.startswith("--") and "/" in value and "://" not in value \
                and not value.startswith("-"):
            pairs.append((option, re.sub(r"\$?\{[^{}]*\}", "${key}", value)))
    return pairs


def stage_places(pipelines=PIPELINES) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]],
                                               list[tuple[str, str, Path]]]:
    """:func:`stage_paths`'s outputs and inputs, and (stage, option, path) of each path the
    stages' commands name (``--work data/ablations/{variant}``: a folder a variant's run
    writes outside DVC, its model and checkpoints; ``--data data/prepared``: an input)."""
    import yaml

    from .cli import pipeline_stages

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a lock of 16 variants: fast
    found = {"outs": [], "deps": [], "named": []}
    for dvc_yaml in pipelines:
        if not dvc_yaml.is_file():
            continue
        stages = pipeline_stages(dvc_yaml)
        try:
            lock = dvc_yaml.with_suffix(".lock")
            locked = ((yaml.load(lock.read_text(), Loader=loader) or {}).get("stages")
                      if lock.is_file() else {})
            (locked or {}).items()
        except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, AttributeError):
            locked = {}
        for stage, spec in stages.items():
            body = spec.get("do", spec) if isinstance(spec, dict) else {}
            body = body if isinstance(body, dict) else {}
            base = dvc_yaml.parent / str(body.get("wdir", "."))
            for kinds, locked_as in ((("outs", "metrics", "plots"), "outs"), (("deps",), "deps")):
                paths = [(stage, e if isinstance(e, str) else next(iter(e), ""))
                         for kind in kinds
                         for e in (body.get(kind) or []) if isinstance(e, (str, dict))]
                paths += [(name, e.get("path", "")) for name, rec in (locked or {}).items()
                          if str(name).split("@")[0] == stage and isinstance(rec, dict)
                          for e in (rec.get(locked_as) or []) if isinstance(e, dict)]
                found[locked_as] += [(name, Path(os.path.normpath(base / str(path))))
                                     for name, path in dict.fromkeys(paths) if path]
            found["named"] += [(stage, option, Path(os.path.normpath(base / path)))
                               for option, path in _command_paths(body.get("cmd"))]
    # the resolved paths (the locks') first: they name the variant's own stage
    outs, deps = (sorted(found[k], key=lambda item: "${" in str(item[1]))
                  for k in ("outs", "deps"))
    return outs, deps, found["named"]


def _works(outs, deps, named, root: Path) -> dict[Path, list[tuple[str, str]]]:
    """The folders inside the repository ``root`` the stages' commands name that are no
    output or input and hold none (a variant's run folder, partial downloads: written
    outside DVC), each once, with the (stage, option) naming it (data/.downloads: several
    stages'). One outside the repository (``--tmpdir /tmp``) is no stage's."""
    places = {p for _, p in outs + deps}
    # the outputs by their first folder (one of ${...}: any): a pipeline of thousands of
    # stages compares each named path with the outputs that can lie below it only
    by_first: dict[str, list[Path]] = {}
    for _, out in outs:
        first = out.parts[0] if out.parts else ""
        by_first.setdefault("${" if "${" in first else first, []).append(out)
    works, held = {}, {}
    for stage, option, path in named:
        at = Path(os.path.normpath(root / path))
        if at == root or not at.is_relative_to(root):
            continue
        if path not in held:
            near = (list(by_first.values()) if "${" in path.parts[0] else
                    [by_first.get(path.parts[0], []), by_first.get("${", [])])
            held[path] = any(len(out.parts) > len(path.parts) and all(
                a == b or "${" in a or "${" in b for a, b in zip(path.parts, out.parts))
                for group in near for out in group)  # ${...}: any one name
        if path not in places and not held[path]:
            works.setdefault(path, []).append((stage, option))
    return works


def _shown(path: Path, name: Optional[str] = None) -> str:
    """``path`` as a user reads it: a foreach stage's ``${key}`` is the variant's ``name``,
    or NAME where none is met."""
    return str(path).replace("${key}", name if name is not None else "NAME")


def _is_git_folder(folder: Path) -> bool:
    """Whether ``folder`` is a git repository's own folder (a bare repository, another
    clone's --separate-git-dir), as git itself tells one: objects/, refs/ and a HEAD
    naming a branch or a commit."""
    import re

    try:
        if not ((folder / "objects").is_dir() and (folder / "refs").is_dir()
                and (folder / "HEAD").is_file()):
            return False
        with open(folder / "HEAD", "rb") as f:
            head = f.read(512).decode("utf-8", "replace").strip()
    except OSError:  # a name too long to look at, a HEAD that cannot be read
        return False
    return head.startswith("ref: refs/") or re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?",
                                                         head) is not None


def _running_for(root: Path) -> Path:
    """The repository a command run now works for, resolved: the working folder's; else
    (run from outside any) the place's own ``root`` where that is the working folder (a
    project with no git or DVC yet), else the one whose code runs (a stage script run by
    its path), else the working folder (an installed package). A queued experiment's
    workspace (.dvc/tmp/exps/...) works for the project around it
    (:func:`_in_a_workspace`), for its run folders only."""
    here = Path.cwd().resolve()
    running = (repository_at(here) or (root if root == here else None)
               or repository_at(Path(__file__).resolve().parent) or here).resolve()
    return root if _in_a_workspace(running, root) else running


def _in_a_workspace(running: Path, root: Path) -> bool:
    """Whether ``running`` is a queued experiment's workspace inside ``root``'s .dvc/."""
    return running != root and running.is_relative_to(root) \
        and ".dvc" in running.relative_to(root).parts


def stages_at(path: Path, kind: str) -> tuple[str, ...]:
    """The stages of the working folder's pipelines with ``path`` among their ``kind``:
    "outs", "deps", or "works" (a folder their command names that is neither: a variant's
    run folder), ``ablation@NAME`` for a foreach stage's; in the repository this command
    works for only (another checkout's stages are none of its own)."""
    where = Path(path).resolve()
    root = repository_root(Path(path))
    if _running_for(root) != root:
        return ()
    outs, deps, named = stage_places(tuple(root / p for p in PIPELINES))
    if kind == "works":
        found = [(stage, p) for p, of in _works(outs, deps, named, root).items()
                 for stage, _ in of]
    else:
        found = outs if kind == "outs" else deps
    return tuple(dict.fromkeys(_named(stage, p, where) for stage, p in found
                               if _overlap(where, Path(os.path.normpath(root / p))) == "is"))


def _overlap(where: Path, output: Path) -> Optional[str]:
    """How the resolved path ``where`` meets ``output`` (a path whose ``${...}`` parts, a
    foreach stage's, stand for any one variant name: reports/ablations/report.md is no
    variant's): "is", "lies inside", "holds", or None."""
    from .params import VARIANT_NAME, VARIANT_NAME_LIMIT

    parts = output.parts
    fixed = next((i for i, part in enumerate(parts) if "${" in part), len(parts))
    parts = Path(*parts[:fixed]).resolve().parts + parts[fixed:]
    mine = where.parts
    same = all(t == w or ("${" in t and len(w) <= VARIANT_NAME_LIMIT
                          and VARIANT_NAME.fullmatch(w) is not None)
               for t, w in zip(parts, mine))
    if not same:
        return None
    return ("is" if len(mine) == len(parts) else "lies inside" if len(mine) > len(parts)
            else "holds")


def _variant_at(output: Path, where: Path) -> Optional[str]:
    """The name ``where`` gives a foreach stage's ``${key}`` in ``output``, if it reaches it."""
    if "${" not in str(output):
        return None
    fixed = next(i for i, part in enumerate(output.parts) if "${" in part)
    at = len(Path(*output.parts[:fixed]).resolve().parts)
    return where.parts[at] if len(where.parts) > at else None


def _named(stage: str, output: Path, where: Path) -> str:
    """The stage an output of ``stage`` at ``where`` is: ``ablation@NAME`` for a foreach
    stage's template path, the variant named where the path names one."""
    name = _variant_at(output, where)
    return f"{stage}@{name}" if name is not None else stage


def _said(stage: str, output: Path, where: Path) -> str:
    """The stage of ``output`` at ``where`` as a message says it: a foreach stage's with the
    variant named in words, true whether or not the params define that variant yet."""
    name = _variant_at(output, where)
    return (f"{stage!r} (for a variant named {name})" if name is not None
            else repr(_named(stage, output, where)))


def _is_own(stage: str, output: Path, where: Path, own_stages: tuple[str, ...]) -> bool:
    """Whether ``output`` (of ``stage``), met at ``where``, is one of ``own_stages``'s: a
    name is one variant's, of one group, so the variant's own in any group's template."""
    name = _variant_at(output, where)
    if name is not None and any(s.endswith(f"@{name}") for s in own_stages):
        return True
    return _named(stage, output, where) in own_stages


def _is_manifest(path: Path) -> bool:
    """Whether ``path`` is publish's manifest (a JSON object whose ``files`` maps the names
    publish writes, model.pt among them, to sha256s), not any file of that name (a
    website's, a home folder's)."""
    import json

    if not path.is_file():  # not a FIFO, whose read would wait
        return False
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    files = data.get("files") if isinstance(data, dict) else None
    return (isinstance(files, dict) and "model.pt" in files
            and set(files) <= set(PUBLISHED_FILES))


def refuse_inside_published(path: Path, option: str, default: str = "",
                            publishing: bool = False) -> None:
    """A folder of published weights (its manifest, published.json as publish writes it,
    at ``path`` or in any folder above it, inside the repository or not) is no place for another command's
    files: its card and manifest list what it holds (``publishing``: the folder itself is
    the one publish replaces). One line naming it."""
    from .errors import PipelineError

    where = Path(path).resolve()
    for folder in ([] if publishing else [where]) + list(where.parents):
        try:
            published = _is_manifest(folder / PUBLISHED_MANIFEST)
        except OSError as e:  # a name too long, a folder that cannot be searched
            raise PipelineError(f"{option} {path}: {folder} cannot be looked into "
                                f"({e.strerror}); give {option} another path. Nothing was "
                                f"changed.") from None
        if published:
            instead = f" ({default})" if default else ""
            raise PipelineError(f"{option} {path}: inside {folder}, a folder of published "
                                f"weights ({PUBLISHED_MANIFEST} lists what it holds); give "
                                f"{option} another place{instead}. Nothing was changed.")


def repository_at(here: Path) -> Optional[Path]:
    """The nearest folder at or above ``here`` with dvc.yaml and .dvc/ (or .git: a
    checkout that lost its .dvc/ is still the project) (a queued
    experiment's workspace, .dvc/tmp/exps/..., holds both: it is a project of its own,
    found before the repository around it); a place inside a .dvc/ is in the repository
    above it, whose DVC folder it is. Failing that, a project in a subfolder of a DVC
    repository (a monorepo: .dvc/ at its root, dvc.yaml in the project's folder): the
    nearest folder at or below that root holding reports/dvc.yaml (reports/ holds a
    dvc.yaml too, a folder between may hold another project's), else the outermost with
    a dvc.yaml."""
    chain = []
    for p in (here, *here.parents):
        try:
            # .git/ too: a project whose .dvc/ was removed is still that project
            if (p / "dvc.yaml").is_file() and ((p / ".dvc").is_dir() or (p / ".git").exists()):
                return p
            if (p / ".dvc").is_dir():  # DVC's root, with no dvc.yaml of its own
                # the folder holding the exercise pipeline (another project's dvc.yaml may
                # lie between; DVC's root itself, where only that pipeline is copied, as a
                # check's scratch tree), else the outermost with a dvc.yaml
                found = next((c for c in (*chain, p) if (c / PIPELINES[1]).is_file()),
                             chain[-1] if chain else None)
                if found is not None:
                    return found
            if (p / "dvc.yaml").is_file():
                chain.append(p)
        except OSError:  # a name too long to look at: not a repository's root
            continue
    return None


def dvc_root(root: Path) -> Optional[Path]:
    """The folder holding the .dvc/ of the DVC repository ``root`` (a project's root) is
    in: ``root`` itself, or a folder above it (a monorepo); None where there is none."""
    return next((p for p in (root, *root.parents) if (p / ".dvc").is_dir()), None)


def repository_root(start: Optional[Path] = None) -> Path:
    """The DVC repository ``start`` (a place written or read) is in, else the one the
    working folder is in, else the working folder. From the place, not only the working
    folder: a stage script run from a subfolder, or from outside the repository with
    absolute paths, writes into that project, and its pipelines and code are the ones
    that place must keep clear of."""
    here = Path.cwd().resolve()
    # the path as given first (a folder of the project may be a link to another disk:
    # data/train -> /big/train), then as resolved, then the working folder
    given = [Path(os.path.abspath(start)), Path(start).resolve()] if start is not None else []
    for at in given + [here]:
        found = repository_at(at)
        if found is not None:  # resolved: the places it is compared with are
            return found.resolve()
    return here


def _dvc_config_folders(dvc: Optional[Path]) -> list[tuple[Path, str]]:
    """The folders DVC's config names, read by DVC itself at every level it reads (the
    repository's config and config.local, the user's, the system's wherever
    XDG_CONFIG_DIRS puts it): its cache, the remotes that are folders of this machine,
    and its site cache (indexes and hashes of every repository, /var/tmp/dvc by default)."""
    try:
        from dvc.config import Config
        from dvc.dirs import site_cache_dir
    except ImportError:  # no DVC installed (a machine given the stage scripts alone): none
        return []

    found = [(Path(site_cache_dir(None)), "DVC's site cache")]  # its default, whatever
    # a repository config DVC cannot read (every dvc command there says what is wrong):
    # the user's and the system's still count
    for dvc_dir in ([str(dvc / ".dvc")] if dvc is not None else []) + [None]:
        try:  # relative paths come resolved from the file that names them
            config = Config(dvc_dir=dvc_dir, validate=False)
            break
        except Exception:
            continue
    else:
        return found
    try:
        core, cache, remotes = config["core"], config["cache"], config["remote"]
        found.append((Path(site_cache_dir(core.get("site_cache_dir"))), "DVC's site cache"))
        if cache.get("dir"):
            found.append((Path(os.path.expanduser(str(cache["dir"]))), "DVC's cache"))
        for remote in remotes.values():
            folder = local_folder(str(remote.get("url") or "")) if isinstance(remote, dict) \
                else None
            if folder:
                found.append((Path(os.path.expanduser(folder)), "a DVC remote"))
        return found
    except (TypeError, ValueError, AttributeError, KeyError, OSError):  # values of odd kinds
        return found


def tool_folders(root: Path) -> list[tuple[Path, str]]:
    """git's and DVC's own folders of the repository ``root`` wherever they lie, resolved:
    a git folder not named .git (``.git`` a file naming it: ``git clone
    --separate-git-dir``, a worktree, a submodule; GIT_DIR), DVC's cache, site cache and
    the remotes on this machine its config (the repository's, yours, the system's) names."""
    found = []
    dot_git = root / ".git"
    try:
        if dot_git.is_file():  # "gitdir: PATH", relative to the checkout
            named = dot_git.read_text(encoding="utf-8", errors="replace")[:4096].strip()
            if named.startswith("gitdir:"):
                git_dir = root / named[len("gitdir:"):].strip()
                found.append((git_dir, "git's own folder"))
                common = git_dir / "commondir"  # a worktree's: the repository's own
                if common.is_file():
                    found.append((git_dir / common.read_text(encoding="utf-8",
                                                             errors="replace").strip(),
                                  "git's own folder"))
    except OSError:
        pass
    if os.environ.get("GIT_DIR"):
        found.append((Path(os.environ["GIT_DIR"]), "git's own folder"))
    found += _dvc_config_folders(dvc_root(root))
    resolved = []
    for folder, what in found:
        try:
            folder = Path(os.path.normpath(folder)).resolve()
        except (OSError, RuntimeError):
            continue
        # a cache holding the whole project (cache.dir: ..) would refuse every place
        if folder != root and folder not in root.parents:
            resolved.append((folder, what))
    return resolved


# the project's own folders, under the repository root: no command writes its results there
NOT_OURS = {".git": "git's own folder", ".dvc": "DVC's own folder",
            "src": "the project's code", "stages": "the project's code",
            "tools": "the project's code", "devtools": "the project's code",
            "benchmarks": "the project's code", "tests": "the project's code"}


# file names git and DVC read wherever they lie in a repository: a command's results
# written under one would break every git or DVC command there (dvc.lock holding a page)
TOOL_FILE_NAMES = {"dvc.yaml": "DVC's pipeline file", "dvc.lock": "DVC's lock file",
                   ".dvcignore": "DVC's ignore file", ".gitignore": "git's ignore file",
                   ".gitattributes": "git's attributes file", ".gitmodules": "git's submodules file"}


def refuse_tool_file_name(path: Path, option: str, default: str = "") -> None:
    """A path named as a file git or DVC reads (dvc.yaml, dvc.lock, NAME.dvc, .gitignore
    ...), or inside a folder so named (made there, it would stand where git or DVC reads
    a file), is never a command's result: one line naming it. Inside a repository, the
    parts below its root count (DVC and git read nothing above it); outside one, every
    part (a repository may be made there later)."""
    from .errors import PipelineError

    where = Path(os.path.abspath(path))
    root = repository_root(Path(path))
    parts = where.relative_to(root).parts if where.is_relative_to(root) else where.parts
    for name in parts:
        what = TOOL_FILE_NAMES.get(name) or ("a DVC-tracked file's record"
                                             if name.endswith(".dvc") and name != ".dvc"
                                             else None)
        if what is not None:
            instead = f" ({default})" if default else ""
            at = "named as" if name == where.name else f"inside a folder {name}, named as"
            raise PipelineError(f"{option} {path}: {at} {what}, which git or DVC reads "
                                f"wherever it lies in the repository; give {option} another "
                                f"place{instead}. Nothing was changed.")


def refuse_foreign_place(path: Path, option: str, default: str = "",
                         own_stages: tuple[str, ...] = (), publishing: bool = False,
                         feeds: tuple[tuple[str, Optional[str]], ...] = (),
                         own_outputs: bool = True) -> None:
    """Before a command writes at ``path`` (given as ``option``): a path holding a control
    character (a newline would break every line that shows it), one inside .git/, .dvc/,
    src/ or stages/ of the repository root, or one that is, lies inside or holds an output
    of a DVC stage of the pipelines other than ``own_stages`` (DVC would find that output
    changed and replace it on the stage's next run; ``ablation@NAME`` for a foreach
    stage's) is refused in one line naming it; ``default`` says where such results go.
    So is one in a folder of published weights (:func:`refuse_inside_published`), in git's
    or DVC's folders wherever they lie (:func:`tool_folders`), or at or inside a file or
    folder a stage reads that no stage makes (reports/tf_reference, kept in git: the stage
    would find it changed), but for the inputs this command writes, ``feeds``: (stage, the
    option of its command naming the input), or (stage, None) for those it reads through
    its params (the regression stage's baselines). A folder a stage's command names that is
    neither an output nor an input (a variant's run folder, data/ablations/NAME) is that
    stage's own as its outputs are. ``own_outputs`` false: ``own_stages``' folders are
    this command's to write in, their outputs not (eval --watch writes beside a run's
    model, never into its curves). ``own_stages`` and ``feeds`` hold in the repository
    this command runs for only (the working folder's, else the running code's): another
    checkout's stages are never its own. Under
    `dvc repro` too: DVC_STAGE is a variable anyone may set, so it switches nothing off.
"""
    from .errors import PipelineError

    instead = f" ({default})" if default else ""
    if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):
        raise PipelineError(f"{option} {str(path)!r}: holds a newline or another control "
                            f"character, which no line that names it can show; give another "
                            f"path{instead}. Nothing was changed.")
    refuse_tool_file_name(path, option, default)
    where = Path(path).resolve()
    if where == Path(where.anchor) or where == Path.home().resolve():
        # its files and its lock (beside it, in the folder above) among the system's or
        # the user's own: never a place of a command's results
        whose = "the file system's root" if where.parent == where else "your home folder"
        raise PipelineError(f"{option} {path}: {whose} itself; give {option} a folder of its own{instead}. "
                            f"Nothing was changed.")
    root = repository_root(Path(path))
    lies_in = repository_at(where)
    if lies_in is not None and lies_in.resolve() != root.resolve():
        # a link in one checkout into another: judged also where it leads, by that
        # checkout's pipelines (whose stages are never this command's own)
        refuse_foreign_place(where, option, default, own_stages, publishing, feeds,
                             own_outputs)
    if _running_for(root) != root:  # another checkout's place
        own_stages, feeds = (), ()
    here_running = repository_at(Path.cwd().resolve())
    if here_running is not None and _in_a_workspace(here_running.resolve(), root):
        # an experiment's workspace writes the project's run folders (its queued
        # checkpoints), never the project's outputs: its own are in the workspace
        own_outputs = False
    # below the repository root, its own parts only: a queued DVC experiment runs in a
    # workspace inside the repository's .dvc/ (.dvc/tmp/exps/...)
    parts = where.relative_to(root).parts if where.is_relative_to(root) else where.parts
    for name, what in NOT_OURS.items():  # git's and DVC's folders of any repository
        if (name in parts if name.startswith(".") else
                where == root / name or root / name in where.parents):
            raise PipelineError(f"{option} {path}: inside {name}/, {what}; give {option} a "
                                f"folder of its own{instead}. Nothing was changed.")
    for folder in (where, *where.parents):  # any repository's git folder, by what it holds
        if _is_git_folder(folder):
            raise PipelineError(f"{option} {path}: inside {folder}, a git repository's own "
                                f"folder; give {option} a folder of its own{instead}. Nothing "
                                f"was changed.")
    for folder, what in tool_folders(root):
        if where == folder or folder in where.parents:
            raise PipelineError(f"{option} {path}: inside {folder}, {what}; give {option} a "
                                f"folder of its own{instead}. Nothing was changed.")
    refuse_inside_published(path, option, default, publishing)
    here = root == Path.cwd().resolve()  # the pipelines' paths as they name them
    pipelines = PIPELINES if here else tuple(root / p for p in PIPELINES)
    # a monorepo's pipelines between DVC's root and the project: theirs may name a place
    # inside it (DVC reads every dvc.yaml of the repository)
    top = dvc_root(root)
    pipelines += tuple(p / "dvc.yaml" for p in root.parents
                       if top is not None and p.is_relative_to(top) and (p / "dvc.yaml").is_file())
    outputs, reads, named = stage_places(pipelines)
    for stage, output in outputs:
        how = _overlap(where, output)
        if how is not None and (not own_outputs or not _is_own(stage, output, where, own_stages)):
            shown = _shown(output, _variant_at(output, where))
            if how == "holds" and not os.path.lexists(path):
                how = "would hold"
            raise PipelineError(f"{option} {path}: {how} {shown}, an output of the DVC stage "
                                f"{_said(stage, output, where)}, which DVC would find "
                                f"changed and replace on the stage's next run; give {option} "
                                f"a path outside the pipelines' outputs{instead}. Nothing was "
                                f"changed.")
    # a folder a stage's command writes outside DVC (a variant's run: model, checkpoints),
    # the variant's own run only: its next run refuses what it did not make there, and a
    # model there is the only copy
    for work, stages in _works(outputs, reads, named, root).items():
        how = _overlap(where, work)
        if how is not None and not any(
                _is_own(stage, work, where, own_stages)
                or ("${" not in str(work)  # one folder for a group: each variant's
                    and any(s.split("@")[0] == stage for s in own_stages))
                for stage, _ in stages):
            stage, given = stages[0]
            name = _variant_at(work, where)  # the variant's own folder, as the user sees it
            if name is not None:
                whose = (f"a folder the DVC stage {stage!r} writes outside DVC for a variant "
                         f"named {name} (its command's {given})")
            else:
                whose = (f"a folder the DVC stage {stage!r} writes outside DVC (its "
                         f"command's {given}{', for each variant' if '${' in str(work) else ''})")
            raise PipelineError(f"{option} {path}: {how} {_shown(work, name)}, {whose}, which "
                                f"its next run refuses to share with files it did not make; "
                                f"give {option} a path outside the pipelines' "
                                f"folders{instead}. Nothing was changed.")
    # what a stage reads and no stage makes (kept in git): written into, the stage is stale;
    # but the one input this command writes (``feeds``: the stage, and the option of its
    # command that names that input, or None: those it reads through its params)
    fed = set()
    for stage, option_of in feeds:
        given = {p for s, o, p in named if s == stage and o == option_of}
        fed |= ({(stage, p) for p in given} if option_of is not None else
                {(s, d) for s, d in reads if s.split("@")[0] == stage
                 and d not in {p for s2, _, p in named if s2 == stage}})
    read = {}  # each path once (every variant reads the same code): the first stage's
    for stage, dep in reads:
        at = Path(os.path.normpath(root / dep))
        if (stage.split("@")[0], dep) not in fed and "${" not in str(dep) and at != root \
                and at.is_relative_to(root) and at.relative_to(root).parts[0] not in NOT_OURS:
            read.setdefault(at, (stage, dep))
    for at, (stage, dep) in read.items():
        how = _overlap(where, at.resolve())
        # (a stage's output too, as data/prepared: what is said of outputs holds there)
        if how in ("is", "lies inside") \
                and not any(_overlap(at, output) is not None for _, output in outputs):
            raise PipelineError(f"{option} {path}: {how} {dep}, which the DVC stage "
                                f"{stage!r} reads (kept in git, made by no stage): DVC would "
                                f"find it changed; give {option} a path of its own{instead}. "
                                f"Nothing was changed.")
    # a folder holding one stage's outputs and no other's, at any depth (data/train,
    # reports/eval, a variant's results, reports/ablations itself) is that stage's: its
    # next run refuses a file it did not make there, after DVC removed its outputs. One
    # holding several stages' (reports/, data/) is shared. The deepest folder is named.
    def under(folder: Path, output: Path) -> bool:  # ${...}: any one name
        return len(output.parts) > len(folder.parts) and all(
            a == b or "${" in a or "${" in b for a, b in zip(folder.parts, output.parts))

    def inside_root(folder: Path) -> bool:
        at = Path(os.path.normpath(root / folder))
        return at != root and at.is_relative_to(root)

    folders = dict.fromkeys(folder for _, output in outputs for folder in output.parents
                            if inside_root(folder))
    kinds = {}
    for folder in sorted(folders, key=lambda f: -len(f.parts)):
        for stage, output in outputs:
            if under(folder, output):
                kind = stage.split("@")[0].replace("dataset_ablation", "ablation")
                kinds.setdefault(folder, {}).setdefault(kind, []).append((stage, output))
    for folder, of in kinds.items():
        if len(of) != 1:
            continue
        how = _overlap(where, folder)
        if how not in ("is", "lies inside"):
            continue
        stages = next(iter(of.values()))
        # its own where ``where`` is one of its own stages' places (a variant's, below)
        if any(_is_own(stage, output, where, own_stages) for stage, output in stages):
            continue
        # a folder above a foreach stage's ${key} (reports/ablations) is the whole stage's
        above = any(next((i for i, part in enumerate(output.parts) if "${" in part), -1)
                    >= len(folder.parts) for _, output in stages)
        group = stages[0][0].split("@")[0]
        shown = (repr(group) if above else _said(group, folder, where) if "${" in str(folder)
                 else repr(stages[0][0]))
        raise PipelineError(f"{option} {path}: {how} {_shown(folder, _variant_at(folder, where))}"
                            f", the folder of the outputs of the DVC stage {shown}, which its next "
                            f"run refuses to share with files it did not make; give {option} "
                            f"a path outside the pipelines' folders{instead}. Nothing was "
                            f"changed.")
    # anywhere else in another checkout than the one this command runs in (its root, a new
    # folder of its models/): that checkout's files are made by its own commands, from its
    # own results. Run from no checkout, the command runs for the checkout whose code runs
    # (a stage script given by its path, an editable install); only an installed package
    # run from no checkout names none of its own
    code_in = None
    if here_running is None:
        code_in = repository_at(Path(__file__).resolve().parent)
    running = here_running if here_running is not None else code_in
    if lies_in is not None and running is not None \
            and lies_in.resolve() != running.resolve() \
            and not _in_a_workspace(running.resolve(), lies_in.resolve()):
        which = (f"the one this runs in ({here_running})" if here_running is not None else
                 f"the one whose code runs ({code_in})")
        raise PipelineError(f"{option} {path}: inside {lies_in}, another checkout than "
                            f"{which}; run it from there, or give {option} a path outside "
                            f"it{instead}. Nothing was changed.")

