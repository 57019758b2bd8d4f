"""Results read by hand (the report, the results page, a model card) are judged by what
DVC recorded (`dvc status`): a variant whose params changed, or whose results were edited,
since its stage ran stops the command; a `dvc status` that fails stops it too. A real DVC
project with a foreach stage of the report pipeline's shape."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.report.results import refuse_stale_results

DVC = str(Path(sys.executable).with_name("dvc"))
PIPELINE = {"stages": {"ablation": {
    "foreach": "${ablations}", "do": {
        "cmd": "mkdir -p ablations/${key} && echo '{\"seed\": ${item.seed}}' > "
               "ablations/${key}/metrics.json",
        "params": ["ablations.${key}"],
        "outs": [{"ablations/${key}/metrics.json": {"cache": False}}]}}}}


def _run(cwd: Path, *cmd: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def project(tmp_path, monkeypatch):
    if not Path(DVC).is_file() and shutil.which("dvc") is None:
        pytest.skip("dvc is not installed beside this Python")
    dvc = DVC if Path(DVC).is_file() else "dvc"
    project = tmp_path / "p"
    (project / "reports").mkdir(parents=True)
    (project / "dvc.yaml").write_text("stages: {}\n")
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(PIPELINE))
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 1}, "b": {"seed": 2}}}))
    _run(project, "git", "init", "-q")
    _run(project, dvc, "init", "-q")
    _run(project, dvc, "repro", "-q", "reports/dvc.yaml")
    monkeypatch.chdir(project)
    return project


def test_results_dvc_calls_changed_are_refused(project):
    results = Path("reports/ablations")
    refuse_stale_results(results)  # as DVC recorded them
    params = project / "reports/params.yaml"
    params.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    with pytest.raises(PipelineError, match=r"^reports/ablations: the results of a are not of "
                                            r"their definition as it is now \(`dvc status --with-deps "
                                            r"reports/dvc.yaml`: a: reports/params.yaml "
                                            r"ablations.a modified"):
        refuse_stale_results(results)
    refuse_stale_results(results, only="b")  # a model card of b: b is as recorded
    # an edited result (the stage's output changed since DVC recorded it)
    params.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}, "b": {"seed": 2}}}))
    (project / "reports/ablations/b/metrics.json").write_text('{"seed": 9}\n')
    with pytest.raises(PipelineError, match=r"the results of b are not .*: b: "
                                            r"reports/ablations/b/metrics.json modified"):
        refuse_stale_results(results, only="b")


def test_a_changed_stage_command_is_stale(project):
    """DVC calls every variant changed when the stage's command changed (a thread variable
    added, an option dropped): their results are not of the command as it is now."""
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    pipeline["stages"]["ablation"]["do"]["cmd"] = "OMP_NUM_THREADS=1 " + \
        pipeline["stages"]["ablation"]["do"]["cmd"]
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    with pytest.raises(PipelineError, match=r"the results of a, b are not .*: a: its stage's "
                                            r"command changed"):
        refuse_stale_results(Path("reports/ablations"))


def test_from_a_subfolder_the_repository_above_is_asked(project, monkeypatch):
    """Run from reports/ (its paths relative to there), the check asks the repository the
    folder is in, not a reports/dvc.yaml below it that is not there."""
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    monkeypatch.chdir(project / "reports")
    with pytest.raises(PipelineError, match=r"^ablations: the results of a are not"):
        refuse_stale_results(Path("ablations"))


def test_a_dvc_status_that_fails_stops_the_command(project):
    (project / "reports/dvc.lock").write_text("stages: [not, a, lock\n")
    with pytest.raises(PipelineError, match=r"^`dvc status --with-deps reports/dvc.yaml` failed \(exit "
                                            r"\d+: .*\): whether the results in "
                                            r"reports/ablations are of their definitions"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_failing_status_is_named_by_dvc_s_error_line(project):
    """DVC prints its error line, then what and where (a YAML line number, the key it
    rejects), then the file's lines: the line names the error first, then what and where,
    not the file's lines."""
    (project / "reports/dvc.lock").write_text("stages:\n  a: [1,\n")
    with pytest.raises(PipelineError) as caught:
        refuse_stale_results(Path("reports/ablations"))
    assert re.search(r"\(exit 1: './reports/dvc.lock' is invalid. While \w+ .*, in line \d+, "
                     r"column \d+\)", str(caught.value)), caught.value
    assert "│" not in str(caught.value)
    (project / "reports/dvc.lock").write_text("schema: '2.0'\nbogus: 1\nstages: {}\n")
    with pytest.raises(PipelineError) as caught:
        refuse_stale_results(Path("reports/ablations"))
    assert ("(exit 1: './reports/dvc.lock' validation failed. extra keys not allowed, in "
            "bogus)") in str(caught.value), caught.value


