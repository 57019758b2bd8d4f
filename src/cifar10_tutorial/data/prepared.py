"""The prepared tensors as training, evaluation and the benchmarks read them: the files the
preprocess stage wrote (:mod:`prepare`), loaded without pickles and checked. Apart from
:mod:`prepare` so that a stage that only reads the data does not depend on the code that
fetches and parses it: editing the downloader reruns nothing after the preprocess stage.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import PipelineError

META_NAME = "meta.json"
PREPARED_NAMES = {f"{split}_{kind}.npy" for split in ("train", "test")
                  for kind in ("images", "labels")} | {META_NAME}


class PrepareError(PipelineError):
    """The raw archive or a record file is not in the expected layout."""


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

    @functools.cached_property
    def content_hash(self) -> str:
        """A hash of every array and of meta.json: the identity of the data a run trained on
        (checkpoints of other data are not resumed). About 0.3 s for CIFAR-10."""
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps(self.meta, sort_keys=True).encode())
        for name in ("train_images", "train_labels", "test_images", "test_labels"):
            arr = np.ascontiguousarray(getattr(self, name))
            h.update(f"{name} {arr.dtype} {arr.shape}".encode())
            h.update(arr.data)
        return h.hexdigest()


REDO = "rerun the preprocess stage (`dvc repro -f preprocess`)"


def _meta(meta_path: Path) -> dict:
    """meta.json, checked for what the loaders and stages read from it."""
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PrepareError(f"{meta_path}: not valid JSON ({str(exc)[:80]}); {REDO}.") from None
    if not isinstance(meta, dict):
        raise PrepareError(f"{meta_path}: expected a JSON object, found a "
                           f"{type(meta).__name__}; {REDO}.")
    classes, n, counts, shape = (meta.get(k) for k in ("classes", "num_classes", "counts",
                                                        "image_shape"))
    problems = []
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        problems.append(f"classes a list of names (found {str(classes)[:60]})")
    elif not (isinstance(n, int) and n == len(classes)):
        problems.append(f"num_classes {len(classes)}, one per class name (found {n!r})")
    if not (isinstance(counts, dict) and all(isinstance(counts.get(k), int) and counts[k] >= 0
                                             for k in ("train", "test"))):
        problems.append(f"counts of train and test (found {str(counts)[:60]})")
    if not (isinstance(shape, list) and len(shape) == 3 and shape[0] == 3
            and all(isinstance(x, int) and x > 0 for x in shape)):
        problems.append(f"image_shape [3, height, width] (found {shape!r})")
    files = meta.get("file_counts")
    if files is not None and not problems:  # older data record none: one file of each split
        for split in ("train", "test"):
            sizes = files.get(split) if isinstance(files, dict) else None
            if not (isinstance(sizes, list) and sizes
                    and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                            for c in sizes)):
                problems.append(f"file_counts.{split} the records of each {split} file (found "
                                f"{str(sizes if isinstance(files, dict) else files)[:60]})")
    if problems:
        raise PrepareError(f"{meta_path}: expected {'; '.join(problems)}; {REDO}.")
    return meta


def _check_split(out_dir: Path, split: str, images: np.ndarray, labels: np.ndarray,
                 meta: dict) -> None:
    where = out_dir / f"{split}_images.npy"
    if len(images) != len(labels) or len(images) != meta["counts"][split]:
        raise PrepareError(f"{out_dir}: {split} has {len(images)} images and {len(labels)} "
                           f"labels; {META_NAME} says {meta['counts'][split]}; {REDO}.")
    if len(images) == 0:
        raise PrepareError(f"{out_dir}: the {split} split is empty; expected images to "
                           f"{'train on' if split == 'train' else 'evaluate on'}: check the "
                           f"archive (data.url), then {REDO}.")
    sizes = (meta.get("file_counts") or {}).get(split)
    if sizes is not None and sum(sizes) != len(images):  # how several devices share them
        raise PrepareError(f"{out_dir / META_NAME}: file_counts.{split} {str(sizes)[:60]} adds "
                           f"up to {sum(sizes)} records, where {split} has {len(images)} "
                           f"images; {REDO}.")
    if tuple(images.shape[1:]) != tuple(meta["image_shape"]):
        raise PrepareError(f"{where}: expected images of shape {tuple(meta['image_shape'])} "
                           f"(channels, height, width), found {tuple(images.shape[1:])}; {REDO}.")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= meta["num_classes"]:
        raise PrepareError(f"{out_dir / f'{split}_labels.npy'}: expected labels 0 to "
                           f"{meta['num_classes'] - 1} ({meta['num_classes']} classes), found "
                           f"{lo if lo < 0 else hi}; {REDO}.")


def prepared_size(out_dir: Path | str) -> tuple[int, bool, Optional[list[int]]]:
    """The training images of prepared data, whether its data set flips by default, and
    the records of each training file (None where not recorded): what a run's params are
    compared with before the run loads the tensors, checked as :func:`load_prepared`
    checks them (the arrays' headers and labels only: the images are mapped, not read), so
    that damaged data are named, before any lock or launch, not taken at meta.json's word."""
    data = load_prepared(out_dir, mapped=True)
    return len(data.train_labels), bool(data.meta.get("flip", True)), train_file_counts(data)


def train_file_counts(data: Prepared) -> Optional[list[int]]:
    """The records of each training file that meta.json records (the processes of a run
    on several devices share each out record by record; :func:`_meta` checks them); None
    where it records none (data prepared before they were recorded: one file)."""
    return (data.meta.get("file_counts") or {}).get("train")


def load_prepared(out_dir: Path | str, mapped: bool = False) -> Prepared:
    """Load what :func:`prepare` wrote (no pickles); clear errors if it is missing or damaged:
    meta.json's fields, each array's type, shape and length, the labels' range.
    ``mapped``: the arrays memory-mapped, read only where used."""
    out_dir = Path(out_dir)
    meta_path = out_dir / META_NAME
    if os.path.lexists(out_dir) and not out_dir.is_dir():  # never a path inside a file
        what = ("a link to nothing" if not out_dir.exists() else "a file" if out_dir.is_file()
                else "not a folder (a FIFO, socket or device)")
        raise PrepareError(f"{out_dir}: {what}, where the prepared data's folder is expected "
                           f"({META_NAME} and the tensors the preprocess stage writes); give "
                           f"that folder.")
    if not os.path.lexists(out_dir):
        raise PrepareError(f"{out_dir}: not found, where the prepared data's folder is "
                           f"expected; give its path (a mistyped path?), or prepare it first "
                           f"(`dvc repro preprocess`).")
    if not meta_path.is_file():
        if os.path.lexists(meta_path):  # a FIFO would block the read: never opened
            raise PrepareError(f"{meta_path}: not a file (a folder, FIFO or link to nothing), "
                               f"where the preprocess stage writes its record; {REDO}.")
        raise PrepareError(f"{meta_path}: not found; run the preprocess stage first "
                           f"(`dvc repro preprocess`).")
    meta = _meta(meta_path)
    arrays = {}
    for split in ("train", "test"):
        for kind, dtype, ndim in (("images", np.uint8, 4), ("labels", np.int64, 1)):
            path = out_dir / f"{split}_{kind}.npy"
            if os.path.lexists(path) and not path.is_file():  # a FIFO would block: not opened
                raise PrepareError(f"{path}: not a file (a folder, FIFO or link to nothing), "
                                   f"where the preprocess stage writes its tensors; {REDO}.")
            try:
                arr = np.load(path, allow_pickle=False, mmap_mode="r" if mapped else None)
            except (OSError, ValueError) as exc:
                raise PrepareError(f"{path}: cannot be read ({exc}); rerun `dvc repro preprocess`.") from None
            if arr.dtype != dtype or arr.ndim != ndim:
                raise PrepareError(f"{path}: expected {dtype.__name__} with {ndim} dimensions, "
                                   f"found {arr.dtype} with shape {arr.shape}.")
            arrays[f"{split}_{kind}"] = arr
        _check_split(out_dir, split, arrays[f"{split}_images"], arrays[f"{split}_labels"], meta)
    return Prepared(meta=meta, **arrays)
