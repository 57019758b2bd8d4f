"""Published weights: a finished variant's model beside its records and a card that states
its precision (tools/publish.py), usable by predict and eval from anywhere; and the
project's own published weights, when committed, checked against their card."""
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from cifar10_tutorial.errors import PipelineError
from publish import publish  # tools/publish.py
from conftest import DVC, ROOT, SHARED, run_stage, set_params, tiny_project

PUBLISHED = "tutorial_100k"  # the variant whose weights the project publishes


def _run_in(cwd, *cmd):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


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
    proc = _run(project, "tools/publish.py", "tutorial_100k",
                "--model", "data/ablations/tutorial_100k/model.pt", "--results", str(results),
                "--out", str(out), "--check-data", "data/prepared")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.pt", "params.yaml", "provenance.json", "metrics.json", "README.md",
         "published.json"])
    manifest = json.loads((out / "published.json").read_text())
    assert manifest["name"] == "tutorial_100k" and manifest["step"] == 14
    assert {n: hashlib.sha256((out / n).read_bytes()).hexdigest()
            for n in manifest["files"]} == manifest["files"]
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
    # results edited after the run: metrics.json alone (its eval/ says otherwise), a
    # precision above 1, both records alike (the run's own last held-out evaluation says
    # otherwise), every record alike, the held-out curves deleted (its predictions say
    # otherwise), and its evaluation's files edited to agree too (the model gives another
    # precision than they state: only the evaluation run again tells)
    edited = tmp_path / "edited"
    shutil.copytree(results, edited)
    m = json.loads((edited / "metrics.json").read_text())
    t = json.loads((edited / "train/metrics.json").read_text())
    model = project / "data/ablations/tutorial_100k/model.pt"
    for value, how, said, check in (
            (m["eval"]["precision_at_1"] + 0.01, "metrics", r"eval/metrics.json: precision_at_1 "
                                                            r"not what .* gives", None),
            (1.7, "both", r"eval.precision_at_1 is 1.7, expected a fraction", None),
            (m["eval"]["precision_at_1"] + 0.01, "both", r"where train.held_out.precision_at_1 "
                                                         r"is .*: the same weights", None),
            (m["eval"]["precision_at_1"] + 0.01, "all", r"where its .*eval/predictions.csv "
                                                        r"gives .*: one evaluation writes both",
             None),
            (m["eval"]["precision_at_1"] + 0.01, "all", r"gives precision_at_1 = .* but its "
                                                        r"metrics state", project / "data/prepared")):
        held = {**m["train"]["held_out"], "precision_at_1": value} if how == "all" else \
            m["train"]["held_out"]
        (edited / "metrics.json").write_text(json.dumps(
            {"train": {**m["train"], "held_out": held},
             "eval": {**m["eval"], "precision_at_1": value}}))
        if how in ("both", "all"):
            (edited / "eval/metrics.json").write_text(json.dumps({**m["eval"],
                                                                  "precision_at_1": value}))
        if how == "all":
            (edited / "train/metrics.json").write_text(json.dumps({**t, "held_out": held}))
            shutil.rmtree(edited / "train/plots/metrics/held_out", ignore_errors=True)
            if check is not None:  # its predictions edited to agree as well
                _predictions_that_give(edited / "eval", value)
        with pytest.raises(PipelineError, match=said):
            publish("tutorial_100k", model, edited, tmp_path / "b", check_data=check)
        assert not (tmp_path / "b").exists()
    # an --out that holds files it did not make is not touched
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match=r"holds notes.txt, which publish did not make"):
        publish("tutorial_100k", project / "data/ablations/tutorial_100k/model.pt", results,
                tmp_path / "c")
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["notes.txt"]