def test_results_a_stage_never_recorded_made_are_refused_naming_the_fix(project):
    """A variant run by hand (its stage absent from the lock): DVC calls each of its deps
    "modified", which says nothing either way; its results are refused naming how to
    record them, not called stale. Recorded (`dvc commit -f`), it is judged as the others."""
    params = project / "reports/params.yaml"
    params.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}, "b": {"seed": 2},
                                                    "c": {"seed": 3}}}))
    refuse_stale_results(Path("reports/ablations"))  # c has no results yet
    (project / "reports/ablations/c").mkdir()
    (project / "reports/ablations/c/metrics.json").write_text('{"seed": 3}\n')
    for only in (None, "c"):
        with pytest.raises(PipelineError, match=r"^reports/ablations: the results of c were "
                                                r"never recorded by DVC \(reports/dvc.lock has "
                                                r"no ablation@c\).*`dvc commit -f "
                                                r"reports/dvc.yaml:ablation@c`"):
            refuse_stale_results(Path("reports/ablations"), only=only)
    refuse_stale_results(Path("reports/ablations"), only="a")
    _run(project, DVC if Path(DVC).is_file() else "dvc", "commit", "-f", "-q",
         "reports/dvc.yaml:ablation@c")
    refuse_stale_results(Path("reports/ablations"))
    params.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 4}, "b": {"seed": 2},
                                                    "c": {"seed": 6}}}))
    with pytest.raises(PipelineError, match=r"the results of a, c are not "):
        refuse_stale_results(Path("reports/ablations"))


@pytest.mark.parametrize("lock", [None, "schema: '2.0'\nstages: {}\n"], ids=["no-lock", "an-empty-lock"])
def test_results_with_no_lock_are_not_vouched_for(project, lock):
    """A lock deleted, or one that lost the variants (a merge): their results are no
    longer known to be of anything; the variant's params changed meanwhile is no result
    reported as current."""
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    path = project / "reports/dvc.lock"
    path.unlink()
    if lock is not None:
        path.write_text(lock)
    said = (r"reports/dvc.lock is missing.*restore it \(`git checkout -- reports/dvc.lock`\)"
            if lock is None else r"the results of a, b were never recorded by DVC")
    with pytest.raises(PipelineError, match=said) as raised:
        refuse_stale_results(Path("reports/ablations"))
    # with no lock, recording the results as they are (`dvc commit -f`) is no advice
    assert (lock is None) == ("dvc commit" not in str(raised.value))


