"""The stages as users run them: entry points, `dvc repro`, `dvc exp run`, a remote."""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cifar10_tutorial.data.prepared import load_prepared
from conftest import (DVC, ROOT, SHARED, commit, copy_project, dvc, init_repo, run_queue,
                      run_stage, set_params, tiny_project)

def test_entry_points_on_a_synthetic_archive(archive, tmp_path):
    project = copy_project(tmp_path / "p")
    set_params(project, "data", url=archive["path"].as_uri(), md5=archive["md5"])
    proc = run_stage(project, "download")
    assert proc.returncode == 0, proc.stderr
    assert (project / "data/raw/cifar-10-binary.tar.gz").read_bytes() == archive["path"].read_bytes()
    proc = run_stage(project, "preprocess")
    assert proc.returncode == 0, proc.stderr
    data = load_prepared(project / "data/prepared")
    np.testing.assert_array_equal(data.train_labels, archive["train_labels"])


def test_unknown_params_key_fails_the_stage(tmp_path):
    project = copy_project(tmp_path / "p")
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["data"]["md55"] = "x"
    (project / "params.yaml").write_text(yaml.safe_dump(raw))
    proc = run_stage(project, "download")
    assert proc.returncode == 1
    assert "error: params.yaml: unknown key data.md55" in proc.stderr
    assert "valid keys in 'data': dataset, url, md5" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "data/raw").exists()


@pytest.mark.parametrize("bad, expected", [
    ("md5", "md5 mismatch"),
    ("html", "not a gzip-compressed tar archive"),
])
def test_bad_archive_fails_the_stage_cleanly(archive, tmp_path, bad, expected):
    project = copy_project(tmp_path / "p")
    if bad == "md5":
        set_params(project, "data", url=str(archive["path"]), md5="1" * 32)
    else:
        page = tmp_path / "page.html"
        page.write_text("<html><body>Service unavailable</body></html>")
        set_params(project, "data", url=str(page), md5=None)
    proc = run_stage(project, "download")
    assert proc.returncode == 1 and expected in proc.stderr and "Traceback" not in proc.stderr
    assert not (project / "data/raw/cifar-10-binary.tar.gz").exists()


@pytest.mark.e2e
def test_dvc_repro_caches_and_reruns_on_url_change(archive, tmp_path):
    project = copy_project(tmp_path / "p")
    init_repo(project)
    set_params(project, "data", url=str(archive["path"]), md5=archive["md5"])
    out = dvc(project, "repro", "preprocess").stdout
    assert "Running stage 'download'" in out and "Running stage 'preprocess'" in out
    assert load_prepared(project / "data/prepared").meta["source_md5"] == archive["md5"]
    out = dvc(project, "repro", "preprocess").stdout
    assert "Running stage" not in out
    assert "Data and pipelines are up to date" in out
    mirror = tmp_path / "mirror" / "copy.tar.gz"
    mirror.parent.mkdir()
    shutil.copy(archive["path"], mirror)
    set_params(project, "data", url=mirror.as_uri())
    out = dvc(project, "repro", "preprocess").stdout
    assert "Running stage 'download'" in out and "Running stage 'preprocess'" in out


