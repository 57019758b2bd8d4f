"""A run that outlives its machine: paused at a deadline, carried in a mirror, continued in a
fresh folder, and ending exactly as one uninterrupted run."""
import json
import os
import socket
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch

from cifar10_tutorial.training import deadline as continuation_settings
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.checkpoint_files import load_checkpoint
from cifar10_tutorial.training.distributed import PAUSED_EXIT
from cifar10_tutorial.training.deadline import Continuation, from_stage
from cifar10_tutorial.training.deadline import parse_deadline
from cifar10_tutorial.training.mirror import MIRROR_ENV, Mirror, run_ended
from cifar10_tutorial.errors import PipelineError, TrainingError
from cifar10_tutorial.params import to_dict
from cifar10_tutorial.training.train import train
from conftest import children_of, processes_in, tiny_params, write_train_project
from test_train import assert_same_outputs


def paths(root) -> TrainPaths:
    return TrainPaths(root / "train", root / "live")


NOW = datetime(2026, 12, 1, 16, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("text, seconds", [
    ("2h30m", 9000), ("90m", 5400), ("45s", 45), ("3600", 3600), ("1h", 3600), ("1.5h", 5400),
    ("18:20", 8400), ("15:00", 82800),  # the next 15:00: tomorrow
    ("2026-12-01T18:20", 8400), ("2026-12-01T18:20:00+01:00", 4800), ("2026-12-01T16:30Z", 1800),
    (f"@{NOW + 12}", 12)])
def test_deadlines_as_durations_or_moments(text, seconds):
    assert parse_deadline(text, now=NOW) == pytest.approx(NOW + seconds)


@pytest.mark.parametrize("text", ["soon", "2x", "25:00", "", "h", "1e6", "@nan", "@inf", "@-inf"])
def test_a_deadline_that_is_neither_is_one_clear_error(text):
    with pytest.raises(PipelineError, match="is not a duration .* or a moment"):
        parse_deadline(text, now=NOW)


@pytest.mark.parametrize("text", ["2h30", "1m5", "1h2.5"])
def test_a_number_without_its_unit_after_hours_or_minutes_is_refused(text):
    """``2h30`` is ambiguous (2 h 30 min, or 2 h 0 min 30 s?): refused, naming both ways."""
    with pytest.raises(PipelineError, match=rf"'{text}' .*ends in a number without its unit: "
                                            rf"write {text}m or {text}s"):
        parse_deadline(text, now=NOW)


@pytest.mark.parametrize("text", ["2000-01-01", "2026-12-01T15:59", "2026-12-01T16:59+02:00"])
def test_a_moment_already_past_is_refused_and_named(text):
    with pytest.raises(PipelineError, match=r"is 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC, which has "
                                            r"passed; give a later moment or a duration"):
        parse_deadline(text, now=NOW)
    assert parse_deadline("0", now=NOW) == NOW  # a zero duration: pause at once (tests use it)
    # what a stage exports to its torchrun processes: may have passed when they read it
    assert parse_deadline(f"@{NOW - 1}", now=NOW) == NOW - 1


def test_the_stage_fixes_a_relative_deadline_once_for_every_process(monkeypatch):
    for name in (continuation_settings.STOP_AT_ENV, MIRROR_ENV):  # unset after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    cont = from_stage("2h", "s3://bucket/runs/", "tutorial_100k")
    assert cont.mirror == "s3://bucket/runs/tutorial_100k"
    assert os.environ[continuation_settings.STOP_AT_ENV] == f"@{cont.deadline:.3f}"
    # a torchrun relaunch repeats the options: its processes keep the parent's deadline
    monkeypatch.setattr(continuation_settings, "launched_by_torchrun", lambda: True)
    again = from_stage("2h", "s3://bucket/runs/", "tutorial_100k")
    assert again.deadline == pytest.approx(cont.deadline, abs=1e-3)
    monkeypatch.undo()
    # nothing set: no deadline, no mirror
    for name in (continuation_settings.STOP_AT_ENV, MIRROR_ENV):
        monkeypatch.delenv(name, raising=False)
    assert from_stage(None, None, "train") == Continuation()


def test_queued_experiments_keep_mirror_folders_of_their_own(monkeypatch, tmp_path):
    """`dvc queue start -j N` runs experiments of other params side by side: with one
    mirror for all (CIFAR10_CHECKPOINT_MIRROR), the second would find the first's
    checkpoint in <mirror>/train and stop. Each keeps <mirror>/train/queued/<experiment>."""
    for name in (continuation_settings.STOP_AT_ENV, MIRROR_ENV, "DVC_EXP_NAME"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv(MIRROR_ENV, "s3://bucket/runs")
    workspace = tmp_path / "repo/.dvc/tmp/exps/tmpab12"
    workspace.mkdir(parents=True)
    monkeypatch.chdir(workspace)
    assert from_stage(None, None, "train").mirror == "s3://bucket/runs/train/queued/tmpab12"
    monkeypatch.setenv("DVC_EXP_NAME", "bs64")
    assert from_stage(None, None, "baseline").mirror == "s3://bucket/runs/baseline/queued/bs64"
    monkeypatch.chdir(tmp_path / "repo")  # the workspace itself
    assert from_stage(None, None, "train").mirror == "s3://bucket/runs/train"


@dataclass(frozen=True)
class AfterChecks(Continuation):
    """A deadline that passes at the loop's ``n``-th look at the clock (one a step)."""

    n: int = 0
    looks: list = None

    def due(self) -> bool:
        self.looks.append(1)
        return len(self.looks) >= self.n


def pause_after(n: int, mirror) -> Continuation:
    return AfterChecks(mirror=str(mirror), n=n, looks=[])


@pytest.mark.parametrize("shuffle", ["permutation", "queue"])
def test_paused_runs_continued_from_the_mirror_in_fresh_folders_equal_one_run(
        synth_data, tmp_path, shuffle):
    params = tiny_params(input={"shuffle": shuffle},
                         train={"max_steps": 30}, run={"checkpoint_every": 8}, eval={"every_steps": 5})
    train(params, synth_data, paths(tmp_path / "whole"), progress=False)
    mirror = tmp_path / "mirror" / "train"
    # segment 1 pauses at step 11 (between checkpoints: it writes one at the pause)
    with pytest.raises(SystemExit) as stop:
        train(params, synth_data, paths(tmp_path / "m1"), progress=False,
              continuation=pause_after(11, mirror))
    assert stop.value.code == PAUSED_EXIT
    first = paths(tmp_path / "m1")
    assert not first.model.exists() and not (first.live_dir / "metrics.json").exists()
    assert json.loads((mirror / "mirror.json").read_text())["step"] == 11
    assert load_checkpoint(mirror / "checkpoint.pt")["step"] == 11
    (mirror.parent / "README.md").write_text("not the run's")
    (mirror / "README.md").write_text("not the run's either")
    # segment 2, on "another machine": a fresh folder, from the mirror; pauses at step 19
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "m2"), progress=False,
              continuation=pause_after(8, mirror))
    assert load_checkpoint(mirror / "checkpoint.pt")["step"] == 19
    # segment 3: a third fresh folder, to the end
    last = paths(tmp_path / "m3")
    m = train(params, synth_data, last, progress=False,
              continuation=Continuation(mirror=str(mirror)))
    assert m["step"] == 30
    assert_same_outputs(paths(tmp_path / "whole"), last)
    made = json.loads((last.live_dir / "provenance.json").read_text())
    assert [(s["from_step"], s["to_step"]) for s in made["segments"]] == [(0, 11), (11, 19),
                                                                           (19, 30)]
    assert all(s["device"] and s["wall_time_s"] > 0 and "commit" in s for s in made["segments"])
    # the results written, the run's files leave the mirror; what it did not write stays
    run_ended(Continuation(mirror=str(mirror)))
    assert sorted(p.name for p in mirror.iterdir()) == ["README.md"]