def test_a_recorded_result_deleted_is_refused(project):
    """The variants' results are kept in git, so a clone has them: one DVC recorded and
    now missing, beside the others read, is no variant's results as made."""
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    do = pipeline["stages"]["ablation"]["do"]
    do["cmd"] += " && echo 1 > ablations/${key}/eval.json"
    do["outs"].append({"ablations/${key}/eval.json": {"cache": False}})
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    _run(project, DVC if Path(DVC).is_file() else "dvc", "repro", "-q", "reports/dvc.yaml")
    refuse_stale_results(Path("reports/ablations"))
    (project / "reports/ablations/b/eval.json").unlink()
    with pytest.raises(PipelineError, match=r"the results of b are not .*: b: "
                                            r"reports/ablations/b/eval.json deleted"):
        refuse_stale_results(Path("reports/ablations"))
    # its metrics.json deleted, the rest there: no variant "not run", its results damaged
    _run(project, DVC if Path(DVC).is_file() else "dvc", "repro", "-q", "reports/dvc.yaml")
    (project / "reports/ablations/b/metrics.json").unlink()
    with pytest.raises(PipelineError, match=r"the results of b are not .*: b: "
                                            r"reports/ablations/b/metrics.json deleted"):
        refuse_stale_results(Path("reports/ablations"))
    shutil.rmtree(project / "reports/ablations/b")  # all of them: still no "not run"
    with pytest.raises(PipelineError, match=r"the results of b are not .*: b: "
                                            r"reports/ablations/b/.* deleted"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_code_dep_deleted_is_a_change_data_not_pulled_is_not(project):
    """A dep DVC calls deleted: a file of code (kept in git) deleted is changed code; data
    a stage outputs (a clone has not pulled it) says nothing of the results."""
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    pipeline["stages"]["ablation"]["do"]["deps"] = ["code.py", "../data/prepared"]
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    (project / "reports/code.py").write_text("print(1)\n")
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"preprocess": {
        "cmd": "mkdir -p data/prepared && echo x > data/prepared/x.npy",
        "outs": ["data/prepared"]}}}))
    _run(project, DVC if Path(DVC).is_file() else "dvc", "repro", "-q", "-f", "reports/dvc.yaml")
    refuse_stale_results(Path("reports/ablations"))
    shutil.rmtree(project / "data/prepared")  # not pulled
    refuse_stale_results(Path("reports/ablations"))
    (project / "reports/code.py").unlink()
    with pytest.raises(PipelineError, match=r"the results of a, b are not .*: a: "
                                            r"reports/code.py deleted"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_variant_no_longer_defined_is_not_published(project):
    """A variant taken out of reports/params.yaml, its results left: DVC has no stage to
    ask, so its results are of nothing defined; a card of it is refused."""
    (project / "reports/params.yaml").write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}}}))
    refuse_stale_results(Path("reports/ablations"), only="a")
    with pytest.raises(PipelineError, match=r"^reports/ablations: b is no variant of "
                                            r".*reports/params.yaml now"):
        refuse_stale_results(Path("reports/ablations"), only="b")


def test_results_read_from_outside_the_repository_are_judged_by_it(project, tmp_path,
                                                                   monkeypatch):
    """The report run from a folder outside the project (absolute paths): the repository
    is the one the results lie in, not the working folder's (none)."""
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(PipelineError, match=r"the results of a are not"):
        refuse_stale_results(project / "reports/ablations")
    # a link to the results folder is the folder
    (elsewhere / "link").symlink_to(project / "reports/ablations")
    with pytest.raises(PipelineError, match=r"the results of a are not"):
        refuse_stale_results(elsewhere / "link")
    # ... and so is the project's folder that is a link to another disk
    shutil.move(project / "reports/ablations", tmp_path / "big")
    (project / "reports/ablations").symlink_to(tmp_path / "big")
    with pytest.raises(PipelineError, match=r"the results of a are not"):
        refuse_stale_results(project / "reports/ablations")


