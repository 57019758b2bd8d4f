"""The `cifar10` console command (cifar10_tutorial.commands)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cifar10_tutorial.commands import COMMANDS, main, stage_argv
from cifar10_tutorial.errors import PipelineError
from conftest import ROOT


@pytest.fixture
def child(monkeypatch):
    """`cifar10 NAME` replaces its process with the script (commands.become); in a test the
    script runs as a child instead, and its exit status is the SystemExit it would give."""
    def run(command):
        raise SystemExit(subprocess.run(command).returncode)

    monkeypatch.setattr("cifar10_tutorial.commands.become", run)


def test_the_help_lists_every_command_with_an_example(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for name, (what, example, _) in COMMANDS.items():
        assert f"  {name} " in out and f"e.g. `{example}`" in out and example.startswith(f"cifar10 {name}")


def test_an_unknown_command_is_one_line():
    with pytest.raises(PipelineError, match=r"cifar10 trian: no such command; the commands are train, "):
        main(["trian"])


def test_a_stage_command_runs_the_stage_script_with_its_pipeline_arguments(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert stage_argv("train")[1:] == ["--data", "data/prepared", "--out", "data/train",
                                       "--live", "reports/train"]
    assert stage_argv("report")[0].endswith("stages/report.py")
    assert "--ablations" in stage_argv("report")  # reports/dvc.yaml's command


@pytest.mark.parametrize("text, message", [
    ("stages:\n  report:\n    cmd: python stages/report.py --out a\n"
     "  report:\n    cmd: python stages/report.py --out b\n",
     r"reports/dvc.yaml: the key 'report' appears twice \(line 4\); keep one"),
    ("stages: [1, 2]\n", r"reports/dvc.yaml: expected a mapping `stages:`.*found list"),
    ("stages:\n  report: {cmd: [\n", r"reports/dvc.yaml: not a readable pipeline file"),
    ("stages:\n  report: just-a-string\n",
     r"reports/dvc.yaml: stage 'report': expected a mapping \(cmd:, deps:, outs:\), found str"),
])
def test_a_pipeline_file_read_two_ways_or_not_at_all_is_one_line(text, message, tmp_path,
                                                                  monkeypatch):
    # `cifar10 report` takes its arguments from the file DVC runs: a copy DVC refuses (a
    # stage written twice) must not hand the command one of the two silently
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "dvc.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=message):
        stage_argv("report")


@pytest.mark.parametrize("cmds", [["python stages/report.py --out 'my reports'"],
                                  ["echo first", "python stages/report.py --out 'my reports'",
                                   "echo done"]], ids=["one", "several"])
def test_a_stage_command_written_as_a_list_is_read_as_dvc_runs_it(tmp_path, monkeypatch, cmds):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "dvc.yaml").write_text(
        "stages:\n  report:\n    cmd:\n" + "".join(f"    - {c}\n" for c in cmds))
    monkeypatch.chdir(tmp_path)
    assert stage_argv("report")[1:] == ["--out", "my reports"]


@pytest.mark.parametrize("command", [["eval"], ["predict", "x.png"]])
def test_a_command_outside_a_repository_root_is_one_line(command, monkeypatch):
    """A command run from a folder that is not the project's root (reports/, which has a
    dvc.yaml of its own) is refused in one line that says where to run it."""
    monkeypatch.chdir(ROOT / "reports")
    with pytest.raises(PipelineError, match=rf"cifar10 {command[0]}: .*reports is not a "
                                            r"repository root of this project \(no stages\); "
                                            r"run it from the folder"):
        main(command)


def test_a_command_runs_the_code_of_the_checkout_it_is_in(tmp_path):
    """Run from a second clone, a command runs that clone's stages and modules, not the
    installed package's (another clone's, `pip install -e` there), so that the code that
    runs is the code its provenance names."""
    clone = tmp_path / "b"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / "src" / "cifar10_tutorial" / "errors.py").write_text(
        (clone / "src" / "cifar10_tutorial" / "errors.py").read_text()
        + "\nprint('code of clone b', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", "from cifar10_tutorial.commands import entry; "
                           "entry()", "publish", "nothing-here"], cwd=clone,
                          capture_output=True, text=True, timeout=120)
    assert "code of clone b" in proc.stdout, proc.stdout + proc.stderr
    assert stage_argv("train")[0] == "stages/train.py"  # the current folder's script


def test_a_module_command_shows_its_options_and_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "e.g. `cifar10 predict cat.jpg --top 3`" in out and "--top TOP" in out


@pytest.mark.parametrize("name, option", [
    ("benchmark", "--tf-python"), ("trial", "--keep"), ("publish", "--replace"),
    ("check-code", "--no-record"), ("ci", "--update-baseline"), ("results-page", "--out"),
    ("dev-split", "--train")])
def test_a_script_command_runs_the_script_beside_the_package(name, option, capfd, monkeypatch,
                                                             child):
    """The tools around the pipeline are scripts beside the package (benchmarks/, tools/,
    .ci/, devtools/): each command runs this checkout's script."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    out = capfd.readouterr().out
    assert exc.value.code == 0 and option in out, out
    assert COMMANDS[name][2].endswith(".py") and (ROOT / COMMANDS[name][2]).is_file()