def test_signature_differences_name_what_differs_as_json_sees_it():
    from cifar10_tutorial.training.checkpoints import signature_differences

    ours = {"data": "d1", "device": "cpu", "world_size": 1,
            "params": {"train": {"initial_lr": 0.1, "seed": 1}, "eval": {"targets": (0.5,)}}}
    assert signature_differences(json.loads(json.dumps(ours)), ours) == []  # lists vs tuples
    other = {**ours, "world_size": 2, "params": {**ours["params"], "train": {"initial_lr": 0.05,
                                                                             "seed": 2}}}
    assert signature_differences(other, ours) == [
        "params.train.initial_lr: 0.05 there, 0.1 here", "params.train.seed: 2 there, 1 here",
        "world_size: 2 there, 1 here"]
    assert signature_differences({**other, "data": "d2"}, ours) == [
        "data: \"d2\" there, \"d1\" here", "params.train.initial_lr: 0.05 there, 0.1 here",
        "params.train.seed: 2 there, 1 here", "1 more"]


def test_a_mirror_of_another_run_is_left_alone_and_a_damaged_one_starts_afresh(
        synth_data, tmp_path, caplog):
    """A mirror holding another run's checkpoint (other params: a paused run, say, of an
    experiment sharing the mirror) stops the run in one line, the mirror untouched: that
    checkpoint may be the other run's only durable copy. A damaged one is dropped and the
    run starts afresh."""
    caplog.set_level("INFO")
    mirror = tmp_path / "mirror"
    params = tiny_params(train={"max_steps": 20})
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "a"), progress=False,
              continuation=pause_after(6, mirror))
    before = {p.relative_to(mirror): p.read_bytes() for p in mirror.rglob("*") if p.is_file()}
    other = tiny_params(train={"max_steps": 20, "initial_lr": 0.05})
    for old_state in (False, True):  # mirror.json with the run's signature, or without
        if old_state:
            state = json.loads((mirror / "mirror.json").read_text())
            del state["signature"]
            (mirror / "mirror.json").write_text(json.dumps(state))
            before[Path("mirror.json")] = (mirror / "mirror.json").read_bytes()
        with pytest.raises(TrainingError, match=rf"{mirror}: holds the checkpoint of another "
                           r"run \(step 6 of 20; params.train.initial_lr: 0.1 there, 0.05 here\), "
                           r"which this run would replace; give this run a mirror folder of its "
                           r"own \(--mirror or CIFAR10_CHECKPOINT_MIRROR\), or remove "):
            train(other, synth_data, paths(tmp_path / "b"), progress=False,
                  continuation=Continuation(mirror=str(mirror)))
        assert {p.relative_to(mirror): p.read_bytes() for p in mirror.rglob("*")
                if p.is_file()} == before
        assert not list(paths(tmp_path / "b").checkpoints.glob("ckpt-*.pt"))
    # the run it belongs to still continues from it
    m = train(params, synth_data, paths(tmp_path / "a2"), progress=False,
              continuation=Continuation(mirror=str(mirror)))
    assert m["step"] == 20 and "resuming from" in caplog.text
    run_ended(Continuation(mirror=str(mirror)))
    # a damaged mirror: dropped, and the run starts afresh
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "c"), progress=False,
              continuation=pause_after(6, mirror))
    data = (mirror / "checkpoint.pt").read_bytes()
    (mirror / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    caplog.clear()
    m = train(params, synth_data, paths(tmp_path / "d"), progress=False,
              continuation=Continuation(mirror=str(mirror)))
    assert m["step"] == 20 and "resuming" not in caplog.text
    assert f"the checkpoint of {mirror} is damaged or truncated: starting afresh" in caplog.text
    assert not list(paths(tmp_path / "d").checkpoints.glob("*.tmp"))


def test_a_local_checkpoint_comes_before_the_mirror(synth_data, tmp_path, caplog):
    caplog.set_level("INFO")
    mirror = tmp_path / "mirror"
    params = tiny_params(train={"max_steps": 20}, run={"checkpoint_every": 5})
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "a"), progress=False,
              continuation=pause_after(12, mirror))
    (mirror / "checkpoint.pt").write_bytes(b"damaged, and never read")
    train(params, synth_data, paths(tmp_path / "a"), progress=False,
          continuation=Continuation(mirror=str(mirror)))
    assert "resuming from" in caplog.text and "fetched" not in caplog.text