def test_a_link_to_another_checkouts_results_is_judged_there(project, tmp_path):
    """A link inside one checkout to another's results: the results are judged by the
    repository they lie in (stale there), not by the clean one the link is in."""
    other = tmp_path / "q"
    shutil.copytree(project, other, symlinks=True)
    (other / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    (project / "qlink").symlink_to(other / "reports/ablations")
    refuse_stale_results(Path("reports/ablations"))  # this checkout's own: clean
    with pytest.raises(PipelineError, match=r"^qlink: the results of a are not"):
        refuse_stale_results(Path("qlink"))


def test_a_folder_beside_the_variants_is_not_walked(project, tmp_path):
    """A link among the results to a tree of other files (old results on another disk),
    no variant's: not looked through, a broken link deep in it refuses nothing."""
    (tmp_path / "old/deep").mkdir(parents=True)
    (tmp_path / "old/deep/gone").symlink_to(tmp_path / "nowhere")
    (project / "reports/ablations/zz_old").symlink_to(tmp_path / "old")
    refuse_stale_results(Path("reports/ablations"))


def test_a_copy_without_git_is_told_how_dvc_can_judge(project):
    """A source archive (no .git/, .dvc/ tracked) : DVC's status needs git, and the line
    says how to give it one."""
    shutil.rmtree(project / ".git")
    with pytest.raises(PipelineError, match=r"not a git repository.*`git init` \(or `dvc "
                                            r"config --local core.no_scm true`"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_folder_that_is_no_dvc_repository_is_not_judged(project):
    """No .dvc/ and no lock: nothing was recorded. No .dvc/ beside a lock (removed to reset
    DVC, or lost in a copy): the record is there but DVC cannot read it; refused."""
    shutil.rmtree(project / ".dvc")
    (project / "reports/params.yaml").write_text(yaml.safe_dump({"ablations": {"a": {"seed": 7}}}))
    with pytest.raises(PipelineError, match=r"reports/dvc.lock records the variants, but \.dvc/ "
                                            r"is gone.*`git checkout -- \.dvc`, or `dvc init`"):
        refuse_stale_results(Path("reports/ablations"))
    (project / "reports/dvc.lock").unlink()
    assert "no DVC repository records them" in refuse_stale_results(Path("reports/ablations"))


def test_a_fifo_among_the_results_is_one_line_not_a_hang(project):
    """DVC hashes every result to compare it: a FIFO would hold `dvc status` for ever."""
    os.mkfifo(project / "reports/ablations/b/notes.json")
    with pytest.raises(PipelineError, match=r"ablations/b/notes.json: expected a result file, "
                                            r"found a FIFO"):
        refuse_stale_results(Path("reports/ablations"))
    (project / "reports/ablations/b/notes.json").unlink()
    (project / "reports/ablations/b/metrics.json").unlink()  # the results file itself
    os.mkfifo(project / "reports/ablations/b/metrics.json")
    with pytest.raises(PipelineError, match=r"ablations/b/metrics.json: expected a result file, "
                                            r"found a FIFO"):
        refuse_stale_results(Path("reports/ablations"))


@pytest.mark.parametrize("where, dvc_stage", [(".", None), ("reports", None),
                                               (".", "reports/dvc.yaml:report")],
                         ids=["by-hand", "from-reports", "as-dvc-runs-it"])
def test_the_report_stage_refuses_stale_results(project, where, dvc_stage):
    """stages/report.py asks DVC before reading: by hand, from a subfolder, and as `dvc
    repro --single-item reports/dvc.yaml:report` runs it (without the variants before)."""
    root = Path(__file__).resolve().parents[1]
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}
    if dvc_stage:
        env["DVC_STAGE"] = dvc_stage
    up = "" if where == "." else "../"
    for record in ("x.md", "x.json"):  # the records it reads are there: the results are not
        (project / where / record).write_text("# notes\n" if record.endswith(".md") else "[]")
    proc = subprocess.run([sys.executable, str(root / "stages/report.py"), "--params",
                           f"{up}reports/params.yaml", "--ablations", f"{up}reports/ablations",
                           "--search", "x.md", "--equivalence", "x.json", "--out", f"{up}reports"],
                          cwd=project / where, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{up}reports/ablations: the results of a are not of their definition" \
        in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (project / "reports/report.md").exists()


def test_the_results_page_refuses_a_report_older_than_its_results(project):
    """The results page quotes the report's tables: a variant rerun since the report (the
    report not) stops it in one line, as DVC says the report stage changed."""
    from results_page import _refuse_stale_report

    dvc = DVC if Path(DVC).is_file() else "dvc"
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    pipeline["stages"]["report"] = {"cmd": "cat ablations/*/metrics.json > report.md",
                                    "deps": ["ablations"],
                                    "outs": [{"report.md": {"cache": False}}]}
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    _run(project, dvc, "repro", "-q", "reports/dvc.yaml")
    _refuse_stale_report()
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    _run(project, dvc, "repro", "-q", "--single-item", "reports/dvc.yaml:ablation@a")
    refuse_stale_results(Path("reports/ablations"))  # the variants are as recorded ...
    with pytest.raises(PipelineError, match=r"^reports/report.md and its tables are not "
                                            r"recorded by DVC as made from the results as they "
                                            r"are now \(`dvc status reports/dvc.yaml:report`: "
                                            r"\S*ablations modified; a report made by `cifar10 report` is "
                                            r"never recorded.*`dvc repro reports/dvc.yaml:report`"):
        _refuse_stale_report()  # ... the report is not
    # a FIFO anywhere the report stage reads (beside the variants' folders): one line, at
    # once, not `dvc status` waiting on it
    _run(project, dvc, "repro", "-q", "reports/dvc.yaml")
    os.mkfifo(project / "reports/ablations/junk")
    with pytest.raises(PipelineError, match=r"^.*reports/ablations/junk: expected a file the "
                                            r"report reads, found a FIFO"):
        _refuse_stale_report()


def test_a_dvc_status_that_never_answers_is_one_line(project, monkeypatch, tmp_path):
    """DVC waiting on an input that never answers (a mount, a FIFO deep among the deps) is
    bounded: one line after the timeout. A FIFO among the files DVC reads first (a params
    file) is named at once, before DVC is asked."""
    from cifar10_tutorial import cli
    from cifar10_tutorial.report import results

    monkeypatch.setattr(results, "STATUS_TIMEOUT", 5)
    waits = tmp_path / "dvc"
    waits.write_text("#!/bin/sh\nexec sleep 60\n")
    waits.chmod(0o755)
    monkeypatch.setattr(cli, "dvc_executable", lambda: str(waits))
    with pytest.raises(PipelineError, match=r"`dvc status --with-deps reports/dvc.yaml` gave no answer in 5 s"):
        refuse_stale_results(Path("reports/ablations"))
    params = project / "reports/params.yaml"
    params.unlink()
    os.mkfifo(params)
    with pytest.raises(PipelineError, match=r"reports/params.yaml: not a regular file \(a "
                                            r"folder, FIFO, device or broken link\), where DVC "
                                            r"reads the pipeline's params.yaml"):
        refuse_stale_results(Path("reports/ablations"))


def _dvc() -> str:
    return DVC if Path(DVC).is_file() else "dvc"


def test_a_stage_upstream_changed_makes_the_variants_stale(project):
    """The data's URL changed, nothing rerun: `dvc repro` would download, prepare and rerun
    every variant that reads the data. Their results are not the new definition's."""
    (project / "params.yaml").write_text("data:\n  url: https://a.example/one.tar.gz\n")
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "download": {"cmd": "mkdir -p data/raw && echo ${data.url} > data/raw/x",
                     "params": ["data.url"], "outs": ["data/raw"]},
        "preprocess": {"cmd": "mkdir -p data/prepared && cp data/raw/x data/prepared/x",
                       "deps": ["data/raw"], "outs": ["data/prepared"]}}}))
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    pipeline["stages"]["ablation"]["do"]["deps"] = ["../data/prepared"]
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    _run(project, _dvc(), "repro", "-q", "reports/dvc.yaml")
    assert refuse_stale_results(Path("reports/ablations")) is None
    # the data there (DVC lists only download: the variants' own deps are as recorded)
    for pulled in (True, False):  # with the data there, then as a clone that has not
        # pulled it (no change of its own, then the same change upstream)
        if not pulled:
            (project / "params.yaml").write_text("data:\n  url: https://a.example/one.tar.gz\n")
            for out in ("data/raw", "data/prepared"):
                shutil.rmtree(project / out)
            assert refuse_stale_results(Path("reports/ablations")) is None
        (project / "params.yaml").write_text("data:\n  url: https://b.example/two.tar.gz\n")
        with pytest.raises(PipelineError, match=r"the results of a, b are not of their "
                                                r"definition .*a: upstream, download: "
                                                r"params.yaml data.url modified"):
            refuse_stale_results(Path("reports/ablations"))
        with pytest.raises(PipelineError, match=r"the results of b are not .*upstream, download"):
            refuse_stale_results(Path("reports/ablations"), only="b")
    # a clone whose upstream stages never ran (no dvc.lock: the results came in git): DVC
    # calls each of their deps modified, which says nothing of the results
    (project / "dvc.lock").unlink()
    (project / "params.yaml").write_text("data:\n  url: https://a.example/one.tar.gz\n")
    assert refuse_stale_results(Path("reports/ablations")) is None


