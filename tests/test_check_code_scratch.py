"""The scratch folders of check-code and the trial (files.scratch_folder): marked as the
command's own before anything is written in them and removed with the mark last, so that
a command killed at any moment, its clean-up included, leaves a folder the next one can
tell as its own (marked) or one with nothing in it; one kept for its user (unmarked)
stays."""
import os
import tempfile

import pytest

import check_code
import trial
from cifar10_tutorial.files import process_alive, remove_dead_scratch, scratch_folder

COMMANDS = [(check_code.SCRATCH, check_code.MARK), (trial.SCRATCH, trial.MARK)]


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("prefix, mark", COMMANDS)
def test_a_scratch_folder_is_marked_then_removed_whole(tmpdir_, prefix, mark):
    with scratch_folder(prefix, mark, "a test") as tmp:
        assert (tmp / mark).is_file() and tmp.name.startswith(f"{prefix}-{os.getpid()}-")
        (tmp / "trees" / "data").mkdir(parents=True)
        (tmp / "trees" / "data" / "prepared").symlink_to(tmpdir_, target_is_directory=True)
        (tmp / "file").write_text("x")
    assert list(tmpdir_.iterdir()) == []
    with scratch_folder(prefix, mark, "a test") as kept:  # kept for its user: unmarked
        (kept / "trial.log").write_text("why it failed\n")
        (kept / mark).unlink()
    assert [p.name for p in kept.iterdir()] == ["trial.log"]


@pytest.mark.parametrize("prefix, mark", COMMANDS)
def test_a_dead_commands_folder_is_removed_if_marked_or_empty_only(tmpdir_, prefix, mark):
    dead = 999_999
    assert not process_alive(dead)
    marked = tmpdir_ / f"{prefix}-{dead}-a"
    (marked / "theirs").mkdir(parents=True)
    (marked / mark).write_text("")
    emptied = tmpdir_ / f"{prefix}-{dead}-b"  # killed after its mark went
    emptied.mkdir()
    unmarked = tmpdir_ / f"{prefix}-{dead}-c"  # not the command's: never removed
    unmarked.mkdir()
    (unmarked / "notes.txt").write_text("mine")
    linked = tmpdir_ / f"{prefix}-{dead}-d"  # a link as its mark: not the command's
    linked.mkdir()
    (linked / mark).symlink_to(unmarked / "notes.txt")
    alive = tmpdir_ / f"{prefix}-{os.getpid()}-e"  # a command still running
    alive.mkdir()
    (alive / mark).write_text("")
    remove_dead_scratch(prefix, mark)
    assert sorted(p.name for p in tmpdir_.iterdir()) == sorted([unmarked.name, linked.name,
                                                                alive.name])
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


def test_damaged_data_given_to_the_check_is_named_before_any_run(tmp_path):
    """--data with labels of another type: one line naming --data and the file, not a
    variant's run failing on a link to it in the check's scratch tree, blamed on a
    commit's code."""
    import re

    import numpy as np

    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import prepare
    from cifar10_tutorial.data.synthetic import make_cifar10_archive
    from cifar10_tutorial.errors import PipelineError

    make_cifar10_archive(tmp_path / "a.tar.gz", train_per_batch=4, test=5)
    prepare(tmp_path / "a.tar.gz", tmp_path / "prepared", CIFAR10)
    assert check_code._fixed_data(tmp_path, tmp_path / "prepared") == (tmp_path / "prepared").resolve()
    np.save(tmp_path / "prepared" / "train_labels.npy", np.full(20, 42, dtype=np.uint8))
    with pytest.raises(PipelineError, match=r"^" + re.escape(
            f"--data {tmp_path / 'prepared'}: {tmp_path / 'prepared' / 'train_labels.npy'}: "
            f"expected int64")):
        check_code._fixed_data(tmp_path, tmp_path / "prepared")