def test_check_code_run_by_hand_outside_a_checkout_is_one_line(tmp_path):
    """tools/check_code.py compares the code of the folder it runs in: run elsewhere, it says
    where to run it in one line, before any git command or training."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_code.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: check-code: {tmp_path} is not the repository root of "
                                  f"a checkout of this project (no src/, stages/)"), proc.stderr


@pytest.mark.parametrize("name, option", [("publish", "--replace"), ("train", "--live")])
def test_a_commands_help_works_from_any_folder(name, option, capfd, monkeypatch, child):
    """`cifar10 NAME --help` works from a folder that is not a repository root (docs/):
    it shows the options of the package's own checkout's script."""
    monkeypatch.chdir(ROOT / "docs")
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    out = capfd.readouterr().out
    assert exc.value.code == 0 and option in out, out


def test_a_checkout_without_the_commands_script_is_one_line(tmp_path, monkeypatch):
    for name in ("dvc.yaml", "params.yaml"):
        (tmp_path / name).write_text("")
    (tmp_path / "stages").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"^cifar10 publish: tools/publish.py is not in .*; "
                                            r"run it from the repository root"):
        main(["publish", "x"])


@pytest.mark.skipif(shutil.which("cifar10") is None, reason="the package is not installed")
def test_the_console_script_is_installed_and_runs_a_stage_help():
    proc = subprocess.run(["cifar10", "eval", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "e.g. `cifar10 eval --model other/model.pt --out other/eval`" in proc.stdout and "--model" in proc.stdout


def test_the_package_run_as_a_module_is_the_console_script(tmp_path):
    """``python -m cifar10_tutorial`` (scripts folder off PATH) is ``cifar10``: the same
    commands, and an unknown one refused, never a silent no-op."""
    run = [sys.executable, "-m", "cifar10_tutorial"]
    proc = subprocess.run([*run, "eval", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cifar10 eval:" in proc.stdout and "--model" in proc.stdout
    proc = subprocess.run([*run, "no-such-command"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "no-such-command" in proc.stderr


def _trial_project(tmp_path):
    """A tiny project with two variants whose main pipeline has prepared its data."""
    from conftest import commit, dvc, tiny_project
    import yaml

    project = tiny_project(tmp_path, dict(train_per_batch=60, test=50, seed=2),
                           ablation={"max_steps": 4}, eval={"batch_size": 25},
                           train={"device": "cpu", "batch_size": 16},
                           run={"checkpoint_every": 2})
    raw = yaml.safe_load((project / "reports/params.yaml").read_text())
    raw["ablations"] = {"baseline": {}, "no_lrn": {"model": {"lrn": False}}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "dvc.yaml:preprocess")
    commit(project, "two variants, data prepared")
    return project


@pytest.mark.e2e
def test_the_trial_benchmark_times_the_users_command_in_a_clone(tmp_path):
    """`cifar10 trial` runs `dvc exp run -S ablation.trial_steps=N reports/dvc.yaml:report`
    in a throwaway clone and reports each stage; the workspace is left as it was."""
    import json

    project = _trial_project(tmp_path)
    out = tmp_path / "trial.json"
    proc = subprocess.run([sys.executable, "benchmarks/trial.py", "--steps", "2",
                           "--out", str(out)], cwd=project, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert set(result["stages"]) == {"reports/dvc.yaml:ablation@baseline",
                                     "reports/dvc.yaml:ablation@no_lrn", "reports/dvc.yaml:report"}
    assert result["steps"] == 2 and result["wall_s"] >= sum(result["stages"].values()) > 0
    assert result["command"] == ("dvc exp run -S reports/params.yaml:ablation.trial_steps=2 "
                                 "reports/dvc.yaml:report")
    assert len(result["provenance"]["data"]) == 32 and result["provenance"]["cpus"] >= 1
    assert "the trial: 3 stages in " in proc.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True,
                            text=True).stdout
    assert status == "" and not (project / "reports/ablations").exists()


@pytest.mark.e2e
def test_the_trial_times_the_workspaces_code_and_keeps_the_log_it_names(tmp_path):
    """The trial runs the workspace's code, uncommitted edits included (not HEAD's), and,
    failing, names a log that is still there."""
    project = _trial_project(tmp_path)
    stage = project / "stages" / "ablation.py"  # an edit not committed: the trial runs it
    stage.write_text(stage.read_text().replace(
        "def main() -> None:\n",
        "def main() -> None:\n    raise SystemExit('the workspace edit ran')\n", 1))
    proc = subprocess.run([sys.executable, "benchmarks/trial.py", "--steps", "2"],
                          cwd=project, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the trial failed") and "its output: " in last, last
    log = Path(last.split("its output: ")[1])
    assert log.is_file() and "the workspace edit ran" in log.read_text()
    # the clone itself is removed, and the folder kept for its log is unmarked: no later
    # trial's sweep of killed trials' folders removes it
    assert sorted(p.name for p in log.parent.iterdir()) == ["trial.log"]
    shutil.rmtree(log.parent)


@pytest.mark.e2e
def test_a_trial_through_dvc_evaluates_trial_eval_images_and_says_so(tmp_path):
    """The trial as users run it: each variant trains trial_steps steps and is evaluated on
    the first ablation.trial_eval_images held-out images; the report's banner says both.
    Its models and checkpoints go to data/trials/NAME: a full run's stay as they were."""
    import json
    from pathlib import Path

    from conftest import commit, dvc

    project = _trial_project(tmp_path)
    dvc(project, "repro", "reports/dvc.yaml:ablation@baseline")  # a full run (4 steps) first
    commit(project, "the full baseline")
    full = project / "data/ablations/baseline"
    # as if a longer run had been stopped after its step-2 checkpoint
    (full / "checkpoints/ckpt-00000004.pt").unlink()
    (full / "model.pt").unlink()
    kept = {p.relative_to(full): p.read_bytes() for p in full.rglob("*") if p.is_file()}
    assert Path("checkpoints/ckpt-00000002.pt") in kept
    dvc(project, "exp", "run", "-S", "reports/params.yaml:ablation.trial_steps=2", "-S",
        "reports/params.yaml:ablation.trial_eval_images=20", "reports/dvc.yaml:report")
    # the trial's model and checkpoints are its own; the full run's are as they were
    assert {p.relative_to(full): p.read_bytes() for p in full.rglob("*") if p.is_file()} == kept
    assert (project / "data/trials/baseline/model.pt").is_file()
    assert (project / "data/trials/no_lrn/model.pt").is_file()
    assert not (project / "data/ablations/no_lrn/model.pt").exists()
    for name in ("baseline", "no_lrn"):
        m = json.loads((project / f"reports/ablations/{name}/metrics.json").read_text())
        assert m["eval"]["num_examples"] == 20 and m["train"]["step"] == 2, m
        rows = (project / f"reports/ablations/{name}/eval/predictions.csv").read_text().splitlines()
        assert len(rows) == 21
    top = (project / "reports/report.md").read_text().split("## ", 1)[0]
    assert ("capped every variant at 2 steps, those with a budget of their own included, and "
            "each was evaluated on 20 held-out images (`ablation.trial_eval_images`)") in top
    # as docs/exercises.md says: git brings the full run's results back, up to date for DVC
    subprocess.run(["git", "checkout", "params.yaml", "reports/"], cwd=project, check=True)
    assert json.loads((project / "reports/ablations/baseline/metrics.json").read_text()
                      )["train"]["step"] == 4
    assert "up to date" in dvc(project, "status", "reports/dvc.yaml:ablation@baseline").stdout
    # and the stopped full run goes on from its checkpoint, not from step 0
    out = dvc(project, "repro", "-f", "reports/dvc.yaml:ablation@baseline")
    assert "ckpt-00000002.pt at step 2" in out.stdout + out.stderr, out.stdout + out.stderr
    assert (full / "model.pt").is_file()


