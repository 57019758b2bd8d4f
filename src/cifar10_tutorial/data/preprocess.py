"""Binary records -> cached tensors (the preprocess stage).

The archive is read in one streaming pass. Every member is checked before its
bytes are used: a path that would leave the extraction folder (absolute, or
with ``..``), a link, a device or a FIFO is refused, so nothing is ever
written outside ``data/``; the record files are parsed in memory with numpy
(no Python loop per record) and written as ``.npy`` arrays plus a JSON of
counts and class names. The output folder is built under a temporary name and
renamed into place, so a ``data/prepared`` folder is always complete.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Optional

import numpy as np

from .datasets import DatasetSpec
from ..files import md5_of, writing
from ..files import folder_held, hidden_stem, hold_folder, process_alive
from ..ownership import refuse_foreign
from .prepared import META_NAME, PREPARED_NAMES, PrepareError

log = logging.getLogger(__name__)




# --------------------------------------------------------------------------- archive


def check_member(member: tarfile.TarInfo, archive: Path) -> Optional[PurePosixPath]:
    """The member's safe relative path, None for a folder; raise for anything unsafe."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or member.name.startswith(("/", "\\")) \
            or ":" in (name.parts[0] if name.parts else ""):
        raise PrepareError(f"{archive}: refusing member {member.name!r}: its path leaves the "
                           f"extraction folder (absolute or with '..'). The archive is not a "
                           f"genuine data archive.")
    if member.issym() or member.islnk():
        raise PrepareError(f"{archive}: refusing member {member.name!r}: it is a link (to "
                           f"{member.linkname!r}); data archives hold regular files only.")
    if member.isdir():
        return None
    if not member.isfile():
        raise PrepareError(f"{archive}: refusing member {member.name!r}: it is a device, FIFO "
                           f"or other special file; data archives hold regular files only.")
    return name


def read_archive(archive: Path, wanted: set[str], max_bytes: Optional[int] = None
                 ) -> dict[str, bytes]:
    """Return the bytes of the wanted members (paths inside the archive), checking every
    member; one larger than ``max_bytes`` is refused before it is read."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:  # one streaming pass: gzip is never re-read
                path = check_member(member, archive)
                if path is not None and str(path) in wanted:
                    if max_bytes is not None and member.size > max_bytes:  # a gzip bomb stops here
                        raise PrepareError(f"{archive}: {path} holds {member.size:,} bytes, more "
                                           f"than any file of this data set ({max_bytes:,}): "
                                           f"the archive is not this set; check data.url")
                    f = tf.extractfile(member)
                    found[str(path)] = f.read() if f is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise PrepareError(f"{archive}: no such file; run the download stage first "
                               f"(`dvc repro download`).") from None
        raise PrepareError(f"{archive}: not a readable gzip tar archive ({exc}).") from None
    return found


# --------------------------------------------------------------------------- records


def parse_records(raw: bytes, spec: DatasetSpec, source: str, label_index: int = 0,
                  num_classes: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-length records -> (uint8 images N x C x H x W, int64 labels N).

    Each record is ``spec.label_bytes`` label bytes then the pixels, channel
    after channel (R, G, B planes), each plane row-major. The record count
    comes from the size, so files of any number of records work.
    """
    size = spec.record_bytes
    if len(raw) == 0 or len(raw) % size:
        raise PrepareError(
            f"{source}: size {len(raw)} bytes is not a positive multiple of the record length "
            f"{size} ({spec.label_bytes} label byte(s) + {size - spec.label_bytes} pixel bytes); "
            f"the file is truncated or not a {spec.name} record file.")
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)
    labels = records[:, label_index].astype(np.int64)
    k = num_classes or spec.num_classes
    bad = np.flatnonzero(labels >= k)
    if bad.size:
        i = int(bad[0])
        raise PrepareError(f"{source}: record {i} has label {labels[i]}; expected 0.."
                           f"{k - 1} ({bad.size} records out of range).")
    images = records[:, spec.label_bytes:].reshape(-1, *spec.image_shape).copy()
    return images, labels


