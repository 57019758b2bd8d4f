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
                                            r"ablations.a modified\)"):
        refuse_stale_results(results)
    refuse_stale_results(results, only="b")  # a model card of b: b is as recorded
    # an edited result (the stage's output changed since DVC recorded it)
    params.write_text(yaml.safe_dump({"ablations": {"a": {"seed": 1}, "b": {"seed": 2}}}))
    (project / "reports/ablations/b/metrics.json").write_text('{"seed": 9}\n')
    with pytest.raises(PipelineError, match=r"the results of b are not .*: b: "
                                            r"reports/ablations/b/metrics.json modified"):
        refuse_stale_results(results, only="b")


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


def test_the_report_stage_by_hand_refuses_stale_results(project):
    """stages/report.py run by hand (not under `dvc repro`) asks DVC before reading."""
    root = Path(__file__).resolve().parents[1]
    (project / "reports/params.yaml").write_text(
        yaml.safe_dump({"ablations": {"a": {"seed": 5}, "b": {"seed": 2}}}))
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}
    proc = subprocess.run([sys.executable, str(root / "stages/report.py"), "--params",
                           "reports/params.yaml", "--ablations", "reports/ablations",
                           "--search", "x.md", "--equivalence", "x.json", "--out", "reports"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "reports/ablations: the results of a are not of their definition" \
        in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (project / "reports/report.md").exists()
