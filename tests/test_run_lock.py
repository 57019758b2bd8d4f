"""One run per output folder (ownership.hold_run_lock): a second run on the same folder stops
at once naming the first, and a killed run leaves no stuck lock."""
import os
import signal
import subprocess
import sys
import time

import pytest

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.ownership import hold_run_lock
from cifar10_tutorial.params import to_dict
from conftest import ROOT, tiny_params, write_train_project

HOLD = ("import sys, time\n"
        "from cifar10_tutorial.ownership import hold_run_lock\n"
        "hold_run_lock(sys.argv[1], 'the first run')\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")


def _holder(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_stops_naming_the_first_and_a_killed_one_frees_the_folder(tmp_path):
    out = tmp_path / "data" / "train"
    first = _holder(out)
    try:
        with pytest.raises(PipelineError, match=rf"{out}: another run is writing there \(pid "
                                                rf"{first.pid}, since .*: the first run\); wait"):
            hold_run_lock(out, "the second run")
    finally:
        os.kill(first.pid, signal.SIGKILL)  # no clean-up of its own
        first.wait()
    hold_run_lock(out, "the second run")  # the kernel released it with the process
    assert (tmp_path / "data" / ".train.run-lock").read_text().startswith(f"pid {os.getpid()}")
    assert not out.exists()  # the lock is beside the folder, never inside it


def test_a_symlinked_alias_of_the_folder_takes_the_same_lock(tmp_path):
    out = tmp_path / "data" / "train"
    out.mkdir(parents=True)
    alias = tmp_path / "alias"
    alias.symlink_to(out)
    first = _holder(out)
    try:
        with pytest.raises(PipelineError, match=rf"^{alias}: another run is writing there "
                                                rf"\(pid {first.pid}"):
            hold_run_lock(alias, "the second run")
    finally:
        first.kill()
        first.wait()
    assert not (tmp_path / ".alias.run-lock").exists()


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo", "hard-link", "users-file",
                                  "lock-line-and-more"])
def test_a_lock_path_that_is_no_regular_file_is_one_line_and_left_as_it_was(tmp_path, kind):
    """A symbolic link there is not followed: the file it names keeps its bytes; nor is a
    hard link (another name of a user's file) or a user's file of that name written."""
    foreign = tmp_path / "thesis.txt"
    foreign.write_bytes(b"my thesis\n")
    lock = tmp_path / ".train.run-lock"
    if kind == "symlink":
        lock.symlink_to(foreign)
    elif kind == "folder":
        lock.mkdir()
    elif kind == "hard-link":
        os.link(foreign, lock)
    elif kind == "users-file":
        lock.write_bytes(b"my thesis\n")
    elif kind == "lock-line-and-more":  # starts as a lock does, then a line of the user's
        lock.write_bytes(b"pid 1, since x\nmy thesis\n")
    else:
        os.mkfifo(lock)
    want = {"symlink": "a symbolic link", "folder": "a folder",
            "fifo": "not a regular file", "hard-link": r"a hard link \(the file has another name",
            "users-file": None, "lock-line-and-more": None}[kind]
    said = (rf"^{lock}: the run lock of .*train holds something else than a run lock's one "
            rf"line" if want is None else rf"^{lock}: the run lock of .*train is {want}")
    with pytest.raises(PipelineError, match=said):
        hold_run_lock(tmp_path / "train", "a run")
    assert foreign.read_bytes() == b"my thesis\n"
    assert lock.is_symlink() or lock.is_dir() or lock.is_fifo() or lock.is_file()
    if kind in ("hard-link", "users-file"):
        assert lock.read_bytes() == b"my thesis\n"
    if kind == "lock-line-and-more":
        assert lock.read_bytes() == b"pid 1, since x\nmy thesis\n"


def test_a_lock_that_cannot_be_written_is_named(tmp_path):
    """No space for the lock's line (here: a file-size limit of 0 bytes, as a full disk
    refuses the write): one line naming the lock file, not "an output file"."""
    code = ("import resource, signal, sys\n"
            "from pathlib import Path\n"
            "from cifar10_tutorial.errors import PipelineError\n"
            "from cifar10_tutorial.ownership import hold_run_lock\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n"
            "try:\n"
            "    hold_run_lock(Path(sys.argv[1]), 'a run')\n"
            "except PipelineError as exc:\n"
            "    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.stdout.strip() == (
        f"{tmp_path}/.out.run-lock: the run lock of {tmp_path}/out cannot be written (File too "
        f"large); nothing else was written: free space there, or give this run another output "
        f"folder, then rerun"), proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


def test_an_output_entry_linked_to_another_folder_is_one_line_and_left_alone(tmp_path):
    """`reports/train/plots` a symbolic link to a folder of the user's: the train stage
    stops in one line naming it before anything is touched, the link never followed."""
    from cifar10_tutorial.ownership import refuse_foreign

    theirs = tmp_path / "up"
    theirs.mkdir()
    (theirs / "thesis.csv").write_text("t\n")
    live = tmp_path / "reports" / "train"
    live.mkdir(parents=True)
    (live / "plots").symlink_to(theirs)
    with pytest.raises(PipelineError, match=rf"^{live}: holds plots, a symbolic link to a "
                                            r"folder, which the train stage would replace"):
        refuse_foreign(live, {"plots", "metrics.json"}, "train", "--live")
    assert (theirs / "thesis.csv").read_text() == "t\n" and (live / "plots").is_symlink()