@pytest.mark.e2e
def test_the_stage_pauses_at_its_deadline_and_continues_elsewhere(synth_data, tmp_path):
    """The command line of a preemptible machine: --stop-at, --mirror; then the same command
    in another clone continues from the mirror to the end of one uninterrupted run."""
    reference = paths(tmp_path / "ref")
    params = to_dict(tiny_params(input={"shuffle": "queue"},
                                 train={"max_steps": 200,
                                        "log_every": 10}, run={"checkpoint_every": 50, "summary_every": 1000}))
    train(tiny_params(**{k: params[k] for k in ("input", "train")}), synth_data, reference,
          progress=False)
    mirror = tmp_path / "durable"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop(continuation_settings.STOP_AT_ENV, None)
    first = write_train_project(tmp_path / "one", synth_data, params)
    paused = subprocess.run([sys.executable, "stages/train.py", "--stop-at", "1s", "--mirror",
                             str(mirror)], cwd=first, capture_output=True, text=True,
                            timeout=300, env=env)
    assert paused.returncode == PAUSED_EXIT, paused.stderr
    step = int(json.loads((mirror / "train" / "mirror.json").read_text())["step"])
    assert 0 < step < 200, "the deadline should pause a 200-step run part-way"
    assert f"paused at step {step} of 200; run the same command to continue" in paused.stdout
    assert not (first / "data/train/model.pt").exists()
    assert not (first / "reports/train/metrics.json").exists()
    # another machine: a fresh copy of the project, the mirror given by the environment
    second = write_train_project(tmp_path / "two", synth_data, params)
    done = subprocess.run([sys.executable, "stages/train.py"], cwd=second, capture_output=True,
                          text=True, timeout=300,
                          env={**env, MIRROR_ENV: str(mirror)})
    assert done.returncode == 0, done.stderr
    assert "fetched" in done.stderr and "resuming from" in done.stderr
    a, b = load_checkpoint(reference.model), load_checkpoint(second / "data/train/model.pt")
    for key in ("model", "ema"):
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=0, atol=0)
    assert not (mirror / "train").exists()  # the run ended: its folder is gone
    made = json.loads((second / "reports/train/provenance.json").read_text())
    assert [(s["from_step"], s["to_step"]) for s in made["segments"]] == [(0, step), (step, 200)]


