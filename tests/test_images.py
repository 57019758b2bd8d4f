"""Images as users have them (evaluation.predict.load_image): deep and float pixels scaled,
EXIF orientation applied, metadata bombs and FIFOs refused in one line."""
import os
import zlib

import numpy as np
import pytest
from PIL import Image

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.evaluation.predict import load_image


def _grey_of(path):
    img = load_image(path, size=4)
    assert img.shape == (3, 4, 4) and img.dtype == np.uint8
    assert (img[0] == img[1]).all() and (img[1] == img[2]).all()
    return img[0]


@pytest.mark.parametrize("mode, values, expected", [
    ("I;16", np.full((8, 8), 32896, np.uint16), 128),   # 16-bit grey: / 257, not clipped to 255
    ("F", np.full((8, 8), 0.5, np.float32), 128),        # float in [0, 1]: x 255, not black
])
def test_deep_and_float_pixels_are_scaled_not_clipped(tmp_path, mode, values, expected):
    """A 16-bit PNG is scaled by 1/257 and a float TIFF in [0, 1] by 255, to 0-255: not
    clipped to near-white, nor cast to black."""
    path = tmp_path / ("img.png" if mode == "I;16" else "img.tiff")
    Image.frombytes(mode, values.shape[::-1], values.tobytes()).save(path)
    assert abs(int(_grey_of(path).mean()) - expected) <= 1


def test_int32_pixels_beyond_16_bits_are_scaled_from_their_range(tmp_path):
    """An int32 TIFF of 46-69887 spans 0-255 in order, not clipped at 255."""
    a = np.tile(np.linspace(46, 69887, 8).astype(np.int32), (8, 1))
    path = tmp_path / "img.tiff"
    Image.frombytes("I", a.shape[::-1], a.tobytes()).save(path)
    grey = load_image(path, size=8)[0].astype(int)
    assert grey[:, 0].max() <= 5 and grey[:, -1].min() >= 250  # the whole range, not clipped
    assert (np.diff(grey[4]) >= 0).all()


def test_exif_orientation_is_applied(tmp_path):
    """A photo with EXIF orientation 6 is read upright, as it is displayed."""
    a = np.zeros((8, 16, 3), np.uint8)
    a[:, :8] = 255  # stored: white on the left
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "photo.jpg"
    Image.fromarray(a).save(path, exif=exif.tobytes(), quality=95)
    shown = load_image(path, size=16)[0].astype(int)
    assert shown[:4].mean() > 200 and shown[-4:].mean() < 50  # upright: white on top


def test_a_palette_image_with_transparency_is_read_without_library_warnings(tmp_path):
    """A palette PNG with per-entry transparency is read with its colours as they are,
    and no Pillow UserWarning (with its source path) reaches predict's stderr."""
    import warnings

    palette = [v for i in range(256) for v in (i, 255 - i, 7)]
    img = Image.new("P", (8, 8), 200)
    img.putpalette(palette)
    path = tmp_path / "palette.png"
    img.save(path, transparency=bytes([0] * 10 + [255] * 246))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = load_image(path, size=8)
    assert got[:, 0, 0].tolist() == [200, 55, 7]


def _png_with_chunk(path, kind: bytes, payload: bytes):
    import struct

    base = tmp_png = path.with_suffix(".base.png")
    Image.new("RGB", (1, 1)).save(base)
    data = base.read_bytes()
    chunk = struct.pack(">I", len(payload)) + kind + payload
    chunk += struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
    path.write_bytes(data[:33] + chunk + data[33:])  # after IHDR
    tmp_png.unlink()


@pytest.mark.parametrize("kind, payload", [
    (b"zTXt", b"Comment\x00\x00" + zlib.compress(b"\x00" * (200 << 20), 9)),
    (b"iCCP", b"icc\x00\x00" + zlib.compress(b"\x00" * (200 << 20), 9)),
])
def test_metadata_bombs_are_one_line(tmp_path, kind, payload):
    """A text or colour-profile chunk inflating to 200 MB."""
    path = tmp_path / "bomb.png"
    _png_with_chunk(path, kind, payload)
    with pytest.raises(PipelineError, match=r"bomb.png: refused: its metadata .*decompression bomb"):
        load_image(path)


def test_many_text_chunks_are_one_line(tmp_path):
    """2,000 tEXt chunks of 60 KB."""
    base = tmp_path / "base.png"
    Image.new("RGB", (1, 1)).save(base)
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for i in range(2000):
        info.add_text(f"k{i}", "x" * 60_000)
    path = tmp_path / "many.png"
    Image.open(base).save(path, pnginfo=info)
    with pytest.raises(PipelineError, match=r"many.png: refused: its metadata"):
        load_image(path)


def test_a_fifo_is_refused_instead_of_hanging(tmp_path):
    """A FIFO is refused in one line, never opened (reading it would wait forever)."""
    fifo = tmp_path / "f.png"
    os.mkfifo(fifo)
    with pytest.raises(PipelineError, match=r"f.png: not a regular file \(a folder, FIFO or device\)"):
        load_image(fifo)


@pytest.mark.parametrize("fill, count", [("nan", 64), ("inf", 1)])
def test_nan_or_infinite_pixels_are_one_line(tmp_path, fill, count):
    """An all-NaN float TIFF, or one with a single +inf pixel, is refused in one line
    counting the pixels that are not finite, before any prediction."""
    a = np.full((8, 8), 0.5, np.float32)
    if fill == "nan":
        a[:] = np.nan
    else:
        a[3, 3] = np.inf
    path = tmp_path / "img.tiff"
    Image.frombytes("F", a.shape[::-1], a.tobytes()).save(path)
    with pytest.raises(PipelineError, match=rf"^{path}: {count} of its 64 pixels are NaN or "
                                            r"infinite, expected finite values"):
        load_image(path)

