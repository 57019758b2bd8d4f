"""Where a command writes: never inside git's, DVC's or the code's folders, never into
another DVC stage's output (run by hand, where DVC does not keep the stages apart), never
at a path holding a control character (ownership.refuse_foreign_place). Each command is
run as a user runs it, in a copy of the project with a lock naming a variant's outputs."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial import ownership
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.ownership import refuse_foreign_place, repository_at
from conftest import ROOT, copy_project

LOCK = ("schema: '2.0'\nstages:\n  ablation@baseline:\n    cmd: x\n    outs:\n"
        "    - path: reports/ablations/baseline/eval\n      hash: md5\n"
        "    - path: reports/ablations/baseline/metrics.json\n      hash: md5\n"
        "  ablation@softmax:\n    cmd: x\n    outs:\n"
        "    - path: reports/ablations/softmax/train/provenance.json\n      hash: md5\n")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The project's pipelines and code, a lock for two variants, git and DVC folders."""
    project = copy_project(tmp_path / "p")
    (project / "reports/dvc.lock").write_text(LOCK)
    for name in (".git", ".dvc"):
        (project / name).mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    return project


def _everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path, own, said", [
    (".git/x.json", (), r"inside \.git/, git's own folder"),
    (".dvc/cache/x", (), r"inside \.dvc/, DVC's own folder"),
    ("src/x.json", (), r"inside src/, the project's code"),
    ("stages", (), r"inside stages/, the project's code"),
    ("reports/ablations/baseline/eval", ("eval",),
     r"is reports/ablations/baseline/eval, an output of the DVC stage 'ablation@baseline'"),
    # (not there yet in this project: the stage's outputs would be there)
    ("reports/ablations/softmax/train", ("train",),
     r"would hold reports/ablations/softmax/train/provenance.json, an output of the DVC stage "
     r"'ablation@softmax'"),
    ("reports/ablations/baseline", ("ablation@softmax",),
     r"would hold reports/ablations/baseline/eval, an output of the DVC stage "
     r"'ablation@baseline'"),
    ("data/prepared/dev.tar.gz", (), r"lies inside data/prepared, an output of the DVC stage "
                                     r"'preprocess'"),
    ("reports/ablations/newone/eval", ("train",),
     r"is reports/ablations/newone/eval, an output of the DVC stage 'ablation' \(for a "
     r"variant named newone\)"),
    ("x\ny.json", (), r"holds a newline or another control character"),
    # beside a stage's outputs in a folder holding only that stage's: its next run refuses
    # a file it did not make there, after DVC removed its outputs
    ("data/train/evalx", ("eval",),
     r"lies inside data/train, the folder of the outputs of the DVC stage 'train'"),
    ("reports/eval/report.md", ("report",),
     r"lies inside reports/eval, the folder of the outputs of the DVC stage 'eval'"),
    ("data/train/b.json", (), r"lies inside data/train, the folder of the outputs of the DVC "
                              r"stage 'train'"),
    ("reports/ablations/baseline/page.md", (), r"lies inside reports/ablations/baseline, the "
                                               r"folder of the outputs of the DVC stage "
                                               r"'ablation@baseline'"),
    # a variant defined nowhere yet: no stage of that name to name, and nothing there yet
    ("reports/ablations/newvar", ("eval",),
     r"would hold reports/ablations/newvar/\S+, an output of the DVC stage 'ablation' \(for a "
     r"variant named newvar\)"),
    ("reports/ablations/newvar/report.md", ("report",),
     r"lies inside reports/ablations/newvar, the folder of the outputs of the DVC stage "
     r"'ablation' \(for a variant named newvar\)"),
], ids=["git", "dvc", "src", "stages", "eval-into-variant", "live-into-variant",
        "variant-into-variant", "into-prepared", "variant-not-run", "newline",
        "eval-beside-train", "report-beside-eval", "baseline-beside-train",
        "page-beside-a-variants-results", "into-an-undefined-variant",
        "report-into-an-undefined-variant"])
def test_a_place_that_is_not_the_commands_is_refused(project, path, own, said):
    before = _everything(project)
    with pytest.raises(PipelineError, match=said + r".*Nothing was changed\.$"):
        refuse_foreign_place(Path(path), "--out", "", own)
    assert _everything(project) == before


@pytest.mark.parametrize("path, said", [
    ("ablations/baseline/eval", r"is .*/reports/ablations/baseline/eval, an output of the DVC "
                                r"stage 'ablation@baseline'"),
    ("../src/x.json", r"inside src/, the project's code"),
], ids=["a-variants-output", "the-code"])
def test_a_command_run_from_a_subfolder_guards_the_same_project(project, monkeypatch, path,
                                                                said):
    """A stage script run from reports/ (its paths relative to there) writes into the same
    project: the repository root above the working folder is the one guarded."""
    monkeypatch.chdir(project / "reports")
    before = _everything(project)
    with pytest.raises(PipelineError, match=said + r".*Nothing was changed\.$"):
        refuse_foreign_place(Path(path), "--out", "", ("eval",))
    assert _everything(project) == before


@pytest.mark.parametrize("path, own, said", [
    ("src/evalx", ("eval",), r"inside src/, the project's code"),
    ("reports/ablations/baseline/eval", ("eval",),
     r"is .*/reports/ablations/baseline/eval, an output of the DVC stage 'ablation@baseline'"),
    ("data/train/raw", ("download",), r"lies inside .*/data/train, the folder of the "
                                      r"outputs of the DVC stage 'train'"),
], ids=["the-code", "a-variants-output", "a-stages-folder"])
def test_a_command_run_from_outside_the_repository_guards_its_project(project, tmp_path,
                                                                       monkeypatch, path,
                                                                       own, said):
    """A stage script run from a folder outside the project, its paths absolute: the
    project guarded is the one the place lies in, not the working folder's (none)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    before = _everything(project)
    with pytest.raises(PipelineError, match=said + r".*Nothing was changed\.$"):
        refuse_foreign_place(project / path, "--out", "", own)
    assert _everything(project) == before
    # the project's own stage where its code is the code that runs (a stage script run by
    # path: its checkout's src/), another checkout's where not
    with pytest.raises(PipelineError, match=r"an output of the DVC stage 'eval'"):
        refuse_foreign_place(project / "reports/eval", "--out", "", ("eval",))
    monkeypatch.setattr(ownership, "__file__",
                        str(project / "src/cifar10_tutorial/ownership.py"))
    refuse_foreign_place(project / "reports/eval", "--out", "", ("eval",))  # its own


def test_a_project_folder_that_is_a_link_elsewhere_is_guarded_from_outside(project, tmp_path,
                                                                           monkeypatch):
    """data/train a link to another disk, the command run from outside the project with
    the project's path: the place is in the project as given, though it resolves outside."""
    big = tmp_path / "big" / "train"
    big.mkdir(parents=True)
    shutil.rmtree(project / "data/train", ignore_errors=True)
    (project / "data/train").symlink_to(big)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(PipelineError, match=r"the folder of the outputs of the DVC stage 'train'"):
        refuse_foreign_place(project / "data/train/evx", "--out", "", ("eval",))
    monkeypatch.setattr(ownership, "__file__",  # its code: the project's own stage
                        str(project / "src/cifar10_tutorial/ownership.py"))
    refuse_foreign_place(project / "data/train/checkpoints", "--out", "", ("train",))