def test_mirror_on_an_fsspec_url(tmp_path, synth_data):
    """Not only folders: a mirror given as an fsspec URL (here file://, as s3:// or gs://)."""
    params = tiny_params(train={"max_steps": 12}, run={"checkpoint_every": 4})
    url = f"file://{tmp_path}/runs/train"
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "a"), progress=False,
              continuation=pause_after(5, url))
    assert Mirror(url).state()["step"] == 5
    m = train(params, synth_data, paths(tmp_path / "b"), progress=False,
              continuation=Continuation(mirror=url))
    assert m["step"] == 12
    shutil.rmtree(tmp_path / "a")


@pytest.mark.parametrize("url, message", [
    ("memory://runs", "is in memory, which goes with this process"),
    ("zip://x", "is on zip://, expected durable storage"),
    ("github://a/b", "is on github://, expected durable storage"),
    ("http://127.0.0.1:9/m", "is on http://, expected durable storage"),
    ("   ", "is blank"),
    ("file://otherhost/tmp/x", "names the host 'otherhost', which this machine cannot write"),
])
def test_a_mirror_where_no_run_could_continue_is_one_line(url, message, monkeypatch):
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    with pytest.raises(PipelineError, match=re.escape(message)):
        from_stage(None, url, "train")


def test_a_mirror_url_whose_file_system_is_not_installed_is_one_clear_error():
    with pytest.raises(PipelineError, match=r"gs://bucket/runs/train: the checkpoint mirror "
                                            r"\(--mirror or CIFAR10_CHECKPOINT_MIRROR\) cannot be "
                                            r"opened: .*gcsfs"):
        Mirror("gs://bucket/runs/train")


@pytest.mark.parametrize("where", ["file", "proc", "webhdfs"])
def test_a_mirror_that_cannot_be_written_is_refused_at_the_start(synth_data, tmp_path, where):
    """A file, an unwritable place or a server that is not there is refused in one line at
    the start, before any checkpoint: not at the first checkpoint, after the run has
    trained."""
    url = {"file": str(tmp_path / "mf"), "proc": "/proc/mirror",
           "webhdfs": "webhdfs://127.0.0.1:9/m"}[where]
    (tmp_path / "mf").write_text("a file")
    with pytest.raises(PipelineError, match=rf"^{url}: the checkpoint mirror .*cannot be written "
                                            r"\(.*\); give a folder or bucket this machine can write"):
        train(tiny_params(train={"max_steps": 4}), synth_data, paths(tmp_path / "r"),
              progress=False, continuation=Continuation(mirror=url))
    assert not paths(tmp_path / "r").checkpoints.exists() or not list(
        paths(tmp_path / "r").checkpoints.iterdir())


