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

import json
import logging
import os
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

import numpy as np

from .datasets import DatasetSpec
from .download import md5_of
from .errors import PipelineError

log = logging.getLogger(__name__)

META_NAME = "meta.json"


class PrepareError(PipelineError):
    """The raw archive or a record file is not in the expected layout."""


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


def read_archive(archive: Path, wanted: set[str]) -> dict[str, bytes]:
    """Return the bytes of the wanted members (paths inside the archive), checking every member."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:  # one streaming pass: gzip is never re-read
                path = check_member(member, archive)
                if path is not None and str(path) in wanted:
                    f = tf.extractfile(member)
                    found[str(path)] = f.read() if f is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise PrepareError(f"{archive}: no such file; run the download stage first "
                               f"(`dvc repro download`).") from None
        raise PrepareError(f"{archive}: not a readable gzip tar archive ({exc}).") from None
    return found


# --------------------------------------------------------------------------- records


def parse_records(raw: bytes, spec: DatasetSpec, source: str,
                  label_index: int = 0) -> tuple[np.ndarray, np.ndarray]:
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
    bad = np.flatnonzero(labels >= spec.num_classes)
    if bad.size:
        i = int(bad[0])
        raise PrepareError(f"{source}: record {i} has label {labels[i]}; expected 0.."
                           f"{spec.num_classes - 1} ({bad.size} records out of range).")
    images = records[:, spec.label_bytes:].reshape(-1, *spec.image_shape).copy()
    return images, labels


def parse_class_names(raw: bytes, spec: DatasetSpec, source: str) -> list[str]:
    names = [line.strip() for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
    if len(names) != spec.num_classes:
        raise PrepareError(f"{source}: expected {spec.num_classes} class names, one a line; "
                           f"found {len(names)}.")
    return names


# --------------------------------------------------------------------------- stage


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished ``tmp`` folder to ``out``, replacing any old one."""
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, out)


def prepare(archive: Path, out_dir: Path, spec: DatasetSpec) -> dict:
    """Parse ``archive`` into ``out_dir`` (``{split}_images.npy``, ``{split}_labels.npy``,
    ``meta.json``); return the metadata written."""
    t0 = time.perf_counter()
    archive, out_dir = Path(archive), Path(out_dir)
    member = lambda name: f"{spec.folder}/{name}"  # noqa: E731
    wanted = {member(f) for files in spec.splits.values() for f in files} | {member(spec.meta_file)}
    found = read_archive(archive, wanted)
    missing = sorted(wanted - set(found))
    if missing:
        raise PrepareError(f"{archive}: missing {', '.join(missing)}; expected the official "
                           f"layout {spec.folder}/ with {', '.join(sorted(w.split('/')[-1] for w in wanted))}.")
    t_read = time.perf_counter()

    classes = parse_class_names(found[member(spec.meta_file)], spec, f"{archive}:{member(spec.meta_file)}")
    arrays, counts = {}, {}
    for split, files in spec.splits.items():
        parts = [parse_records(found[member(f)], spec, f"{archive}:{member(f)}") for f in files]
        arrays[f"{split}_images"] = np.concatenate([p[0] for p in parts])
        arrays[f"{split}_labels"] = np.concatenate([p[1] for p in parts])
        counts[split] = int(len(arrays[f"{split}_labels"]))
    t_parse = time.perf_counter()

    meta = {
        "dataset": spec.name,
        "classes": classes,
        "num_classes": spec.num_classes,
        "image_shape": list(spec.image_shape),
        "counts": counts,
        "file_counts": {split: [len(found[member(f)]) // spec.record_bytes for f in files]
                        for split, files in spec.splits.items()},
        "class_counts": {split: np.bincount(arrays[f"{split}_labels"],
                                            minlength=spec.num_classes).tolist()
                         for split in spec.splits},
        "source_archive": archive.name,
        "source_md5": md5_of(archive),
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
        (tmp / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    t_end = time.perf_counter()
    log.info("prepared %s: %s records in %.2f s (read %.2f s, parse %.2f s, write %.2f s)",
             spec.name, ", ".join(f"{k} {v}" for k, v in counts.items()), t_end - t0,
             t_read - t0, t_parse - t_read, t_end - t_parse)
    return meta


@dataclass
class Prepared:
    """The cached tensors of one data set, as numpy arrays."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    meta: dict

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])


def load_prepared(out_dir: Path | str = "data/prepared") -> Prepared:
    """Load what :func:`prepare` wrote (no pickles); clear errors if it is missing or damaged."""
    out_dir = Path(out_dir)
    meta_path = out_dir / META_NAME
    if not meta_path.is_file():
        raise PrepareError(f"{meta_path}: not found; run the preprocess stage first "
                           f"(`dvc repro preprocess`).")
    meta = json.loads(meta_path.read_text())
    arrays = {}
    for split in ("train", "test"):
        for kind, dtype, ndim in (("images", np.uint8, 4), ("labels", np.int64, 1)):
            path = out_dir / f"{split}_{kind}.npy"
            try:
                arr = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise PrepareError(f"{path}: cannot be read ({exc}); rerun `dvc repro preprocess`.") from None
            if arr.dtype != dtype or arr.ndim != ndim:
                raise PrepareError(f"{path}: expected {dtype.__name__} with {ndim} dimensions, "
                                   f"found {arr.dtype} with shape {arr.shape}.")
            arrays[f"{split}_{kind}"] = arr
        n_img, n_lab = len(arrays[f"{split}_images"]), len(arrays[f"{split}_labels"])
        if n_img != n_lab or n_img != meta["counts"][split]:
            raise PrepareError(f"{out_dir}: {split} has {n_img} images and {n_lab} labels; "
                               f"{META_NAME} says {meta['counts'][split]}.")
    return Prepared(meta=meta, **arrays)
