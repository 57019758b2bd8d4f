"""Results read by hand (the report, the results page, a model card) are judged by what
DVC recorded (`dvc status`): a variant whose params changed, or whose results were edited,
since its stage ran stops the command; a `dvc status` that fails stops it too. A real DVC
project with a foreach stage of the report pipeline's shape."""
import os
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
                                            r"their definition as it is now \(`dvc status "
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
    with pytest.raises(PipelineError, match=r"^`dvc status reports/dvc.yaml` failed \(exit "
                                            r"\d+: .*\): whether the results in "
                                            r"reports/ablations are of their definitions"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_copy_without_git_is_told_how_dvc_can_judge(project):
    """A source archive (no .git/, .dvc/ tracked) : DVC's status needs git, and the line
    says how to give it one."""
    shutil.rmtree(project / ".git")
    with pytest.raises(PipelineError, match=r"not a git repository.*`git init` \(or `dvc "
                                            r"config --local core.no_scm true`"):
        refuse_stale_results(Path("reports/ablations"))


def test_a_folder_that_is_no_dvc_repository_is_not_judged(project):
    shutil.rmtree(project / ".dvc")
    (project / "reports/params.yaml").write_text(yaml.safe_dump({"ablations": {"a": {"seed": 7}}}))
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
    proc = subprocess.run([sys.executable, str(root / "stages/report.py"), "--params",
                           f"{up}reports/params.yaml", "--ablations", f"{up}reports/ablations",
                           "--search", "x.md", "--equivalence", "x.json", "--out", f"{up}reports"],
                          cwd=project / where, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{up}reports/ablations: the results of a are not of their definition" \
        in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (project / "reports/report.md").exists()