def test_a_copy_of_the_results_is_said_to_be_unchecked(project, tmp_path):
    """A copy of the variants' results (kept in the checkout, or outside any) is no folder
    DVC records: checking it by its folders' names would vouch for figures of anything.
    The command is told they are unchecked, with why."""
    shutil.copytree(project / "reports/ablations", project / "old_abl")
    # a copy where another stage of the variants writes (a data-set variant's data folder)
    pipeline = yaml.safe_load((project / "reports/dvc.yaml").read_text())
    pipeline["stages"]["ablation"]["do"]["outs"].append({"data/${key}": {"cache": False}})
    pipeline["stages"]["ablation"]["do"]["cmd"] += " && mkdir -p data/${key}"
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(pipeline))
    _run(project, _dvc(), "repro", "-q", "reports/dvc.yaml")
    shutil.copytree(project / "reports/ablations", project / "reports/data", dirs_exist_ok=True)
    shutil.copytree(project / "reports/ablations", tmp_path / "abx")
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    for copy in (Path("old_abl"), tmp_path / "abx", Path("reports/data")):
        said = refuse_stale_results(copy)
        assert f"the results in {copy} were not checked" in said \
            and "not the ablation stages' folder (reports/ablations)" in said, said
    with pytest.raises(PipelineError, match=r"the results of a(, b)? are not"):
        refuse_stale_results(Path("reports/ablations"))


