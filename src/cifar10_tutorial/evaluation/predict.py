"""Classify image files with the trained model.

    python -m cifar10_tutorial.evaluation.predict cat.jpg truck.png [--model PATH/model.pt] [--top 3]

Any size, PNG or JPEG: each image is resized to 32x32 (as CIFAR images are),
then given the evaluation input (central 24x24 crop, per-image
standardization); the averaged weights are used unless --raw.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from ..cli import run_stage, stage_output
from ..errors import PipelineError
from ..model_files import load_trained
from ..scoring import predict_logits


def _to_8bit(img, path: Path):
    """An image of 16-bit, 32-bit integer or float pixels as 8-bit grey, scaled, not clipped:
    16-bit values (up to 65,535) by 1/257, floats in [0, 1] by 255, anything else from its
    own minimum and maximum to 0..255. NaN or infinite pixels have no such scale."""
    from PIL import Image

    a = np.asarray(img).astype(np.float64)
    bad = int(np.size(a) - np.isfinite(a).sum())
    if bad:
        raise PipelineError(f"{path}: {bad:,} of its {np.size(a):,} pixels are NaN or infinite, "
                            f"expected finite values; give an image of finite pixels")
    lo, hi = float(a.min()), float(a.max())
    if img.mode == "F" and lo >= 0 and hi <= 1:
        a = a * 255
    elif img.mode.startswith("I") and lo >= 0 and hi <= 65535:
        a = a / 257
    else:
        a = (a - lo) * (255 / (hi - lo)) if hi > lo else np.zeros_like(a)
    return Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), mode="L")


def load_image(path: Path, size: int = 32) -> np.ndarray:
    """uint8 3 x size x size from an image file of any size and mode, turned upright by its
    EXIF orientation; 16-bit, 32-bit and float pixels scaled to 8 bits."""
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    if path.exists() and not path.is_file():
        raise PipelineError(f"{path}: not a regular file (a folder, FIFO or device); give an "
                            f"image file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                img = ImageOps.exif_transpose(img)
                if img.mode in ("I", "F") or img.mode.startswith("I;16"):
                    img = _to_8bit(img, path)
                if img.mode in ("P", "PA") and "transparency" in img.info:
                    img = img.convert("RGBA")  # straight to RGB, Pillow warns on stderr
                img = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                return np.asarray(img).transpose(2, 0, 1).copy()
    except FileNotFoundError:
        raise PipelineError(f"{path}: no such file") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise PipelineError(f"{path}: refused: the image claims more than "
                            f"{Image.MAX_IMAGE_PIXELS:,} pixels (a possible decompression "
                            f"bomb); give a photo of ordinary size") from None
    except ValueError as exc:  # Pillow's limits on text and ICC chunks (PngImagePlugin)
        if "too large" in str(exc) or "text chunks" in str(exc):
            raise PipelineError(f"{path}: refused: its metadata (text or colour-profile chunks) "
                                f"inflates past Pillow's safety limits (a possible "
                                f"decompression bomb); give an ordinary image") from None
        raise PipelineError(f"{path}: not a readable image ({exc})") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise PipelineError(f"{path}: not a readable image ({exc})") from None


def predict(paths: list[Path], model_path: Path, top: int = 3, averaged: bool = True):
    model, ckpt = load_trained(model_path, "cpu", averaged)
    images = torch.from_numpy(np.stack([load_image(p) for p in paths]))
    probs = predict_logits(model, images).softmax(dim=1)
    classes = ckpt["classes"]
    k = min(top, len(classes))
    values, indices = probs.topk(k, dim=1)
    return [[(classes[i], float(v)) for v, i in zip(vs, idx)]
            for vs, idx in zip(values.tolist(), indices.tolist())]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return value


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Print the top classes of image files.")
    ap.add_argument("images", nargs="+", type=Path)
    ap.add_argument("--model", type=Path,
                    help="a model.pt (default: the train stage's, from dvc.yaml)")
    ap.add_argument("--top", type=_positive, default=3, help="how many classes to print (>= 1)")
    ap.add_argument("--raw", action="store_true", help="use the raw instead of the averaged weights")
    a = ap.parse_args(argv)
    model = a.model or stage_output("train", "model.pt")
    for path, ranked in zip(a.images, predict(a.images, model, a.top, not a.raw)):
        print(f"{shown(path)}: " + ", ".join(f"{name} {p:.3f}" for name, p in ranked))


def shown(path: Path) -> str:
    """A file name as one line of output: a name with a control character (a newline) is
    quoted, as Python writes it, rather than split over two lines."""
    text = str(path)
    return repr(text) if any(ord(c) < 32 or ord(c) == 127 for c in text) else text


if __name__ == "__main__":
    run_stage(main)