def parse_class_names(raw: bytes, num_classes: int, source: str) -> list[str]:
    names = [line.strip() for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
    if len(names) != num_classes:
        raise PrepareError(f"{source}: expected {num_classes} class names, one a line; "
                           f"found {len(names)}.")
    odd = next((n for n in names if not n.isprintable()), None)
    if odd is not None:  # escape codes would reach the CSVs and the terminal
        raise PrepareError(f"{source}: the class name {odd!r} holds control characters; "
                           f"expected printable names; check the archive (data.url).")
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:  # else the tables would hold rows of one name
        raise PrepareError(f"{source}: the class name {twice!r} appears "
                           f"{names.count(twice)} times; expected {num_classes} different "
                           f"names; check the archive (data.url).")
    return names


# --------------------------------------------------------------------------- stage


# what the stage writes into its folder: it replaces that folder, and nothing else


# written first into every folder the stage makes beside its output (a temporary one it
# builds in, an old output set aside): what marks a leftover of a killed run as the stage's
# own, which its next run removes; a folder without it is never removed, whatever it holds
OWN_MARK = ".preprocess-own"


def _fresh_dir(out: Path, kind: str) -> Path:
    """A new, empty folder beside ``out`` under a name no user has and that names the
    process making it (``.prepared.tmp-<pid>-x1y2``), marked as the stage's own before
    anything else is written in it. Such folders a killed run left (SIGKILL, or SIGTERM
    before Python's clean-up) are removed here, once their process has gone."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _sweep_left_behind(out)
    path = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{hidden_stem(out.name)}.{kind}-{os.getpid()}-"))
    hold_folder(path)  # in use while this process lives, whatever PID namespace sweeps
    (path / OWN_MARK).write_text("made by the preprocess stage, which removes it\n")
    return path


def _sweep_left_behind(out: Path) -> None:
    """Remove what a killed run left: a folder of that name whose process has gone, that
    holds the stage's mark and otherwise only what the stage writes (a folder of the
    user's of the same name, a copy of the output kept as a backup say, has no mark and is
    left as it is)."""
    stem = hidden_stem(out.name)
    for left in out.parent.glob(f".{glob.escape(stem)}.*-*-*"):
        kind, _, rest = left.name[len(stem) + 2:].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("tmp", "old") and pid.isdigit() and left.is_dir() \
                and not left.is_symlink() and not process_alive(int(pid)) \
                and not folder_held(left) and _own(left):
            shutil.rmtree(left, ignore_errors=True)


def _own(folder: Path) -> bool:
    """Whether ``folder`` holds the stage's mark, and besides it only files the stage
    writes, or outputs on their way (``prepared/``, ``new/``) holding only those."""
    def stage_files(where: Path) -> bool:  # (new/ still holds its own mark for an instant)
        return all(f.name in (*PREPARED_NAMES, OWN_MARK) and f.is_file() and not f.is_symlink()
                   for f in where.iterdir())

    mark = folder / OWN_MARK
    if not mark.is_file() or mark.is_symlink():
        return False
    rest = [f for f in folder.iterdir() if f.name != OWN_MARK]
    # an old output set aside (prepared/), a new one on its way into place (new/)
    if rest and {f.name for f in rest} <= {"prepared", "new"}:
        return all(f.is_dir() and not f.is_symlink() and stage_files(f) for f in rest)
    return all(f.name in PREPARED_NAMES and f.is_file() and not f.is_symlink() for f in rest)


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished ``tmp`` folder to ``out``, replacing any old one, by way of a
    marked folder of the stage's: the new output waits in it, and the old one is set aside
    in it, so that a kill at any moment leaves nothing unmarked beside ``out`` (the next
    run removes the marked folder); an exception puts the old output back."""
    held = _fresh_dir(out, "old")
    os.rename(tmp, held / "new")
    (held / "new" / OWN_MARK).unlink()  # the output holds the stage's files only
    try:
        if out.exists():
            os.rename(out, held / "prepared")
        os.rename(held / "new", out)
    except BaseException:
        if not out.exists() and (held / "prepared").is_dir():
            os.rename(held / "prepared", out)
        raise
    finally:
        shutil.rmtree(held, ignore_errors=True)