def _another_runs_folder(mirror: Path) -> dict:
    """A folder holding another run's checkpoint and curves (bytes to check against)."""
    (mirror / "plots" / "metrics").mkdir(parents=True)
    (mirror / "checkpoint.pt").write_bytes(b"another run's only durable checkpoint")
    (mirror / "plots" / "metrics" / "loss.tsv").write_text("step\tloss\n1\t2.3\n")
    return _bytes(mirror)


def _bytes(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("state", [None, '{"step": tr', '{"step": "abc"}', '{"step": true}',
                                   '{"step": 1.5}', "[1, 2]", "{}", '{"step": -3}'])
def test_a_mirror_whose_files_no_manifest_proves_ours_is_left_alone(synth_data, tmp_path,
                                                                     state):
    """Another run's checkpoint beside a mirror.json that is missing, truncated, not a
    manifest or holds an odd step: the run stops at its start, every byte there as it was.
    Only a manifest proves which files are a run's own; without one, none may be replaced
    or cleared."""
    mirror = tmp_path / "m"
    mirror.mkdir()
    if state is not None:
        (mirror / "mirror.json").write_text(state)
    before = _another_runs_folder(mirror)
    with pytest.raises(TrainingError, match=rf"^{mirror}: .*so nothing shows whose files are "
                                            r"there, and this run would replace them"):
        train(tiny_params(train={"max_steps": 6}, run={"checkpoint_every": 2}), synth_data,
              paths(tmp_path / "r"), progress=False, continuation=Continuation(mirror=str(mirror)))
    assert _bytes(mirror) == before
    assert not paths(tmp_path / "r").model.exists()


def test_a_run_removes_only_what_its_manifest_lists(synth_data, tmp_path):
    """A file of the user's in the run's mirror folder, in plots/ too, outlives the run's
    end: the end removes the files the manifest lists, never a whole folder."""
    mirror = tmp_path / "m"
    params = tiny_params(train={"max_steps": 8, "log_every": 1}, run={"checkpoint_every": 2})
    with pytest.raises(SystemExit):
        train(params, synth_data, paths(tmp_path / "a"), progress=False,
              continuation=pause_after(3, mirror))
    listed = json.loads((mirror / "mirror.json").read_text())["files"]
    assert "checkpoint.pt" in listed and any(f.startswith("plots/") for f in listed)
    (mirror / "plots" / "thesis-figure.csv").write_text("mine\n")
    (mirror / "README").write_text("notes\n")
    cont = Continuation(mirror=str(mirror))
    assert train(params, synth_data, paths(tmp_path / "a"), progress=False,
                 continuation=cont)["step"] == 8
    run_ended(cont)
    assert _bytes(mirror) == {Path("plots/thesis-figure.csv"): b"mine\n",
                              Path("README"): b"notes\n"}


@pytest.mark.parametrize("base", ["live", "out", "inside_out"])
def test_a_mirror_that_is_or_holds_an_output_folder_is_refused(synth_data, tmp_path, base):
    """A mirror that is, or lies in, the run's --out or --live is refused (`--mirror
    reports` makes the mirror folder reports/train, the train stage's --live): the run's
    end would remove the finished run's own outputs from it."""
    p = paths(tmp_path / "r")
    url = {"live": p.live_dir, "out": p.out_dir, "inside_out": p.out_dir / "mirror"}[base]
    with pytest.raises(PipelineError, match=r"is, holds or lies in the run's"):
        train(tiny_params(train={"max_steps": 4}), synth_data, p, progress=False,
              continuation=Continuation(mirror=str(url)))


def test_a_mirror_another_live_process_writes_is_refused(synth_data, tmp_path):
    """Two runs started on one mirror: the second stops at once, naming the first."""
    mirror = tmp_path / "m"
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\n"
                               "from cifar10_tutorial.ownership import hold_run_lock\n"
                               "hold_run_lock(sys.argv[1], 'the first run')\n"
                               "print('held', flush=True)\ntime.sleep(600)\n", str(mirror)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PipelineError, match=rf"{mirror}: another run is writing there "
                                                rf"\(pid {holder.pid}"):
            train(tiny_params(train={"max_steps": 4}), synth_data, paths(tmp_path / "r"),
                  progress=False, continuation=Continuation(mirror=str(mirror)))
    finally:
        holder.kill()
        holder.wait()
    # a lease of another live process on this host (a mirror on a shared disk, say)
    mirror2 = tmp_path / "m2"
    mirror2.mkdir()
    (mirror2 / "mirror.json").write_text(json.dumps(
        {"lease": {"host": socket.gethostname(), "pid": os.getppid(), "heartbeat": 0}}))
    with pytest.raises(TrainingError, match=r"another run is writing there \(host .*, pid "):
        train(tiny_params(train={"max_steps": 4}), synth_data, paths(tmp_path / "r2"),
              progress=False, continuation=Continuation(mirror=str(mirror2)))