def test_a_project_reached_through_a_link_guards_its_code(project, tmp_path, monkeypatch):
    """The project named through a link to it (plink -> p), from outside: the repository
    found through the link is the project itself, whose code folders are refused."""
    (tmp_path / "plink").symlink_to(project)
    monkeypatch.chdir(tmp_path)
    for path in ("plink/src/x", "plink/stages/x", "plink/tools/x", tmp_path / "plink/src/x"):
        with pytest.raises(PipelineError, match=r"the project's code"):
            refuse_foreign_place(Path(path), "--out", "", ("eval",))


@pytest.mark.parametrize("folder", ["tools", "devtools", "benchmarks", "tests"])
def test_the_projects_other_code_folders_are_refused(project, folder):
    with pytest.raises(PipelineError, match=rf"inside {folder}/, the project's code"):
        refuse_foreign_place(Path(folder) / "evx", "--out")


def test_a_checkout_without_its_dvc_folder_is_still_the_project(project, tmp_path,
                                                                  monkeypatch):
    """.dvc/ removed (to reset DVC) or lost in a copy, .git/ there: the place is still in
    the project, whose code and stages' outputs are guarded from outside it too."""
    shutil.rmtree(project / ".dvc")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(PipelineError, match=r"inside src/, the project's code"):
        refuse_foreign_place(project / "src/evx", "--out", "", ("eval",))


def test_a_command_run_from_inside_dvc_s_folder_guards_the_project(project, monkeypatch):
    """From inside .dvc/ (or .dvc/tmp, no workspace), DVC's folder is the project's: a
    place there, by a relative or an absolute path, is refused as DVC's own."""
    (project / ".dvc/tmp").mkdir()
    monkeypatch.chdir(project / ".dvc/tmp")
    for path in (Path("x"), project / ".dvc/tmp/x", Path(".")):
        with pytest.raises(PipelineError, match=r"inside \.dvc/, DVC's own folder"):
            refuse_foreign_place(path, "--out")
    monkeypatch.chdir(project / ".dvc")
    with pytest.raises(PipelineError, match=r"inside src/, the project's code"):
        refuse_foreign_place(Path("../src/x"), "--out")
    with pytest.raises(PipelineError, match=r"lies inside .*reports/eval, the folder of"):
        refuse_foreign_place(Path("../reports/eval/x"), "--out")


def test_a_name_too_long_to_look_at_is_one_line(project, tmp_path):
    for path in (tmp_path / ("a" * 300), project / ("b" * 300) / "eval"):
        with pytest.raises(PipelineError, match=r"cannot be looked into \(File name too long\)"
                                                r"; give --out another path"):
            refuse_foreign_place(path, "--out")


def test_the_variants_folder_is_theirs_alone(project):
    """reports/ablations holds the variants' results only: a report or a page written there
    is refused as in the ablation stage's folder (report.md is no variant's name), and each
    variant's own place in it is still its own."""
    for path in ("reports/ablations/report.md", "reports/ablations/.report-swapping"):
        with pytest.raises(PipelineError, match=r"lies inside reports/ablations, the folder of "
                                                r"the outputs of the DVC stage 'ablation'"):
            refuse_foreign_place(Path(path), "--out", "", ("report",))
    with pytest.raises(PipelineError, match=r"--out reports/ablations: would hold "
                                            r"reports/ablations/"):
        refuse_foreign_place(Path("reports/ablations"), "--out", "", ("report",))
    refuse_foreign_place(Path("reports/ablations/fresh"), "--out", "", ("ablation@fresh",))
    refuse_foreign_place(Path("reports/ablations/fresh/eval"), "--out", "",
                         ("dataset_ablation@fresh",))
    with pytest.raises(PipelineError, match=r"the DVC stage 'ablation' \(for a variant named "
                                            r"fresh\)"):
        refuse_foreign_place(Path("reports/ablations/fresh/x"), "--out", "", ("ablation@other",))
    # with the variants' results there, the folder holds them
    (project / "reports/ablations/baseline/eval").mkdir(parents=True)
    with pytest.raises(PipelineError, match=r"--out reports/ablations: holds reports/ablations/"):
        refuse_foreign_place(Path("reports/ablations"), "--out", "", ("report",))


@pytest.mark.parametrize("path", ["models/w", "models/w/eval", "models/w/eval/metrics.json"],
                         ids=["the-folder", "a-folder-in-it", "a-file-in-it"])
def test_a_place_in_a_folder_of_published_weights_is_refused(project, path):
    """An evaluation, a results page or a table written into published weights' folder
    would stand beside the card as if published; publish itself replaces its own folder."""
    (project / "models/w").mkdir(parents=True)
    (project / "models/w/published.json").write_text('{"files": {"model.pt": "0"}}')
    before = _everything(project)
    with pytest.raises(PipelineError, match=r"inside .*models/w, a folder of published weights"
                                            r".*Nothing was changed\.$"):
        refuse_foreign_place(Path(path), "--out")
    assert _everything(project) == before
    refuse_foreign_place(Path("models/w"), "--out", publishing=True)  # publish's own
    with pytest.raises(PipelineError, match=r"a folder of published weights"):
        refuse_foreign_place(Path("models/w/inner"), "--out", publishing=True)