@pytest.mark.e2e
@pytest.mark.parametrize("edit, said", [
    # a speed the run did not measure (its steps over its own training time)
    ("speed", r"metrics.json: train.examples_per_sec is 30, where the run's 14 steps of "
              r"\d+ images in its .* s of training \(its train_seconds\) give .* a second"),
    # a network size the model it publishes does not have
    ("num_params", r"metrics.json: train.num_params is 999, where tutorial_100k's network "
                   r"\(the model section of the params model.pt was trained with, .*\) has "
                   r"1,068,298"),
    # what variant.json copies from the run's record, contradicted there
    ("world_size", r"variant.json: world_size is 1, where .*train/provenance.json records 2: "
                   r"the stage writes one from the other"),
])
def test_publish_checks_the_figures_as_the_report_does(finished, tmp_path, edit, said):
    """Publish carries the variant's metrics.json and states its figures on the card: it
    checks the folder as the report does (one function, report.results
    check_results_folder), and the network's size against the model file it publishes.
    A speed, a parameter count or a record edited in every file alike is one line, and
    nothing is published."""
    project = finished
    edited = tmp_path / "edited"
    shutil.copytree(project / "reports" / "ablations" / "tutorial_100k", edited)
    if edit == "world_size":
        record = json.loads((edited / "train/provenance.json").read_text())
        (edited / "train/provenance.json").write_text(json.dumps({**record, "world_size": 2}))
    else:
        m = json.loads((edited / "metrics.json").read_text())
        m["train"].update({"speed": {"examples_per_sec": 30.0,
                                     "examples_per_sec_per_device": 30.0},
                           "num_params": {"num_params": 999}}[edit])
        (edited / "metrics.json").write_text(json.dumps(m))
        (edited / "train/metrics.json").write_text(json.dumps(m["train"]))
    proc = _run(project, "tools/publish.py", "tutorial_100k", "--model",
                "data/ablations/tutorial_100k/model.pt", "--results", str(edited), "--out",
                str(tmp_path / "pub"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(said, proc.stderr.strip().splitlines()[-1]), proc.stderr
    assert not (tmp_path / "pub").exists()


def _predictions_that_give(folder, precision):
    """An evaluation's predictions.csv and per_class.csv edited to give ``precision``
    (wrong rows made right, or right ones wrong; the raw weights' column as it was)."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO((folder / "predictions.csv").read_text())))[1:]
    need = round(precision * len(rows)) - sum(a == p for a, p in rows)
    for row in rows:
        if need > 0 and row[0] != row[1]:
            row[1], need = row[0], need - 1
        elif need < 0 and row[0] == row[1]:
            row[1], need = next(a for a, _ in rows if a != row[0]), need + 1
    (folder / "predictions.csv").write_text(
        "".join(f"{a},{p}\n" for a, p in [("actual", "predicted"), *rows]))
    table = list(csv.reader(io.StringIO((folder / "per_class.csv").read_text())))
    for line in table[1:]:
        mine = [p for a, p in rows if a == line[0]]
        line[2] = f"{sum(p == line[0] for p in mine) / len(mine):.4f}" if mine else "nan"
    (folder / "per_class.csv").write_text("".join(",".join(line) + "\n" for line in table))


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _one_error_line(proc):
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


CIFAR10 = str(Path(sys.executable).with_name("cifar10"))


@pytest.mark.e2e
def test_the_help_example_of_publish_runs(finished):
    """`cifar10 --help` gives an example for publish that runs as written once the
    variants have run (no option left to add), publishing in models/NAME."""
    from cifar10_tutorial.commands import COMMANDS

    example = shlex.split(COMMANDS["publish"][1])
    assert example[:2] == ["cifar10", "publish"]
    proc = subprocess.run([CIFAR10, *example[1:]], cwd=finished, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    name = example[2]
    out = finished / "models" / name
    card = (out / "README.md").read_text()
    assert card.startswith(f"# Published weights: `{name}`")
    assert json.loads((out / "published.json").read_text())["name"] == name
    shutil.rmtree(out)  # the fixture's project is shared: leave it as it was


@pytest.mark.e2e
def test_published_weights_are_replaced_only_on_request_and_only_by_their_variant(
        finished, tmp_path):
    """The name published must be the results' variant (baseline results published as
    tutorial_100k would get a card calling a baseline model tutorial_100k), and replacing a
    published folder takes --replace; without it, one line names the folder and nothing
    changes. Another variant's published weights, and a file of the user's there, are
    refused even with --replace."""
    project, out = finished, tmp_path / "models" / "tutorial_100k"
    first = _run(project, "tools/publish.py", "tutorial_100k",
                 "--out", str(out))
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    wrong = _run(project, "tools/publish.py", "tutorial_100k",
                 "--model", "data/ablations/baseline/model.pt",
                 "--results", "reports/ablations/baseline", "--out", str(out), "--replace")
    assert "variant.json: these are the results of the variant 'baseline', not " \
           "'tutorial_100k'" in _one_error_line(wrong)
    again = _run(project, "tools/publish.py", "tutorial_100k",
                 "--out", str(out))
    line = _one_error_line(again)
    precision = json.loads((out / "metrics.json").read_text())["eval"]["precision_at_1"]
    assert f"{out}: already holds published weights (tutorial_100k, step 14, " \
           f"{100 * precision:.2f}% held-out); give --replace to replace them with " \
           f"tutorial_100k at step 14" in line, line
    assert _snapshot(out) == before
    replaced = _run(project, "tools/publish.py", "tutorial_100k",
                    "--out", str(out), "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert _snapshot(out)["model.pt"] == before["model.pt"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["tutorial_100k"]  # no leftovers
    assert (f"note: {out}: the weights published there before (tutorial_100k, step 14, "
            f"{100 * precision:.2f}% held-out) are replaced by tutorial_100k at step 14") \
        in replaced.stderr, replaced.stderr
    # another variant's weights over them: refused even with --replace (the folder is
    # tutorial_100k's: the weights there may be the ones others use)
    replaced = _snapshot(out)
    other = _one_error_line(_run(project, "tools/publish.py", "baseline", "--out", str(out),
                                 "--replace"))
    assert (f"{out}: holds the published weights of tutorial_100k (tutorial_100k, step 14, "
            f"{100 * precision:.2f}% held-out), not baseline's, and publish replaces only a "
            f"variant's own; give another --out (the default is models/baseline)") in other, other
    assert _snapshot(out) == replaced
    # nor into a fresh folder named after another variant (dvc.yaml's artifact of the
    # 100K run is models/tutorial_100k/model.pt)
    fresh = tmp_path / "elsewhere" / "tutorial_100k"
    named = _one_error_line(_run(project, "tools/publish.py", "baseline", "--out", str(fresh)))
    assert (f"--out {fresh}: named after the variant tutorial_100k, not baseline: a published "
            f"folder takes its variant's name (models/NAME), so this one would be taken for "
            f"tutorial_100k's; publish baseline into models/baseline (the default)") in named, named
    assert not fresh.parent.exists()
    # a file of the user's in the published folder: refused, named, kept
    (out / "thesis-notes.md").write_text("mine")
    kept = _snapshot(out)
    line = _one_error_line(_run(project, "tools/publish.py",
                                "tutorial_100k", "--out", str(out), "--replace"))
    assert f"{out}: holds thesis-notes.md, which publish did not make" in line, line
    assert _snapshot(out) == kept


@pytest.mark.e2e
def test_a_missing_field_is_one_line_before_anything_is_replaced(finished, tmp_path,
                                                                 monkeypatch):
    """Every field the card states is read before anything is written: metrics.json
    without eval.num_examples is one line, and the published folder (model, records and
    the card's figures) stays as it was."""
    project, out = finished, tmp_path / "models" / "baseline"
    monkeypatch.chdir(project)  # where the eval record's model path is relative to
    assert publish("baseline", project / "data/ablations/baseline/model.pt",
                   project / "reports/ablations/baseline", out).is_file()
    before = _snapshot(out)
    damaged = tmp_path / "r5"
    shutil.copytree(project / "reports/ablations/baseline", damaged)
    m = json.loads((damaged / "metrics.json").read_text())
    del m["eval"]["num_examples"]
    (damaged / "metrics.json").write_text(json.dumps(m))
    proc = _run(project, "tools/publish.py", "baseline", "--model",
                "data/ablations/baseline/model.pt", "--results", str(damaged), "--out",
                str(out), "--replace")
    line = _one_error_line(proc)
    assert f"{damaged / 'metrics.json'}: expected eval.num_examples, found none" in line, line
    # a copy under another name is no stage's folder DVC can vouch for: said so
    assert f"note: {damaged} is not the ablation stage's folder of baseline" in proc.stderr
    assert _snapshot(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["baseline"]  # no temp folder


@pytest.mark.e2e
def test_a_model_of_other_params_at_the_same_step_is_not_published(finished, tmp_path):
    """The model file's params must be those variant.json records: a model of another
    seed, trained to the same step and put where the variant's model was, is refused, not
    published with the variant's card (which would state a precision it does not have)."""
    import torch

    project = finished
    results, model = tmp_path / "results", tmp_path / "run" / "model.pt"
    shutil.copytree(project / "reports/ablations/baseline", results)
    model.parent.mkdir()
    shutil.copyfile(project / "data/ablations/baseline/model.pt", model)
    ev = json.loads((results / "eval" / "provenance.json").read_text())
    ev["model"] = str(model)  # these results are of the model at this path
    (results / "eval" / "provenance.json").write_text(json.dumps(ev))
    assert publish("baseline", model, results, tmp_path / "ok").is_file()
    other = torch.load(model, weights_only=True)
    other["params"]["train"]["seed"] = 7  # as a seed-7 run of the same step records it
    torch.save(other, model)
    proc = _run(project, "tools/publish.py", "baseline", "--model",
                str(model), "--results", str(results), "--out", str(tmp_path / "p"))
    line = _one_error_line(proc)
    assert f"{model}: trained with train.seed = 7, but {results / 'variant.json'} records " \
           f"seed = 0" in line, line
    assert not (tmp_path / "p").exists()
    # a setting variant.json does not record (the learning rate: the variant rerun with
    # another since these results were copied): the eval record's params hash tells
    other["params"]["train"]["seed"] = 0
    other["params"]["train"]["initial_lr"] = 0.2
    torch.save(other, model)
    proc = _run(project, "tools/publish.py", "baseline", "--model",
                str(model), "--results", str(results), "--out", str(tmp_path / "p"))
    line = _one_error_line(proc)
    assert f"{results / 'eval/provenance.json'}: evaluated a model of params " \
           f"{ev['params_hash']}, but {model} was trained with params " in line, line
    assert not (tmp_path / "p").exists()
    # the run's model again, its training record naming other params (a copy's record
    # edited, or another run's): the card would publish that record
    shutil.copyfile(project / "data/ablations/baseline/model.pt", model)
    record = results / "train" / "provenance.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "params_hash": "0" * 16}))
    proc = _run(project, "tools/publish.py", "baseline", "--model",
                str(model), "--results", str(results), "--out", str(tmp_path / "p"))
    line = _one_error_line(proc)
    assert f"{results / 'eval/provenance.json'}: params_hash is '{ev['params_hash']}', where " \
           f"{record} records '0000000000000000': the model (its params) evaluated is not " \
           f"the run's" in line, line
    assert not (tmp_path / "p").exists()


@pytest.mark.e2e
def test_the_model_an_eval_record_names_is_of_the_results_repository(finished, tmp_path):
    """Run from another checkout, the eval record's relative model path names the model of
    the repository the results lie in, not that checkout's file of the same path."""
    import torch

    p = tmp_path / "p"
    shutil.copytree(finished, p, symlinks=True)
    (p / ".git").mkdir(exist_ok=True)  # a checkout (its results: no DVC records them)
    q = tmp_path / "q"
    (q / "data/ablations/baseline").mkdir(parents=True)
    other = torch.load(p / "data/ablations/baseline/model.pt", weights_only=True)
    other["params"]["train"]["initial_lr"] = 0.2  # another run of that path and step
    torch.save(other, q / "data/ablations/baseline/model.pt")
    proc = _run(q, str(ROOT / "tools/publish.py"), "baseline", "--results",
                str(p / "reports/ablations/baseline"), "--out", str(tmp_path / "pub"))
    assert proc.returncode == 0, proc.stderr
    assert "were not checked" in proc.stderr and "no DVC repository records them" in proc.stderr
    assert hashlib.sha256((tmp_path / "pub/model.pt").read_bytes()).digest() == \
        hashlib.sha256((p / "data/ablations/baseline/model.pt").read_bytes()).digest()


@pytest.mark.e2e
def test_a_worktree_without_the_model_is_sent_to_the_checkout_that_trained_it(finished,
                                                                            tmp_path):
    """A worktree of the checkout that trained the variant lacks its model (models are not
    in git). Neither line sends the user in a circle: the model at the record's path in
    another checkout cannot be told from another run's (no hash of it is recorded, and a
    model of other data has the same params), so both name the checkout that trained it."""
    p, w = tmp_path / "p", tmp_path / "w"
    for copy in (p, w):
        shutil.copytree(finished, copy, symlinks=True)
        (copy / ".git").mkdir(exist_ok=True)
    (w / "data/ablations/baseline/model.pt").unlink()
    proc = _run(w, str(ROOT / "tools/publish.py"), "baseline", "--out", str(tmp_path / "pub"))
    assert proc.returncode == 1 and "publish from the checkout that trained it" in proc.stderr
    proc = _run(w, str(ROOT / "tools/publish.py"), "baseline", "--model",
                str(p / "data/ablations/baseline/model.pt"), "--out", str(tmp_path / "pub"))
    assert proc.returncode == 1 and "not here: models are not kept in git" in proc.stderr \
        and "publish from the checkout that trained it" in proc.stderr, proc.stderr
    assert not (tmp_path / "pub").exists()


@pytest.mark.e2e
def test_a_card_of_results_no_stage_vouches_for_says_so_under_its_figures(finished, tmp_path):
    """--results a copy (edited, say): the card states its figures, and says under them
    that they were not checked and why, not only a note on the terminal."""
    copy = tmp_path / "copy" / "baseline"
    shutil.copytree(finished / "reports/ablations/baseline", copy)
    proc = _run(finished, "tools/publish.py", "baseline", "--results", str(copy), "--out",
                str(tmp_path / "pub"))
    assert proc.returncode == 0, proc.stderr
    card = (tmp_path / "pub/README.md").read_text()
    assert f"> **Unchecked.** {copy} is not the ablation stage's folder of baseline" in card


@pytest.mark.e2e
def test_another_checkouts_stage_folder_is_checked_where_it_lies(finished, tmp_path):
    """--results the ablation stage's folder of another checkout: that checkout's DVC can
    judge it, and does (stale there: refused), rather than a note that it cannot."""
    p = tmp_path / "p"
    shutil.copytree(finished, p, symlinks=True)
    _run_in(p, "git", "init", "-q")
    _run_in(p, DVC, "init", "-q")
    q = tmp_path / "q"
    q.mkdir()
    proc = _run(q, str(ROOT / "tools/publish.py"), "baseline", "--results",
                str(p / "reports/ablations/baseline"), "--out", str(tmp_path / "pub"))
    # its lock never made there: that checkout's DVC cannot vouch for them
    assert proc.returncode == 1 and "reports/dvc.lock is missing" in proc.stderr, proc.stderr
    assert not (tmp_path / "pub").exists()


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
    # fetched as the DVC artifact once a version is registered (a GTO tag): the clone's
    # own where the checkout has registered one, as the docs say, else one made here
    name = next(iter(_artifact()))
    tags = subprocess.run(["git", "-C", str(clone), "tag", "--list", f"{name}@*"],
                          capture_output=True, text=True, check=True).stdout.split()
    if not tags:
        subprocess.run(["git", "-C", str(clone), "-c", "user.name=test", "-c",
                        "user.email=test@localhost", "tag", "-a", f"{name}@v1.0.0", "-m",
                        "test"], check=True)
    (tmp_path / "got").mkdir()
    # a hang detector, not a speed test: 6 s by hand on 2 cores, minutes under a loaded
    # suite's other workers
    got = subprocess.run([DVC, "artifacts", "get", str(clone), name], cwd=tmp_path / "got",
                         capture_output=True, text=True, timeout=1800)
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


@pytest.mark.e2e
@pytest.mark.skipif(not (ROOT / "models" / PUBLISHED).exists(),
                    reason="the project's weights are not published yet")
@pytest.mark.parametrize("manifest", [True, False])
def test_the_projects_published_weights_are_not_replaced_without_a_question(finished, tmp_path,
                                                                            manifest):
    """The project's own published folder: a new tutorial_100k run is not published over
    it without --replace; the line names the folder and the weights it holds, and nothing
    in it changes. Without its manifest nothing there is publish's to replace, even with
    --replace (its files may be a user's copy, edited)."""
    out = tmp_path / "models" / PUBLISHED
    shutil.copytree(ROOT / "models" / PUBLISHED, out)
    if not manifest:
        (out / "published.json").unlink(missing_ok=True)
    before = _snapshot(out)
    steps = json.loads((out / "provenance.json").read_text())["steps"]
    line = _one_error_line(_run(finished, "tools/publish.py", PUBLISHED,
                                "--out", str(out)))
    if not manifest:
        for args in ((), ("--replace",)):
            line = _one_error_line(_run(finished, "tools/publish.py", PUBLISHED,
                                        "--out", str(out), *args))
            assert line.startswith(f"error: {out}: holds README.md, metrics.json, model.pt, "
                                   f"params.yaml, provenance.json and no published.json"), line
            assert _snapshot(out) == before
        return
    assert line.startswith(f"error: {out}: already holds published weights ({PUBLISHED}, "
                           f"step {steps:,}, "), line
    assert _snapshot(out) == before
    replaced = _run(finished, "tools/publish.py", PUBLISHED,
                    "--out", str(out), "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert "**14 steps**" in (out / "README.md").read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == [PUBLISHED]


def test_what_publish_may_replace_is_only_what_its_manifest_names(tmp_path):
    """The manifest decides what a --replace removes, so one naming files publish never
    writes (here '..') is refused, as is a link for --out; each before anything is read
    or written (the model and results given do not exist)."""
    out = tmp_path / "m"
    out.mkdir()
    (out / "published.json").write_text(json.dumps({"files": {"..": "0", "model.pt": "0"}}))
    (out / "model.pt").write_bytes(b"weights")
    before = _snapshot(out)
    with pytest.raises(PipelineError, match=r"m/published.json: not a manifest publish wrote"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", out, replace=True)
    assert _snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(PipelineError, match=r"link: a link, where publish writes a folder"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", tmp_path / "link",
                replace=True)
    assert _snapshot(out) == before
    # a manifest that cannot be read is --out's: the fix named is there, not the results'
    for text in ("", "[" * 100_000):
        (out / "published.json").write_text(text)
        with pytest.raises(PipelineError, match=rf"m/published.json: not valid JSON .*; move "
                                                rf"{re.escape(str(out))} away or give another "
                                                rf"--out. Nothing was changed.$"):
            publish("baseline", tmp_path / "none.pt", tmp_path / "none", out, replace=True)
        assert (out / "model.pt").read_bytes() == b"weights"


def test_a_linked_file_in_the_published_folder_is_refused(tmp_path):
    """A manifest (or any file publish writes) that is a link is not publish's: refused
    before anything is read, the link and what it points at left as they are."""
    out, elsewhere = tmp_path / "m", tmp_path / "elsewhere.json"
    out.mkdir()
    (out / "model.pt").write_bytes(b"w")
    elsewhere.write_text(json.dumps({"name": "baseline", "files": {
        "model.pt": hashlib.sha256(b"w").hexdigest()}}))
    (out / "published.json").symlink_to(elsewhere)
    before, text = _snapshot(out), elsewhere.read_text()
    with pytest.raises(PipelineError, match=r"m/published.json: a link, where publish writes "
                                            r"a file of its own"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", out, replace=True)
    assert _snapshot(out) == before and elsewhere.read_text() == text


def test_a_swapped_out_folder_holding_more_is_kept_and_returned(tmp_path):
    """The old folder a swap replaced keeps whatever is not the writer's, and the swap
    says where it is: the caller names it, never silently."""
    from cifar10_tutorial.files import swap_in_folder

    dest, staged = tmp_path / "d", tmp_path / ".d.staging-1-x"
    dest.mkdir()
    staged.mkdir()
    (dest / "model.pt").write_text("old")
    (dest / "notes.txt").write_text("mine")
    (staged / "model.pt").write_text("new")
    kept = swap_in_folder(staged, dest, {"model.pt"})
    assert (dest / "model.pt").read_text() == "new"
    assert kept is not None and (kept / "notes.txt").read_text() == "mine" \
        and (kept / "model.pt").read_text() == "old"
    (staged2 := tmp_path / ".d.staging-2-y").mkdir()
    (staged2 / "model.pt").write_text("newer")
    assert swap_in_folder(staged2, dest, {"model.pt"}) is None  # only its own: removed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["d", kept.name])


@pytest.mark.e2e
def test_publish_of_a_finished_variant_under_a_file_is_one_line(finished, tmp_path):
    """The command itself, with records it would publish: --out under a file is one line,
    not FileExistsError from making its folder; nothing is written."""
    (tmp_path / "afile").write_text("mine")
    proc = _run(finished, "tools/publish.py", "baseline", "--out", str(tmp_path / "afile" / "sub"))
    line = _one_error_line(proc)
    assert f"{tmp_path / 'afile'}: a file, where the run needs a folder" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "mine"


def test_an_out_whose_folder_cannot_be_made_is_one_line(tmp_path):
    """--out under a file (afile/sub) or where no folder can be made (/proc/x/y): one line
    naming the path and the fix, before the model or results are read, nothing changed."""
    (tmp_path / "afile").write_text("mine")
    cases = {tmp_path / "afile" / "sub": r"afile: a file, where the run needs a folder to "
                                          r"write into; give another path, or move that file",
             tmp_path / "afile" / "sub" / "deeper": r"afile: a file, where the run needs a "
                                                    r"folder to make .*afile/sub in; give "
                                                    r"another path, or move that file"}
    if Path("/proc/self").is_dir():
        cases[Path("/proc/x/y")] = r"^/proc: cannot write there \(.+\), and the run writes " \
                                   r"/proc/x; nothing was changed"
    for out, message in cases.items():
        with pytest.raises(PipelineError, match=message):
            publish("baseline", tmp_path / "none.pt", tmp_path / "none", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("files, why", [
    ({"README.md": "# my model\n"}, "no published.json, the manifest publish writes"),
    ({"model.pt": "mine"}, "no published.json, the manifest publish writes"),
    # the five names, the card even quoting model.pt's sha256: still not publish's to delete
    ({"model.pt": "x", "params.yaml": "mine", "provenance.json": "{}", "metrics.json": "{}",
      "README.md": f"sha256 `{hashlib.sha256(b'x').hexdigest()}`"},
     "no published.json, the manifest publish writes"),
    ("edited", "README.md: changed since publish wrote it"),
    # a manifest naming model.pt twice: which sha256 counts would be the parser's accident
    ("twice", "published.json: not valid JSON (the key 'model.pt' twice)"),
])
def test_a_replace_never_deletes_a_file_publish_did_not_write_as_it_is(tmp_path, files, why):
    """--replace removes only files publish wrote, as it wrote them: the manifest names
    them with their sha256, and without one nothing there is publish's (a card the user
    edited is theirs, as are files that only bear publish's names). Refused before the
    model or results are read."""
    out = tmp_path / "m"
    out.mkdir()
    if files == "edited":
        files = {"model.pt": "w", "README.md": "# card\n"}
        digest = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in files.items()}
        files["published.json"] = json.dumps({"name": "baseline", "files": digest})
        files["README.md"] = "# card\nmy notes on this model\n"
    elif files == "twice":
        right = hashlib.sha256(b"w").hexdigest()
        files = {"model.pt": "w", "published.json": '{"name": "baseline", "files": {'
                 f'"model.pt": "{"0" * 64}", "model.pt": "{right}"}}}}'}
    for name, text in files.items():
        (out / name).write_text(text)
    before = _snapshot(out)
    with pytest.raises(PipelineError, match=re.escape(why)):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", out, replace=True)
    assert _snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.parametrize("manifest", [True, False])
def test_an_interrupted_publishs_old_folder_is_removed_only_as_it_wrote_it(tmp_path, manifest):
    """The published folder an interrupted --replace set aside is removed by the next
    publish only when every file in it is as the manifest records it: an edited one, or
    no manifest, keeps the folder (named), whatever the file names."""
    from cifar10_tutorial.files import process_alive

    out = tmp_path / "o"
    pid = 999_999
    assert not process_alive(pid)
    aside = tmp_path / f".o.replaced-{pid}-zz"
    aside.mkdir()
    (aside / "metrics.json").write_text('{"edited": "by me"}\n')
    if manifest:
        digest = hashlib.sha256(b"as published\n").hexdigest()
        (aside / "published.json").write_text(json.dumps({"files": {"metrics.json": digest}}))
    out.mkdir()  # a complete replacement in place: the old folder would be removed
    (out / "published.json").write_text(json.dumps({"files": {}}))
    before = _snapshot(aside)
    from publish import FILES, MANIFEST, _as_written
    from cifar10_tutorial.files import recover_swapped_folder

    said = recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written)
    assert aside.is_dir() and _snapshot(aside) == before, said
    assert any("holds files it did not write" in line for line in said), said
    # as publish wrote it: removed
    (aside / "metrics.json").write_text("as published\n")
    if manifest:
        said = recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written)
        assert not aside.exists(), said


@pytest.mark.e2e
def test_a_publish_killed_mid_swap_is_noticed_by_the_next(finished, tmp_path):
    """A publish killed between the two renames of a swap (systems without renameat2) left
    the published folder beside its name: the next publish puts it back first, so that
    replacing those weights still takes --replace."""
    project, out = finished, tmp_path / "models" / "tutorial_100k"
    first = _run(project, "tools/publish.py", "tutorial_100k", "--out", str(out))
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # the killed publish's pid: no longer running
    out.rename(out.parent / f".tutorial_100k.replaced-{gone.pid}-x1")
    again = _run(project, "tools/publish.py", "tutorial_100k", "--out", str(out))
    assert "already holds published weights (tutorial_100k, step 14" in _one_error_line(again)
    assert "restored from .tutorial_100k.replaced-" in again.stderr
    assert _snapshot(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["tutorial_100k"]


@pytest.mark.e2e
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGHUP"])
def test_a_publish_stopped_from_outside_leaves_no_staging_folder(finished, tmp_path,
                                                                signal_name):
    """A stop from outside (`kill`, a closed terminal) while publish builds its folder:
    its clean-up runs (exit status 128 + the signal), and no half-built folder with the
    model's bytes is left beside --out for the next publish to find."""
    import signal

    out = tmp_path / "models" / "baseline"
    # the signal's default action, as in a terminal (a runner under nohup ignores SIGHUP,
    # and publish rightly keeps a handler its caller set)
    stopped = (f"import os, signal, sys; sys.path.insert(0, 'tools'); import publish\n"
               f"signal.signal(signal.{signal_name}, signal.SIG_DFL)\n"
               f"built = publish._write_folder\n"
               f"def stop_after(*a, **k):\n"
               f"    built(*a, **k); os.kill(os.getpid(), signal.{signal_name})\n"
               f"publish._write_folder = stop_after\n"
               f"sys.argv = ['cifar10 publish', 'baseline', '--out', {str(out)!r}]\n"
               f"from cifar10_tutorial.cli import run_stage; run_stage(publish.main)\n")
    proc = _run(finished, "-c", stopped)
    assert proc.returncode == 128 + getattr(signal, signal_name), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists() and list(out.parent.iterdir()) == [], list(out.parent.iterdir())


def test_the_default_results_folder_is_the_one_the_ablation_stage_writes(monkeypatch):
    from publish import variant_results

    monkeypatch.chdir(ROOT)
    assert variant_results("baseline") == Path("reports/ablations/baseline")


def test_a_folder_named_as_a_staging_one_is_removed_only_with_publishs_mark(tmp_path):
    """A folder publish was building carries its mark from its first write: a folder of
    that name without it (the user's own) keeps every file, whatever their names; one
    with the mark, left by a killed publish, is removed."""
    from publish import BUILDING, FILES, MANIFEST, _as_written
    from cifar10_tutorial.files import recover_swapped_folder

    out = tmp_path / "x"
    mine = tmp_path / ".x.staging-999999-mywork"
    mine.mkdir()
    (mine / "README.md").write_text("my notes\n")
    (mine / "params.yaml").write_text("mine: 1\n")
    before = _snapshot(mine)
    with pytest.raises(PipelineError):  # the model does not exist: refused after the clean-up
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", out)
    assert _snapshot(mine) == before
    killed = tmp_path / ".x.staging-999998-ab"
    killed.mkdir()
    (killed / BUILDING).write_text("")
    (killed / "model.pt").write_bytes(b"half")
    said = recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written)
    assert not killed.exists() and _snapshot(mine) == before, said
    assert any("holds files it did not write" in line and "mywork" in line for line in said)


def test_a_publish_killed_after_its_manifest_leaves_nothing_the_next_keeps(tmp_path):
    """Killed between writing its manifest and removing its mark: the staging folder is
    all publish's (the manifest's files with their digests, the manifest, the mark), so the
    next publish removes it rather than keep it as holding files publish did not write; a
    file the manifest does not name still keeps it."""
    import hashlib

    from publish import BUILDING, FILES, MANIFEST, _as_written
    from cifar10_tutorial.files import recover_swapped_folder

    out = tmp_path / "x"

    def killed(name: str):
        folder = tmp_path / name
        folder.mkdir()
        (folder / BUILDING).write_text("a folder cifar10 publish is building\n")
        for f in FILES:
            (folder / f).write_text(f"{f}\n")
        digests = {f: hashlib.sha256(f"{f}\n".encode()).hexdigest() for f in FILES}
        (folder / MANIFEST).write_text(json.dumps({"files": digests}))
        return folder

    whole = killed(".x.staging-999997-ab")
    extra = killed(".x.staging-999996-cd")
    (extra / "notes.md").write_text("mine\n")
    said = recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written)
    assert not whole.exists(), said
    assert (extra / "notes.md").read_text() == "mine\n" and (extra / "model.pt").exists()
    assert [line for line in said if "holds files it did not write" in line] == \
        [line for line in said if ".x.staging-999996-cd" in line], said


@pytest.mark.e2e
def test_the_cards_commands_quote_the_path_and_a_newline_is_refused(finished, tmp_path):
    """An --out with spaces and shell text: the card's commands, split as a shell splits
    them, pass the model file as one argument and run nothing else; an --out with a
    newline (which would split a command in two) is refused before anything is written."""
    out = tmp_path / "my models;touch pwned" / "w"
    proc = _run(finished, "tools/publish.py", "tutorial_100k", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    card = (out / "README.md").read_text()
    block = card.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2
    for line in block:
        words = shlex.split(line)
        assert words[words.index("--model") + 1] == f"{out}/model.pt", line
        assert not {";", "&&", "|"} & set(words), line
    bad = tmp_path / "new\nline"
    proc = _run(finished, "tools/publish.py", "tutorial_100k", "--out", str(bad))
    assert proc.returncode == 1 and "holds a newline or another control character" in \
        proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not bad.exists()


def test_a_variant_never_trained_is_named_with_its_own_stage(tmp_path):
    """A variant whose model does not exist yet: the line names the variant's stage to run
    (reports/dvc.yaml's ablation@NAME), not the main pipeline's train stage."""
    with pytest.raises(PipelineError, match=r"^" + re.escape(
            f"{tmp_path / 'none.pt'}: no trained model for softmax; run the variant first "
            f"(`dvc repro -s reports/dvc.yaml:ablation@softmax`), or give --model")):
        publish("softmax", tmp_path / "none.pt", tmp_path / "none", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["a" * 300, "../x", "-rf", "1abc"])
def test_a_name_that_is_not_a_variant_name_is_one_line(name):
    """NAME names a folder and the model card: a 300-character one, a path or an option
    is one line before anything is read."""
    from cifar10_tutorial.errors import PipelineError
    from publish import main

    with pytest.raises(PipelineError, match=r"expected a variant name"):
        main([name] if not name.startswith("-") else ["--", name])


def test_a_card_for_a_folder_named_like_an_option_still_runs(finished, tmp_path):
    """A card's commands for an --out named '-rf' (given relative, as `--out=-rf`): the
    paths they name are arguments (./-rf/model.pt, ./-rf-eval), never options argparse
    would take."""
    proc = _run(finished, "tools/publish.py", "tutorial_100k", "--out=-rf")
    try:
        assert proc.returncode == 0, proc.stderr
        card = (finished / "-rf" / "README.md").read_text()
    finally:
        shutil.rmtree(finished / "-rf", ignore_errors=True)
    for start, option, value in (("python stages/eval.py", "--out", "./-rf-eval"),
                                 ("python stages/eval.py", "--model", "./-rf/model.pt"),
                                 ("python -m cifar10_tutorial.evaluation.predict", "--model",
                                  "./-rf/model.pt")):
        line = next(l for l in card.splitlines() if l.startswith(start))
        words = shlex.split(line)
        assert words[words.index(option) + 1] == value, line


def test_an_out_inside_a_published_folder_is_refused(tmp_path, monkeypatch):
    """A published folder holds what its manifest and card list: a second model published
    in a folder under it (models/tutorial_100k/sub) is refused before anything is written."""
    published = tmp_path / "models/tutorial_100k"
    published.mkdir(parents=True)
    (published / "published.json").write_text('{"files": {"model.pt": "0"}}')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"^--out models/tutorial_100k/sub: inside .*"
                                            r"models/tutorial_100k, a folder of published weights"):
        publish("softmax", tmp_path / "none.pt", tmp_path / "none",
                Path("models/tutorial_100k/sub"))
    assert sorted(p.name for p in published.iterdir()) == ["published.json"]


@pytest.mark.parametrize("out", [".git/pub", ".dvc/cache/pub"])
def test_an_out_in_gits_or_dvcs_own_folder_is_refused(tmp_path, monkeypatch, out):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".dvc").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"inside \.(git|dvc)/, (git|DVC)'s own folder"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", Path(out))
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".dvc", ".git"]


@pytest.mark.parametrize("out, how, stage", [
    ("reports/ablations/baseline/eval/pub", "lies inside", "ablation@baseline"),
    ("data/prepared", "is", "preprocess"),
    ("reports", "holds", "ablation@baseline"),
])
def test_an_out_among_a_stages_outputs_is_refused(tmp_path, monkeypatch, out, how, stage):
    """Published weights inside (or around) a DVC stage's output would change that output:
    `dvc status` calls it modified, and the stage's next run replaces it with the folder.
    The outputs come from dvc.yaml and from the lock (a foreach stage's resolved paths)."""
    (tmp_path / "reports").mkdir()
    (tmp_path / "dvc.yaml").write_text("stages:\n  preprocess:\n    cmd: x\n    outs:\n"
                                       "    - data/prepared\n")
    (tmp_path / "reports/dvc.yaml").write_text(
        "stages:\n  ablation:\n    foreach: [baseline]\n    do:\n      wdir: ..\n"
        "      cmd: x ${key}\n      outs:\n      - reports/ablations/${key}/eval\n")
    (tmp_path / "reports/dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  ablation@baseline:\n    cmd: x baseline\n    outs:\n"
        "    - path: reports/ablations/baseline/eval\n      hash: md5\n")
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(PipelineError, match=rf"^--out {out}: {how} \S+, an output of the DVC "
                                            rf"stage '{stage}'.* Nothing was changed\.$"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", Path(out))
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_pipeline_with_a_stage_written_twice_is_read_as_dvc_reads_it(tmp_path, monkeypatch):
    """dvc.yaml naming a stage twice: PyYAML keeps the second copy (no outputs), DVC refuses
    the file. Publish reads it as DVC does: one line naming the key, nothing written, never
    a folder published into the first copy's output."""
    (tmp_path / "dvc.yaml").write_text("stages:\n  preprocess:\n    cmd: x\n    outs:\n"
                                       "    - data/prepared\n  preprocess:\n    cmd: y\n")
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(PipelineError, match=r"^dvc.yaml: the key 'preprocess' appears twice "
                                            r"\(line 6\); keep one"):
        publish("baseline", tmp_path / "none.pt", tmp_path / "none", Path("data/prepared"))
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_an_out_among_a_foreach_output_of_a_variant_not_run_yet_is_refused(tmp_path,
                                                                            monkeypatch):
    """A variant defined but never run has no lock entry: its output comes from the
    foreach template (`${key}` standing for any name)."""
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/dvc.yaml").write_text(
        "stages:\n  ablation:\n    foreach: [baseline, zz]\n    do:\n      wdir: ..\n"
        "      cmd: x ${key}\n      outs:\n      - reports/ablations/${key}/eval\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"^--out reports/ablations/zz/eval: is "
                                            r"reports/ablations/zz/eval, an output of the "
                                            r"DVC stage 'ablation' \(for a variant named "
                                            r"zz\)"):
        publish("zz", tmp_path / "none.pt", tmp_path / "none", Path("reports/ablations/zz/eval"))
    with pytest.raises(PipelineError, match=r"^--out reports/ablations/zz/eval/pub: lies inside "
                                            r".* the DVC stage 'ablation' \(for a variant "
                                            r"named zz\)"):
        publish("zz", tmp_path / "none.pt", tmp_path / "none",
                Path("reports/ablations/zz/eval/pub"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_curves_past_the_models_step_are_another_runs(tmp_path):
    """A results folder whose DVCLive curves run past the model's step (left from a longer
    run) would put another run's precision on the card: one line, before anything."""
    from cifar10_tutorial.errors import PipelineError
    from publish import _curve

    held = tmp_path / "r/train/plots/metrics/held_out"
    held.mkdir(parents=True)
    (held / "precision_at_1.tsv").write_text("step\tprecision_at_1\n5000\t0.75\n10000\t0.78\n")
    assert any("10,000" in line for line in _curve(tmp_path / "r", 10_000))
    with pytest.raises(PipelineError, match=r"held_out: curves to step 10,000, past the "
                                            r"model's step 2: another run's"):
        _curve(tmp_path / "r", 2)


@pytest.mark.parametrize("what", ["fifo", "file", "missing"])
def test_a_results_option_that_is_no_folder_is_named_as_given(tmp_path, what):
    """--results naming a FIFO, a file or nothing: one line naming the option as given,
    never a path inside it nor an errno's words."""
    import os

    from publish import main

    given = tmp_path / "r"
    if what == "fifo":
        os.mkfifo(given)
    elif what == "file":
        given.write_text("{}")
    said = {"fifo": r"not a folder \(a FIFO, socket or device\)", "file": "a file",
            "missing": "not found"}[what]
    with pytest.raises(PipelineError, match=rf"^--results {re.escape(str(given))}: {said}, "
                                            rf"where publish reads the variant's results folder"):
        main(["baseline", "--results", str(given), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_publish_out_dash_is_refused_not_made_a_folder(tmp_path):
    """--out - reads as the standard output everywhere else: refused by argparse in one
    line, before anything runs; a folder of that name is still ./-."""
    from conftest import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / "tools/publish.py"), "baseline", "--out",
                           "-"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "argument --out: '-', which commands read as the standard output; publish writes a "
        "folder: give its path (./- for a folder named so)"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_at_out_names_out_not_the_model(finished, tmp_path):
    """The disk of --out full while the model is copied there: the line names --out (whose
    disk is full), not the variant's model it copies from; nothing is left at --out."""
    out = tmp_path / "pub"
    code = ("import errno, os, runpy, shutil, sys\n"
            "def full(src, dst, *a, **k):\n"
            "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))\n"
            "shutil.copyfile = full\n"
            "sys.path.insert(0, 'tools')\n"
            f"sys.argv = ['tools/publish.py', 'baseline', '--out', {str(out)!r}]\n"
            "runpy.run_path('tools/publish.py', run_name='__main__')\n")
    proc = _run(finished, "-c", code)
    line = _one_error_line(proc)
    assert f"{out}: No space left on device" in line and "model.pt" not in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_at_the_first_write_names_out(finished, tmp_path):
    """The disk of --out full from publish's first write on (its building mark), raised as
    a full disk is by a plain write, without a file name: the line names --out, not "an
    output file"; nothing is left at --out."""
    out = tmp_path / "pub"
    code = ("import errno, os, pathlib, runpy, sys\n"
            "def full(self, *a, **k):\n"
            "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
            "pathlib.Path.write_text = full\n"
            "sys.path.insert(0, 'tools')\n"
            f"sys.argv = ['tools/publish.py', 'baseline', '--out', {str(out)!r}]\n"
            "runpy.run_path('tools/publish.py', run_name='__main__')\n")
    proc = _run(finished, "-c", code)
    line = _one_error_line(proc)
    assert line.startswith(f"error: {out}: No space left on device"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["inside-results", "results-inside-out"])
def test_published_weights_and_their_results_are_folders_apart(finished, tmp_path, where):
    """--out inside --results would write the published files into the variant's results
    (a DVC stage's output), and --results inside --out would publish a folder into
    itself: one line naming both, nothing written anywhere."""
    import shutil

    outer = tmp_path / "outer"
    results = outer / "results" if where == "results-inside-out" else tmp_path / "results"
    shutil.copytree(finished / "reports/ablations/baseline", results)
    out = results / "published" if where == "inside-results" else outer
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = _run(finished, "tools/publish.py", "baseline", "--results", str(results), "--out",
                str(out))
    line = _one_error_line(proc)
    assert f"--results {results.resolve()} and --out {out.resolve()}: one inside the other; " \
           f"each is a folder of its own" in line, line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