@pytest.fixture(scope="session")
def dev_archive(tmp_path_factory):
    tool = SHARED / "tools" / "make_dev_archive.py"
    if not tool.exists() or not (SHARED / "data" / "cifar10-train-jpeg.zip").exists():
        pytest.skip("../shared/data is absent: real-data checks skipped")
    path = tmp_path_factory.mktemp("dev") / "cifar10-dev-small.tar.gz"
    proc = subprocess.run([sys.executable, str(tool), str(path), "--train", "1000", "--test", "200"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    md5 = proc.stdout.strip().splitlines()[-1].split()[-1]
    return path, md5


@pytest.mark.e2e
@pytest.mark.real_data
def test_real_dev_archive_through_dvc(dev_archive, tmp_path):
    path, md5 = dev_archive
    project = copy_project(tmp_path / "p")
    init_repo(project)
    set_params(project, "data", url=str(path), md5=md5)
    dvc(project, "repro", "preprocess")
    data = load_prepared(project / "data/prepared")
    assert data.meta["counts"] == {"train": 1000, "test": 200}
    assert data.classes[0] == "airplane" and data.classes[-1] == "truck"
    assert set(np.unique(data.train_labels)) == set(range(10))
    # real photographs: not constant, full dynamic range, neighbouring pixels correlated
    img = data.train_images.astype(np.float32)
    assert img.std() > 40 and img.min() == 0 and img.max() == 255
    rows = np.corrcoef(img[:, :, :, :-1].ravel(), img[:, :, :, 1:].ravel())[0, 1]
    assert rows > 0.8
    assert "Data and pipelines are up to date" in dvc(project, "repro", "preprocess").stdout


@pytest.mark.e2e
def test_whole_pipeline_exp_run_and_metrics_diff(tmp_path):
    project = tiny_project(
        tmp_path, dict(train_per_batch=100, test=100, seed=2),
        train=dict(max_steps=12, batch_size=32, log_every=4,
                   device="cpu"), run=dict(checkpoint_every=6, summary_every=6),
        input=dict(min_fraction_of_examples_in_queue=0.1))
    out = dvc(project, "repro").stdout  # the main pipeline; the exercises are reports/dvc.yaml
    for stage in ("download", "preprocess", "train", "eval"):
        assert f"Running stage '{stage}'" in out
    assert "ablation" not in out
    metrics = yaml.safe_load((project / "reports/eval/metrics.json").read_text())
    assert 0 <= metrics["precision_at_1"] <= 1 and metrics["num_examples"] == 100
    assert "Data and pipelines are up to date" in dvc(project, "repro").stdout
    plain = dvc(project, "metrics", "show")  # no exercise run yet: that is no warning
    assert "failed to load" not in plain.stdout + plain.stderr, plain.stdout + plain.stderr
    assert "reports/ablations" not in plain.stdout
    shown = dvc(project, "metrics", "show", "--json").stdout
    assert "precision_at_1_raw" in shown and "loss_avg" in shown
    # speeds, times and sizes stay out of DVC's metrics (exp show's width)
    for key in ("num_params", "examples_per_sec", "wall_time_s", "time_to_first_batch_s"):
        assert key not in shown, key
    speed = json.loads((project / "reports/train/speed.json").read_text())
    assert speed["num_params"] > 0 and speed["examples_per_sec"] > 0 and speed["step"] == 12
    assert json.loads((project / "reports/eval/provenance.json").read_text())["examples_per_sec"] > 0
    assert "provenance" not in shown and "data_hash" not in shown  # apart from the metrics
    # provenance beside the metrics: this commit, this data, one params hash for both stages
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True,
                          text=True).stdout.strip()
    made = {s: json.loads((project / f"reports/{s}/provenance.json").read_text())
            for s in ("train", "eval")}
    content = load_prepared(project / "data/prepared").content_hash
    for p in made.values():
        assert p["commit"] == head and p["data_hash"] == content and p["steps"] == 12
        assert p["torch"] == torch.__version__ and "thread" in p["device"]
    assert made["train"]["params_hash"] == made["eval"]["params_hash"]
    assert made["train"]["epochs"] == 12 * 32 / 500 and made["train"]["wall_time_s"] > 0
    commit(project, "first run")
    set_params(project, "run", checkpoint_every=5, summary_every=3)  # how, not what: no rerun
    assert "Data and pipelines are up to date" in dvc(project, "repro").stdout
    commit(project, "checkpoints more often")
    proc = dvc(project, "exp", "run", "-S", "train.batch_size=64")
    out = proc.stdout
    assert "Running stage 'train'" in out and "Running stage 'download'" not in out
    assert "ablation" not in out
    # the exercises never ran: no warnings about their outputs, repo-wide commands work
    assert "WARNING" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    dvc(project, "checkout")
    diff = dvc(project, "metrics", "diff", "--json").stdout
    assert "reports/eval/metrics.json" in diff and "reports/train/metrics.json" in diff
    plots = dvc(project, "plots", "show", "--json").stdout
    assert "reports/eval/predictions.csv" in plots and "loss_avg" in plots
    lr = json.loads(plots)["data"]["Learning rate"][0]["content"]  # a staircase from 0
    assert lr["encoding"]["y"]["scale"] == {"zero": True} and lr["mark"]["interpolate"] == "step-after"
    # what the README shows: the params and metrics that differ, not every column
    header = dvc(project, "exp", "show", "--only-changed", "--csv").stdout.splitlines()[0]
    columns = header.split(",")
    # two params files hold train.*: DVC names the file in the column
    assert "params.yaml:train.batch_size" in columns and "data.dataset" not in columns, columns
    assert "held_out.precision_at_1" in columns and "schedule" not in columns, columns
    # the README's form that fits 120 columns: the changed param beside precision_at_1
    line = next(x for x in (ROOT / "README.md").read_text().splitlines()
                if x.startswith("dvc exp show --only-changed --drop"))
    header = dvc(project, *shlex.split(line)[1:], "--csv").stdout.splitlines()[0]
    assert header.split(",") == ["Experiment", "rev", "typ", "precision_at_1",
                                 "params.yaml:train.batch_size"], header
    bad = subprocess.run([DVC, "exp", "run", "-S", "+train.batchsize=64"], cwd=project,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0
    assert "unknown key train.batchsize" in bad.stdout + bad.stderr
    # the failed experiment leaves its key in params.yaml; the next one fails naming
    # it and says why it is there
    assert "batchsize" in (project / "params.yaml").read_text()
    again = subprocess.run([DVC, "exp", "run", "-S", "train.batch_size=8"], cwd=project,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode != 0 and "a failed `dvc exp run -S` leaves its change in " \
        "params.yaml: `git checkout params.yaml` undoes it" in again.stdout + again.stderr


def _readme_block(after: str) -> list[str]:
    """The lines of the README's first bash block after the sentence starting ``after``."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index(after):].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.e2e
def test_the_readmes_compare_loop_and_recovery_work_as_written_in_a_fresh_clone(tmp_path):
    """In a fresh clone, the README's loop as written: the diffs compare against a HEAD
    with metrics, `dvc exp show` fits 120 columns, queued experiments reuse the committed
    data, and the recovery after a failed experiment restores dvc.lock and the model."""
    project = tiny_project(tmp_path, dict(train_per_batch=100, test=100, seed=2),
                           train=dict(max_steps=8, batch_size=32, log_every=4, device="cpu"),
                           run=dict(checkpoint_every=4, summary_every=4),
                           input=dict(min_fraction_of_examples_in_queue=0.1))
    dvc(project, "repro")

    def sh(line, ok=True):
        proc = subprocess.run(["bash", "-c", line.replace("dvc ", f"{DVC} ")], cwd=project,
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "COLUMNS": "120"})
        assert proc.returncode == 0 or not ok, line + "\n" + proc.stdout + proc.stderr
        return proc

    loop = _readme_block("## Change a parameter and compare")
    assert loop[0].startswith("git add params.yaml dvc.lock reports/ && git commit")
    for line in loop:
        out = sh(line)
        assert "failed to load" not in out.stdout + out.stderr, line + out.stdout + out.stderr
        if line.startswith("dvc exp show"):
            widths = [len(row) for row in out.stdout.splitlines()]
            assert widths and max(widths) <= 120, out.stdout
    params = sh("dvc params diff")
    assert "failed to load" not in params.stdout + params.stderr and "batch_size" in params.stdout
    # queued experiments start from the committed run: its data are not made again
    for seed in (1, 2):
        dvc(project, "exp", "run", "--queue", "-n", f"seed{seed}", "-S", f"train.seed={seed}")
    run_queue(project)
    for seed in (1, 2):
        log = dvc(project, "queue", "logs", f"seed{seed}").stdout
        assert "Running stage 'train'" in log and "Running stage 'download'" not in log, log
    # a failed experiment (train runs, eval fails), then the README's recovery
    model, per_class = project / "data/train/model.pt", project / "reports/eval/per_class.csv"
    sh("git checkout -- . && dvc checkout")
    before = model.read_bytes(), per_class.read_bytes()
    failed = sh("dvc exp run -S train.batch_size=16 -S eval.device=cuda", ok=False)
    assert failed.returncode != 0 and "eval.device is cuda" in failed.stdout + failed.stderr
    assert model.read_bytes() != before[0]
    recovery = _readme_block("A failed `dvc exp run` leaves")
    assert len(recovery) == 1
    sh(recovery[0])
    assert (model.read_bytes(), per_class.read_bytes()) == before
    assert sh("git status --porcelain").stdout == ""
    assert "up to date" in dvc(project, "status", "dvc.yaml").stdout


@pytest.mark.e2e
def test_a_dvc_remote_shares_data_and_model_with_a_fresh_clone(tmp_path):
    """dvc push to a local-folder remote; a fresh clone pulls, and dvc repro recomputes nothing."""
    project = tiny_project(
        tmp_path, dict(train_per_batch=40, test=50, seed=5),
        train=dict(max_steps=6, batch_size=16, log_every=3,
                   device="cpu"), run=dict(checkpoint_every=3, summary_every=6),
        input={"min_fraction_of_examples_in_queue": 0.1})
    dvc(project, "repro")
    dvc(project, "remote", "add", "-d", "shared", str(tmp_path / "remote"))
    dvc(project, "push")
    commit(project, "a trained model, its data in the remote")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True)
    assert not (clone / "data/train/model.pt").exists()
    (tmp_path / "cifar-10-binary.tar.gz").unlink()  # the clone must get everything from the remote, not from the source
    dvc(clone, "pull", "dvc.yaml")  # the main pipeline (the exercises were not run)
    assert (clone / "data/train/model.pt").read_bytes() == (project / "data/train/model.pt").read_bytes()
    assert load_prepared(clone / "data/prepared").train_labels.shape == (200,)
    out = dvc(clone, "repro").stdout
    assert "Running stage" not in out and "Data and pipelines are up to date" in out, out
    # the model is declared as a DVC artifact (dvc.yaml `artifacts:`): registries find it
    from dvc.repo import Repo

    with Repo(str(clone)) as repo:
        artifact = repo.artifacts.read()["dvc.yaml"]["cifar10-cnn"]
    assert artifact.type == "model" and (clone / artifact.path).is_file()
    # a version registered as a GTO tag: `dvc artifacts get` fetches it from the remote
    subprocess.run(["git", "tag", "-a", "cifar10-cnn@v0.1.0", "-m", "Registering artifact "
                    "cifar10-cnn version v0.1.0"], cwd=project, check=True)
    (tmp_path / "get").mkdir()
    dvc(tmp_path / "get", "artifacts", "get", str(project), "cifar10-cnn")
    assert (tmp_path / "get/model.pt").read_bytes() == (project / "data/train/model.pt").read_bytes()


def _untimed(path: Path) -> dict:
    timings = {"examples_per_sec", "examples_per_sec_per_device", "wall_time_s",
               "time_to_first_batch_s", "train_seconds", "held_out_eval_seconds"}

    def strip(d):
        return {k: strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in timings}
    return strip(yaml.safe_load(path.read_text()))


@pytest.mark.e2e
def test_repro_f_twice_and_a_changed_archive_without_md5(tmp_path):
    """Two `dvc repro -f` give the same metrics (timings aside); with data.md5: null, a
    different archive at the same path, picked up by `dvc repro -f download`, trains from
    scratch even where an unfinished checkpoint of the old data is left."""
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    project = tiny_project(
        tmp_path, dict(train_per_batch=40, test=50, seed=5), md5=False,
        train=dict(max_steps=8, batch_size=16, log_every=2,
                   device="cpu"), run=dict(checkpoint_every=4, summary_every=4),
        input={"min_fraction_of_examples_in_queue": 0.5})
    archive = tmp_path / "cifar-10-binary.tar.gz"  # the project's data.url
    dvc(project, "repro")
    first = {m: _untimed(project / f"reports/{m}/metrics.json") for m in ("train", "eval")}
    dvc(project, "repro", "-f")
    again = {m: _untimed(project / f"reports/{m}/metrics.json") for m in ("train", "eval")}
    assert again == first and first["train"]["loss"] > 0
    assert first["train"]["step"] == 8
    # an unfinished run of the old data: the newest checkpoint at step 4
    (project / "data/train/checkpoints/ckpt-00000008.pt").unlink()
    make_cifar10_archive(archive, train_per_batch=20, test=50, seed=6)  # fewer images, same path
    assert "Data and pipelines are up to date" in dvc(project, "repro").stdout  # DVC cannot see it
    proc = subprocess.run([DVC, "repro", "-f", "download"], cwd=project, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([DVC, "repro"], cwd=project, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Running stage 'preprocess'" in proc.stdout and "Running stage 'train'" in proc.stdout
    assert "made with other data or params: starting afresh" in proc.stderr
    assert "resuming" not in proc.stderr
    assert load_prepared(project / "data/prepared").meta["counts"]["train"] == 100
    assert _untimed(project / "reports/train/metrics.json")["step"] == 8


@pytest.mark.parametrize("code, words", [(28, "No space left on device; free disk space"),
                                          (30, "Read-only file system; the file system is "
                                               "read-only")])
def test_a_full_disk_or_read_only_folder_is_one_line(tmp_path, code, words):
    import errno
    import os
    import sys

    assert code in (errno.ENOSPC, errno.EROFS)
    script = ("from cifar10_tutorial.cli import run_stage\n"
              "def main():\n"
              f"    raise OSError({code}, __import__('os').strerror({code}), 'data/train/model.pt.tmp')\n"
              "run_stage(main)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: data/train/model.pt.tmp: {words}"), proc.stderr


@pytest.mark.e2e
def test_exp_apply_before_a_first_commit_keeps_logs_and_checkpoints(tmp_path):
    """`dvc exp apply` stashes untracked files with `git stash -u`, which deletes ignored
    files inside an untracked folder: the repository tracks data/train/.gitignore itself,
    so that data/train/ (logs, checkpoints) is never such a folder."""
    project = tiny_project(tmp_path, dict(train_per_batch=20, test=20, seed=1),
                           train=dict(max_steps=4, batch_size=16, log_every=2, device="cpu"), run=dict(checkpoint_every=2, summary_every=2),
                           input={"min_fraction_of_examples_in_queue": 0.1},
                           eval={"every_steps": 0})
    dvc(project, "repro")  # no commit after it: dvc.lock and the outputs are untracked
    dvc(project, "exp", "run", "-S", "train.batch_size=8", "-n", "first")
    dvc(project, "exp", "run", "-S", "train.batch_size=4", "-n", "second")
    train = project / "data" / "train"
    before = sorted(p.relative_to(train).as_posix() for p in train.rglob("*"))
    assert len(list((train / "tensorboard").iterdir())) == 3 and (train / "checkpoints").is_dir()
    dvc(project, "exp", "apply", "first")
    after = sorted(p.relative_to(train).as_posix() for p in train.rglob("*"))
    assert after == before
    assert "batch_size: 8" in (project / "params.yaml").read_text()


@pytest.mark.e2e
def test_the_main_pipeline_works_without_the_exercise_params(tmp_path):
    """DVC reads reports/dvc.yaml for any command: a reports/params.yaml without
    `ablations:`, an empty one, or none leaves it no variant stage and every dvc command
    working; the exercise stages' loader refuses such a file by its name."""
    from cifar10_tutorial.params import ParamsError, load_params

    project = tiny_project(tmp_path)
    exercises = project / "reports/params.yaml"
    params = yaml.safe_load(exercises.read_text())
    for text in ("", yaml.safe_dump({k: v for k, v in params.items() if k != "ablations"}),
                 None):
        if text is None:
            exercises.unlink()
        else:
            exercises.write_text(text)
        proc = subprocess.run([DVC, "status"], cwd=project, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ablation@" not in proc.stdout and "train:" in proc.stdout
        with pytest.raises(ParamsError, match=rf"^{exercises}: (empty|has no ablations: "
                                              rf"section|no such file)"):
            load_params(exercises)
    exercises.write_text(yaml.safe_dump({**params, "ablations": {}}))
    proc = subprocess.run([DVC, "status"], cwd=project, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ablation@" not in proc.stdout


@pytest.mark.e2e
def test_the_published_weights_come_out_of_a_clone_as_the_docs_say(tmp_path):
    """The README's `dvc get URL PATH` works on a clone as it is; `dvc artifacts get URL
    cifar10-cnn-100k` needs a registered version ("Unable to find artifact" without one)
    and works once a version is tagged as docs/training.md says."""
    project = copy_project(tmp_path / "p")
    shutil.copytree(ROOT / "models", project / "models")
    init_repo(project)
    commit(project, "the project with its published weights")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True)
    want = (ROOT / "models/tutorial_100k/model.pt").read_bytes()
    assert "dvc get REPOSITORY models/tutorial_100k/model.pt" in (ROOT / "README.md").read_text()
    (tmp_path / "get").mkdir()
    dvc(tmp_path / "get", "get", str(clone), "models/tutorial_100k/model.pt", "-o", "model-100k.pt")
    assert (tmp_path / "get/model-100k.pt").read_bytes() == want
    proc = subprocess.run([DVC, "artifacts", "get", str(clone), "cifar10-cnn-100k"],
                          cwd=tmp_path / "get", capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Unable to find artifact" in proc.stdout + proc.stderr
    subprocess.run(["git", "tag", "-a", "cifar10-cnn-100k@v1.0.0", "-m", "Registering artifact "
                    "cifar10-cnn-100k version v1.0.0"], cwd=clone, check=True)
    dvc(tmp_path / "get", "artifacts", "get", str(clone), "cifar10-cnn-100k")
    assert (tmp_path / "get/model.pt").read_bytes() == want


@pytest.mark.e2e
def test_an_experiment_run_after_the_remote_is_added_travels_with_exp_push(tmp_path):
    """As docs/ci.md says: remote first, then dvc exp run; dvc exp push
    uploads its outputs and a clone's dvc exp pull + apply has its model."""
    project = tiny_project(tmp_path, dict(train_per_batch=20, test=20, seed=1),
                           train=dict(max_steps=4, batch_size=16, log_every=2, device="cpu"),
                           run=dict(checkpoint_every=2, summary_every=2),
                           input={"min_fraction_of_examples_in_queue": 0.1},
                           eval={"every_steps": 0})
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run(["git", "remote", "add", "origin", str(origin)], cwd=project, check=True)
    dvc(project, "remote", "add", "-d", "shared", str(tmp_path / "remote"))
    commit(project, "DVC remote")
    subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=project, check=True)
    dvc(project, "exp", "run", "-n", "bs8", "-S", "train.batch_size=8")
    pushed = dvc(project, "exp", "push", "origin", "bs8").stdout
    assert "Pushed experiment bs8" in pushed and "files uploaded" in pushed, pushed
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(origin), str(clone)], check=True)
    dvc(clone, "exp", "pull", "origin", "bs8")
    dvc(clone, "exp", "apply", "bs8")
    assert (clone / "data/train/model.pt").is_file()
    assert yaml.safe_load((clone / "params.yaml").read_text())["train"]["batch_size"] == 8


@pytest.mark.e2e
def test_queued_experiments_keep_their_checkpoints_and_tensorboard_logs(tmp_path):
    """After `dvc queue start` an experiment keeps its checkpoints and TensorBoard logs,
    not only reports/train: they are written outside DVC's temporary workspace."""
    project = tiny_project(tmp_path, dict(train_per_batch=20, test=20, seed=1),
                           train=dict(max_steps=4, batch_size=16, log_every=2, device="cpu"),
                           run=dict(checkpoint_every=2, summary_every=2),
                           input={"min_fraction_of_examples_in_queue": 0.1},
                           eval={"every_steps": 0})
    dvc(project, "repro")
    commit(project, "a first run")
    for bs in (8, 4):
        dvc(project, "exp", "run", "--queue", "-n", f"bs{bs}", "-S", f"train.batch_size={bs}")
    status = run_queue(project, jobs=2)
    assert "Success" in status and "Failed" not in status, status
    for name in ("bs8", "bs4"):
        ckpts = sorted((project / "data/train/queued" / name / "checkpoints").glob("ckpt-*.pt"))
        assert [p.name for p in ckpts] == ["ckpt-00000002.pt", "ckpt-00000004.pt"], name
        assert list((project / "data/train/tensorboard").glob(f"{name}-*/events.out.tfevents.*"))
    assert not (project / ".dvc/tmp/exps").exists() or not any(
        (project / ".dvc/tmp/exps").glob("*/data/train/checkpoints"))
    dvc(project, "repro")  # the workspace's own run is undisturbed by the queued ones' folders


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(name, size): a tmpfs of ``size`` mounted at tmp_path/name (skips where this
    user cannot mount one: it needs root)."""
    mounted = []

    def make(name: str, size: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.e2e
def test_a_disk_that_fills_up_is_one_line_naming_the_output(tmp_path, small_disk):
    """A full disk is one line naming the output that did not fit (numpy's and torch's own
    errors carry no errno), and no temporary file is left beside the outputs."""
    project = tiny_project(tmp_path, dict(train_per_batch=100, test=50, seed=2),
                           train=dict(max_steps=4, batch_size=16, log_every=2, device="cpu"),
                           run=dict(checkpoint_every=2, summary_every=2),
                           input={"min_fraction_of_examples_in_queue": 0.1},
                           eval={"every_steps": 0})
    dvc(project, "repro", "train")

    def one_line(proc, path):
        assert proc.returncode == 1, proc.stdout + proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert last.startswith(f"error: {path}") and "No space left on device; free disk " \
            "space there" in last, last

    full = small_disk("prep", "400k")
    one_line(run_stage(project, "preprocess", "--raw", "data/raw", "--out", str(full / "p")),
             full / "p")
    assert list(full.iterdir()) == []  # no temporary folder left
    full = small_disk("train", "1500k")  # the first checkpoint does not fit
    proc = run_stage(project, "train", "--out", str(full / "tr"), "--live", str(tmp_path / "lv"))
    one_line(proc, full / "tr" / "checkpoints")
    assert not list((full / "tr" / "checkpoints").glob("*.tmp"))
    full = small_disk("live", "4k")  # DVCLive's curves: its errors name no file
    proc = run_stage(project, "train", "--out", str(tmp_path / "tr2"), "--live", str(full / "lv"))
    one_line(proc, full / "lv")
    full = small_disk("mirror", "1m")  # the mirror's file is named, not the local one
    proc = run_stage(project, "train", "--out", str(tmp_path / "tr3"), "--live",
                     str(tmp_path / "lv3"), "--mirror", str(full))
    one_line(proc, full / "train" / "checkpoint.pt")
    assert not list((full / "train").glob("*.tmp"))
    full = small_disk("eval", "8k")
    proc = run_stage(project, "eval", "--out", str(full / "ev"))
    one_line(proc, full / "ev")
    # nothing half written left: no temporary file, no staging folder beside --out
    assert not [p for p in full.rglob("*") if ".tmp" in p.name or ".staging-" in p.name]
    full = small_disk("dl", "400k")  # the archive does not fit
    proc = run_stage(project, "download", "--out", str(full / "raw"), "--partial",
                     str(full / "part"))
    one_line(proc, full / "part")