def test_a_folder_of_published_weights_outside_the_checkout_is_guarded(project, tmp_path):
    """Weights published outside the checkout (publish --out /elsewhere) hold only their own
    files too: an evaluation or a run written inside them is refused."""
    (tmp_path / "pub/w").mkdir(parents=True)
    (tmp_path / "pub/w/published.json").write_text('{"files": {"model.pt": "0"}}')
    for path in (tmp_path / "pub/w/eval", tmp_path / "pub/w/run/live"):
        with pytest.raises(PipelineError, match=r"a folder of published weights"):
            refuse_foreign_place(path, "--out")


def test_eval_watch_writes_no_events_into_published_weights(project, tmp_path):
    """`eval --watch` writes its events beside the model's run (tensorboard/eval): for
    published weights that is their folder, refused before anything is read."""
    (project / "models/w").mkdir(parents=True)
    (project / "models/w/published.json").write_text('{"files": {"model.pt": "0"}}')
    line = _run(project, "stages/eval.py", "--watch", "--max-evals", "1", "--data",
                str(tmp_path / "none"), "--model", "models/w/model.pt", "--out", "o")
    assert "--watch --model models/w/tensorboard/eval: inside" in line \
        and "a folder of published weights" in line, line


@pytest.mark.e2e
def test_eval_watch_writes_no_events_into_the_code_or_a_variants_results(project, tmp_path):
    """`eval --watch --model M` writes beside M (M's folder/tensorboard/eval): a model in
    src/ or in a variant's results folder is refused before anything is written; beside
    the train stage's run it is its own."""
    for model, said in (("src/m.pt", "--watch --model src/tensorboard/eval: inside src/"),
                        ("reports/ablations/baseline/m.pt",
                         "the folder of the outputs of the DVC stage 'ablation@baseline'")):
        line = _run(project, "stages/eval.py", "--watch", "--max-evals", "1", "--data",
                    str(tmp_path / "none"), "--model", model, "--out", "o")
        assert said in line and "Nothing was changed" in line, line
    refuse_foreign_place(Path("data/train/tensorboard/eval"), "--watch --model", "", ("train",))


@pytest.mark.parametrize("path, own", [
    ("reports/eval", ("eval",)), ("data/train", ("train",)),
    ("reports/ablations/softmax", ("ablation@softmax",)),
    ("reports/ablations/softmax/eval", ("dataset_ablation@softmax",)),
    ("elsewhere/out", ()), ("../outside.json", ()),
    ("reports/regression.md", ("regression",)), ("reports/report.md", ("report",)),
    ("reports/notes.md", ()), ("data/dev/dev.tar.gz", ()), ("data/.downloads", ("download",)),
    ("data/ablations/softmax/checkpoints", ("ablation@softmax",)),
    ("reports/ablations/softmax/eval", ("ablation@softmax",)),
], ids=["eval-own", "train-own", "variant-own", "variant-own-any-group", "free", "outside",
        "gate-table", "report", "beside-several-stages", "dev-archive", "partial-downloads",
        "variant-checkpoints", "variant-eval"])
def test_a_commands_own_place_or_a_free_one_passes(project, path, own):
    refuse_foreign_place(Path(path), "--out", "", own)


def test_dvc_stage_set_by_hand_switches_no_check_off(project, monkeypatch):
    """DVC_STAGE is DVC's variable for a stage's command, and anyone may set it: set by
    hand (or under dvc repro), another stage's output is still refused."""
    monkeypatch.setenv("DVC_STAGE", "eval")
    with pytest.raises(PipelineError, match=r"is reports/ablations/baseline/eval, an output of "
                                            r"the DVC stage 'ablation@baseline'"):
        refuse_foreign_place(Path("reports/ablations/baseline/eval"), "--out", "", ("eval",))
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))  # its own
    with pytest.raises(PipelineError, match=r"inside \.git/"):
        refuse_foreign_place(Path(".git/x"), "--out", "", ("eval",))


