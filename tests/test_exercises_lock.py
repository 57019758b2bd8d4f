"""reports/dvc.lock: what a clone of the repository recomputes of the exercises
(docs/exercises.md, "What a clone recomputes")."""
import json
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, SHARED, dvc

DEV_MD5 = "cbbdb9d17d56e942e56211e6031ea0f1"  # make_dev_archive.py's archive (runs/README.md)


def clone_of_head(dest):
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    return dest


def status(project) -> dict:
    return json.loads(dvc(project, "status", "--json", "reports/dvc.yaml").stdout or "{}")


def test_a_clone_lacks_only_the_data_to_be_up_to_date(tmp_path):
    """The lock records every variant with results and the report at this commit: in a
    clone, which has the results but no data, DVC finds nothing changed but the missing
    prepared data. Fails when code, params or results change without the lock being
    refreshed. A variant added to reports/params.yaml and not run yet (no results, not in
    the lock: a user's own, say) is only new, and leaves the rest as they were."""
    clone = clone_of_head(tmp_path / "clone")
    lock = yaml.safe_load((clone / "reports" / "dvc.lock").read_text())["stages"]
    params = yaml.safe_load((clone / "reports" / "params.yaml").read_text())
    variants = set(params["ablations"]) | set(params["dataset_ablations"] or {})
    new = {v for v in variants - {s.split("@", 1)[-1] for s in lock}
           if not (clone / "reports" / "ablations" / v).exists()}
    assert set(lock) == {f"ablation@{v}" for v in set(params["ablations"]) - new} | {"report"}
    missing = [{"changed deps": {"data/prepared": "deleted"}}]
    found = status(clone)
    found = {stage: changes for stage, changes in found.items()
             if stage.split("@", 1)[-1] not in new}
    if new:  # the report lists every variant: one not run yet is a change of its params
        found.pop("reports/dvc.yaml:report", None)
    assert {stage: changes for stage, changes in found.items() if changes != missing} == {}
    # every variant, and not the report, which is up to date
    assert set(found) == {f"reports/dvc.yaml:ablation@{v}" for v in set(params["ablations"]) - new}


@pytest.mark.e2e
@pytest.mark.real_data
def test_a_clone_that_prepares_the_dev_split_recomputes_nothing(tmp_path):
    """The dev split made on this machine by the project's own command (`cifar10
    dev-split`, from the public repository's train/ folder, which ../shared/data holds as
    a zip), prepared by the stages as runs/README.md says, is byte for byte the data the
    lock records."""
    source = SHARED / "data" / "cifar10-train-jpeg.zip"
    if not source.is_file():
        pytest.skip("../shared/data is absent: real-data checks skipped")
    clone = clone_of_head(tmp_path / "clone")
    archive = tmp_path / "cifar10-dev.tar.gz"
    made = subprocess.run([sys.executable, "-c", "from cifar10_tutorial.commands import entry; "
                           "entry()", "dev-split", str(source), "--out", str(archive)],
                          cwd=clone, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr
    assert f"md5 {DEV_MD5}" in made.stdout and "byte for byte" in made.stdout, made.stdout
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["data"].update(url=str(archive), md5=DEV_MD5)
    dev_params = tmp_path / "dev-params.yaml"
    dev_params.write_text(yaml.safe_dump(params))
    for cmd in (["stages/download.py", "--out", "data/raw", "--partial", "data/.downloads"],
                ["stages/preprocess.py", "--raw", "data/raw", "--out", "data/prepared"]):
        proc = subprocess.run([sys.executable, *cmd, "--params", str(dev_params)], cwd=clone,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert status(clone) == {}