HOLDER = ("import sys, time\nsys.path.insert(0, {src!r})\n"
          "from cifar10_tutorial.files import hold_folder\n"
          "hold_folder({folder!r})\nprint('held', flush=True)\ntime.sleep(600)\n")


def _held_by_another_process(folder):
    """A process that holds ``folder`` as a command holds its own (files.hold_folder), as
    one in another PID namespace would: the PID in the folder's name is not its PID."""
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(src=src, folder=str(folder))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("prefix, mark", COMMANDS)
def test_a_running_commands_folder_is_kept_whatever_pid_its_name_shows(tmpdir_, prefix, mark):
    """A command in a container (another PID namespace) sharing the temporary folder: the
    PID in its folder's name is dead here, but the command runs; its lock on the folder
    says so, and the sweep keeps it. Once it has ended, the folder goes."""
    dead = 999_998
    assert not process_alive(dead)
    running = tmpdir_ / f"{prefix}-{dead}-x"
    (running / "theirs").mkdir(parents=True)
    (running / mark).write_text("")
    holder = _held_by_another_process(running)
    try:
        remove_dead_scratch(prefix, mark)
        assert (running / mark).is_file() and (running / "theirs").is_dir()
    finally:
        holder.kill()
        holder.wait()
    remove_dead_scratch(prefix, mark)
    assert not running.exists()


def test_preprocess_keeps_a_running_runs_folder_whatever_pid_its_name_shows(tmp_path):
    """The same for the preprocess stage's temporary folders beside its output."""
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import OWN_MARK, prepare
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    archive = tmp_path / "a.tar.gz"
    make_cifar10_archive(archive, train_per_batch=4, test=5, seed=1)
    running = tmp_path / ".prepared.tmp-999997-x"
    running.mkdir()
    (running / OWN_MARK).write_text("")
    (running / "meta.json").write_text("{}")
    holder = _held_by_another_process(running)
    try:
        prepare(archive, tmp_path / "prepared", CIFAR10)
        assert (running / "meta.json").is_file()
    finally:
        holder.kill()
        holder.wait()
    prepare(archive, tmp_path / "prepared", CIFAR10)
    assert not running.exists()


def test_a_variant_out_of_disk_in_the_scratch_folder_names_tmpdir(tmp_path):
    """A variant that fills the disk of the check's scratch folder says that the folder is in
    TMPDIR and how much is free there (its own line blames only the file it wrote); a
    full disk elsewhere, or another error, is left as the stage said it."""
    tree = tmp_path / "cifar10-check-1-abc" / "theirs"
    tree.mkdir(parents=True)
    full = (f"error: {tree.parent}/theirs-mirror/baseline/checkpoint.pt: "
            f"{os.strerror(28)}; free disk space there, then rerun")
    said = check_code._scratch_full(tree, full)
    assert said.startswith(f" (the check's scratch folder {tree.parent} is in the temporary "
                           f"folder, ") and "point TMPDIR at a folder with a few GB free" in said
    assert check_code._scratch_full(tree, full.replace(str(tree.parent), "/elsewhere")) == ""
    # DVCLive's own writes fail without a file name: still the scratch's disk
    unnamed = f"error: an output file: {os.strerror(28)}; free disk space there, then rerun"
    assert "point TMPDIR at a folder" in check_code._scratch_full(tree, unnamed)
    assert check_code._scratch_full(tree, f"error: {tree}/x: Permission denied") == ""


