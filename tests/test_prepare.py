import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from cifar10_tutorial.data.datasets import CIFAR10
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.data.preprocess import OWN_MARK, prepare
from cifar10_tutorial.data.prepared import PREPARED_NAMES, PrepareError, load_prepared
from cifar10_tutorial.data.synthetic import CLASSES, make_cifar10_archive, write_tar_gz

FOLDER = "cifar-10-batches-bin/"


def official_members(records: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """Every file of the official layout: 2 random records per batch, unless given."""
    rng = np.random.default_rng(0)
    members = {}
    for name in CIFAR10.splits["train"] + CIFAR10.splits["test"]:
        rec = np.concatenate([rng.integers(0, 10, (2, 1)), rng.integers(0, 256, (2, 3072))], 1)
        members[FOLDER + name] = rec.astype(np.uint8).tobytes()
    members[FOLDER + "batches.meta.txt"] = ("\n".join(CLASSES) + "\n\n").encode()
    members.update(records or {})
    return members


def assert_no_output(out):
    assert not out.exists()
    assert sorted(out.parent.glob(f".{out.name}.*")) == []  # no temporary folder left


def test_round_trip_of_known_pixels_channel_order_and_orientation(tmp_path):
    # one hand-made record: label 3; R plane 10 with (row 0, col 1) = 200;
    # G plane 20 with (row 1, col 0) = 100; B plane 30 with (row 31, col 31) = 250
    r = np.full((32, 32), 10, np.uint8); r[0, 1] = 200
    g = np.full((32, 32), 20, np.uint8); g[1, 0] = 100
    b = np.full((32, 32), 30, np.uint8); b[31, 31] = 250
    record = bytes([3]) + r.tobytes() + g.tobytes() + b.tobytes()
    assert record[1 + 1] == 200 and record[1 + 1024 + 32] == 100 and record[-1] == 250
    archive = tmp_path / "a.tar.gz"
    write_tar_gz(archive, official_members({FOLDER + "test_batch.bin": record}))
    out = tmp_path / "prepared"
    meta = prepare(archive, out, CIFAR10)
    data = load_prepared(out)
    assert data.test_images.shape == (1, 3, 32, 32) and data.test_images.dtype == np.uint8
    img = data.test_images[0]
    assert data.test_labels.tolist() == [3] and data.test_labels.dtype == np.int64
    assert img[0, 0, 1] == 200 and img[0, 0, 0] == 10 and img[0, 1, 0] == 10
    assert img[1, 1, 0] == 100 and img[1, 0, 1] == 20
    assert img[2, 31, 31] == 250 and img[2, 0, 0] == 30
    assert meta["classes"] == CLASSES and data.classes == CLASSES
    assert meta["counts"] == {"train": 10, "test": 1}


def test_round_trip_of_generated_archive(archive, tmp_path):
    out = tmp_path / "prepared"
    meta = prepare(archive["path"], out, CIFAR10)
    data = load_prepared(out)
    for split in ("train", "test"):
        np.testing.assert_array_equal(getattr(data, f"{split}_images"), archive[f"{split}_images"])
        np.testing.assert_array_equal(getattr(data, f"{split}_labels"), archive[f"{split}_labels"])
    assert meta["source_md5"] == archive["md5"]
    assert json.loads((out / "meta.json").read_text())["counts"] == {"train": 60, "test": 15}
    assert sum(meta["class_counts"]["train"]) == 60
    # the arrays load without pickles
    np.load(out / "train_images.npy", allow_pickle=False)


def test_rerun_replaces_previous_output(archive, tmp_path):
    out = tmp_path / "prepared"
    prepare(archive["path"], out, CIFAR10)
    (out / "train_images.npy").write_bytes(b"an old run's, damaged")
    prepare(archive["path"], out, CIFAR10)
    assert len(load_prepared(out).train_images) == len(load_prepared(out).train_labels) > 0
    assert sorted(tmp_path.glob(".prepared.*")) == []  # no temporary folder left beside it
    # a file it did not make: refused, not deleted
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match="holds notes.txt, which the preprocess"):
        prepare(archive["path"], out, CIFAR10)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run(archive, tmp_path):
    """A preprocess killed mid-write (SIGKILL, or SIGTERM before Python's clean-up) leaves
    its temporary folder (118 MB on the dev split): the next run removes those of
    processes that have gone, and nothing else."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out = tmp_path / "prepared"
    left = tmp_path / f".prepared.tmp-{gone.pid}-abc123"
    left.mkdir()
    (left / OWN_MARK).write_text("")  # the stage's mark, written first
    (left / "train_images.npy").write_bytes(b"half")
    aside = tmp_path / f".prepared.old-{gone.pid}-ghi789"  # an old output set aside
    (aside / "prepared").mkdir(parents=True)
    (aside / OWN_MARK).write_text("")
    (aside / "prepared" / "meta.json").write_text("{}")
    live = tmp_path / f".prepared.tmp-{os.getpid()}-def456"  # a run still going
    live.mkdir()
    mine = [tmp_path / ".prepared.tmp", tmp_path / ".prepared.notes-1-2"]
    for folder in mine:
        folder.mkdir()
    # a folder of the user's named as a leftover, of a process that has gone: it holds a
    # file the stage never writes, so it is not the stage's to remove
    snapshot = tmp_path / f".prepared.old-{gone.pid}-snapshot"
    snapshot.mkdir()
    (snapshot / "NOTES.md").write_text("mine")
    (snapshot / "train_images.npy").write_bytes(b"kept")
    # a user's backup of the output under such a name, only the stage's files in it, and
    # a number where the pid goes: no mark, so not the stage's either
    backup = tmp_path / ".prepared.old-2024-mybackup"
    backup.mkdir()
    for name in PREPARED_NAMES:
        (backup / name).write_bytes(b"my copy")
    marked_but_more = tmp_path / f".prepared.tmp-{gone.pid}-jkl012"  # the mark, and a file
    marked_but_more.mkdir()
    (marked_but_more / OWN_MARK).write_text("")
    (marked_but_more / "NOTES.md").write_text("mine")
    prepare(archive["path"], out, CIFAR10)
    assert not left.exists() and not aside.exists() and live.exists()
    assert all(f.exists() for f in mine) and marked_but_more.exists()
    assert (snapshot / "NOTES.md").read_text() == "mine"
    assert (snapshot / "train_images.npy").read_bytes() == b"kept"
    assert {f.name: f.read_bytes() for f in backup.iterdir()} == \
        {name: b"my copy" for name in PREPARED_NAMES}
    prepare(archive["path"], out, CIFAR10)  # replacing an output leaves nothing beside it
    assert sorted(p.name for p in tmp_path.glob(".prepared.*-*-*")) == sorted(
        p.name for p in (live, backup, snapshot, marked_but_more, mine[1]))
    assert not (out / OWN_MARK).exists()


def test_truncated_record_file(tmp_path):
    bad = official_members()[FOLDER + "data_batch_3.bin"][:-100]
    archive = tmp_path / "a.tar.gz"
    write_tar_gz(archive, official_members({FOLDER + "data_batch_3.bin": bad}))
    out = tmp_path / "prepared"
    with pytest.raises(PrepareError, match=r"data_batch_3.bin: size 6046 bytes is not a positive "
                                           r"multiple of the record length 3073"):
        prepare(archive, out, CIFAR10)
    assert_no_output(out)


def test_label_out_of_range(tmp_path):
    rec = bytes([12]) + bytes(3072)
    archive = tmp_path / "a.tar.gz"
    write_tar_gz(archive, official_members({FOLDER + "data_batch_1.bin": bytes(3073) + rec}))
    with pytest.raises(PrepareError, match=r"data_batch_1.bin: record 1 has label 12; expected 0..9"):
        prepare(archive, tmp_path / "prepared", CIFAR10)
    assert_no_output(tmp_path / "prepared")


def test_missing_test_batch(tmp_path):
    archive = tmp_path / "a.tar.gz"
    make_cifar10_archive(archive, 2, 2, skip=("test_batch.bin",))
    with pytest.raises(PrepareError, match=r"missing cifar-10-batches-bin/test_batch.bin"):
        prepare(archive, tmp_path / "prepared", CIFAR10)
    assert_no_output(tmp_path / "prepared")


def test_wrong_class_names(tmp_path):
    archive = tmp_path / "a.tar.gz"
    write_tar_gz(archive, official_members({FOLDER + "batches.meta.txt": b"cat\ndog\n"}))
    with pytest.raises(PrepareError, match="expected 10 class names, one a line; found 2"):
        prepare(archive, tmp_path / "prepared", CIFAR10)


def _archive_with(tmp_path, info: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, raw in official_members().items():
            ti = tarfile.TarInfo(name)
            ti.size = len(raw)
            tf.addfile(ti, io.BytesIO(raw))
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


@pytest.mark.parametrize("make_info, expected", [
    (lambda: tarfile.TarInfo("../escape.txt"), "its path leaves the extraction folder"),
    (lambda: tarfile.TarInfo("cifar-10-batches-bin/../../x"), "its path leaves the extraction folder"),
    (lambda: tarfile.TarInfo("/etc/evil"), "its path leaves the extraction folder"),
])
def test_members_outside_the_target_are_refused(tmp_path, make_info, expected):
    path = _archive_with(tmp_path, make_info(), b"payload")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(PrepareError, match=expected):
        prepare(path, work / "prepared", CIFAR10)
    assert_no_output(work / "prepared")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind, expected", [
    (tarfile.SYMTYPE, "it is a link"),
    (tarfile.LNKTYPE, "it is a link"),
    (tarfile.CHRTYPE, "it is a device, FIFO"),
    (tarfile.FIFOTYPE, "it is a device, FIFO"),
])
def test_links_and_devices_are_refused(tmp_path, kind, expected):
    info = tarfile.TarInfo("cifar-10-batches-bin/extra")
    info.type = kind
    info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    path = _archive_with(tmp_path, info)
    with pytest.raises(PrepareError, match=expected):
        prepare(path, tmp_path / "prepared", CIFAR10)
    assert_no_output(tmp_path / "prepared")


def test_not_an_archive_and_missing_archive(tmp_path):
    bad = tmp_path / "a.tar.gz"
    bad.write_bytes(b"<html>oops</html>")
    with pytest.raises(PrepareError, match="not a readable gzip tar archive"):
        prepare(bad, tmp_path / "prepared", CIFAR10)
    with pytest.raises(PrepareError, match=r"no such file; run the download stage first"):
        prepare(tmp_path / "missing.tar.gz", tmp_path / "prepared", CIFAR10)


def test_load_prepared_errors(archive, tmp_path):
    with pytest.raises(PrepareError, match=r"nothing: not found, where the prepared data's "
                                           r"folder is expected; give its path \(a mistyped"):
        load_prepared(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrepareError, match=r"meta.json: not found; run the preprocess stage"):
        load_prepared(tmp_path / "empty")
    # a FIFO or a file given as the data: named, never a path inside it
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    for name, what in (("fifo", r"not a folder \(a FIFO, socket or device\)"),
                       ("file", "a file")):
        with pytest.raises(PrepareError, match=rf"{name}: {what}, where the prepared data's "
                                               rf"folder is expected \(meta.json and"):
            load_prepared(tmp_path / name)
    out = tmp_path / "prepared"
    prepare(archive["path"], out, CIFAR10)
    np.save(out / "test_labels.npy", np.zeros(3, np.int64))
    with pytest.raises(PrepareError, match=r"test has 15 images and 3 labels"):
        load_prepared(out)


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_kill_during_the_swap_leaves_nothing_unmarked(archive, tmp_path, at):
    """kill -9 at each rename of the swap (the new output moved into the marked holding
    folder; the old one moved beside it; the new one moved into place): whatever is not
    in place waits inside a folder with the stage's mark, which the next run removes; the
    next run's output is whole."""
    out = tmp_path / "prepared"
    prepare(archive["path"], out, CIFAR10)
    code = (f"import os, sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'src')!r})\n"
            f"from cifar10_tutorial.data import preprocess\n"
            f"from cifar10_tutorial.data.datasets import CIFAR10\n"
            f"real, n = os.rename, [0]\n"
            f"def rename(a, b):\n    real(a, b)\n    n[0] += 1\n"
            f"    if n[0] == {at}:\n        os._exit(9)\n"
            f"preprocess.os.rename = rename\n"
            f"preprocess.prepare({str(archive['path'])!r}, {str(out)!r}, CIFAR10)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 9, proc.stderr
    beside = [p for p in tmp_path.iterdir() if p.name.startswith(".prepared.")]
    assert beside and all((p / OWN_MARK).is_file() for p in beside), \
        [(p.name, sorted(q.name for q in p.iterdir())) for p in beside]
    prepare(archive["path"], out, CIFAR10)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared.")] == []
    assert sorted(p.name for p in out.iterdir()) == sorted(PREPARED_NAMES)


def test_preprocess_refuses_an_out_folder_of_other_files(tmp_path):
    """`python stages/preprocess.py --out data` names a folder of files the stage did not
    make (raw archive, model, checkpoints): refused, none of them replaced."""
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.data.preprocess import prepare
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    data = tmp_path / "data"
    archive = data / "raw" / "cifar-10-binary.tar.gz"
    archive.parent.mkdir(parents=True)
    make_cifar10_archive(archive, train_per_batch=10, test=10, seed=1)
    (data / "train").mkdir()
    (data / "train" / "model.pt").write_bytes(b"weights")
    with pytest.raises(PipelineError, match=r"data: holds raw, train, which the preprocess "
                                            r"stage did not make and would delete"):
        prepare(archive, data, CIFAR10)
    assert (data / "train" / "model.pt").exists() and archive.exists()
    assert sorted(p.name for p in data.iterdir()) == ["raw", "train"]
    # its own folder, made by an earlier run, is replaced as before
    prepare(archive, data / "prepared", CIFAR10)
    prepare(archive, data / "prepared", CIFAR10)
    assert sorted(p.name for p in (data / "prepared").iterdir()) == [
        "meta.json", "test_images.npy", "test_labels.npy", "train_images.npy", "train_labels.npy"]


def test_folders_of_the_users_beside_the_output_are_never_touched(archive, tmp_path):
    """The user's x/results.old/ and x/results.tmp/ beside `--out x/results` are left as
    they are: the stage's own temporary folders have fresh hidden names."""
    out = tmp_path / "results"
    for name in ("results.old", "results.tmp", ".results.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text(name)
    prepare(archive["path"], out, CIFAR10)
    prepare(archive["path"], out, CIFAR10)  # the second replaces the first
    for name in ("results.old", "results.tmp", ".results.tmp"):
        assert (tmp_path / name / "mine.txt").read_text() == name
    assert sorted(p.name for p in tmp_path.iterdir() if "results" in p.name) == [
        ".results.tmp", "results", "results.old", "results.tmp"]


def _damage(archive, tmp_path, change):
    out = tmp_path / "prepared"
    prepare(archive["path"], out, CIFAR10)
    change(out)
    return out


def _meta_edit(**fields):
    def change(out):
        meta = json.loads((out / "meta.json").read_text())
        for k, v in fields.items():
            if v is None:
                meta.pop(k)
            else:
                meta[k] = v
        (out / "meta.json").write_text(json.dumps(meta))
    return change


def _array_edit(name, edit):
    def change(out):
        arr = np.load(out / name)
        np.save(out / name, edit(arr))
    return change


def _set(arr, value):
    arr = arr.copy()
    arr[0] = value
    return arr


@pytest.mark.parametrize("change, expected", [
    (lambda out: (out / "meta.json").write_text("{bad"), r"meta.json: not valid JSON"),
    (lambda out: (out / "meta.json").write_text("[1, 2]"), r"meta.json: expected a JSON object, found a list"),
    (_meta_edit(counts=None), r"meta.json: expected counts of train and test \(found None\)"),
    (_meta_edit(classes=["a", "b"]), r"meta.json: expected num_classes 2, one per class name \(found 10\)"),
    (_meta_edit(image_shape=[1, 32, 32]), r"expected image_shape \[3, height, width\]"),
    # the processes of a run on several devices share each file out: counts that do not
    # add up would give them other shares than the twin rule and the run assume
    (_meta_edit(file_counts={"train": [100, 100, 100, 100, 99], "test": [100]}),
     r"meta.json: file_counts.train \[100, 100, 100, 100, 99\] adds up to 499 records, "
     r"where train has \d+ images"),
    (_meta_edit(file_counts={"train": "five"}),
     r"meta.json: expected file_counts.train the records of each train file \(found five\)"),
    (_meta_edit(file_counts=[1, 2]), r"file_counts.train the records .*\(found \[1, 2\]\)"),
    (lambda out: ((out / "train_images.npy").unlink(), os.mkfifo(out / "train_images.npy")),
     r"train_images.npy: not a file \(a folder, FIFO or link to nothing\), where the "
     r"preprocess stage writes its tensors"),
    (_array_edit("test_labels.npy", lambda a: _set(a, 99)),
     r"test_labels.npy: expected labels 0 to 9 \(10 classes\), found 99"),
    (_array_edit("train_labels.npy", lambda a: _set(a, -1)),
     r"train_labels.npy: expected labels 0 to 9 \(10 classes\), found -1"),
    (_array_edit("test_images.npy", lambda a: np.ascontiguousarray(a[:, :, :8, :8])),
     r"test_images.npy: expected images of shape \(3, 32, 32\) .*found \(3, 8, 8\)"),
    (_array_edit("test_images.npy", lambda a: np.ascontiguousarray(a[:, :1])),
     r"test_images.npy: expected images of shape \(3, 32, 32\) .*found \(1, 32, 32\)"),
])
def test_damaged_prepared_data_is_one_line_naming_the_file(archive, tmp_path, change, expected):
    """Each damage is one line naming the file and `dvc repro -f preprocess`, when the
    data is loaded: never a traceback later in the eval or train stage."""
    out = _damage(archive, tmp_path, change)
    with pytest.raises(PrepareError, match=expected + r".*dvc repro -f preprocess"):
        load_prepared(out)


def test_an_empty_split_is_one_line(archive, tmp_path):
    """An empty test split is one line when the data is loaded: there is nothing to
    evaluate on."""
    def empty(out):
        np.save(out / "test_images.npy", np.zeros((0, 3, 32, 32), np.uint8))
        np.save(out / "test_labels.npy", np.zeros((0,), np.int64))
        _meta_edit(counts={"train": len(np.load(out / "train_labels.npy")),
                           "test": 0})(out)
    out = _damage(archive, tmp_path, empty)
    with pytest.raises(PrepareError, match=r"the test split is empty; expected images to "
                                           r"evaluate on"):
        load_prepared(out)


@pytest.mark.parametrize("names, expected", [
    (["cat"] * 10, r"the class name 'cat' appears 10 times; expected 10 different names"),
    (["\x1b[31mRED\x1b[0m"] + [f"c{i}" for i in range(9)], r"holds control characters"),
])
def test_class_names_that_would_mislead_are_refused(tmp_path, names, expected):
    """Class names that would mislead (ten classes named 'cat', escape codes that would
    reach the CSVs and the terminal) are refused at preprocess."""
    archive = tmp_path / "a.tar.gz"
    write_tar_gz(archive, official_members({FOLDER + "batches.meta.txt":
                                            ("\n".join(names) + "\n").encode()}))
    with pytest.raises(PrepareError, match=expected):
        prepare(archive, tmp_path / "prepared", CIFAR10)


def test_the_documented_synthetic_archive_command_makes_its_folder(tmp_path, capsys):
    # docs/data.md's command for a laptop without the real download, in a fresh clone where
    # data/raw/ does not exist yet
    from cifar10_tutorial.data.synthetic import main

    out = tmp_path / "data" / "raw" / "cifar-10-binary.tar.gz"
    main([str(out), "--train-per-batch", "4", "--test", "3"])
    assert out.is_file() and "20 train, 3 test records" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"raw is a folder; expected the archive's file name"):
        main([str(out.parent), "--train-per-batch", "4", "--test", "3"])
