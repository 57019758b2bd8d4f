"""Synthetic archives in the exact official layout, for tests and CI checks.

``python -m cifar10_tutorial.data.synthetic OUT.tar.gz [--train-per-batch N] [--test N]``
writes a small ``cifar-10-binary.tar.gz`` look-alike and prints its md5. The
images are learnable: each class has its own colour and stripe pattern plus
noise, so a short training run must reach high accuracy on them.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np

from .datasets import CIFAR10, CIFAR100, DatasetSpec

CLASSES = ["airplane", "automobile", "bird", "cat", "deer",
           "dog", "frog", "horse", "ship", "truck"]


def tar_gz_bytes(members: dict[str, bytes]) -> bytes:
    """A reproducible .tar.gz of regular files (fixed timestamps), as bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tf:
            for name, raw in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(raw), 0
                tf.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def write_tar_gz(path: Path, members: dict[str, bytes]) -> str:
    """Write a reproducible .tar.gz of regular files; return its md5."""
    data = tar_gz_bytes(members)
    Path(path).write_bytes(data)
    return hashlib.md5(data).hexdigest()


def learnable_images(labels: np.ndarray, rng: np.random.Generator,
                     num_classes: int = 10, noise: float = 40.0) -> np.ndarray:
    """uint8 N x 3 x 32 x 32 images whose class shows in colour and stripe direction/frequency."""
    n = len(labels)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    palette = np.random.default_rng(1234).uniform(40, 215, size=(num_classes, 3))
    images = np.empty((n, 3, 32, 32), np.float32)
    for c in range(num_classes):
        idx = labels == c
        angle = np.pi * c / num_classes
        freq = 2 * np.pi / (4 + (c % 3) * 3)
        stripes = 50 * np.sin(freq * (np.cos(angle) * xx + np.sin(angle) * yy))
        images[idx] = palette[c][:, None, None] + stripes
    images += rng.normal(0, noise, size=images.shape)
    return np.clip(images, 0, 255).astype(np.uint8)


def make_records(n: int, rng: np.random.Generator, spec: DatasetSpec = CIFAR10,
                 learnable: bool = True) -> tuple[np.ndarray, np.ndarray, bytes]:
    labels = rng.integers(0, spec.num_classes, size=n).astype(np.uint8)
    if learnable:
        images = learnable_images(labels, rng, spec.num_classes)
    else:
        images = rng.integers(0, 256, size=(n, *spec.image_shape), dtype=np.uint8)
    records = np.concatenate([labels[:, None], images.reshape(n, -1)], axis=1)
    return images, labels.astype(np.int64), records.tobytes()


def make_cifar10_archive(path: Path, train_per_batch: int = 20, test: int = 30,
                         seed: int = 0, learnable: bool = True,
                         skip: tuple[str, ...] = ()) -> dict:
    """Write a CIFAR-10-layout archive; return its md5 and the arrays written, per split."""
    rng = np.random.default_rng(seed)
    members, parts = {}, {"train": [], "test": []}
    for split, files in CIFAR10.splits.items():
        for name in files:
            n = train_per_batch if split == "train" else test
            images, labels, raw = make_records(n, rng, CIFAR10, learnable)
            parts[split].append((images, labels))
            members[f"{CIFAR10.folder}/{name}"] = raw
    members[f"{CIFAR10.folder}/{CIFAR10.meta_file}"] = ("\n".join(CLASSES) + "\n").encode()
    for name in skip:
        members.pop(f"{CIFAR10.folder}/{name}")
    md5 = write_tar_gz(path, members)
    out = {"md5": md5, "classes": CLASSES}
    for split, p in parts.items():
        out[f"{split}_images"] = np.concatenate([a for a, _ in p])
        out[f"{split}_labels"] = np.concatenate([b for _, b in p])
    return out


def make_cifar100_archive(path: Path, train: int = 60, test: int = 30, seed: int = 0) -> dict:
    """A CIFAR-100-layout archive: records of coarse byte, fine byte, 3072 pixels."""
    rng = np.random.default_rng(seed)
    members, out = {}, {}
    for split, n in (("train", train), ("test", test)):
        fine = rng.integers(0, 100, size=n).astype(np.uint8)
        coarse = (fine // 5).astype(np.uint8)
        images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        rec = np.concatenate([coarse[:, None], fine[:, None], images.reshape(n, -1)], axis=1)
        members[f"{CIFAR100.folder}/{split}.bin"] = rec.tobytes()
        out[f"{split}_images"], out[f"{split}_fine"], out[f"{split}_coarse"] = images, fine, coarse
    members[f"{CIFAR100.folder}/coarse_label_names.txt"] = \
        "".join(f"superclass_{i}\n" for i in range(20)).encode()
    members[f"{CIFAR100.folder}/fine_label_names.txt"] = \
        "".join(f"class_{i}\n" for i in range(100)).encode()
    out["md5"] = write_tar_gz(path, members)
    return out


def make_svhn_files(folder: Path, train: int = 60, test: int = 30, extra: int = 0,
                    seed: int = 0) -> dict:
    """SVHN-layout MATLAB files (X: 32 x 32 x 3 x N uint8, y: N x 1 in 1..10, 10 for
    the digit 0) with learnable images; returns the images (N x 3 x 32 x 32) and
    labels (0..9) written, per file."""
    import scipy.io

    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, n in (("train_32x32.mat", train), ("test_32x32.mat", test),
                    ("extra_32x32.mat", extra)):
        if n == 0:
            continue
        digits = rng.integers(0, 10, size=n)
        images = learnable_images(digits, rng, 10)
        x = np.ascontiguousarray(images.transpose(2, 3, 1, 0))  # rows x cols x C x N
        y = np.where(digits == 0, 10, digits).astype(np.uint8)[:, None]
        scipy.io.savemat(folder / name, {"X": x, "y": y})
        out[name] = (images, digits.astype(np.int64))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Write a small synthetic CIFAR-10 binary archive.")
    ap.add_argument("out")
    ap.add_argument("--train-per-batch", type=int, default=200)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.is_dir():
        raise SystemExit(f"error: {out} is a folder; expected the archive's file name "
                         f"(e.g. {out / 'cifar-10-binary.tar.gz'})")
    out.parent.mkdir(parents=True, exist_ok=True)  # data/raw/ of a fresh clone is not there yet
    info = make_cifar10_archive(out, a.train_per_batch, a.test, a.seed)
    print(f"wrote {a.out}: {5 * a.train_per_batch} train, {a.test} test records")
    print("md5", info["md5"])


if __name__ == "__main__":
    main()