@pytest.mark.parametrize("cuda, device, runs", [
    (False, "auto", "auto"),  # the variants' own setting, which picks the CPU here: as is
    (False, "cpu", "cpu"),
    (False, "cuda", "cpu"),   # a GPU's setting: the check runs the CPU's path
    (True, "auto", "cpu"),    # where auto would pick the GPU
])
def test_the_check_runs_the_variants_device_setting_where_it_picks_the_cpu(monkeypatch, cuda,
                                                                          device, runs):
    """Code keyed on train.device (every variant's is `auto`) runs in the check as in the
    variants' own runs: the setting is changed only where it would not pick the CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    raw = {"train": {"device": device, "batch_size": 16}, "ablation": {"max_steps": 100},
           "ablations": {"baseline": {}}}
    assert check_code.short_budget(raw)["train"]["device"] == runs
    assert raw["train"]["device"] == device  # the parsed file itself is left as it is


def _trees(tmp_path, ours: dict, theirs: dict):
    """Two check trees that wrote the same variant's files but for ``ours``/``theirs``
    (path -> text)."""
    base = {"reports/params.yaml": "ablations: {b: {}}\n",
            "reports/ablations/b/metrics.json": '{"train": {"step": 13, "wall_time_s": 2.5}}',
            "reports/ablations/b/train/plots/metrics/train/loss.tsv": "step\tloss\n2\t2.5\n",
            "reports/ablations/b/train/plots/metrics/train/examples_per_sec.tsv":
                "step\texamples_per_sec\n2\t410.5\n"}
    for name, changed in (("a", theirs), ("b", ours)):
        for rel, text in {**base, **changed}.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text(text)
    return tmp_path / "a", tmp_path / "b"


SPEED = "reports/ablations/b/train/plots/metrics/train/examples_per_sec.tsv"
LOSS = "reports/ablations/b/train/plots/metrics/train/loss.tsv"
METRICS = "reports/ablations/b/metrics.json"


@pytest.mark.parametrize("rel, text, same", [
    (SPEED, "step\texamples_per_sec\n2\t398.0\n", True),  # another speed: run to run
    (SPEED, "step\tspeed\n2\t410.5\n", False),  # another header
    (SPEED, "step\texamples_per_sec\n3\t410.5\n", False),  # another step
    (SPEED, "step\texamples_per_sec\n2\t-1\n", False),  # no speed a run measures
    (SPEED, "step\texamples_per_sec\n2\tnan\n", False),
    (SPEED, "step\texamples_per_sec\n2\tfast\n", False),
    (LOSS, "step\ttimestamp\tloss\n2\t1765000000\t2.5\n", False),  # a column one tree writes
    (METRICS, '{"train": {"step": 13.0, "wall_time_s": 2.5}}', False),  # 13 and 13.0
    (METRICS, '{"train": {"step": 13, "wall_time_s": 9.5}}', True),  # a time: run to run
    (METRICS, '{"train": {"step": 13, "wall_time_s": "2.5"}}', False),  # a time as text
    (METRICS, '{"train": {"step": 13}}', False),  # a time one tree writes
    (METRICS, '{"train": {"step": 13, "wall_time_s": 2.5, "x": true}}', False),
])
def test_what_the_trees_wrote_is_compared_as_written(tmp_path, rel, text, same):
    """check-code compares what the variants wrote as the report reads it: a time or a
    speed by its kind (a number; its value differs run to run), everything else as
    written (13 and 13.0, true and 1 are other values to the report), every curve's header
    whole and the speed curve's steps."""
    theirs, ours = _trees(tmp_path, {}, {rel: text})
    found, _ = check_code.differences(theirs, ours)
    assert (found == []) == same, found
    if not same:
        assert found[0].startswith(rel), found


@pytest.mark.parametrize("rel, text, named", [
    (METRICS, '{"train": {"step": 13, "wall_time_s": 2.5}', "not JSON as one tree wrote it"),
    ("reports/ablations/b/model.pt", "not a model", "not a model file as one tree wrote it"),
])
def test_a_result_one_tree_wrote_damaged_is_a_difference_not_a_traceback(tmp_path, rel, text,
                                                                         named):
    """A workspace change that breaks a result's format (metrics.json no longer JSON, a
    model file torch cannot load) is what the check is for: a difference naming the file,
    never a traceback."""
    import torch

    theirs, ours = _trees(tmp_path, {}, {rel: text})
    if rel.endswith(".pt"):
        torch.save({"w": torch.ones(2)}, ours / rel)
    found, _ = check_code.differences(theirs, ours)
    assert found == [f"{rel} ({named})"], found
