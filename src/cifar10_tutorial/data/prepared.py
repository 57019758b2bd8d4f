"""The prepared tensors as training, evaluation and the benchmarks read them: the files the
preprocess stage wrote (:mod:`prepare`), loaded without pickles and checked. Apart from
:mod:`prepare` so that a stage that only reads the data does not depend on the code that
fetches and parses it: editing the downloader reruns nothing after the preprocess stage.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

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


def load_prepared(out_dir: Path | str) -> Prepared:
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