def _run(project: Path, *cmd: str) -> str:
    """``cmd`` (a script of the project and its options) from the project's folder: it must
    stop in one line before it writes anything; that line."""
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}
    env["PYTHONPATH"] = str(project / "src")
    before = _everything(project)
    proc = subprocess.run([sys.executable, *cmd], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert _everything(project) == before
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.e2e
def test_the_commands_refuse_a_place_that_is_not_theirs(project, tmp_path):
    """Each command that writes where its user says, at a place of another stage's or of
    git's: one line, nothing written (the cases a hostile pass found writing there)."""
    data = str(tmp_path / "prepared")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["regression"]["baseline"] = "src/b.json"
    baseline_in_src = tmp_path / "params.yaml"
    baseline_in_src.write_text(yaml.safe_dump(params, sort_keys=False))
    cases = [
        (["stages/eval.py", "--data", data, "--model", "m.pt", "--out",
          "reports/ablations/baseline/eval"], "an output of the DVC stage 'ablation@baseline'"),
        (["stages/train.py", "--data", data, "--out", "data/ablations/softmax", "--live",
          "reports/ablations/softmax/train"], "a folder the DVC stage 'ablation' writes outside DVC for a variant named softmax"),
        (["stages/train.py", "--data", data, "--out", "o", "--live", "l", "--mirror", ".git"],
         "--mirror .git/train: inside .git/"),
        (["stages/train.py", "--data", data, "--out", "o", "--live", "l", "--mirror", "src"],
         "--mirror src/train: inside src/"),
        (["stages/ablation.py", "softmax", "--params", "reports/params.yaml", "--data", data,
          "--work", "w", "--out", "reports/ablations/baseline"],
         "an output of the DVC stage 'ablation@baseline'"),
        (["stages/ablation.py", "baseline", "--params", "reports/params.yaml", "--data", data,
          "--work", "w", "--out", ".git"], "--out .git: inside .git/"),
        (["stages/regression.py", "--train-metrics", "t.json", "--eval-metrics", "e.json",
          "--out", ".git/gate.md"], "--out .git/gate.md: inside .git/"),
        (["tools/dev_split.py", "nope.zip", "--out", ".git/dev.tar.gz"],
         "--out .git/dev.tar.gz: inside .git/"),
        (["tools/dev_split.py", "nope.zip", "--out", "data/prepared/dev.tar.gz"],
         "an output of the DVC stage 'preprocess'"),
        (["benchmarks/benchmark.py", "--out", ".git/bench.json"], "--out .git/bench.json: inside"),
        # the data stages by hand, and a data-set variant's partial downloads
        (["stages/download.py", "--out", "data/prepared", "--partial", "p"],
         "--out data/prepared: is data/prepared, an output of the DVC stage 'preprocess'"),
        (["stages/download.py", "--out", "r", "--partial", ".git/p"], "--partial .git/p: inside"),
        (["stages/preprocess.py", "--raw", "r", "--out", "data/raw"],
         "--out data/raw: is data/raw, an output of the DVC stage 'download'"),
        (["stages/dataset_ablation.py", "svhn", "--params", "reports/params.yaml", "--work",
          "w", "--out", "o", "--partial", ".git/p"], "--partial .git/p: inside .git/"),
        # the gate's --update, its baseline in the code
        (["stages/regression.py", "--update", "--params", str(baseline_in_src),
          "--train-metrics", "t.json", "--eval-metrics", "e.json", "--out", "g.md"],
         "regression.baseline src/b.json: inside src/"),
    ]
    for cmd, said in cases:
        line = _run(project, *cmd)
        assert said in line and "Nothing was changed" in line, (cmd, line)
    # a file where the evaluation's folder goes: said before it evaluates, not after
    line = _run(project, "stages/eval.py", "--data", data, "--model", "m.pt", "--out",
                "params.yaml/x")
    assert "params.yaml: a file, where the run needs a folder" in line, line


def test_the_results_page_refuses_git_and_a_stages_output(project):
    shutil.copytree(ROOT / "devtools", project / "devtools")
    for out, said in ((".git/results.md", "inside .git/"),
                      ("data/prepared/results.md", "an output of the DVC stage 'preprocess'")):
        line = _run(project, "devtools/results_page.py", "--out", out)
        assert said in line, line


@pytest.mark.e2e
def test_the_timing_tools_refuse_git_for_their_records(project):
    for cmd in (["benchmarks/trial.py", "--steps", "1", "--out", ".git/trial.json"],
                ["benchmarks/devices_timing.py", "--data", "nope", "--out", ".git/timing.json"]):
        line = _run(project, *cmd)
        assert "inside .git/, git's own folder" in line, (cmd, line)


def test_a_queued_experiments_workspace_inside_dvc_is_not_dvcs_folder(project, monkeypatch):
    """`dvc queue start` runs a stage in a workspace inside the repository's .dvc/
    (.dvc/tmp/exps/...): its own outputs there are not DVC's folder; one inside a .dvc/
    below it still is."""
    workspace = project / ".dvc/tmp/exps/run/abc123"
    (workspace / ".dvc").mkdir(parents=True)  # a checkout of the project, as DVC makes it
    shutil.copyfile(project / "dvc.yaml", workspace / "dvc.yaml")
    monkeypatch.chdir(workspace)
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))
    refuse_foreign_place(project / "data/ablations/softmax/queued/x", "--work", "",
                         ("ablation@softmax",))
    with pytest.raises(PipelineError, match=r"inside \.dvc/, DVC's own folder"):
        refuse_foreign_place(Path(".dvc/cache/x"), "--out", "", ())


def test_a_folder_above_several_stages_outputs_is_shared_with_one_pipeline(project):
    """With the main pipeline alone, reports/ holds the gate's table beside the train and
    eval stages' folders: it is no one stage's, and each writes its own part of it."""
    (project / "reports/dvc.yaml").unlink()
    (project / "reports/dvc.lock").unlink()
    refuse_foreign_place(Path("reports/train"), "--live", "", ("train",))
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))
    refuse_foreign_place(Path("reports/notes.md"), "--out")
    with pytest.raises(PipelineError, match=r"lies inside reports/train, the folder of the "
                                            r"outputs of the DVC stage 'train'"):
        refuse_foreign_place(Path("reports/train/x.md"), "--out", "", ("eval",))


def test_a_name_too_long_anywhere_is_one_line(tmp_path, capsys):
    """A path with a name longer than the file system takes, met anywhere a command reads
    (the report's --ablations, publish's --results): one line naming it, no traceback."""
    from cifar10_tutorial.cli import run_stage

    path = tmp_path / ("a" * 300) / "metrics.json"
    with pytest.raises(SystemExit) as stop:
        run_stage(lambda: path.is_file())
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 1 and len(err) == 1, err
    assert err[0].startswith(f"error: {path}: File name too long; a name in the path is "
                             f"longer than the file system takes"), err


def test_a_loop_of_links_or_a_name_not_utf8_is_one_line(tmp_path, capsys):
    """Path.resolve() on a loop of links raises RuntimeError (before Python 3.13); a path
    of bytes that are no UTF-8 cannot be written into a text: each one line."""
    from cifar10_tutorial.cli import run_stage

    (tmp_path / "lp1").symlink_to(tmp_path / "lp2")
    (tmp_path / "lp2").symlink_to(tmp_path / "lp1")

    def loop():  # RuntimeError before Python 3.13, OSError (ELOOP) from it on
        (tmp_path / "lp1" / "x").resolve()

    def not_utf8():
        (tmp_path / "card.md").write_text(f"published in {tmp_path}/\udcff\n", encoding="utf-8")

    for main, said in ((loop, "a loop of symbolic links"), (not_utf8, "that is not UTF-8")):
        with pytest.raises(SystemExit) as stop:
            run_stage(main)
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 1 and len(err) == 1 and said in err[0], err


def test_gits_folder_elsewhere_is_gits(project, tmp_path):
    """A checkout whose .git is a file naming its git folder (`git clone
    --separate-git-dir`, a worktree): that folder, and a worktree's common one, are git's."""
    shutil.rmtree(project / ".git")
    git_dir = tmp_path / "gd" / "worktrees" / "p"
    git_dir.mkdir(parents=True)
    (git_dir / "commondir").write_text("../..\n")
    (project / ".git").write_text(f"gitdir: {git_dir}\n")
    for place in (git_dir / "x", tmp_path / "gd" / "refs" / "heads"):
        with pytest.raises(PipelineError, match=r"inside .*/gd.*, git's own folder.*"
                                                r"Nothing was changed\.$"):
            refuse_foreign_place(place, "--out")
    assert not (tmp_path / "gd" / "refs").exists()
    refuse_foreign_place(tmp_path / "elsewhere", "--out")  # beside it: free