def _write_outputs(out_dir: Path, arrays: dict, meta: dict) -> None:
    """Write the arrays and meta.json under a temporary name, then rename into place."""
    tmp = _fresh_dir(out_dir, "tmp")
    try:
        with writing(tmp, out_dir):
            for name, arr in arrays.items():
                np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
            (tmp / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare(archive: Path, out_dir: Path, spec: DatasetSpec, label: str = "fine") -> dict:
    """Parse a binary-record archive (CIFAR-10, CIFAR-100) into ``out_dir``
    (``{split}_images.npy``, ``{split}_labels.npy``, ``meta.json``); return the metadata."""
    t0 = time.perf_counter()
    archive, out_dir = Path(archive), Path(out_dir)
    refuse_foreign(out_dir, PREPARED_NAMES, "preprocess")
    labels_of = spec.label_set(label)
    member = lambda name: f"{spec.folder}/{name}"  # noqa: E731
    wanted = {member(f) for files in spec.splits.values() for f in files} | {member(labels_of.names_file)}
    found = read_archive(archive, wanted, spec.max_records_per_file * spec.record_bytes)
    missing = sorted(wanted - set(found))
    if missing:
        raise PrepareError(f"{archive}: missing {', '.join(missing)}; expected the official "
                           f"layout {spec.folder}/ with {', '.join(sorted(w.split('/')[-1] for w in wanted))}.")
    t_read = time.perf_counter()

    names_member = member(labels_of.names_file)
    classes = parse_class_names(found[names_member], labels_of.num_classes, f"{archive}:{names_member}")
    arrays, counts = {}, {}
    for split, files in spec.splits.items():
        parts = [parse_records(found[member(f)], spec, f"{archive}:{member(f)}", labels_of.index,
                               labels_of.num_classes) for f in files]
        arrays[f"{split}_images"] = np.concatenate([p[0] for p in parts])
        arrays[f"{split}_labels"] = np.concatenate([p[1] for p in parts])
        counts[split] = int(len(arrays[f"{split}_labels"]))
    t_parse = time.perf_counter()

    meta = {
        "dataset": spec.name,
        "label": label if len(spec.labels) > 1 else next(iter(spec.labels)),
        "classes": classes,
        "num_classes": labels_of.num_classes,
        "image_shape": list(spec.image_shape),
        "counts": counts,
        "file_counts": {split: [len(found[member(f)]) // spec.record_bytes for f in files]
                        for split, files in spec.splits.items()},
        "class_counts": {split: np.bincount(arrays[f"{split}_labels"],
                                            minlength=labels_of.num_classes).tolist()
                         for split in spec.splits},
        "flip": spec.flip,
        "source_archive": archive.name,
        "source_md5": md5_of(archive),
    }
    _write_outputs(out_dir, arrays, meta)
    t_end = time.perf_counter()
    log.info("prepared %s: %s records in %.2f s (read %.2f s, parse %.2f s, write %.2f s)",
             spec.name, ", ".join(f"{k} {v}" for k, v in counts.items()), t_end - t0,
             t_read - t0, t_parse - t_read, t_end - t_parse)
    return meta


# --------------------------------------------------------------------------- SVHN


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(X as stored: 32 x 32 x 3 x N uint8, labels 0..9) from an SVHN MATLAB file."""
    import scipy.io

    if not Path(path).is_file():
        raise PrepareError(f"{path}: no such file; run the download stage first "
                           f"(`dvc repro download`).")
    try:
        mat = scipy.io.loadmat(path, variable_names=["X", "y"])
    except Exception as exc:  # scipy raises several types for damaged files
        raise PrepareError(f"{path}: not a readable MATLAB file ({type(exc).__name__}: {exc}).") from None
    if "X" not in mat or "y" not in mat:
        raise PrepareError(f"{path}: expected variables X and y, found "
                           f"{sorted(k for k in mat if not k.startswith('__'))}.")
    x, y = mat["X"], np.asarray(mat["y"]).reshape(-1)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.dtype != np.uint8:
        raise PrepareError(f"{path}: expected X of 32 x 32 x 3 x N uint8, found {x.dtype} "
                           f"{' x '.join(map(str, x.shape))}.")
    if len(y) != x.shape[3]:
        raise PrepareError(f"{path}: X holds {x.shape[3]} images but y {len(y)} labels.")
    bad = np.flatnonzero((y < 1) | (y > 10) | (y != np.round(y)))
    if bad.size:
        raise PrepareError(f"{path}: label {y[bad[0]]} at index {bad[0]}; expected 1..10 "
                           f"(10 meaning the digit 0).")
    return x, (y.astype(np.int64) % 10)


def prepare_svhn(raw_dir: Path, out_dir: Path, spec: DatasetSpec, extra: bool = False,
                 chunk: int = 8192) -> dict:
    """SVHN's MATLAB files -> the same cached tensors as CIFAR. Images are copied to the
    output in chunks, so the peak memory is one file's X, not two copies of it."""
    t0 = time.perf_counter()
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    refuse_foreign(out_dir, PREPARED_NAMES, "preprocess")
    splits = {"train": list(spec.splits["train"]) + (list(spec.optional_files) if extra else []),
              "test": list(spec.splits["test"])}
    tmp = _fresh_dir(out_dir, "tmp")
    counts, file_counts, class_counts, md5s = {}, {}, {}, {}
    try:
        for split, files in splits.items():
            parts_labels, sizes, images_out = [], [], None
            for name in files:
                x, y = read_svhn_mat(raw_dir / name)
                md5s[name] = md5_of(raw_dir / name)
                n = x.shape[3]
                if images_out is None:  # size the output from every file of the split
                    total = n + sum(_svhn_count(raw_dir / f) for f in files[1:])
                    images_out = open(tmp / f"{split}_images.npy", "wb")
                    np.lib.format.write_array_header_1_0(images_out, {
                        "descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
                        "fortran_order": False, "shape": (total, 3, 32, 32)})
                for i in range(0, n, chunk):  # N x C x rows x cols from rows x cols x C x N
                    images_out.write(np.ascontiguousarray(
                        x[:, :, :, i:i + chunk].transpose(3, 2, 0, 1)).tobytes())
                parts_labels.append(y)
                sizes.append(n)
                del x
            images_out.close()
            labels = np.concatenate(parts_labels)
            np.save(tmp / f"{split}_labels.npy", labels, allow_pickle=False)
            counts[split], file_counts[split] = int(len(labels)), sizes
            class_counts[split] = np.bincount(labels, minlength=10).tolist()
        labels_of = spec.label_set("digit")
        meta = {"dataset": spec.name, "label": "digit", "classes": list(labels_of.names),
                "num_classes": labels_of.num_classes, "image_shape": list(spec.image_shape),
                "counts": counts, "file_counts": file_counts, "class_counts": class_counts,
                "flip": spec.flip, "svhn_extra": extra, "source_md5": md5s}
        (tmp / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("prepared svhn: %s images in %.2f s", ", ".join(f"{k} {v}" for k, v in counts.items()),
             time.perf_counter() - t0)
    return meta


def _svhn_count(path: Path) -> int:
    """The number of images in an SVHN file, from its y variable alone."""
    import scipy.io

    try:
        return int(np.asarray(scipy.io.loadmat(path, variable_names=["y"])["y"]).size)
    except FileNotFoundError:
        raise PrepareError(f"{path}: no such file; run the download stage first.") from None
    except Exception as exc:
        raise PrepareError(f"{path}: not a readable MATLAB file ({exc}).") from None


def prepare_dataset(raw_dir: Path, out_dir: Path, data) -> dict:
    """The preprocess stage for ``data`` (DataParams): whichever format the set has."""
    from .datasets import get_dataset

    spec = get_dataset(data.dataset)
    with writing(out_dir):  # a full disk is one line naming the output, however it shows
        if spec.format == "svhn_mat":
            return prepare_svhn(raw_dir, out_dir, spec, extra=data.svhn_extra)
        return prepare(Path(raw_dir) / spec.archive_name, out_dir, spec, data.label)