@pytest.mark.e2e
def test_two_train_runs_of_other_outs_do_not_share_the_live_folder(synth_data, tmp_path):
    """Each folder a run writes has its lock: a second run with its own --out and the same
    --live (DVCLive's curves) stops at once instead of interleaving one loss.tsv."""
    proj = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params()))
    first = _holder(proj / "reports" / "train")
    try:
        proc = subprocess.run([sys.executable, "stages/train.py", "--out", "data/train2"],
                              cwd=proj, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1].startswith(
            f"error: reports/train: another run is writing there (pid {first.pid}")
        assert not (proj / "data" / "train2" / "model.pt").exists()
    finally:
        first.kill()
        first.wait()


@pytest.mark.e2e
def test_the_train_stage_beside_a_running_one_exits_at_once(synth_data, tmp_path):
    """`dvc repro` beside a hand-run stage: the second exits at once naming the first's
    pid, so two runs never write one folder and interleave their logs."""
    proj = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params()))
    first = _holder(proj / "data" / "train")
    try:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "stages/train.py"], cwd=proj, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1].startswith(
            f"error: data/train: another run is writing there (pid {first.pid}")
        assert not (proj / "data" / "train" / "model.pt").exists()
        assert time.perf_counter() - t < 60
    finally:
        first.kill()
        first.wait()


@pytest.mark.e2e
@pytest.mark.parametrize("option, seed, foreign", [
    ("--live", {"dvc.yaml": "stages: {}\n", "params.yaml": "train: {}\n"}, "dvc.yaml, params.yaml"),
    ("--live", {"report.md": "# mine\n", "plots/x.png": "png"}, "report.md"),
    ("--out", {"README.md": "# card\n", "model.pt": "published", "params.yaml": "x: 1\n"},
     "README.md, params.yaml"),
])
def test_a_train_output_folder_holding_foreign_files_is_refused_untouched(synth_data, tmp_path,
                                                                          option, seed, foreign):
    """A --live or --out folder holding files the stage did not make (`--live .`: the
    repository's dvc.yaml and params.yaml, which DVCLive's clean-up would delete;
    `--live reports`: the report; `--out models/tutorial_100k`: the published weights)
    stops the stage before it touches anything."""
    proj = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params()))
    target = proj / "mine"
    for name, text in seed.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    args = ["--out", "data/train", "--live", "reports/train"]
    args[args.index(option) + 1] = "mine"
    proc = subprocess.run([sys.executable, "stages/train.py", *args], cwd=proj,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: mine: holds {foreign}, which the train stage did not make and would delete; "
        f"give {option} a folder of its own (as in dvc.yaml), or move those elsewhere first. "
        f"Nothing was changed.")
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before


@pytest.mark.e2e
@pytest.mark.parametrize("paused, name, text", [
    (False, "notes.txt", "my notes\n"),  # a finished run trained again empties plots/
    (True, "metrics/mine.tsv", "a\tb\n1\t2\n"),  # a resumed run cuts every curve back
    (True, "metrics/train/loss.tsv", "step\tloss\n"),  # a header of another curve's name
    (True, "metrics/train/bytes.tsv", b"step\tbytes\n1\t2.3\n\xff\xfe\n"),  # not UTF-8
    (True, "metrics/train/folder.tsv", None),  # a folder named as a curve
])
def test_a_users_file_in_the_curves_folder_is_refused_untouched(synth_data, tmp_path, paused,
                                                                 name, text):
    """plots/ under --live is emptied when a run starts afresh and its TSVs are cut back
    when one resumes: a file there the stage did not write stops the run, named, and
    everything in --live stays as it was."""
    proj = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params()))
    first = subprocess.run([sys.executable, "stages/train.py",
                            *(["--stop-at", "0"] if paused else [])], cwd=proj,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == (75 if paused else 0), first.stderr[-2000:]
    live = proj / "reports" / "train"
    mine = live / "plots" / name
    if name == "metrics/train/loss.tsv":
        mine = mine.with_name("loss_avg.tsv")  # a real curve's file, its header not its own
    mine.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        mine.mkdir()
        (mine / "inside.txt").write_text("mine\n")
    elif isinstance(text, bytes):
        mine.write_bytes(text)
    else:
        mine.write_text(text)
    before = {p: p.read_bytes() for p in live.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "stages/train.py"], cwd=proj, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {mine.relative_to(proj)}: not a training curve this stage wrote")
    assert {p: p.read_bytes() for p in live.rglob("*") if p.is_file()} == before


@pytest.mark.e2e
def test_torchrun_variables_left_in_the_environment_skip_neither_lock_nor_deadline(
        synth_data, tmp_path):
    """LOCAL_RANK and WORLD_SIZE left over (a notebook started under torchrun): the stage
    still pauses at its deadline, and still stops beside a run holding its folder."""
    proj = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params()))
    env = {**os.environ, "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    paused = subprocess.run([sys.executable, "stages/train.py", "--stop-at", "0"], cwd=proj,
                            env=env, capture_output=True, text=True, timeout=300)
    assert paused.returncode == 75, paused.stderr[-2000:]
    first = _holder(proj / "data" / "train")
    try:
        proc = subprocess.run([sys.executable, "stages/train.py"], cwd=proj, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "another run is writing there" in proc.stderr
    finally:
        first.kill()
        first.wait()


def test_a_folder_no_lock_can_be_made_beside_is_said_as_such():
    """--out /proc/x: the lock's folder takes no file; one line saying so (not a lock 'to
    remove' that is not there)."""
    with pytest.raises(PipelineError, match=r"^/proc: cannot write there \(.+\), and the run "
                                            r"writes in it"):
        hold_run_lock(__import__("pathlib").Path("/proc/x"), "a test")