def test_results_in_a_folder_not_of_their_variants_name_are_refused(project):
    """softmax's results moved to softmax_old (a backup kept before a rerun): reported as
    softmax, they would be checked as no stage's. One line naming the folder."""
    for name in ("a", "b"):
        (project / f"reports/ablations/{name}/variant.json").write_text(f'{{"variant": "{name}"}}')
    refuse_stale_results(Path("reports/ablations"))
    (project / "reports/ablations/a").rename(project / "reports/ablations/a_old")
    with pytest.raises(PipelineError, match=r"^reports/ablations/a_old: holds the results of "
                                            r"'a' \(its variant.json\), in a folder of another "
                                            r"name.*move it out of reports/ablations"):
        refuse_stale_results(Path("reports/ablations"))


def test_definitions_stated_from_another_params_file_must_be_the_checked_ones(project,
                                                                              tmp_path):
    """The report's --params another file: the definitions it states must be those DVC
    checked the results against (reports/params.yaml), else one line."""
    other = tmp_path / "other.yaml"
    shutil.copy(project / "reports/params.yaml", other)
    assert refuse_stale_results(Path("reports/ablations"), params=other) is None
    other.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 9}, "b": {"seed": 2}}}))
    with pytest.raises(PipelineError, match=rf"^{other}: defines variant a otherwise than "
                                            rf".*reports/params.yaml, whose definitions DVC "
                                            rf"checked"):
        refuse_stale_results(Path("reports/ablations"), params=other)
    # a variant with results left out (its rows would vanish from the report)
    other.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}}}))
    with pytest.raises(PipelineError, match=r"defines variant b otherwise than"):
        refuse_stale_results(Path("reports/ablations"), params=other)
    # the budget of every variant (a trial cap) stated otherwise
    other.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}, "b": {"seed": 2}},
                                     "ablation": {"trial_steps": 10}}))
    with pytest.raises(PipelineError, match=r"defines `ablation:` otherwise than"):
        refuse_stale_results(Path("reports/ablations"), params=other)
    # a FIFO or a device as --params: no read without end (said where params are loaded)
    os.mkfifo(tmp_path / "fifo")
    for odd in (tmp_path / "fifo", Path("/dev/zero")):
        assert refuse_stale_results(Path("reports/ablations"), params=odd) is None


