"""docs/extending.md, followed: its code is the code of the package (the worked example,
model.dropout, is real), and its variant, added to a tiny project's reports/params.yaml
as the page shows and run with the page's commands, gets its own report section."""
import json
import re
import subprocess

import pytest
import yaml

from conftest import DVC, ROOT, commit, dvc, tiny_project

PAGE = ROOT / "docs" / "extending.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), flags=re.S)


@pytest.mark.parametrize("index, source", [(0, "src/cifar10_tutorial/params.py"),
                                           (1, "src/cifar10_tutorial/model.py")])
def test_the_pages_code_is_the_packages(index, source):
    code = (ROOT / source).read_text()
    lines = [ln.strip() for ln in blocks("python")[index].splitlines()
             if ln.strip() and ln.strip() != "..."]
    assert lines and all(ln in code for ln in lines), [ln for ln in lines if ln not in code]


def project_with_variants(tmp_path, variants: dict):
    """A tiny project whose exercises are ``variants`` (reports/params.yaml `ablations:`),
    each 4 steps."""
    project = tiny_project(tmp_path, dict(train_per_batch=60, test=50, seed=2),
                           ablation={"max_steps": 4}, eval={"batch_size": 25, "every_steps": 0},
                           train={"device": "cpu", "batch_size": 16, "log_every": 2},
                           run={"checkpoint_every": 2, "summary_every": 2})
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"] = variants  # these alone, not the project's
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    return project


@pytest.mark.e2e
def test_the_pages_variant_gets_its_own_report_section(tmp_path):
    """The page's variant (batch normalization in place of LRN: a layer with parameters,
    floating-point and integer buffers), run with the page's commands, trains, gets its
    report section, and its model file is read back by predict and publish."""
    page = yaml.safe_load(blocks("yaml")[0])
    project = project_with_variants(tmp_path, {"baseline": {}, **page["ablations"]})
    dvc(project, "repro", "dvc.yaml:preprocess")
    commit(project, "a variant of my own")
    for line in blocks("bash")[0].splitlines():
        command = line.split("#")[0].split()
        assert command[0] == "dvc"
        proc = subprocess.run([DVC, *command[1:]], cwd=project, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    name = next(iter(page["ablations"]))
    made = json.loads((project / f"reports/ablations/{name}/metrics.json").read_text())
    assert made["train"]["step"] == 4
    report = (project / "reports/report.md").read_text()
    mine = report.split("## Your variants", 1)[1].split("\n## ", 1)[0]
    assert f"### `{name}`" in mine
    assert "It changes `model.lrn: false`, `model.batch_norm: true`." in mine, mine
    for heading in ("## Exercise 1", "## Exercise 2", "## Exercise 3", "## Exercise 4"):
        assert name not in report.split(heading, 1)[1].split("\n## ", 1)[0], heading
    # its model file: BatchNorm's buffers in it, read back by predict and publish
    import sys

    import torch
    from PIL import Image

    model = project / f"data/ablations/{name}/model.pt"
    ema = torch.load(model, weights_only=True)["ema"]
    assert ema["bn1.num_batches_tracked"].dtype == torch.int64
    assert ema["bn1.num_batches_tracked"].item() == 4
    Image.new("RGB", (32, 32), (200, 30, 30)).save(tmp_path / "red.png")
    for command in (["-m", "cifar10_tutorial.evaluation.predict", str(tmp_path / "red.png"),
                     "--model", str(model)],
                    ["tools/publish.py", name, "--out", str(tmp_path / "published")]):
        proc = subprocess.run([sys.executable, *command], cwd=project, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "published" / "model.pt").read_bytes() == model.read_bytes()


@pytest.mark.e2e
def test_check_code_records_the_lock_only_for_code_that_trains_identically(tmp_path):
    """An edit that changes no result (a comment) stales every variant that imports the
    module; `cifar10 check-code` trains a fixed configuration with both codes, on no data
    of the project's, and records the lock only when they agree."""
    import sys

    project = project_with_variants(tmp_path, {"baseline": {}})
    dvc(project, "repro", "dvc.yaml:preprocess")
    dvc(project, "repro", "reports/dvc.yaml")
    commit(project, "the exercises' results")
    lock = (project / "reports/dvc.lock").read_text()

    def check():
        return subprocess.run([sys.executable, "-c", "from cifar10_tutorial.commands import "
                               "entry; entry()", "check-code"], cwd=project,
                              capture_output=True, text=True, timeout=900)

    loop = project / "src/cifar10_tutorial/training/train.py"
    loop.write_text(loop.read_text() + "\n# a comment changes no result\n")
    assert "ablation@baseline" in dvc(project, "status", "reports/dvc.yaml").stdout
    proc = check()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote the same raw and averaged weights and results" in proc.stdout
    assert "up to date" in dvc(project, "status", "reports/dvc.yaml").stdout
    commit(project, "a comment")
    recorded = (project / "reports/dvc.lock").read_text()
    assert recorded != lock
    # a change of the math: refused in one line, the lock left as it was
    model = project / "src/cifar10_tutorial/model.py"
    model.write_text(model.read_text().replace("LRN_BETA = 0.75", "LRN_BETA = 0.74"))
    proc = check()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr.strip().splitlines()[-1]
    assert (project / "reports/dvc.lock").read_text() == recorded
    assert "ablation@baseline" in dvc(project, "status", "reports/dvc.yaml").stdout