@pytest.mark.parametrize("config, line", [
    ("config", "[cache]\n    dir = ../../dcache\n"),
    ("config.local", "[cache]\n    dir = ../../dcache\n"),
    ("config", "['remote \"store\"']\n    url = {tmp}/dcache\n"),
    ("config", "['remote \"store\"']\n    url = file://{tmp}/dcache\n"),
], ids=["cache", "local-cache", "remote", "remote-url"])
def test_dvcs_cache_and_remotes_elsewhere_are_dvcs(project, tmp_path, config, line):
    """DVC's cache set outside .dvc/ (`dvc cache dir`) and a remote on this machine are
    DVC's folders: no command writes there."""
    (project / ".dvc" / config).write_text(line.format(tmp=tmp_path))
    (tmp_path / "dcache" / "files").mkdir(parents=True)
    with pytest.raises(PipelineError, match=r"inside .*/dcache, (DVC's cache|a DVC remote)"):
        refuse_foreign_place(tmp_path / "dcache" / "files" / "md5", "--out", "", ("report",))
    assert sorted(p.name for p in (tmp_path / "dcache").iterdir()) == ["files"]


@pytest.mark.parametrize("path, own, feeds, said", [
    ("reports/tf_reference", ("report",), (), "is reports/tf_reference, which the DVC stage "
                                              "'report' reads"),
    ("reports/tf_reference/x.json", ("report",), (), "lies inside reports/tf_reference"),
    ("reports/baseline/plots", ("report",), (), "lies inside reports/baseline, which the DVC "
                                                "stage 'regression' reads"),
    ("reports/baseline/ci.json", (), (("report", "--tf-reference"),),
     "lies inside reports/baseline"),
    ("reports/tf_reference/timing.json", (), (("report", "--devices-timing"),),
     "lies inside reports/tf_reference"),
], ids=["report-into-tf-reference", "inside-it", "report-into-baselines",
        "another-stages-inputs", "another-input-of-the-stage-fed"])
def test_what_a_stage_reads_kept_in_git_is_no_place(project, path, own, feeds, said):
    """A folder a stage reads that no stage makes (kept in git) written into: DVC would find
    the stage changed. Refused, but for a command writing that stage's inputs."""
    with pytest.raises(PipelineError, match=re.escape(said) + r".*Nothing was changed\.$"):
        refuse_foreign_place(Path(path), "--out", "", own, feeds=feeds)
    refuse_foreign_place(Path("reports/baseline/new.json"), "regression.baseline",
                         feeds=(("regression", None),))
    refuse_foreign_place(Path("reports/devices_timing.json"), "--out",
                         feeds=(("report", "--devices-timing"),))


def test_another_checkouts_stages_are_never_the_commands_own(project, tmp_path):
    """From one checkout, the report stage's outputs of another are not its own: refused."""
    other = copy_project(tmp_path / "w")
    (other / ".dvc").mkdir()
    with pytest.raises(PipelineError, match=r"is .*/w/reports/report.md, an output of the DVC "
                                            r"stage 'report'"):
        refuse_foreign_place(other / "reports" / "report.md", "--out", "", ("report",))
    refuse_foreign_place(Path("reports/report.md"), "--out", "", ("report",))  # its own


@pytest.mark.parametrize("place", ["report.md", "models/mine", "notes/report.md"])
def test_a_place_anywhere_in_another_checkout_is_refused(project, tmp_path, monkeypatch,
                                                         place):
    """Run from one checkout, a command writes nothing into another (its root, a new
    folder of its models/: the other checkout's own commands make those from its own
    results). Run from outside any checkout, the command runs for the checkout whose code
    runs (a stage script given by its path): another is refused all the same; only an
    installed package's code, in no checkout, names none of its own."""
    other = copy_project(tmp_path / "w")
    (other / ".dvc").mkdir()
    before = _everything(other)
    with pytest.raises(PipelineError, match=rf"^--out {re.escape(str(other / place))}: inside "
                                            rf"{re.escape(str(other))}, another checkout than "
                                            rf"the one this runs in \({re.escape(str(project))}\)"
                                            rf"; run it from there"):
        refuse_foreign_place(other / place, "--out")
    assert _everything(other) == before
    refuse_foreign_place(Path(place), "--out")  # its own checkout's
    (tmp_path / "free").mkdir()
    monkeypatch.chdir(tmp_path / "free")
    code = repository_at(Path(ownership.__file__).resolve().parent)
    with pytest.raises(PipelineError, match=rf"^--out {re.escape(str(other / place))}: inside "
                                            rf"{re.escape(str(other))}, another checkout than "
                                            rf"the one whose code runs \({re.escape(str(code))}\)"
                                            rf"; run it from there"):
        refuse_foreign_place(other / place, "--out")
    assert _everything(other) == before
    refuse_foreign_place(code / "scratch" / "mine", "--out")  # the code's own checkout
    (tmp_path / "site-packages").mkdir()
    monkeypatch.setattr(ownership, "__file__", str(tmp_path / "site-packages" / "ownership.py"))
    refuse_foreign_place(other / "models/mine", "--out")  # an installed package's: none


@pytest.mark.parametrize("through, own", [
    ("reports", ("report",)),  # cifar10 report --out link: the other's report
    ("reports/ablations/baseline", ()),  # publish or eval --out inside the other's variant
], ids=["report", "variant"])
def test_a_link_into_another_checkout_is_judged_where_it_leads(project, tmp_path, through,
                                                                own):
    """A link inside this checkout to a folder of another: the path as typed lies in this
    checkout, the place it leads to in the other, whose stages' outputs are not this
    command's own; refused as the same place by its real path is."""
    other = copy_project(tmp_path / "w")
    (other / ".dvc").mkdir()
    (other / through).mkdir(parents=True, exist_ok=True)
    (project / "link").symlink_to(other / through)
    for path in (Path("link"), Path("link/eval"), other / through):
        with pytest.raises(PipelineError, match=r"/w/reports/.*an output of the DVC stage"):
            refuse_foreign_place(path, "--out", "", own)
    (project / "mine").mkdir()
    (project / "link2").symlink_to(project / "mine")  # a link within this checkout
    refuse_foreign_place(Path("link2/out"), "--out", "", own)


