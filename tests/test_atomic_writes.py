"""Every file an output is written through (files._replace_with: write_text_atomic,
torch_save_atomic, save_figure_atomic) is written beside it under a new temporary name of
its own, then renamed over it: what lies beside it is never written through or replaced,
and a link at the output itself is refused in one line."""
from pathlib import Path

import pytest

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import write_text_atomic


@pytest.mark.parametrize("in_the_way", ["link", "file", "folder"])
def test_whatever_lies_beside_the_output_is_left_as_it_is(tmp_path, in_the_way):
    """The temporary file is made new under a name of its own: a link to a foreign file, a
    user's file or a folder at ``NAME.tmp`` (the old fixed name) is neither written
    through nor replaced, and the output is written."""
    out, foreign = tmp_path / "metrics.json", tmp_path / "foreign.txt"
    out.write_text("old\n")
    foreign.write_text("not yours\n")
    tmp = tmp_path / "metrics.json.tmp"
    {"link": lambda: tmp.symlink_to(foreign), "file": lambda: tmp.write_text("mine\n"),
     "folder": lambda: tmp.mkdir()}[in_the_way]()
    write_text_atomic(out, "new\n")
    assert out.read_text() == "new\n" and not out.is_symlink()
    assert foreign.read_text() == "not yours\n"
    assert tmp.is_symlink() if in_the_way == "link" else tmp.exists()
    if in_the_way == "file":
        assert tmp.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.txt", "metrics.json",
                                                         "metrics.json.tmp"]


def test_an_output_that_is_a_link_is_refused_and_what_it_points_to_kept(tmp_path):
    out, foreign = tmp_path / "summary.csv", tmp_path / "foreign.csv"
    foreign.write_text("a,b\n")
    out.symlink_to(foreign)
    with pytest.raises(PipelineError, match=rf"^{out}: a link, where this run writes a file"):
        write_text_atomic(out, "x\n")
    assert out.is_symlink() and foreign.read_text() == "a,b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.csv", "summary.csv"]


def test_a_write_leaves_only_its_file_and_a_failed_one_nothing(tmp_path):
    out = tmp_path / "r.md"
    write_text_atomic(out, "one\n")
    write_text_atomic(out, "two\n")
    assert out.read_text() == "two\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]
    with pytest.raises(TypeError):
        write_text_atomic(out, 3)  # the writer fails: its own temporary file goes
    assert out.read_text() == "two\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


LONG = "a" * 240 + ".json"  # a legal name (245 bytes); with what a hidden name adds, not


def test_a_long_output_name_is_written_and_its_hidden_names_fit(tmp_path):
    """The hidden names built beside an output (its temporary file, its run lock, its
    staging folder) hold a long name cut, with a digest of the whole: a name the file
    system takes is never an error in a name of ours, and two long names sharing their
    first bytes still get hidden names of their own."""
    from cifar10_tutorial.files import NAME_ROOM, hidden_stem, staging_folder
    from cifar10_tutorial.ownership import hold_run_lock

    out = tmp_path / LONG
    write_text_atomic(out, "x\n")
    assert out.read_text() == "x\n" and [p.name for p in tmp_path.iterdir()] == [LONG]
    other = "a" * 240 + ".yaml"
    assert hidden_stem(LONG) != hidden_stem(other) and hidden_stem("short") == "short"
    assert len(hidden_stem(LONG).encode()) <= NAME_ROOM
    staged = staging_folder(tmp_path / other)
    assert staged.name.startswith(f".{hidden_stem(other)}.staging-")
    hold_run_lock(tmp_path / ("b" * 250), "test", host="h" * 64)  # one per machine
    assert any(p.name.endswith(".run-lock") for p in tmp_path.iterdir())


@pytest.mark.parametrize("command, ours", [
    (["stages/regression.py"], "Regression check against b.json:\n\n| metric |"),
    (["benchmarks/benchmark.py", "--no-compiled", "--train-stage-runs", "0"],
     '{"median_examples_per_sec": 1, "steps_per_window": 2}'),
    (["benchmarks/devices_timing.py", "--data", "none"],
     '{"setups": {}, "speed_2x64_vs_1x128": 1.0}'),
], ids=["regression", "benchmark", "devices-timing"])
@pytest.mark.parametrize("what", ["users-file", "folder", "link"])
def test_a_file_output_replaces_only_a_file_of_its_own_kind(tmp_path, command, ours, what):
    """--out naming a user's file (README.md), a folder or a link: refused in one line
    before any work, the file as it was (a file of the command's own kind it replaces)."""
    import subprocess
    import sys

    from conftest import ROOT

    target = tmp_path / "README.md"
    foreign = tmp_path / "foreign.md"
    foreign.write_text("# my project\n")
    if what == "users-file":
        target.write_text("# my project\n")
        said = "holds a file that is not"
    elif what == "folder":
        target.mkdir()
        said = "a folder, where this writes"
    else:
        target.symlink_to(foreign)
        said = "a link, where this writes"
    proc = subprocess.run([sys.executable, str(ROOT / command[0]), *command[1:], "--out",
                           str(target)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert said in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert foreign.read_text() == "# my project\n"
    assert what != "users-file" or target.read_text() == "# my project\n"
    if what == "users-file":  # its own kind: the check lets it through to the work
        from cifar10_tutorial.ownership import refuse_foreign_file
        from cifar10_tutorial import regression
        from cifar10_tutorial.ownership import json_with

        target.write_text(ours)
        check = (regression.is_gate_text if command[0].endswith("regression.py") else
                 json_with(*__import__("json").loads(ours)))
        refuse_foreign_file(target, "--out", "x", check)


def test_a_killed_writes_temporary_file_is_named_by_the_next_write(tmp_path, capsys):
    """kill -9 between the temporary file and the rename leaves `.NAME.<random>.tmp`: the
    next write of NAME names it (nothing records it as a run's: it stays); another file
    of that folder is not named."""
    left = tmp_path / ".metrics.json.ab_cd123.tmp"
    left.write_text("{half")
    (tmp_path / ".metrics.json.notes.txt").write_text("mine")
    write_text_atomic(tmp_path / "metrics.json", "{}\n")
    assert capsys.readouterr().err.strip() == (
        f"note: {left} (5 bytes) is the temporary file of a write of metrics.json that was "
        f"killed; delete it once nothing writes metrics.json")
    assert left.is_file() and (tmp_path / "metrics.json").read_text() == "{}\n"


@pytest.mark.parametrize("command", [["stages/regression.py"],
                                     ["benchmarks/benchmark.py", "--no-compiled"]],
                         ids=["regression", "benchmark"])
def test_a_file_output_whose_folder_cannot_be_made_is_one_line_before_the_work(tmp_path,
                                                                               command):
    """--out under a file (README.md/x) or where no folder can be made: one line naming it,
    before the gate or the benchmark runs, not a traceback after it."""
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / "README.md").write_text("# mine\n")
    for out, said in ((tmp_path / "README.md" / "x.json", "README.md: a file, where the run "
                                                          "needs a folder"),
                      (Path("/proc/x/b.json"), "/proc: cannot write there")):
        proc = subprocess.run([sys.executable, str(ROOT / command[0]), *command[1:], "--out",
                               str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert said in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert (tmp_path / "README.md").read_text() == "# mine\n"