def stranded_runs(runs: Path, params) -> list[str]:
    """The runs in progress under ``runs`` (``<variant>/checkpoint.pt``, a checkpoint mirror
    such as the repository's runs/) that this code would not resume: their resume signature
    is not the one this code computes for that variant (params read, their layout)."""
    from cifar10_tutorial.training.checkpoints import run_signature
    from cifar10_tutorial.params import variant_params

    stranded = []
    for path in sorted(Path(runs).glob("*/checkpoint.pt")):
        sig = load_checkpoint(path)["signature"]
        now = run_signature(variant_params(params, path.parent.name), sig["data"],
                            torch.device(sig["device"]), sig["world_size"])
        if now != sig:
            stranded.append(path.parent.name)
    return stranded


def test_runs_under_way_still_resume_at_this_commit(tmp_path):
    """A change to the resume signature must not strand the runs in progress in runs/ (the
    project's own long runs, continued from one machine to the next); the check finds a
    run whose signature this code no longer computes."""
    from cifar10_tutorial.training.checkpoints import run_signature
    from cifar10_tutorial.params import load_params, params_from_dict, variant_params
    from conftest import ROOT

    assert stranded_runs(ROOT / "runs", load_params(ROOT / "reports/params.yaml")) == []
    params = params_from_dict({"ablations": {"held": {}, "moved": {"model": {"lrn": False}}}})
    state = {"model": {"w": torch.zeros(1)}, "ema": {"w": torch.zeros(1)}, "step": 4}
    for name in ("held", "moved"):
        sig = run_signature(variant_params(params, name), "d" * 32, torch.device("cpu"), 1)
        if name == "moved":  # made by code that read another layout of the params
            sig = {**sig, "params": {**sig["params"], "model": {"lrn": False}}}
        (tmp_path / name).mkdir()
        torch.save({**state, "signature": sig}, tmp_path / name / "checkpoint.pt")
    assert stranded_runs(tmp_path, params) == ["moved"]


def _repro_project(tmp_path: Path, **train):
    """A tiny project for `cifar10 repro` (100 synthetic images a batch, checkpoints every
    20 steps unless ``run`` says otherwise), and the environment with no pause or mirror
    set by the caller's shell."""
    from conftest import tiny_project

    run = train.pop("run", dict(checkpoint_every=20, summary_every=1000))
    project = tiny_project(tmp_path, dict(train_per_batch=100, test=50, seed=2),
                           train=dict(batch_size=16, device="cpu", **train), run=run,
                           input={"min_fraction_of_examples_in_queue": 0.1},
                           eval={"every_steps": 0})
    env = {k: v for k, v in os.environ.items()
           if k not in (continuation_settings.STOP_AT_ENV, MIRROR_ENV)}
    return project, env