def test_the_trial_benchmark_wants_the_main_pipelines_data_first(tmp_path):
    from conftest import copy_project
    from trial import clone_for_trial

    project = copy_project(tmp_path / "p")
    with pytest.raises(PipelineError, match=r"no dvc.lock or data/prepared/meta.json: run "
                                            r"`dvc repro` first"):
        clone_for_trial(project, tmp_path / "clone")
    assert not (tmp_path / "clone").exists()


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], r"^--steps 0: expected an integer from 1 to 1000000000 \(steps a variant\)"),
    (["--steps", str(10**10)], r"^--steps 10000000000: expected an integer from 1 to"),
    # a folder that takes no files: no chmod helps, another path does
    (["--steps", "1", "--out", "/proc/trial.json"],
     r"^/proc: cannot write there \(.+\), and the run writes in it; nothing was changed or "
     r"removed\. Point the stage's output at another folder, then rerun\.$"),
    (["--out", "LINK"], r"^--out .*link\.json: a link, where the trial writes a file of its own"),
])
def test_a_trial_that_cannot_succeed_is_refused_before_it_starts(argv, message, monkeypatch,
                                                                 tmp_path):
    """--steps out of ablation.trial_steps's range, or an --out that cannot be written (or
    is a link, which the final write would refuse), is refused in one line before any
    clone is made or any variant trains, so that no trial's figures are lost at its end."""
    import trial

    work, links = tmp_path / "work", tmp_path / "links"
    work.mkdir()
    links.mkdir()
    (links / "real.json").write_text("{}")
    (links / "link.json").symlink_to(links / "real.json")
    argv = [str(links / "link.json") if a == "LINK" else a for a in argv]
    monkeypatch.chdir(work)  # no project here: refused before one is looked for
    with pytest.raises(PipelineError, match=message):
        trial.main(argv)
    assert list(work.iterdir()) == [] and sorted(p.name for p in links.iterdir()) == \
        ["link.json", "real.json"] and (links / "real.json").read_text() == "{}"


