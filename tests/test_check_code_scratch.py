"""check-code's scratch folder: marked as its own before anything is written in it and
removed with the mark last, so that a check killed at any moment, its clean-up included,
leaves a folder the next check can tell as its own (marked) or one with nothing in it."""
import os
import tempfile

import pytest

import check_code
from cifar10_tutorial.files import process_alive


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_scratch_folder_is_marked_then_removed_whole(tmpdir_):
    with check_code._scratch() as tmp:
        assert (tmp / check_code.MARK).is_file()
        (tmp / "trees" / "data").mkdir(parents=True)
        (tmp / "trees" / "data" / "prepared").symlink_to(tmpdir_, target_is_directory=True)
        (tmp / "file").write_text("x")
    assert list(tmpdir_.iterdir()) == []


def test_a_dead_checks_folder_is_removed_if_marked_or_empty_only(tmpdir_):
    dead = 999_999
    assert not process_alive(dead)
    marked = tmpdir_ / f"{check_code.SCRATCH}{dead}-a"
    (marked / "theirs").mkdir(parents=True)
    (marked / check_code.MARK).write_text("")
    emptied = tmpdir_ / f"{check_code.SCRATCH}{dead}-b"  # killed after its mark went
    emptied.mkdir()
    unmarked = tmpdir_ / f"{check_code.SCRATCH}{dead}-c"  # not the check's: never removed
    unmarked.mkdir()
    (unmarked / "notes.txt").write_text("mine")
    alive = tmpdir_ / f"{check_code.SCRATCH}{os.getpid()}-d"  # a check still running
    alive.mkdir()
    (alive / check_code.MARK).write_text("")
    check_code._remove_dead_scratch()
    assert sorted(p.name for p in tmpdir_.iterdir()) == sorted([unmarked.name, alive.name])
    assert (unmarked / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("variant, provenance", [
    ({"variant": "softmax"}, {"device_type": "cuda"}),  # variant.json without the device
    ({"variant": "softmax", "device_type": "cuda"}, None)])
def test_results_a_record_says_were_trained_off_the_cpu_are_not_recorded(tmp_path, variant,
                                                                         provenance):
    """Either record of a variant's results (variant.json, train/provenance.json) saying
    it trained on a GPU keeps the CPU-only check from recording it."""
    import json
    import shutil

    from conftest import ROOT
    from cifar10_tutorial.errors import PipelineError

    (tmp_path / "reports").mkdir()
    shutil.copyfile(ROOT / "reports" / "dvc.yaml", tmp_path / "reports" / "dvc.yaml")
    folder = tmp_path / "reports" / "ablations" / "softmax"
    (folder / "train").mkdir(parents=True)
    (folder / "variant.json").write_text(json.dumps(variant))
    if provenance is not None:
        (folder / "train" / "provenance.json").write_text(json.dumps(provenance))
    with pytest.raises(PipelineError, match=r"says softmax was trained on cuda"):
        check_code._trained_where_the_check_runs(tmp_path, ["softmax"])
    (folder / "variant.json").write_text(json.dumps({"variant": "softmax"}))
    (folder / "train" / "provenance.json").write_text(json.dumps({"device_type": "cpu"}))
    check_code._trained_where_the_check_runs(tmp_path, ["softmax"])  # the CPU's: fine