def test_a_project_in_a_subfolder_of_a_dvc_repository_is_judged_by_it(tmp_path, monkeypatch):
    """A monorepo: git and DVC at its root, the project in a subfolder (no .dvc/ of its
    own). DVC records its stages; nothing is "gone"."""
    mono = tmp_path / "mono"
    project = mono / "p"
    (project / "reports").mkdir(parents=True)
    (project / "dvc.yaml").write_text("stages: {}\n")
    (project / "reports/dvc.yaml").write_text(yaml.safe_dump(PIPELINE))
    (project / "reports/params.yaml").write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}}}))
    _run(mono, "git", "init", "-q")
    _run(mono, _dvc(), "init", "-q")
    _run(project, _dvc(), "repro", "-q", "reports/dvc.yaml")
    monkeypatch.chdir(project)
    assert refuse_stale_results(Path("reports/ablations")) is None
    (project / "reports/params.yaml").write_text(yaml.safe_dump({"ablations": {"a": {"seed": 3}}}))
    with pytest.raises(PipelineError, match=r"the results of a are not of their definition"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_clone_asking_another_data_set_than_the_variants_record_is_stale(project):
    """A clone records no download or preprocess (the main pipeline's lock is the user's,
    not in git): the data set params.yaml asks for is compared with the one each variant
    records (variant.json), so results of CIFAR-10 are not stated as the new set's."""
    for name in ("a", "b"):
        (project / f"reports/ablations/{name}/variant.json").write_text(
            f'{{"variant": "{name}", "dataset": "cifar10"}}')
    (project / "params.yaml").write_text("data:\n  dataset: cifar10\n")
    assert refuse_stale_results(Path("reports/ablations")) is None
    (project / "params.yaml").write_text("data:\n  dataset: svhn\n")
    with pytest.raises(PipelineError, match=r"the results of a, b are not of their definition "
                                            r".*a: upstream, params.yaml data.dataset is svhn, "
                                            r"the results are of cifar10"):
        refuse_stale_results(Path("reports/ablations"))
    for text in ("train: {}\n", "data:\n  dataset: CIFAR10\n"):  # none, or none the
        (project / "params.yaml").write_text(text)  # stages take: they say why
        assert refuse_stale_results(Path("reports/ablations")) is None


@pytest.mark.parametrize("file, text, said", [
    ("params.yaml", "ablations:\n  foo: {}\n",
     r"^params.yaml: ablations: lives in reports/params.yaml, not in params.yaml; move it "
     r"there. Nothing was written.$"),
    ("reports/params.yaml", "data:\n  dataset: svhn\n",
     r"^reports/params.yaml: data: lives in params.yaml, not in reports/params.yaml \(the "
     r"variants train on .*\); remove it here. Nothing was written.$"),
])
def test_a_section_in_the_other_params_file_is_refused(project, file, text, said):
    """A variant under ablations: in params.yaml, or data: in reports/params.yaml, is read
    by no stage (the stages refuse it): the report, the results page and a model card
    refuse it too, rather than state the results as if it were read."""
    refuse_stale_results(Path("reports/ablations"))
    with open(project / file, "a") as f:
        f.write(text)
    with pytest.raises(PipelineError, match=said):
        refuse_stale_results(Path("reports/ablations"))


def test_a_name_in_both_groups_is_named_before_dvc_is_asked(project):
    """One name under ablations: and dataset_ablations: would be two stages writing one
    folder; DVC's own line (an output "specified in" two stages) is cut and names no
    variant: the name is said first."""
    params = yaml.safe_load((project / "reports/params.yaml").read_text())
    params["dataset_ablations"] = {"b": {"seed": 3}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(PipelineError, match=r"^reports/params.yaml: ablations and "
                                            r"dataset_ablations share the names \['b'\]; rename "
                                            r"one of each. Nothing was written.$"):
        refuse_stale_results(Path("reports/ablations"))
