"""The dev split from a copy of the public CIFAR-10-images repository (cifar10 dev-split):
the same archive from the repository's folder, its train/ folder or its zip; its test/
folder never read; one line for an incomplete copy, a duplicated, damaged or oversized
image (a zip bomb) and an --out that exists or cannot be written (checked before the images
are read), the archive written aside and linked into place; and, with the real
images beside the checkout, the md5 of the split the committed figures were measured on
(tests/test_exercises_lock.py builds it with the command, then prepares it)."""
import io
import re
import tarfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dev_split import build_dev_split  # tools/dev_split.py
from cifar10_tutorial.data.synthetic import CLASSES
from cifar10_tutorial.errors import PipelineError


def _jpeg(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), value, np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def make_repository(root, per_class=3):
    """The repository's layout: train/<class>/NNNN.jpg and test/<class>/NNNN.jpg, the
    test images all white (so that any of them in the split shows)."""
    for c, name in enumerate(CLASSES):
        for i in range(per_class):
            for split, value in (("train", 10 * c + i), ("test", 255)):
                path = root / split / name / f"{i:04d}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_jpeg(value))
    return root


def records(archive):
    with tarfile.open(archive) as tf:
        names = tf.getnames()
        read = {n.split("/")[-1]: tf.extractfile(n).read() for n in names if n.endswith(".bin")}
    train = np.frombuffer(b"".join(read[f"data_batch_{i}.bin"] for i in range(1, 6)),
                          np.uint8).reshape(-1, 3073)
    return names, train, np.frombuffer(read["test_batch.bin"], np.uint8).reshape(-1, 3073)