def test_a_killed_command_takes_its_script_with_it(tmp_path):
    """`cifar10 NAME` becomes the script it runs (same process): kill -9 of the command the
    user started ends the tool, which never carries on alone and writes later."""
    import os
    import signal
    import time

    for name in ("dvc.yaml", "params.yaml"):
        (tmp_path / name).write_text("")
    (tmp_path / "stages").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "check_code.py").write_text(
        "import os, sys, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
        "open('written-after-the-kill', 'w').close()\n")
    proc = subprocess.Popen([sys.executable, "-c", "from cifar10_tutorial.commands import "
                             "entry; entry()", "check-code"], cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        assert pid == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        proc.kill()
    assert not (tmp_path / "written-after-the-kill").exists()


def test_no_dvc_beside_python_or_on_path_is_one_line(tmp_path, monkeypatch):
    """A Python with the package but no DVC (a compute node's, say) running a command that
    needs DVC (check-code, trial, repro): one line saying where to run it, not a
    FileNotFoundError traceback from the subprocess."""
    from cifar10_tutorial import cli

    monkeypatch.setattr(cli.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PipelineError, match=r"^dvc: not found beside this Python \(.*python\) "
                                            r"nor on PATH; run this from the project's "
                                            r"environment"):
        cli.dvc_executable()
    (tmp_path / "dvc").write_text("#!/bin/sh\n")
    (tmp_path / "dvc").chmod(0o755)
    assert cli.dvc_executable() == str(tmp_path / "dvc")


@pytest.mark.parametrize("command", [
    ["stages/train.py", "--out", ""],
    ["stages/report.py", "--ablations", "reports/ablations", "--search", "x.md",
     "--equivalence", "x.json", "--out", ""],
    ["tools/publish.py", "baseline", "--out", ""],
    ["tools/dev_split.py", "x.zip", "--out", ""],
    ["devtools/results_page.py", "--out", ""],
    ["stages/ablation.py", "baseline", "--data", "d", "--work", "w", "--out", ""],
    ["stages/dataset_ablation.py", "svhn", "--work", "w", "--partial", "p", "--out", ""],
    ["stages/eval.py", "--params", ""],
    ["stages/report.py", "--params", ""],
], ids=["train", "report", "publish", "dev-split", "results-page", "ablation",
        "dataset-ablation", "eval-params", "report-params"])
def test_an_empty_path_option_is_refused_not_read_as_the_working_folder(tmp_path, command):
    """`--out ''` (a quoted variable never set) would be the working folder, Path(''):
    argparse's one line naming the option, before anything runs or is written."""
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run([sys.executable, str(ROOT / command[0]), *command[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    option = next(arg for arg in command if arg.startswith("--") and
                  command[command.index(arg) + 1] == "")
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"argument {option}: an empty path (`''`), which would be read as the working "
        f"folder; give the path"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", [
    ["stages/report.py", "--ablations", "reports/ablations", "--search", "x.md",
     "--equivalence", "x.json", "--out", "-"],
    ["stages/eval.py", "--data", "d", "--model", "m.pt", "--out", "-"],
    ["stages/regression.py", "--train-metrics", "t.json", "--eval-metrics", "e.json",
     "--out", "-"],
    ["stages/train.py", "--data", "-"],
], ids=["report", "eval", "gate", "train-data"])
def test_a_dash_path_option_is_refused_not_made_a_file_named_so(tmp_path, command):
    """`--out -` reads as the standard output: the report, the evaluation and the gate
    made a folder or file named `-` in the working folder instead. argparse's one line
    naming the option; `./-` still names one."""
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run([sys.executable, str(ROOT / command[0]), *command[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    option = command[command.index("-") - 1]
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"argument {option}: '-', which commands read as the standard input or output; this "
        f"one reads and writes files: give the path (./- for one named so)"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
