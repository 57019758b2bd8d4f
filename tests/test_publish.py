"""Published weights: a finished variant's model beside its records and a card that states
its precision (cifar10_tutorial.report.publish), usable by predict and eval from anywhere; and the
project's own published weights, when committed, checked against their card."""
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import yaml

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.report.publish import publish
from conftest import DVC, ROOT, SHARED, run_stage, set_params, tiny_project

PUBLISHED = "tutorial_100k"  # the variant whose weights the project publishes


def _run(cwd, *args):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny project whose `tutorial_100k` (14 steps) and `baseline` (12) variants ran."""
    project = tiny_project(
        tmp_path_factory.mktemp("publish"), dict(train_per_batch=100, test=100, seed=4),
        git=False, ablation={"max_steps": 12}, train=dict(log_every=2, device="cpu"),
        run=dict(checkpoint_every=4, summary_every=4, queue_threads=1),
        eval={"batch_size": 50})
    set_params(project, "ablations", tutorial_100k={"train": {"max_steps": 14},
                                                    "eval": {"every_steps": 7}})
    for stage in ("download", "preprocess"):
        proc = run_stage(project, stage)
        assert proc.returncode == 0, proc.stderr
    for name in ("tutorial_100k", "baseline"):
        proc = run_stage(project, "ablation", name, "--data", "data/prepared", "--work",
                         f"data/ablations/{name}", "--out", f"reports/ablations/{name}")
        assert proc.returncode == 0, proc.stderr
    return project


@pytest.mark.e2e
def test_publish_a_finished_variant_and_use_it_from_elsewhere(finished, tmp_path):
    project = finished
    results = project / "reports" / "ablations" / "tutorial_100k"
    out = tmp_path / "published"
    proc = _run(project, "-m", "cifar10_tutorial.report.publish", "tutorial_100k",
                "--model", "data/ablations/tutorial_100k/model.pt", "--results", str(results),
                "--out", str(out), "--check-data", "data/prepared")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.pt", "params.yaml", "provenance.json", "metrics.json", "README.md"])
    card = (out / "README.md").read_text()
    metrics = json.loads((results / "metrics.json").read_text())
    assert f"**{100 * metrics['eval']['precision_at_1']:.2f}%**" in card
    assert f"{100 * metrics['eval']['precision_at_1_raw']:.2f}%" in card
    digest = hashlib.sha256((out / "model.pt").read_bytes()).hexdigest()
    assert digest in card and "**14 steps**" in card
    assert yaml.safe_load((out / "params.yaml").read_text())["train"]["max_steps"] == 14
    # predict and eval use it from another folder, no project files there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    from PIL import Image

    Image.fromarray(np.full((40, 50, 3), 90, np.uint8)).save(elsewhere / "x.png")
    proc = _run(elsewhere, "-m", "cifar10_tutorial.evaluation.predict", "x.png", "--model",
                str(out / "model.pt"), "--top", "2")
    assert proc.returncode == 0 and proc.stdout.startswith("x.png: "), proc.stderr
    proc = _run(project, "stages/eval.py", "--model", str(out / "model.pt"),
                "--data", "data/prepared", "--out", str(tmp_path / "eval"))
    assert proc.returncode == 0, proc.stderr
    again = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert again["precision_at_1"] == metrics["eval"]["precision_at_1"]


@pytest.mark.e2e
def test_publish_refuses_files_that_do_not_belong_together(finished, tmp_path, monkeypatch):
    project = finished
    monkeypatch.chdir(project)
    results = project / "reports" / "ablations" / "tutorial_100k"
    other = project / "data" / "ablations" / "baseline" / "model.pt"  # 12 steps, not 14
    with pytest.raises(PipelineError, match=r"records step 14, but .*baseline/model.pt is at "
                                            r"step 12: they come from different runs"):
        publish("tutorial_100k", other, results, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    # results edited after the run: the model gives another precision than they state
    edited = tmp_path / "edited"
    shutil.copytree(results, edited)
    m = json.loads((edited / "metrics.json").read_text())
    m["eval"]["precision_at_1"] += 0.01
    (edited / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(PipelineError, match=r"gives precision_at_1 = .* but its metrics state"):
        publish("tutorial_100k", project / "data/ablations/tutorial_100k/model.pt", edited,
                tmp_path / "b", check_data=project / "data" / "prepared")
    assert not (tmp_path / "b").exists()
    # an --out that holds files it did not make is not touched
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match=r"holds notes.txt, which the publish stage did not make"):
        publish("tutorial_100k", project / "data/ablations/tutorial_100k/model.pt", results,
                tmp_path / "c")


def _artifact():
    arts = yaml.safe_load((ROOT / "dvc.yaml").read_text()).get("artifacts", {})
    return {n: a for n, a in arts.items() if a["path"] == f"models/{PUBLISHED}/model.pt"}


@pytest.mark.skipif(not (ROOT / "models" / PUBLISHED).exists(),
                    reason="the project's weights are not published yet")
def test_the_published_weights_are_what_their_card_says(tmp_path):
    """The committed weights load, match the card's sha256 and precision, are declared as a
    DVC artifact, and a fresh clone classifies an image with them before training anything."""
    from cifar10_tutorial.model_files import load_model_file

    folder = ROOT / "models" / PUBLISHED
    ckpt = load_model_file(folder / "model.pt")
    card = (folder / "README.md").read_text()
    assert hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest() in card
    metrics = json.loads((folder / "metrics.json").read_text())
    assert f"**{100 * metrics['eval']['precision_at_1']:.2f}%**" in card
    assert json.loads((folder / "provenance.json").read_text())["steps"] == ckpt["step"] == 100_000
    assert _artifact(), "dvc.yaml declares no artifact for the published weights"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if not (clone / "models" / PUBLISHED / "model.pt").is_file():
        pytest.skip("the published weights are not committed at HEAD yet")
    # fetched as the DVC artifact once a version is registered (a GTO tag)
    name = next(iter(_artifact()))
    subprocess.run(["git", "-C", str(clone), "tag", "-a", f"{name}@v1.0.0", "-m", "test"],
                   check=True)
    (tmp_path / "got").mkdir()
    got = subprocess.run([DVC, "artifacts", "get", str(clone), name], cwd=tmp_path / "got",
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr
    assert (tmp_path / "got" / "model.pt").read_bytes() == (folder / "model.pt").read_bytes()
    from PIL import Image

    images = [tmp_path / "gray.png"]
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(images[0])
    labels = [None]
    if (SHARED / "data" / "cifar10-train-jpeg.zip").is_file():  # real images, where there are
        with zipfile.ZipFile(SHARED / "data" / "cifar10-train-jpeg.zip") as z:
            for name in sorted(z.namelist()):  # the first 2 of each class
                parts = name.split("/")
                if name.endswith(".jpg") and labels.count(parts[1]) < 2:
                    images.append(tmp_path / f"{parts[1]}-{parts[2]}")
                    images[-1].write_bytes(z.read(name))
                    labels.append(parts[1])
    proc = _run(clone, "-m", "cifar10_tutorial.evaluation.predict", *map(str, images), "--model",
                f"models/{PUBLISHED}/model.pt", "--top", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(images) and all(
        re.fullmatch(rf"{re.escape(str(p))}: \w+ \d\.\d{{3}}", ln) for p, ln in zip(images, lines))
    if len(images) > 1:  # a model at ~80% gets most of 20 images right
        right = sum(ln.split(": ")[1].split()[0] == c for ln, c in zip(lines[1:], labels[1:]))
        assert right >= 14, proc.stdout