def test_folder_train_folder_and_zip_give_one_archive_without_the_test_folder(tmp_path):
    repo = make_repository(tmp_path / "CIFAR-10-images-master")
    with zipfile.ZipFile(tmp_path / "repo.zip", "w") as z:
        for path in sorted(repo.rglob("*.jpg")):
            z.write(path, path.relative_to(tmp_path).as_posix())
    md5s = [build_dev_split(src, tmp_path / f"out{i}.tar.gz", train=20, test=10, per_class=3)
            for i, src in enumerate((repo, repo / "train", tmp_path / "repo.zip"))]
    assert len(set(md5s)) == 1
    names, train, test = records(tmp_path / "out0.tar.gz")
    assert sorted(n.split("/")[-1] for n in names) == sorted(
        [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin", "batches.meta.txt"])
    assert len(train) == 20 and len(test) == 10
    both = np.concatenate([train, test])
    # every record an image of its own class folder (value 10 * class + i), none from test/
    assert (np.abs(both[:, 1:].astype(int).mean(axis=1) - 10 * both[:, 0] - 1) <= 2).all()
    assert both[:, 1:].max() < 200
    assert len({r.tobytes() for r in both}) == 30  # 30 different images of the 30


def test_an_incomplete_copy_is_one_line_naming_the_class(tmp_path):
    repo = make_repository(tmp_path / "repo")
    (repo / "train" / "cat" / "0001.jpg").unlink()
    with pytest.raises(PipelineError, match=r"expected 3 images in each class folder of "
                                            r"train/; found cat: 2"):
        build_dev_split(repo, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    with pytest.raises(PipelineError, match=r"expected a train/ folder in it"):
        build_dev_split(repo / "test" / "cat", tmp_path / "o.tar.gz", train=20, test=5)
    assert not (tmp_path / "o.tar.gz").exists()


def zip_of(repo, zip_path, extra=()):
    """The repository's folder as a zip, with ``extra`` (name, bytes) members after its own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile's "Duplicate name"
        with zipfile.ZipFile(zip_path, "w") as z:
            for path in sorted(repo.rglob("*.jpg")):
                z.write(path, path.relative_to(repo.parent).as_posix())
            for name, raw in extra:
                z.writestr(name, raw)
    return zip_path


@pytest.mark.parametrize("raw", [b"this is not a jpeg", _jpeg(7)[:200]],
                         ids=["not-a-jpeg", "truncated"])
def test_a_damaged_image_is_one_line_naming_the_member(tmp_path, raw):
    repo = make_repository(tmp_path / "repo")
    (repo / "train" / "cat" / "0001.jpg").write_bytes(raw)
    for source in (repo, zip_of(repo, tmp_path / "repo.zip")):
        with pytest.raises(PipelineError, match=r"^" + re.escape(str(source)) + r": train/cat/"
                           r"0001\.jpg is truncated or not a JPEG \(.+\); expected a 32x32 "
                           r"CIFAR-10 image: take the file from a fresh copy of https://"):
            build_dev_split(source, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    assert not (tmp_path / "o.tar.gz").exists()


def test_a_duplicated_member_is_named_as_such(tmp_path):
    repo = make_repository(tmp_path / "repo")
    source = zip_of(repo, tmp_path / "repo.zip",
                    [("repo/train/cat/0001.jpg", _jpeg(1))])
    with pytest.raises(PipelineError, match=r"train/cat/0001\.jpg appears more than once \(a "
                                            r"duplicate member; 1 such\); expected each image "
                                            r"once") as err:
        build_dev_split(source, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    assert "incomplete" not in str(err.value)
    # an extra file under another name: too many, not an incomplete copy
    (repo / "train" / "cat" / "0099.jpg").write_bytes(_jpeg(1))
    with pytest.raises(PipelineError, match=r"found cat: 4 \(too many: files that are not the "
                                            r"repository's among them\? remove them\)$"):
        build_dev_split(repo, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)


def test_out_is_checked_before_the_images_are_read(tmp_path, monkeypatch):
    import dev_split

    def never(*args, **kwargs):
        raise AssertionError("the images were read before --out was checked")

    monkeypatch.setattr(dev_split, "load_records", never)
    (tmp_path / "a_file").write_text("")
    cases = {tmp_path: r"a folder; expected the archive's file name, e.g. --out "
                       + re.escape(str(tmp_path / "cifar10-dev.tar.gz")),
             tmp_path / "a_file" / "dev.tgz": r"its folder .*a_file cannot be made or written "
                                               r"\(.+\); expected a writable place"}
    if Path("/proc/self").is_dir():
        cases[Path("/proc/x/dev.tgz")] = (r"its folder /proc/x cannot be made or written \(.+\); "
                                          r"expected a writable place: give --out another path")
    for out, message in cases.items():
        with pytest.raises(PipelineError, match=r"^--out " + re.escape(str(out)) + ": "
                           + message):
            build_dev_split(tmp_path / "no-such-source", out, train=20, test=5, per_class=3)


def test_an_existing_out_is_refused_before_the_images_are_read(tmp_path, monkeypatch):
    """A file at --out (params.yaml, the source zip itself) is not replaced, and a link
    there is not written through, a dangling one included: one line naming it, nothing
    written, before the images are decoded."""
    import dev_split

    def never(*args, **kwargs):
        raise AssertionError("the images were read before --out was checked")

    monkeypatch.setattr(dev_split, "load_records", never)
    (tmp_path / "params.yaml").write_text("data: {}\n")
    (tmp_path / "target.txt").write_text("mine")
    (tmp_path / "link.tgz").symlink_to(tmp_path / "target.txt")
    (tmp_path / "dangling.tgz").symlink_to(tmp_path / "nowhere.txt")
    (tmp_path / "folder_link").symlink_to(tmp_path, target_is_directory=True)
    before = {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() else None)
              for p in tmp_path.iterdir()}
    cases = {tmp_path / "params.yaml": "a file that already exists",
             tmp_path / "link.tgz": "a symbolic link",
             tmp_path / "dangling.tgz": "a symbolic link",
             tmp_path / "folder_link": "a symbolic link"}
    for out, what in cases.items():
        with pytest.raises(PipelineError, match=r"^--out " + re.escape(str(out)) + ": " + what
                           + r"; expected a new file name \(the archive never replaces a "
                           r"file\): remove it, or give --out another path\. Nothing was "
                           r"written\.$"):
            build_dev_split(tmp_path / "params.yaml", out, train=20, test=5, per_class=3)
    assert {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() else None)
            for p in tmp_path.iterdir()} == before
    assert not (tmp_path / "nowhere.txt").exists()


def test_a_failed_write_leaves_no_archive_and_is_one_line(tmp_path):
    """The archive is written aside and linked into place: a write that fails half way (here
    the file-size limit, `ulimit -f`; a full disk alike) leaves neither a truncated archive
    at --out nor the temporary file, and is one line naming --out."""
    import resource

    repo = make_repository(tmp_path / "repo")
    out = tmp_path / "out" / "dev.tgz"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))  # Python ignores SIGXFSZ: EFBIG
    try:
        with pytest.raises(PipelineError, match=r"^--out " + re.escape(str(out)) + r": cannot "
                           r"be written \(File too large\); nothing was written: raise the "
                           r"file-size limit \(ulimit -f\)"):
            build_dev_split(repo, out, train=20, test=5, per_class=3)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert list(out.parent.iterdir()) == []
    md5 = build_dev_split(repo, out, train=20, test=5, per_class=3)
    assert sorted(p.name for p in out.parent.iterdir()) == ["dev.tgz"]
    import hashlib

    assert hashlib.md5(out.read_bytes()).hexdigest() == md5
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()
    # a file put at --out while the images were decoded is not replaced
    import dev_split

    with pytest.raises(FileExistsError):
        dev_split.write_new_file(out, b"other")
    assert hashlib.md5(out.read_bytes()).hexdigest() == md5
    assert sorted(p.name for p in out.parent.iterdir()) == ["dev.tgz"]


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_member_larger_than_an_image_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A zip member that decompresses to far more than a CIFAR-10 JPEG (a zip bomb) is
    refused by the size the zip declares, before it is decompressed; one whose header
    declares less than it holds is read no further than an image's size; each one line
    naming the member. A file of the folder alike."""
    repo = make_repository(tmp_path / "repo")
    bomb = zip_of(repo, tmp_path / "bomb.zip")
    with zipfile.ZipFile(bomb, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("repo/train/cat/0099.jpg", bytes(2 << 20))

    def refusing_the_bomb(read):
        def checked(self, *args, **kwargs):
            member = self.name if isinstance(self, zipfile.ZipExtFile) else args[0]
            assert not str(getattr(member, "filename", member)).endswith("cat/0099.jpg"), \
                "the bomb's member was read"
            return read(self, *args, **kwargs)
        return checked

    with monkeypatch.context() as m:
        for cls in (zipfile.ZipExtFile, zipfile.ZipFile):
            m.setattr(cls, "read", refusing_the_bomb(cls.read))
        with pytest.raises(PipelineError, match=r"^" + re.escape(str(bomb)) + r": repo/train/"
                           r"cat/0099\.jpg is 2,097,152 bytes; expected a CIFAR-10 JPEG of a "
                           r"few KB \(at most 1,048,576 bytes\)"):
            build_dev_split(bomb, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    # the same member, its declared size (central directory) cut to 100 bytes
    raw = bytearray(bomb.read_bytes())
    entry = raw.rindex(b"PK\x01\x02")  # the last member's central directory entry
    assert raw[entry + 24:entry + 28] == (2 << 20).to_bytes(4, "little")
    raw[entry + 24:entry + 28] = (100).to_bytes(4, "little")
    liar = tmp_path / "liar.zip"
    liar.write_bytes(bytes(raw))
    with pytest.raises(PipelineError, match=r"^" + re.escape(str(liar)) + r": member repo/train/"
                       r"cat/0099\.jpg cannot be read from the zip \(.+\); expected a CIFAR-10 "
                       r"JPEG"):
        build_dev_split(liar, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    # a folder's file: by its size, before it is read
    (repo / "train" / "cat" / "0099.jpg").write_bytes(bytes(2 << 20))
    with pytest.raises(PipelineError, match=r"^" + re.escape(str(repo)) + r": train/cat/0099\."
                       r"jpg is 2,097,152 bytes; expected a CIFAR-10 JPEG"):
        build_dev_split(repo, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    assert not (tmp_path / "o.tar.gz").exists()


def _declaring(width: int, height: int) -> bytes:
    """A 32x32 JPEG whose header (SOF0) declares another size."""
    raw = bytearray(_jpeg(9))
    sof = raw.index(b"\xff\xc0")
    raw[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(raw)


@pytest.mark.parametrize("raw, said", [
    (_declaring(60000, 60000), r"is truncated or not a JPEG \(.+\)"),  # past PIL's bomb limit
    (_declaring(64, 64), r"is 64x64; expected a 32x32 CIFAR-10 image$")])
def test_an_image_declaring_another_size_is_refused_before_it_is_decoded(tmp_path, raw, said):
    repo = make_repository(tmp_path / "repo")
    (repo / "train" / "cat" / "0001.jpg").write_bytes(raw)
    with pytest.raises(PipelineError, match=r"^" + re.escape(str(repo)) + r": train/cat/"
                                            r"0001\.jpg " + said):
        build_dev_split(repo, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    assert not (tmp_path / "o.tar.gz").exists()


def test_an_encrypted_member_is_one_line_naming_it(tmp_path):
    repo = make_repository(tmp_path / "repo")
    source = zip_of(repo, tmp_path / "repo.zip")
    data, name = bytearray(source.read_bytes()), b"repo/train/cat/0001.jpg"
    # the member's "encrypted" flag set, in its local header and its central directory entry
    for sig, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        pos = data.find(sig)
        while pos >= 0:
            if data[pos + name_at:pos + name_at + len(name)] == name:
                data[pos + flag_at] |= 0x1
            pos = data.find(sig, pos + 1)
    source.write_bytes(bytes(data))
    with pytest.raises(PipelineError, match=r"member repo/train/cat/0001\.jpg cannot be read "
                                            r"from the zip \(.*password required.*\)"):
        build_dev_split(source, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)


def test_a_source_that_is_neither_file_nor_folder_is_named_for_what_it_is(tmp_path):
    """A FIFO (or a dangling link) where the images should be is said to be one, not "no
    such file" (it exists), and nothing blocks reading it."""
    import os

    fifo, dangling = tmp_path / "fifo", tmp_path / "dangling"
    os.mkfifo(fifo)
    dangling.symlink_to(tmp_path / "gone")
    for source, found in ((fifo, "neither a file nor a folder (a FIFO, a device or a socket)"),
                          (dangling, "a link to nothing"), (tmp_path / "none", "no such file or folder")):
        with pytest.raises(PipelineError, match=rf"^{re.escape(str(source))}: {re.escape(found)}; "
                                                r"give the folder of"):
            build_dev_split(source, tmp_path / "o.tar.gz", train=20, test=5, per_class=3)
    assert not (tmp_path / "o.tar.gz").exists()


def test_a_killed_writes_temporary_file_is_named_and_kept(tmp_path, capsys):
    """kill -9 during the write leaves write_new_file's `.NAME.*.tmp` beside --out: the next
    dev-split names it (nothing records it as its own, so it stays); other files stay
    unnamed."""
    repo = make_repository(tmp_path / "CIFAR-10-images-master")
    (tmp_path / "out").mkdir()
    left = tmp_path / "out" / ".o.tgz.c_qz_ma7.tmp"
    left.write_bytes(b"x" * 10)
    (tmp_path / "out" / ".o.tgz.mine.txt").write_text("mine")
    build_dev_split(repo, tmp_path / "out" / "o.tgz", train=20, test=10, per_class=3)
    err = capsys.readouterr().err
    assert err.strip() == (f"note: {left} (10 bytes) is the temporary file of a write of o.tgz "
                           f"that was killed; delete it once nothing writes o.tgz")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".o.tgz.c_qz_ma7.tmp", ".o.tgz.mine.txt", "o.tgz"]


@pytest.mark.parametrize("train, test", [(0, 10), (3, 10), (12, 10), (10, 0)])
def test_sizes_it_cannot_make_say_what_it_needs(tmp_path, train, test):
    """--train 0 is a multiple of 5 too: the line says a training set needs 5 images at
    least, a multiple of 5 (the five record files), and a held-out image."""
    with pytest.raises(PipelineError, match=rf"^--train {train} --test {test}: expected at "
                                            rf"least 5 training images, a multiple of 5 \(the "
                                            rf"five record files hold as many each\), and at "
                                            rf"least 1 held-out one"):
        build_dev_split(tmp_path / "none", tmp_path / "out.tar.gz", train, test)
    assert not (tmp_path / "out.tar.gz").exists()


def test_a_source_that_fails_leaves_no_folders_of_out(tmp_path):
    """--out in folders that do not exist yet, and a source that is no archive: one line,
    and the folders are not made (they are made when the archive is written)."""
    (tmp_path / "fake.zip").write_text("not a zip")
    out = tmp_path / "new" / "sub" / "dev.tar.gz"
    with pytest.raises(PipelineError):
        build_dev_split(tmp_path / "fake.zip", out, train=20, test=5, per_class=3)
    assert not (tmp_path / "new").exists()