def test_eval_watch_writes_beside_the_train_stages_model_not_into_its_outputs(project):
    """`eval --watch` belongs in the train stage's folder (beside data/train/model.pt), never
    in the train stage's outputs (its curves, reports/train/plots)."""
    with pytest.raises(PipelineError, match=r"lies inside reports/train/plots, an output of "
                                            r"the DVC stage 'train'"):
        refuse_foreign_place(Path("reports/train/plots/tensorboard/eval"), "--watch --model",
                             "", ("train",), own_outputs=False)
    refuse_foreign_place(Path("data/train/tensorboard/eval"), "--watch --model", "", ("train",),
                         own_outputs=False)


def test_a_file_named_published_json_that_publish_did_not_write_stops_nothing(tmp_path,
                                                                              monkeypatch):
    """A home or web folder above the checkout holding a published.json of its own is no
    folder of published weights: the project's stages run."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home/published.json").write_text('{"site": "my blog", "posts": []}')
    project = copy_project(tmp_path / "home" / "p")
    (project / ".dvc").mkdir()
    monkeypatch.chdir(project)
    refuse_foreign_place(Path("reports/report.md"), "--out", "", ("report",))
    (tmp_path / "home/published.json").write_text('{"files": {"model.pt": "0"}}')
    with pytest.raises(PipelineError, match=r"a folder of published weights"):
        refuse_foreign_place(Path("reports/report.md"), "--out", "", ("report",))


def test_a_project_in_a_subfolder_of_a_dvc_repository_is_the_project(tmp_path, monkeypatch):
    """A monorepo: git and DVC at its root, the project (dvc.yaml, no .dvc/ of its own) in
    a subfolder. Run from the root with the project's paths, the project is guarded."""
    from cifar10_tutorial.ownership import repository_root

    mono = tmp_path / "mono"
    (mono / ".dvc").mkdir(parents=True)
    (mono / ".git").mkdir()
    project = copy_project(mono / "proj")
    (project / "reports/dvc.lock").write_text(LOCK)
    monkeypatch.chdir(mono)
    assert repository_root(Path("proj/reports/x")) == project.resolve()
    for path, own, said in (("proj/src/evx", ("eval",), r"inside src/, the project's code"),
                            ("proj/reports/ablations/baseline/eval", ("eval",),
                             r"an output of the DVC stage 'ablation@baseline'")):
        with pytest.raises(PipelineError, match=said):
            refuse_foreign_place(Path(path), "--out", "", own)
    monkeypatch.chdir(project)
    assert repository_root() == project.resolve()
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))


@pytest.mark.parametrize("path, own", [
    ("data/trials/softmax", ("train",)),  # a trial's model, its checkpoints gone
    ("data/ablations/softmax", ("report",)),
    ("data/ablations/softmax/card", ()),  # publish --out
    ("data/ablations", ("report",)),  # holds every variant's run
    ("data/.downloads", ("preprocess",)),
], ids=["train-into-a-trial", "report-into-a-run", "publish-into-a-run", "above-the-runs",
        "partial-downloads"])
def test_a_folder_a_stage_command_writes_outside_dvc_is_that_stages(project, path, own):
    """A variant's run folder (its command's --work, --trial-work: model and checkpoints,
    no DVC output, the model's only copy) is the variant's: another command's files there
    block its next run, or replace its model, even with its checkpoints/ gone."""
    (project / "data/trials/softmax").mkdir(parents=True)
    (project / "data/trials/softmax/model.pt").write_bytes(b"a variant's model")
    before = _everything(project)
    with pytest.raises(PipelineError, match=r"a folder the DVC stage '(ablation|dataset_"
                                            r"ablation|download)' writes outside DVC( for a "
                                            r"variant named softmax)? \(its command's --"
                                            r".*Nothing was changed\.$"):
        refuse_foreign_place(Path(path), "--out", "", own)
    assert _everything(project) == before


def test_a_variants_run_folders_are_its_own(project):
    """The variant's own stage (either group's, for the shared trial folder) writes in its
    run folders; the partial downloads are the download's and every data-set variant's."""
    refuse_foreign_place(Path("data/ablations/softmax"), "--work", "", ("ablation@softmax",))
    refuse_foreign_place(Path("data/trials/softmax"), "--trial-work", "", ("ablation@softmax",))
    refuse_foreign_place(Path("data/trials/svhn"), "--trial-work", "",
                         ("dataset_ablation@svhn",))
    refuse_foreign_place(Path("data/.downloads"), "--partial", "", ("download",))
    refuse_foreign_place(Path("data/.downloads"), "--partial", "", ("dataset_ablation@svhn",))
    with pytest.raises(PipelineError, match=r"is data/ablations/baseline, a folder the DVC "
                                            r"stage 'ablation' writes outside DVC for a variant "
                                            r"named baseline"):
        refuse_foreign_place(Path("data/ablations/baseline"), "--work", "",
                             ("ablation@softmax",))


@pytest.mark.parametrize("config, line", [
    ("config.local", "['remote \"r\"']\n    url = {tmp}/dcache  # my backup\n"),
    ("config", "[cache]\n    dir = {tmp}/dcache # a comment\n"),
    ("config", "[core]\n    site_cache_dir = {tmp}/dcache\n"),
], ids=["remote-with-a-comment", "cache-with-a-comment", "site-cache"])
def test_dvcs_folders_are_read_as_dvc_reads_its_config(project, tmp_path, config, line):
    """DVC's config read as DVC reads it (an inline comment is no part of a value), its
    site cache (indexes of every repository) included."""
    (project / ".dvc" / config).write_text(line.format(tmp=tmp_path))
    (tmp_path / "dcache").mkdir()
    with pytest.raises(PipelineError, match=r"inside .*/dcache, (DVC's cache|a DVC remote|"
                                            r"DVC's site cache)"):
        refuse_foreign_place(tmp_path / "dcache" / "x", "--out", "", ("report",))
    assert list((tmp_path / "dcache").iterdir()) == []