@pytest.mark.e2e
def test_cifar10_repro_turns_a_pause_under_dvc_into_exit_75_and_continues(tmp_path):
    """`cifar10 repro` says that a stage paused (not DVC's "failed to reproduce ...
    exited with 75" and exit 255), exits 75, and the same command continues to the end;
    a real failure keeps DVC's status."""
    from conftest import dvc

    project, env = _repro_project(tmp_path, max_steps=400, log_every=50)
    cmd = [sys.executable, "-c", "from cifar10_tutorial.commands import entry; entry()", "repro"]
    first = subprocess.run([*cmd, "--stop-at", "2s", "train"], cwd=project, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == PAUSED_EXIT, first.stdout + first.stderr
    assert "failed to reproduce" not in first.stdout
    assert "; run the same command to continue\n" in first.stdout  # the stage's own line
    line = first.stdout.strip().splitlines()[-1]
    assert line.startswith("cifar10 repro: stage 'train' paused at step ") and \
        "run the same command again to continue; exit status 75" in line, line
    assert not (project / "data/train/model.pt").exists()
    done = subprocess.run([*cmd, "train"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming from" in done.stdout and (project / "data/train/model.pt").is_file()
    assert "up to date" in dvc(project, "status", "train").stdout
    (project / "params.yaml").write_text((project / "params.yaml").read_text()
                                         .replace("batch_size: 16", "batch_size: -1"))
    bad = subprocess.run([*cmd, "train"], cwd=project, env=env, capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode not in (0, PAUSED_EXIT) and "failed to reproduce" in bad.stdout


@pytest.mark.e2e
def test_cifar10_repro_piped_into_head_still_exits_75_at_a_pause(tmp_path):
    """`cifar10 repro --stop-at 0 | head -1`: the reader gone, the run still pauses and the
    command's status is still 75, with no traceback."""
    project, env = _repro_project(tmp_path, max_steps=400, log_every=50)
    proc = subprocess.Popen([sys.executable, "-c", "from cifar10_tutorial.commands import "
                             "entry; entry()", "repro", "--stop-at", "0", "train"], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == PAUSED_EXIT, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["sigterm", "kill-9", "guard-kill-9"])
def test_dvc_and_its_stage_never_outlive_cifar10_repro(tmp_path, how):
    """SIGTERM to `cifar10 repro`: the train stage checkpoints and stops, DVC with it, and
    the command says so and exits 143; kill -9 of it (no handler of its own runs): its
    guard's parent-death signal stops them all the same. Never orphans running on."""
    import signal
    import time

    # no log line: a stage that writes nothing never meets a broken pipe, the one thing
    # that would end an orphan
    project, env = _repro_project(tmp_path, max_steps=100000, log_every=100000,
                                  run=dict(checkpoint_every=100000, summary_every=100000))
    log = tmp_path / "repro.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from cifar10_tutorial.commands import "
                                 "entry; entry()", "repro", "train"], cwd=project, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    events = project / "data/train/tensorboard"  # written at step 0: the loop runs
    while not list(events.rglob("events.out.*")) and time.time() < deadline:
        time.sleep(0.5)
    assert list(events.rglob("events.out.*")), log.read_text()
    time.sleep(1)
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()
        text = log.read_text()
        assert "stopped by signal 15 at step" in text, text  # the stage's own checkpoint
        assert text.strip().splitlines()[-1] == (
            "cifar10 repro: stopped by signal 15; its stages were stopped (a training stage "
            "writes its checkpoint first, as its last lines above say): run the same command "
            "again to continue; the outputs DVC removed before the stopped stage ran come "
            "back with `dvc checkout` (those DVC caches) or `git checkout -- PATH` (those git "
            "tracks)"), text
        assert list((project / "data/train/checkpoints").glob("*.pt"))
    elif how == "guard-kill-9":  # the guard process itself: the command stops its group
        guards = children_of(proc.pid)
        assert len(guards) == 1, guards
        os.kill(guards[0], signal.SIGKILL)
        assert proc.wait(timeout=300) == 128 + signal.SIGKILL, log.read_text()
        text = log.read_text()
        assert "stopped by signal 15 at step" in text, text  # the stage's own checkpoint
        assert text.strip().splitlines()[-1].startswith(
            "cifar10 repro: its guard killed by signal 9; its stages were stopped"), text
    else:
        proc.kill()
        proc.wait()
    deadline = time.time() + 60
    while processes_in(project) and time.time() < deadline:
        time.sleep(0.5)
    assert processes_in(project) == []


@pytest.mark.parametrize("lease, live", [
    ({"host": "otherhost", "pid": 4242, "heartbeat": "now"}, True),
    ({"host": "otherhost", "pid": 4242, "heartbeat": 1e12}, False),  # 31,000 years ahead
    ({"host": "this", "pid": 1, "heartbeat": "now"}, None),  # pid 1: init, not a run
])
def test_a_lease_says_its_age_and_lapses_when_it_cannot_be_a_runs(tmp_path, lease, live):
    """A lease of another machine holds while its heartbeat is recent, and the refusal says
    how old it is and how to take over; one a day or more ahead of this clock, or of a
    process of this machine that is not Python, is no run's."""
    import time

    from cifar10_tutorial.training.mirror import Mirror

    lease = {**lease, "heartbeat": time.time() if lease["heartbeat"] == "now"
             else lease["heartbeat"], "host": socket.gethostname() if lease["host"] == "this"
             else lease["host"]}
    if live is None:  # pid 1 runs Python in some containers: then it may hold a lease
        live = b"python" in Path("/proc/1/cmdline").read_bytes().lower()
    mirror = Mirror.__new__(Mirror)
    mirror.url = str(tmp_path / "m")
    if live:
        with pytest.raises(TrainingError, match=r"another run is writing there \(host "
                                                r".*, pid \d+, heartbeat \d+ s ago\); wait "):
            mirror._refuse_live_lease(lease)
    else:
        mirror._refuse_live_lease(lease)


def test_cifar10_repro_keeps_an_ignored_hangup_ignored(monkeypatch):
    """Under nohup (SIGHUP ignored) a closed terminal must not stop the run: while dvc
    runs, repro forwards SIGTERM but leaves an ignored SIGHUP ignored."""
    import io
    import signal

    from cifar10_tutorial import repro

    seen = {}

    class Finished:  # stands in for the guard: no output, exit 0, no group left
        pid = 2 ** 22 + 12345
        returncode = 0

        @property
        def stdout(self):
            seen.update({sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)})
            return iter(())

        def wait(self):
            return 0

    monkeypatch.setattr(repro, "start_guarded", lambda cmd, grace, **popen: Finished())
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert repro.repro(["train"], {}, out=io.StringIO()) == 0
    finally:
        signal.signal(signal.SIGHUP, old)
    assert seen[signal.SIGHUP] is signal.SIG_IGN
    assert seen[signal.SIGTERM] not in (signal.SIG_IGN, signal.SIG_DFL)


def test_a_run_of_another_stage_neither_resumes_nor_deletes_a_folder(synth_data, tmp_path):
    """A folder is one stage's run's (checkpoints/owner.json, written before the first
    checkpoint): the train stage pointed at a variant's --work (other params) stops in one
    line instead of starting afresh there, which deleted the variant's model and
    checkpoints; the variant itself, its params changed, still starts afresh."""
    from cifar10_tutorial.errors import PipelineError, TrainingError
    from cifar10_tutorial.training.paths import TrainPaths
    from cifar10_tutorial.training.train import train

    params = tiny_params(train={"max_steps": 4, "batch_size": 16}, run={"checkpoint_every": 2})
    work = tmp_path / "work"
    train(params, synth_data, TrainPaths(work, tmp_path / "live", owner="ablation@softmax"),
          progress=False)
    assert json.loads((work / "checkpoints/owner.json").read_text()) == {"run": "ablation@softmax"}
    before = {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()}
    other = tiny_params(train={"max_steps": 4, "batch_size": 16, "initial_lr": 0.05},
                        run={"checkpoint_every": 2})
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(work))}: the folder of the stage "
                                            r"ablation@softmax's run \(.*owner.json\): its model "
                                            r"and checkpoints, which this run \(train\) would "
                                            r"resume or delete"):
        train(other, synth_data, TrainPaths(work, tmp_path / "live2", owner="train"),
              progress=False)
    assert {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()} == before
    # its own stage, its params changed: afresh, as before
    train(other, synth_data, TrainPaths(work, tmp_path / "live", owner="ablation@softmax"),
          progress=False)
    assert (work / "model.pt").read_bytes() != before[work / "model.pt"]
    # a folder made before the record, with checkpoints of other params: whose is not
    # known, and starting afresh would delete them: refused, nothing changed
    (work / "checkpoints/owner.json").unlink()
    before = {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()}
    third = tiny_params(train={"max_steps": 4, "batch_size": 16, "initial_lr": 0.02},
                        run={"checkpoint_every": 2})
    with pytest.raises(TrainingError, match=rf"^{re.escape(str(work / 'checkpoints'))}: "
                                            r"checkpoints of a run of other params or data"):
        train(third, synth_data, TrainPaths(work, tmp_path / "live3", owner="train"),
              progress=False)
    assert {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()} == before
    # ... with checkpoints this run resumes (its params): claimed by the first run that comes
    train(other, synth_data, TrainPaths(work, tmp_path / "live", owner="train"), progress=False)
    assert json.loads((work / "checkpoints/owner.json").read_text()) == {"run": "train"}