def test_the_system_config_is_where_dvc_finds_it(project, tmp_path, monkeypatch):
    """DVC's system config lies in the first folder of XDG_CONFIG_DIRS: its remote is
    DVC's too."""
    (tmp_path / "sys/dvc").mkdir(parents=True)
    (tmp_path / "sys/dvc/config").write_text(f"['remote \"s\"']\n    url = {tmp_path}/sysr\n")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "sys"))
    with pytest.raises(PipelineError, match=r"inside .*/sysr, a DVC remote"):
        refuse_foreign_place(tmp_path / "sysr" / "x", "--out", "", ("report",))


@pytest.mark.parametrize("kind", ["bare", "separate-git-dir"])
def test_another_repositorys_git_folder_is_known_by_what_it_holds(project, tmp_path, kind):
    """A git folder not named .git and not this checkout's (a bare repository, another
    clone's --separate-git-dir): its HEAD, objects/ and refs/ say what it is."""
    git = tmp_path / ("other.git" if kind == "bare" else "elsewhere/gitdir")
    for folder in ("objects", "refs/heads", "hooks"):
        (git / folder).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    for path in (git / "hooks", git / "refs/heads", git / "refs/heads/x/report.md"):
        with pytest.raises(PipelineError, match=r"inside .*, a git repository's own folder"):
            refuse_foreign_place(path, "--out", "", ("report",))
    assert sorted(p.name for p in (git / "refs/heads").iterdir()) == []


def test_a_command_run_from_outside_any_repository_owns_only_its_codes_project(
        project, tmp_path, monkeypatch):
    """Run from no repository, a stage script's own stages are those of the checkout its
    code is in: another checkout's report outputs are refused."""
    other = copy_project(tmp_path / "w")
    (other / ".dvc").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(ownership, "__file__", str(project / "src/cifar10_tutorial/x.py"))
    with pytest.raises(PipelineError, match=r"an output of the DVC stage 'report'"):
        refuse_foreign_place(other / "reports/report.md", "--out", "", ("report",))
    refuse_foreign_place(project / "reports/report.md", "--out", "", ("report",))


def test_a_monorepo_with_another_pipeline_between_finds_the_project(tmp_path, monkeypatch):
    """DVC at the monorepo's root, another project's dvc.yaml in a folder between it and
    this project: the project (the folder with both pipelines) is the one guarded."""
    from cifar10_tutorial.ownership import repository_root

    mono = tmp_path / "mono"
    (mono / ".dvc").mkdir(parents=True)
    (mono / ".git").mkdir()
    (mono / "group").mkdir()
    (mono / "group/dvc.yaml").write_text("stages:\n  hello:\n    cmd: echo hi > h.txt\n"
                                         "    outs:\n      - h.txt\n")
    project = copy_project(mono / "group/proj")
    (project / "reports/dvc.lock").write_text(LOCK)
    monkeypatch.chdir(project)
    assert repository_root() == project.resolve()
    for path, said in (("src/evil", r"inside src/, the project's code"),
                       ("data/prepared", r"an output of the DVC stage 'preprocess'"),
                       ("reports/tf_reference", r"which the DVC stage 'report' reads")):
        with pytest.raises(PipelineError, match=said):
            refuse_foreign_place(Path(path), "--out", "", ("report",))


def test_a_published_json_of_other_files_above_the_checkout_stops_nothing(tmp_path,
                                                                         monkeypatch):
    """Only a manifest naming publish's own files (model.pt among them) marks published
    weights: a website's published.json with a files map above the checkout is none."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home/published.json").write_text('{"files": {"index.html": "abc"}}')
    project = copy_project(tmp_path / "home" / "p")
    (project / ".dvc").mkdir()
    monkeypatch.chdir(project)
    refuse_foreign_place(Path("reports/report.md"), "--out", "", ("report",))


@pytest.mark.parametrize("args, said", [
    (["--watch", "--max-evals", "1", "--model", "reports/train/model.pt"],
     "lies inside reports/train, the folder of the outputs of the DVC stage 'train'"),
    (["--model", "other/model.pt"], "an output of the DVC stage 'eval'"),
], ids=["watch-into-the-train-stages-curves", "another-models-figures-as-the-stages"])
def test_eval_writes_into_a_stages_folder_only_for_that_stages_model(project, tmp_path,
                                                                    args, said):
    """`eval --watch` writes beside a stage's own model (data/train/model.pt, a variant's
    run folder), never into the train stage's --live folder; `eval --model other` writes
    the eval stage's outputs only for the model the stage evaluates."""
    line = _run(project, "stages/eval.py", "--data", str(tmp_path / "none"), *args)
    assert said in line and "Nothing was changed" in line, line
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))  # the stage's own
    assert not (project / "reports/train").exists() and not (project / "reports/eval").exists()


@pytest.mark.parametrize("out", ["/", "~"])
def test_the_file_systems_root_or_the_home_folder_is_no_place(project, out):
    """`--out /` or `--out ~` would put a command's files (and its lock, in the folder
    above) among the system's or the user's own."""
    with pytest.raises(PipelineError, match=r"(the file system.s root|your home folder) itself"):
        refuse_foreign_place(Path(out).expanduser(), "--out", "", ("report",))


def test_a_tree_of_the_exercise_pipeline_alone_is_its_own_project(tmp_path, monkeypatch):
    """The code and reports/dvc.yaml alone (a check's scratch tree: no dvc.yaml at its
    root), with the .dvc/ DVCLive makes there at a run's first step: the tree is the
    project, and a variant's stage writes its own results in it, before and after."""
    from cifar10_tutorial.ownership import repository_root

    tree = tmp_path / "ours"
    for part in ("src", "stages", "reports/dvc.yaml", "reports/params.yaml"):
        src = ROOT / part
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(src, tree / part)
    monkeypatch.chdir(tree)
    monkeypatch.setattr(ownership, "__file__", str(tree / "src/cifar10_tutorial/ownership.py"))
    for made in (False, True):
        if made:
            (tree / ".dvc/tmp/exps/run").mkdir(parents=True)
        assert repository_root(Path("reports/ablations/baseline")) == tree.resolve()
        refuse_foreign_place(Path("reports/ablations/baseline"), "--out", "",
                             ("ablation@baseline",))
        # no lock here: the stage is named by its template, with the variant
        with pytest.raises(PipelineError, match=r"the DVC stage 'ablation' \(for a variant "
                                                r"named baseline\)"):
            refuse_foreign_place(Path("reports/ablations/baseline"), "--out", "",
                                 ("ablation@softmax",))


def test_a_stage_commands_folders_count_inside_the_repository_only(project):
    """A user's stage naming `--tmpdir /tmp` (outside the repository) makes no place of
    the project its own; its `--logs logs/mine` inside is its own folder."""
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    pipeline["stages"]["mine"] = {"cmd": "python mine.py --tmpdir /tmp --logs=logs/mine "
                                         f"--scratch {project.parent}"}
    (project / "dvc.yaml").write_text(yaml.safe_dump(pipeline))
    refuse_foreign_place(Path("data/train"), "--out", "", ("train",))
    refuse_foreign_place(Path("reports/eval"), "--out", "", ("eval",))
    with pytest.raises(PipelineError, match=r"lies inside logs/mine, a folder the DVC stage "
                                            r"'mine' writes outside DVC \(its command's --logs\)"):
        refuse_foreign_place(Path("logs/mine/x"), "--out", "", ("report",))
    with pytest.raises(PipelineError, match=r"holds data/ablations/NAME, a folder the DVC "
                                            r"stage 'ablation' writes outside DVC \(its "
                                            r"command's --work, for each variant\)"):
        refuse_foreign_place(Path("data/ablations"), "--out", "", ("report",))


def test_a_monorepos_pipeline_between_guards_its_outputs_in_the_project(tmp_path,
                                                                      monkeypatch):
    """Another pipeline between DVC's root and the project naming an output inside the
    project (DVC reads every dvc.yaml of the repository): refused there."""
    mono = tmp_path / "mono"
    (mono / ".dvc").mkdir(parents=True)
    (mono / ".git").mkdir()
    (mono / "group").mkdir()
    (mono / "group/dvc.yaml").write_text(yaml.safe_dump({"stages": {"outer": {
        "cmd": "echo hi > proj/data/outer_out", "outs": ["proj/data/outer_out"]}}}))
    project = copy_project(mono / "group/proj")
    monkeypatch.chdir(project)
    with pytest.raises(PipelineError, match=r"an output of the DVC stage 'outer'"):
        refuse_foreign_place(Path("data/outer_out"), "--out", "", ("eval",))


def test_an_experiments_workspace_writes_the_projects_run_folders_not_its_outputs(project,
                                                                               monkeypatch):
    """From a queued experiment's workspace (.dvc/tmp/exps/...), the project's run folders
    (queued checkpoints) are its stage's; the project's outputs are not (its own are in
    the workspace)."""
    workspace = project / ".dvc/tmp/exps/run/w1"
    (workspace / ".dvc").mkdir(parents=True)
    shutil.copyfile(project / "dvc.yaml", workspace / "dvc.yaml")
    monkeypatch.chdir(workspace)
    refuse_foreign_place(project / "data/ablations/softmax/queued/x", "--work", "",
                         ("ablation@softmax",))
    with pytest.raises(PipelineError, match=r"an output of the DVC stage 'eval'"):
        refuse_foreign_place(project / "reports/eval", "--out", "", ("eval",))


def test_a_folder_with_a_head_file_that_names_no_commit_is_no_git_folder(project, tmp_path):
    """HEAD, objects/ and refs/ in a user's folder, the HEAD naming no branch or commit:
    git itself takes it for no repository, nor does the guard."""
    mine = tmp_path / "notes"
    for folder in ("objects", "refs"):
        (mine / folder).mkdir(parents=True)
    (mine / "HEAD").write_text("x\n")
    refuse_foreign_place(mine / "out", "--out", "", ("report",))
    (mine / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")
    with pytest.raises(PipelineError, match=r"a git repository's own folder"):
        refuse_foreign_place(mine / "out", "--out", "", ("report",))


def test_a_repository_config_dvc_cannot_read_keeps_the_users_and_the_site_cache(
        project, tmp_path, monkeypatch):
    """A broken .dvc/config (every dvc command there says so) drops none of the other
    levels, nor DVC's site cache."""
    from dvc.dirs import site_cache_dir

    (project / ".dvc/config").write_text("[core\nbroken = \n")
    home = tmp_path / "xdg"
    (home / "dvc").mkdir(parents=True)
    (home / "dvc/config").write_text(f"['remote \"u\"']\n    url = {tmp_path}/userr\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    with pytest.raises(PipelineError, match=r"inside .*/userr, a DVC remote"):
        refuse_foreign_place(tmp_path / "userr" / "x", "--out", "", ("report",))
    with pytest.raises(PipelineError, match=r"DVC's site cache"):
        refuse_foreign_place(Path(site_cache_dir(None)) / "repo" / "x", "--out", "",
                             ("report",))


@pytest.mark.parametrize("path, said", [
    ("runs/dvc.lock", "DVC's lock file"), ("runs/dvc.yaml", "DVC's pipeline file"),
    ("runs/model.pt.dvc", "a DVC-tracked file's record"), ("runs/.gitignore", "git's ignore file"),
    # a folder so named, made on the way: it stands where git or DVC reads a file
    (".gitattributes/x", "inside a folder .gitattributes, named as git's attributes file"),
    ("runs/dvc.yaml/out", "inside a folder dvc.yaml, named as DVC's pipeline file"),
])
def test_a_place_named_as_a_file_git_or_dvc_reads_is_refused(tmp_path, path, said):
    """Any command's results under a name git or DVC reads wherever it lies (dvc.yaml,
    dvc.lock, NAME.dvc, .gitignore ...) would break their commands: one line, even where
    no such file is there yet; other names pass."""
    said = said if said.startswith("inside") else f"named as {said}"
    with pytest.raises(PipelineError, match=rf"--out .*{re.escape(path)}: {said}, "
                                            rf"which git or DVC reads.*Nothing was changed\.$"):
        refuse_foreign_place(tmp_path / path, "--out")
    refuse_foreign_place(tmp_path / "runs" / "dvc-notes.md", "--out")
    assert not (tmp_path / "runs").exists() and not (tmp_path / ".gitattributes").exists()
