"""The exercises as ablation variants, and the report built from their results."""
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.params import ParamsError, load_params, params_from_dict, variant_params
from cifar10_tutorial.report.report import make_report
from conftest import ROOT, commit, dvc, run_queue, set_params



def _run_variant_stage(project: Path, script: str, name: str, *options: str,
                       params: str = "reports/params.yaml",
                       timeout: int = 300) -> subprocess.CompletedProcess:
    """``stages/<script>.py NAME --params PARAMS OPTIONS`` in ``project`` by hand (outside
    DVC: no DVC_STAGE), with this checkout's package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("DVC_STAGE", None)
    return subprocess.run([sys.executable, f"stages/{script}.py", name, "--params", params,
                           *options], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)

def test_variants_override_the_baseline_and_share_the_budget():
    params = load_params(ROOT / "reports/params.yaml")
    assert {"baseline", "softmax", "local_head", "queue_fill_10pct", "queue_fill_1pct",
            "queue_fill_0pct", "devices_2x64", "no_lrn"} <= set(params.ablations)
    base = variant_params(params, "baseline")
    budget = params.ablation.max_steps  # a trial (the docs' loop) cuts every variant to it
    trial = params.ablation.trial_steps
    assert base.train.max_steps == (budget if trial is None else min(budget, trial))
    assert base.model == params.model and base.input == params.input
    assert variant_params(params, "softmax").model.output == "softmax"
    assert variant_params(params, "local_head").model.head == "local"
    assert variant_params(params, "queue_fill_0pct").input.min_fraction_of_examples_in_queue == 0.0
    two = variant_params(params, "devices_2x64").train
    assert (two.num_devices, two.batch_size) == (2, 64)
    assert variant_params(params, "no_lrn").model.lrn is False


@pytest.mark.parametrize("ablations, expected", [
    ({"x": {"model": {"ouput": "softmax"}}}, r"ablations.x: unknown key model.ouput"),
    ({"x": {"model": {"head": "conv"}}}, r"ablations.x: model.head: expected one of 'fc' \| 'local', found 'conv'"),
    ({"x y": {}}, r"^ablations: variant name 'x y' must be a string starting with an ASCII "
                  r"letter \(a-z, A-Z\), then ASCII letters, digits, '_' or '-', at most 64 "
                  r"characters$"),
    ({"é_var": {}}, r"^ablations: variant name 'é_var' must be a string starting with an ASCII "
                    r"letter"),
    ({"--help": {}}, r"^ablations: variant name '--help' must be a string starting with an ASCII letter"),
    ({123: {}}, r"^ablations: variant name 123 must be a string starting with an ASCII letter.* \(YAML "
                r"reads this key as a number: rename it\)$"),
    ({True: {}}, r"^ablations: variant name True must be a string .* \(YAML reads this key as "
                 r"true or false: quote it\)$"),
    ({"a" * 300: {}}, r"^ablations: variant name 'aaaaaaaaaaaaaaaaaaaa'\.\.\. has 300 "
                      r"characters; a name is a string starting with an ASCII letter.* at most 64"),
    ({"x": {"ablation": {"max_steps": 3}}}, r"^ablations.x: a variant cannot override ablation: "
                                            r"\(what every variant shares"),
    ({"dat1": {"data": {"dataset": "svhn"}}}, r"^ablations.dat1: a variant cannot override data: "
                                              r"\(data-set variants go under dataset_ablations:\)$"),
    ({"x": {"regression": {"baseline": None}}}, r"^ablations.x: a variant cannot override "
                                                r"regression: \(the main pipeline's gate"),
])
def test_bad_variants_are_errors(ablations, expected):
    """One line for each: a name that is no string, starts with no letter or is too long
    for a folder's name, and a variant overriding what a variant cannot change."""
    with pytest.raises(ParamsError, match=expected):
        params_from_dict({"ablations": ablations})
    (name, overrides), = ablations.items()
    if "data" in overrides:  # a data-set variant's own data
        assert params_from_dict({"dataset_ablations": ablations}).dataset_ablations[name]
        return
    with pytest.raises(ParamsError, match=expected.replace("^ablations", "^dataset_ablations")):
        params_from_dict({"dataset_ablations": ablations})


def test_a_trial_evaluates_the_first_trial_eval_images_held_out_images():
    """ablation.trial_eval_images cuts the held-out split in a trial only (evaluation would
    be most of a trial's time); null, or more than there are, keeps all."""
    import numpy as np

    from cifar10_tutorial.data.prepared import Prepared
    from cifar10_tutorial.exercises.ablation import trial_held_out
    from cifar10_tutorial.params import AblationParams

    data = Prepared(np.zeros((8, 3, 32, 32), np.uint8), np.zeros(8, np.int64),
                    np.arange(50 * 3 * 32 * 32, dtype=np.int64).astype(np.uint8).reshape(50, 3, 32, 32),
                    np.arange(50) % 10, {"counts": {"train": 8, "test": 50}, "num_classes": 10})
    assert trial_held_out(AblationParams(trial_eval_images=20), data) is data  # not a trial
    assert trial_held_out(AblationParams(trial_steps=5, trial_eval_images=None), data) is data
    assert trial_held_out(AblationParams(trial_steps=5, trial_eval_images=50), data) is data
    cut = trial_held_out(AblationParams(trial_steps=5, trial_eval_images=20), data)
    assert (cut.test_images == data.test_images[:20]).all() and len(cut.test_images) == 20
    assert (cut.test_labels == data.test_labels[:20]).all() and len(cut.test_labels) == 20
    assert cut.train_images is data.train_images and cut.meta["counts"] == {"train": 8, "test": 20}
    assert cut.content_hash != data.content_hash and data.meta["counts"]["test"] == 50


def test_a_trial_trains_in_a_folder_of_its_own(tmp_path):
    """A trial's few-step model and checkpoints go to --trial-work, never over a full run's
    in --work; without --trial-work, or with the same folder, a trial is refused."""
    from cifar10_tutorial.training.paths import training_work
    from cifar10_tutorial.params import AblationParams

    work, trial = tmp_path / "ablations/x", tmp_path / "trials/x"
    assert training_work(AblationParams(), "x", work, trial) == work
    assert training_work(AblationParams(), "x", work, None) == work
    assert training_work(AblationParams(trial_steps=5), "x", work, trial) == trial
    with pytest.raises(PipelineError, match=r"a trial \(ablation.trial_steps: 5\) would replace "
                                            r"the full run's model and checkpoints there; give "
                                            r"it a folder of its own with --trial-work "
                                            r"\(reports/dvc.yaml gives data/trials/x\)"):
        training_work(AblationParams(trial_steps=5), "x", work, None)
    with pytest.raises(PipelineError, match=r"expected a folder other than --work"):
        training_work(AblationParams(trial_steps=5), "x", work, tmp_path / "trials/../ablations/x")


@pytest.mark.e2e
def test_queued_variants_keep_their_models_and_checkpoints(tmp_path):
    """`dvc queue start` runs each experiment in a temporary workspace that DVC deletes
    afterwards (docs/exercises.md runs the variants so): a variant's model, checkpoints and
    TensorBoard logs, which are not DVC outputs, are written in the repository's folder
    instead: data/ablations/NAME/queued/EXPERIMENT, a trial's
    data/trials/NAME/queued/EXPERIMENT."""
    import yaml

    from conftest import tiny_project

    project = tiny_project(tmp_path, dict(train_per_batch=60, test=50, seed=2),
                           ablation={"max_steps": 4}, eval={"batch_size": 25},
                           train={"device": "cpu", "batch_size": 16},
                           run={"checkpoint_every": 2, "summary_every": 2})
    raw = yaml.safe_load((project / "reports/params.yaml").read_text())
    raw["ablations"] = {"baseline": {}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "dvc.yaml:preprocess")
    commit(project, "one variant, data prepared")
    dvc(project, "exp", "run", "--queue", "-n", "qfull", "reports/dvc.yaml:ablation@baseline")
    dvc(project, "exp", "run", "--queue", "-n", "qtrial", "-S", "reports/params.yaml:ablation.trial_steps=2",
        "reports/dvc.yaml:ablation@baseline")
    status = run_queue(project, jobs=1)
    assert status.count("Success") == 2 and "Failed" not in status, status
    for kept, steps in ((project / "data/ablations/baseline/queued/qfull", [2, 4]),
                        (project / "data/trials/baseline/queued/qtrial", [2])):
        assert (kept / "model.pt").is_file(), kept
        assert [p.name for p in sorted((kept / "checkpoints").glob("ckpt-*.pt"))] == [
            f"ckpt-{s:08d}.pt" for s in steps], kept
        assert list((kept / "tensorboard").rglob("events.out.tfevents.*")), kept
    assert not (project / "data/ablations/baseline/model.pt").exists()
    dvc(project, "repro", "reports/dvc.yaml:ablation@baseline")  # the workspace's own run
    assert (project / "data/ablations/baseline/model.pt").is_file()


def test_report_needs_results(tmp_path):
    """An empty results folder: the ablation stages have not run. A folder that is not
    there (a typo) or a file: running them would not help; the folder is named."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipelineError, match=r"no ablation results.*dvc repro reports/dvc.yaml:report"):
        make_report(tmp_path / "empty", tmp_path / "out")
    (tmp_path / "file").write_text("")
    for given, said in (("none", "not found"), ("file", "not a folder")):
        with pytest.raises(PipelineError, match=rf"{given}: {said}, where every variant's "
                                                rf"results are expected .*give that folder"):
            make_report(tmp_path / given, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_tiny_ablation_set_and_report_through_dvc(exercise_run, tmp_path):
    """The exercise pipeline of conftest's exercise_run (every variant, SVHN as a data-set
    variant, 12 steps each), then a changed variant, a remote and a clone."""
    project, out, names = exercise_run["project"], exercise_run["out"], exercise_run["names"]
    for name in names:
        assert f"Running stage 'reports/dvc.yaml:ablation@{name}'" in out
    assert "Running stage 'reports/dvc.yaml:dataset_ablation@svhn'" in out
    assert "Running stage 'train'" not in out  # the ablations do not need the main run
    rep = project / "reports"
    text = (rep / "report.md").read_text()
    for heading in ("## Exercise 1", "## Exercise 2", "## Exercise 3", "## Exercise 4",
                    "## Exercise 5", "## Exercise 6", "## Without local response normalization"):
        assert heading in text
    assert "svhn" in text.split("## Exercise 6", 1)[1].split("\n## ", 1)[0]
    for table in ("summary", "exercise1_softmax", "exercise2_local_head", "exercise3_queue_fill",
                  "exercise4_averaging", "exercise5_devices", "no_lrn"):
        assert (rep / "tables" / f"{table}.csv").is_file(), table
    for plot in ("loss_curves", "averaged_vs_raw", "queue_fill_first_step", "devices_throughput"):
        assert (rep / "plots" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG", plot
    # the numbers in the report are the measured ones
    results = {n: json.loads((rep / "ablations" / n / "metrics.json").read_text()) for n in names}
    v = {n: json.loads((rep / "ablations" / n / "variant.json").read_text()) for n in names}
    m = {n: {**r["train"], **r["eval"]} for n, r in results.items()}
    assert v["devices_2x64"]["world_size"] == 2 and v["devices_2x64"]["global_batch_size"] == 128
    assert m["local_head"]["num_params"] == 2_112_970 and m["baseline"]["num_params"] == 1_068_298
    assert all(r["step"] == 12 for n, r in m.items() if n[:9] not in ("schedule_", "tutorial_"))
    assert m["schedule_fast_50"]["step"] == 12  # 3 epochs of 500 images at 128
    assert m["tutorial_100k"]["step"] == 14
    # the schedule pair: 2 epochs of 500 images at 128 = 8 steps, held-out curves every 3 steps
    assert m["schedule_fast"]["step"] == m["schedule_tutorial"]["step"] == 8
    assert v["schedule_fast"]["schedule"] == "fast" and "train_seconds" in m["schedule_fast"]
    assert v["baseline_seed2"]["seed"] == 2 and m["baseline_seed2"]["loss"] != m["baseline"]["loss"]
    assert "## Time to accuracy" in text and "## The tutorial at its own budget" in text
    # 12 steps: a banner, and no answers
    assert "**Too short to answer.** The exercise variants ran 12 steps" in text
    assert "*Answer:*" not in text and "*Answer withheld:*" in text
    assert "ran 14 of the tutorial's 100,000 steps" in text
    assert (rep / "plots" / "reproduction.png").read_bytes()[:4] == b"\x89PNG"
    assert (rep / "plots" / "time_to_accuracy.png").read_bytes()[:4] == b"\x89PNG"
    tta = (rep / "tables" / "time_to_accuracy.csv").read_text()
    assert "schedule_fast,fast,2.0,8," in tta and "schedule_tutorial,tutorial,2.0,8," in tta
    summary = pd.read_csv(rep / "tables" / "summary.csv")
    row = summary[summary["variant"] == "baseline"].iloc[0]
    assert row["precision @ 1 (averaged)"] == f"{100 * m['baseline']['precision_at_1']:.1f}%"
    q = pd.read_csv(rep / "tables" / "exercise3_queue_fill.csv")
    assert list(q["min fraction"]) == [0.4, 0.1, 0.01, 0.0]
    gain = 100 * (m["no_lrn"]["precision_at_1"] - m["no_lrn"]["precision_at_1_raw"])
    assert f"{gain:+.1f}" in (rep / "tables" / "exercise4_averaging.csv").read_text()
    # softmax trains exactly like the baseline: the report says so
    assert results["softmax"]["train"]["loss_avg"] == results["baseline"]["train"]["loss_avg"]
    # how the results were made: one commit and one data set for every variant
    assert "## How these results were made" in text
    made = {n: json.loads((rep / "ablations" / n / "train" / "provenance.json").read_text())
            for n in names}
    assert len({p["commit"] for p in made.values()}) == 1 and None not in {p["commit"] for p in made.values()}
    assert len({p["data_hash"] for p in made.values()}) == 1
    assert made["softmax"]["params_hash"] != made["baseline"]["params_hash"]
    assert "All variants were made by one commit, on the same data; the exercises at one " \
           "budget." in text
    # changing one variant reruns only that variant and the report
    set_params(project, "ablations", no_lrn={"model": {"lrn": False}, "train": {"seed": 1}})
    # by hand, the report refuses results no longer of their definition (DVC knows which)
    before = (rep / "report.md").read_bytes()
    proc = subprocess.run([str(Path(sys.executable).with_name("cifar10")), "report"],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert ("reports/ablations: the results of no_lrn are not of their definition as it is now "
            "(`dvc status --with-deps reports/dvc.yaml`: no_lrn: reports/params.yaml ablations.no_lrn "
            "modified); rerun them first") in line, line
    assert (rep / "report.md").read_bytes() == before
    # ... and so does the report stage alone: its last report stays (DVC removes no output
    # of it before it runs), and publish through a link to the variant's folder
    proc = subprocess.run([str(Path(sys.executable).with_name("dvc")), "repro", "--single-item",
                           "reports/dvc.yaml:report"], cwd=project, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "the results of no_lrn are not" in proc.stdout + proc.stderr
    assert (rep / "report.md").read_bytes() == before and (rep / "tables").is_dir()
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "no_lrn").symlink_to(rep / "ablations" / "no_lrn")
    proc = subprocess.run([str(Path(sys.executable).with_name("cifar10")), "publish", "no_lrn",
                           "--results", str(tmp_path / "link" / "no_lrn"), "--out",
                           str(tmp_path / "pub")], cwd=project, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "the results of no_lrn are not" in proc.stderr, proc.stderr
    assert not (tmp_path / "pub").exists()
    out = dvc(project, "repro", "reports/dvc.yaml:report").stdout
    ran = [l for l in out.splitlines() if l.startswith("Running stage")]
    assert ran == ["Running stage 'reports/dvc.yaml:ablation@no_lrn':",
                   "Running stage 'reports/dvc.yaml:report':"]

    # Both pipelines ran: repo-wide commands work, and a clone that pulled recomputes nothing
    dvc(project, "repro")
    # `dvc plots show` draws the main pipeline's curves, the loss once, no report PNG
    shown = json.loads(dvc(project, "plots", "show", "--json", "--split").stdout)["data"]
    assert not [k for k in shown if k.startswith("reports/plots/")], list(shown)
    assert sum("loss" in k.lower() for k in shown) == 1, list(shown)
    assert any(k.startswith("Held-out precision") for k in shown), list(shown)
    status = dvc(project, "status").stdout
    assert "Data and pipelines are up to date" in status, status
    dvc(project, "remote", "add", "-d", "shared", str(tmp_path / "remote"))
    dvc(project, "push")
    commit(project, "both pipelines ran, data and models in the remote")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True)
    # everything comes from the remote (and git), nothing from the source (SVHN's stays:
    # the coverage test, which shares this run, still reads it)
    (exercise_run["tmp"] / "cifar-10-binary.tar.gz").unlink()
    pulled = dvc(clone, "pull")
    assert "WARNING" not in pulled.stdout + pulled.stderr
    for target in ([], ["reports/dvc.yaml"]):
        out = dvc(clone, "repro", *target).stdout
        assert "Running stage" not in out and "Data and pipelines are up to date" in out, out
    assert "Data and pipelines are up to date" in dvc(clone, "status").stdout
    exp = dvc(clone, "exp", "run", "-S", "train.log_every=3")
    assert "WARNING" not in exp.stdout + exp.stderr, exp.stdout + exp.stderr
    assert "Running stage 'train'" in exp.stdout and "ablation@" not in exp.stdout
    name = json.loads(dvc(clone, "exp", "show", "--json").stdout)
    dvc(clone, "exp", "apply", _first_experiment(name))
    dvc(clone, "checkout")


def _first_experiment(shown: list) -> str:
    """The name of the first experiment in `dvc exp show --json` output."""
    for rev in shown:
        for exp in rev.get("experiments") or []:
            return exp["name"]
    raise AssertionError(f"no experiment in {shown}")


def test_the_report_says_when_results_were_not_made_in_one_piece(tmp_path):
    from cifar10_tutorial.report.results import Results, provenance_section

    for name, sha in (("a", "1" * 40), ("b", "2" * 40)):
        (tmp_path / name / "train").mkdir(parents=True)
        (tmp_path / name / "train" / "provenance.json").write_text(json.dumps(
            {"commit": sha, "dirty": False, "data_hash": "ab" * 8, "device": "cpu"}))
    df = pd.DataFrame({"steps": [100, 200, 100]}, index=["a", "b", "c"])  # c: older results
    text = "\n".join(provenance_section(Results(df, df, df.iloc[:0], tmp_path, tmp_path, tmp_path)))
    assert "**Not made in one piece.**" in text
    assert "1 of 3 variants have no provenance record" in text
    assert "2 different commits of the code" in text and "2 different budgets" in text
    assert "| a | 1111111111 | abababababab | 100 | cpu |" in text and "not recorded" in text



def test_one_commit_with_uncommitted_changes_is_named_so(tmp_path):
    """One commit, some runs of it with uncommitted changes, is named as one commit."""
    from cifar10_tutorial.report.results import Results, provenance_section

    for name, dirty in (("a", False), ("b", True)):
        (tmp_path / name / "train").mkdir(parents=True)
        (tmp_path / name / "train" / "provenance.json").write_text(json.dumps(
            {"commit": "1" * 40, "dirty": dirty, "data_hash": "ab" * 8, "device": "cpu"}))
    df = pd.DataFrame({"steps": [100, 100]}, index=["a", "b"])
    text = "\n".join(provenance_section(Results(df, df, df.iloc[:0], tmp_path, tmp_path, tmp_path)))
    assert "made by one commit of the code, some of them with uncommitted changes" in text
    assert "different commits" not in text


def test_commits_checked_to_train_alike_count_as_one_piece(tmp_path):
    from cifar10_tutorial.report.results import Results, provenance_section

    root = tmp_path / "ablations"
    for name, sha, cpu in (("a", "1" * 40, "Xeon"), ("b", "2" * 40, "EPYC")):
        (root / name / "train").mkdir(parents=True)
        (root / name / "train" / "provenance.json").write_text(json.dumps(
            {"commit": sha, "dirty": False, "data_hash": "ab" * 8, "device": f"{cpu}, 1 thread"}))
    df = pd.DataFrame({"steps": [100, 100]}, index=["a", "b"])
    record = tmp_path / "code_equivalence.json"

    def section(checks):
        record.write_text(json.dumps(checks))
        return "\n".join(provenance_section(Results(df, df, df.iloc[:0], root, tmp_path, tmp_path),
                                            record))

    text = section([])
    assert "**Not made in one piece.** The variants were made by 2 different commits of the " \
           "code, not checked to train alike" in text
    def check(identical: bool) -> dict:  # as devtools/equivalence.py records one
        digests = ("a" * 64, "a" * 64 if identical else "b" * 64)
        return {"commits": ["1" * 40, "2" * 40], "identical": identical,
                "runs": [{"digest": d} for d in digests]}

    text = section([check(False)])
    assert "**Not made in one piece.**" in text
    text = section([check(True)])
    assert "Not made in one piece" not in text
    assert "All variants were made by 2 commits of the code whose training was checked " \
           "bit-identical" in text
    # machines are said (speeds compare within one), but do not split the piece
    assert "The variants ran on 2 different machines (EPYC, Xeon)" in text


def test_a_file_the_evaluation_does_not_write_in_a_variants_eval_folder_is_refused(
        synth_data, tmp_path):
    """DVC leaves a variant's results in place until it has run (persist outputs), then
    records its eval/ folder whole: a file of someone else's there is refused in one line
    before anything trains, not recorded as this run's."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.exercises.ablation import run_variant
    from cifar10_tutorial.training.paths import VariantPaths
    from conftest import tiny_params as params_for

    out = tmp_path / "reports" / "mine"
    (out / "eval").mkdir(parents=True)
    (out / "eval" / "stale.csv").write_text("mine\n")
    params = dataclasses.replace(params_for(), ablations={"mine": {}})
    with pytest.raises(PipelineError, match=r"eval: holds stale.csv, which the ablation@mine "
                                            r"stage did not make"):
        run_variant(params, "mine", synth_data, VariantPaths(tmp_path / "work", out))
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("where", ["metrics.json", "variant.json", "eval/metrics.json",
                                   "train/metrics.json"])
def test_a_link_where_a_variant_writes_a_file_is_refused_before_it_trains(
        synth_data, tmp_path, where):
    """A file the run writes as it ends is replaced whole, never through a link: a link
    there (to a user's file, even one naming the variant) is refused in one line before
    anything trains, not after the whole budget; the file it points to is kept."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.exercises.ablation import run_variant
    from cifar10_tutorial.training.paths import VariantPaths
    from conftest import tiny_params as params_for

    out = tmp_path / "mine"
    (out / where).parent.mkdir(parents=True)
    theirs = tmp_path / "theirs.json"
    theirs.write_text('{"variant": "mine", "notes": "of my own"}\n')
    (out / where).symlink_to(theirs)
    params = dataclasses.replace(params_for(), ablations={"mine": {}})
    with pytest.raises(PipelineError, match=rf"^{out / where}: a link \(to {theirs}\), where "
                                            rf"the ablation@mine stage writes a file of its own"):
        run_variant(params, "mine", synth_data,
                    VariantPaths(tmp_path / "work", out, "ablation@mine"))
    assert not (tmp_path / "work").exists()
    assert theirs.read_text() == '{"variant": "mine", "notes": "of my own"}\n'


@pytest.mark.parametrize("where", ["train", "eval"])
@pytest.mark.parametrize("behind", ["another-run", "empty"])
def test_a_link_at_a_folder_the_variant_writes_is_refused_before_it_trains(
        synth_data, tmp_path, where, behind):
    """train/ and eval/ in --out are the run's own folders, emptied and written whole: a
    link there to another variant's folder (its record, files named as this run's own)
    or to a user's empty folder would have the run replace or write what lies outside
    --out. Refused in one line before anything trains; what the link points to is kept."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.exercises.ablation import run_variant
    from cifar10_tutorial.training.paths import VariantPaths
    from conftest import tiny_params as params_for

    theirs = tmp_path / "other" / where
    theirs.mkdir(parents=True)
    if behind == "another-run":
        for name in ("metrics.json", "provenance.json") if where == "train" else (
                "metrics.json", "per_class.csv"):
            (theirs / name).write_text(f"{name} of the other run\n")
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}
    out = tmp_path / "mine"
    out.mkdir()
    (out / where).symlink_to(theirs)
    params = dataclasses.replace(params_for(), ablations={"mine": {}})
    with pytest.raises(PipelineError, match=rf"^{out / where}: a link \(to {theirs}\), where "
                                            rf"the ablation@mine stage makes a folder of its "
                                            rf"own in its --out"):
        run_variant(params, "mine", synth_data,
                    VariantPaths(tmp_path / "work", out, "ablation@mine"))
    assert not (tmp_path / "work").exists()
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == before


@pytest.mark.parametrize("where", ["eval/predictions.csv", "eval/metrics.json", "metrics.json",
                                   "variant.json"])
def test_a_folder_where_a_variant_writes_a_file_is_refused_before_it_trains(
        synth_data, tmp_path, where):
    """The results are written once training and evaluation are done: a folder at one of
    their places would fail the run only then. It is named before anything runs."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.exercises.ablation import run_variant
    from cifar10_tutorial.training.paths import VariantPaths
    from conftest import tiny_params as params_for

    out = tmp_path / "reports" / "mine"
    (out / where).mkdir(parents=True)
    params = dataclasses.replace(params_for(), ablations={"mine": {}})
    with pytest.raises(PipelineError, match=rf"mine/{where}: a folder, where the ablation@mine "
                                            rf"stage writes a file when it finishes"):
        run_variant(params, "mine", synth_data, VariantPaths(tmp_path / "work", out))
    assert not (tmp_path / "work").exists() and (out / where).is_dir()


def test_a_folder_where_the_train_stage_writes_a_file_is_refused_before_it_trains(tmp_path):
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.training.paths import TrainPaths, refuse_foreign_outputs

    for where in ("out/model.pt", "live/provenance.json"):
        (tmp_path / where).mkdir(parents=True)
        with pytest.raises(PipelineError, match=rf"{where}: a folder, where the train stage"):
            refuse_foreign_outputs(TrainPaths(tmp_path / "out", tmp_path / "live"))
        (tmp_path / where).rmdir()
    refuse_foreign_outputs(TrainPaths(tmp_path / "out", tmp_path / "live"))


def test_the_variant_stage_refuses_a_twin_its_data_reveal_before_it_trains(synth_data, tmp_path):
    """A budget in epochs that comes to the baseline's steps on these data (1,000 images in
    batches of 32: 0.64 epochs are 20 steps), or flips written as the data set's default:
    the loader cannot tell without the data, the stage refuses once it has read their
    meta.json, in one line naming the variant it copies, before it locks, launches its
    processes or writes anything."""
    import yaml

    from conftest import copy_project, write_prepared

    project = copy_project(tmp_path / "p")  # its own src/: the stage runs this tree's code
    write_prepared(synth_data, project / "prepared")
    (project / "reports" / "params.yaml").write_text(yaml.safe_dump({
        "ablation": {"max_steps": 20}, "train": {"batch_size": 32, "device": "cpu"},
        "ablations": {"baseline": {}, "epochs": {"train": {"max_epochs": 0.64}},
                      "flips": {"input": {"flip": True}},
                      "two": {"train": {"num_devices": 2, "batch_size": 16}},
                      "epochs_on_two": {"train": {"num_devices": 2, "batch_size": 16,
                                                  "max_epochs": 0.64}}},
        "dataset_ablations": {}}, sort_keys=False))  # the first of two twins is the one

    def stage(name):
        return _run_variant_stage(project, "ablation", name, "--data", "prepared", "--work",
                                  f"work/{name}", "--out", f"out/{name}")

    for name, other, said in [
            ("epochs", "baseline", r"train.max_epochs: the same 20 steps of 1,000 training "
                                   r"images"),
            ("flips", "baseline", r"input.flip: null is true on this data set"),
            # on two devices: said before torchrun starts its processes
            ("epochs_on_two", "two", r"train.max_epochs: the same 20 steps of 1,000 training "
                                     r"images")]:
        proc = stage(name)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert re.search(rf"^error: ablations.{name} trains and scores exactly as "
                         rf"ablations.{other} \(it differs only in {said}\)",
                         proc.stderr.strip().splitlines()[-1]), proc.stderr
        assert not (project / "work").exists() and not (project / "out").exists()
        assert "launching:" not in proc.stderr


@pytest.mark.parametrize("files, said", [
    ({"out/two/metrics.json": "{}\n"},
     r"out/two: holds metrics.json, not the results of a run of two \(no variant.json naming "
     r"a variant\), which the ablation@two stage would replace; give --out a folder"),
    ({"out/two/train/notes.txt": "mine\n"},
     r"out/two/train: holds notes.txt, which the ablation@two stage did not make and would "
     r"delete; give --out a folder of its own"),
    ({"work/two/notes.txt": "mine\n"},
     r"work/two: holds notes.txt, which the ablation@two stage did not make and would "
     r"delete; give --work a folder of its own"),
], ids=["users-metrics", "users-file-in-train", "users-file-in-work"])
def test_a_several_device_variant_refuses_files_not_its_own_before_torchrun(
        synth_data, tmp_path, files, said):
    """On two devices, what is in the way of the variant's results is said by the
    launching process, in one line naming the stage and its option, before torchrun
    starts its processes (each of which would refuse, be restarted, and end in torchrun's
    traceback); the files stay as they were."""
    import yaml

    from conftest import copy_project, write_prepared

    project = copy_project(tmp_path / "p")
    write_prepared(synth_data, project / "prepared")
    (project / "reports" / "params.yaml").write_text(yaml.safe_dump({
        "ablation": {"max_steps": 2}, "train": {"batch_size": 16, "device": "cpu"},
        "ablations": {"two": {"train": {"num_devices": 2}}}, "dataset_ablations": {}}))
    for where, text in files.items():
        (project / where).parent.mkdir(parents=True, exist_ok=True)
        (project / where).write_text(text)
    proc = _run_variant_stage(project, "ablation", "two", "--data", "prepared", "--work",
                              "work/two", "--out", "out/two")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "launching:" not in proc.stderr
    assert re.search(said, proc.stderr.strip().splitlines()[-1]), proc.stderr
    for where, text in files.items():
        assert (project / where).read_text() == text
    made = {p.name for p in (project / "out" / "two").rglob("*")} | {
        p.name for p in (project / "work").rglob("*")}
    assert made <= {Path(w).name for w in files} | {"two", "train", ".two.run-lock"}, made


@pytest.mark.parametrize("damage, said", [
    ("counts", r"prepared: train has 1000 images and 1000 labels; meta.json says 2000; rerun "
               r"the preprocess stage"),
    ("fifo", r"prepared/meta.json: not a file \(a folder, FIFO or link to nothing\), where the "
             r"preprocess stage writes its record"),
    ("images-fifo", r"prepared/train_images.npy: not a file \(a folder, FIFO or link to "
                    r"nothing\), where the preprocess stage writes its tensors"),
], ids=["meta-says-more-images", "meta-a-fifo", "images-a-fifo"])
def test_damaged_prepared_data_are_named_before_the_twin_check(synth_data, tmp_path, damage,
                                                               said):
    """The twin check compares a budget in epochs with the data's size before any lock or
    launch: the data are checked as the loader checks them first, so a meta.json that
    says 2,000 images (the arrays hold 1,000) is named, not taken at its word (0.32 epochs
    of 2,000 images in batches of 32 would be the baseline's 20 steps), and a FIFO in its
    place is "not a file", not "not found", and never opened."""
    import json

    import yaml

    from conftest import copy_project, write_prepared

    project = copy_project(tmp_path / "p")
    write_prepared(synth_data, project / "prepared")
    meta = project / "prepared" / "meta.json"
    if damage == "counts":
        record = json.loads(meta.read_text())
        record["counts"]["train"] = 2000
        meta.write_text(json.dumps(record))
    else:  # a FIFO opened would block the stage for good
        where = meta if damage == "fifo" else project / "prepared" / "train_images.npy"
        where.unlink()
        os.mkfifo(where)
    (project / "reports" / "params.yaml").write_text(yaml.safe_dump({
        "ablation": {"max_steps": 20}, "train": {"batch_size": 32, "device": "cpu"},
        "ablations": {"baseline": {}, "epochs": {"train": {"max_epochs": 0.32}}},
        "dataset_ablations": {}}))
    proc = _run_variant_stage(project, "ablation", "epochs", "--data", "prepared", "--work",
                              "work/epochs", "--out", "out/epochs", timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(said, proc.stderr.strip().splitlines()[-1]), proc.stderr
    assert not (project / "work").exists() and not (project / "out").exists()


def test_a_data_set_variant_flipping_as_its_default_is_refused_before_its_download(tmp_path):
    """`input.flip: false` beside the same SVHN variant without it: SVHN's digits are never
    flipped by default, so both train alike. Its data set says so before any data are
    fetched: the stage's one line naming the twin, nothing downloaded, locked or made."""
    import yaml

    from conftest import copy_project

    project = copy_project(tmp_path / "p")  # its own src/: the stage runs this tree's code
    svhn = {"data": {"dataset": "svhn", "url": "http://127.0.0.1:9/nothing-here"}}
    (project / "reports" / "params.yaml").write_text(yaml.safe_dump({
        "ablations": {}, "dataset_ablations": {
            "svhn": svhn, "svhn_unflipped": {"data": dict(svhn["data"]),
                                             "input": {"flip": False}}}}))
    before = sorted(p.relative_to(project) for p in project.rglob("*")
                    if "__pycache__" not in p.parts)
    proc = _run_variant_stage(project, "dataset_ablation", "svhn_unflipped", "--work", "work",
                              "--out", "out", "--partial", "partial")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: dataset_ablations.svhn_unflipped trains and scores exactly as "
        "dataset_ablations.svhn (it differs only in input.flip: null is false on this data "
        "set): its results would be dataset_ablations.svhn's, read as an effect; drop the "
        "variant, or change a setting that computes"), proc.stderr
    assert sorted(p.relative_to(project) for p in project.rglob("*")
                  if "__pycache__" not in p.parts) == before


def test_a_data_set_variants_missing_archive_names_its_own_url(tmp_path):
    """A data-set variant's archive comes from its own data.url in reports/params.yaml: a
    path that is not there is one line naming that key and how to set it there, not the
    main pipeline's data.url (setting which would change the main pipeline's data)."""
    import yaml

    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    missing = tmp_path / "nowhere.tar.gz"
    (project / "reports" / "params.yaml").write_text(yaml.safe_dump({
        "ablations": {}, "dataset_ablations": {"svhn": {"data": {
            "dataset": "svhn", "url": str(missing)}}}}))
    proc = _run_variant_stage(project, "dataset_ablation", "svhn", "--work", "work", "--out",
                              "out", "--partial", "partial")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    # (SVHN's url is the folder of its files: the first, train_32x32.mat, is named)
    assert line.startswith(f"error: dataset_ablations.svhn.data.url: {missing}") \
        and "does not exist" in line, line
    assert line.endswith("Set dataset_ablations.svhn.data.url in reports/params.yaml to a "
                         "mirror or to a local copy (file:///path/to/archive or a plain "
                         "path), e.g. `dvc exp run -S 'reports/params.yaml:dataset_ablations"
                         ".svhn.data.url=/path/to/archive'`."), line
    # by hand with a params file of one's own: that file is the one to edit
    (project / "mine.yaml").write_text((project / "reports" / "params.yaml").read_text())
    proc = _run_variant_stage(project, "dataset_ablation", "svhn", "--work", "work", "--out",
                              "out", "--partial", "partial", params="mine.yaml")
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Set dataset_ablations.svhn.data.url in mine.yaml" in line \
        and "'mine.yaml:dataset_ablations.svhn.data.url=" in line \
        and "reports/params.yaml" not in line, proc.stderr


@pytest.mark.parametrize("files, whose", [
    ({"metrics.json": "my own metrics\n", "variant.json": '{"seed": "my notes"}\n'},
     r"its variant.json names no variant"),
    ({"metrics.json": "my own metrics\n"}, r"no variant.json naming a variant"),
    ({"metrics.json": "{}\n", "variant.json": '{"variant": "softmax"}\n'},
     r"its variant.json names 'softmax'"),
], ids=["users-files", "users-metrics", "another-variants"])
def test_results_of_no_run_of_the_variant_in_its_out_are_refused_before_it_trains(
        synth_data, tmp_path, files, whose):
    """--out's metrics.json and variant.json are replaced when the run ends: files of a
    user's, or another variant's results, there are refused in one line before anything
    trains, and kept; the variant's own earlier results (DVC keeps them in place) are
    not."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.exercises.ablation import _refuse_other_results, run_variant
    from cifar10_tutorial.training.paths import VariantPaths
    from conftest import tiny_params as params_for

    out = tmp_path / "mine"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    params = dataclasses.replace(params_for(), ablations={"mine": {}})
    with pytest.raises(PipelineError, match=rf"^{out}: holds .*, not the results of a run of "
                                            rf"mine \({whose}\), which the ablation@mine stage "
                                            rf"would replace; .* Nothing was changed.$"):
        run_variant(params, "mine", synth_data, VariantPaths(tmp_path / "work", out))
    assert not (tmp_path / "work").exists()
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    (out / "variant.json").write_text('{"variant": "mine"}\n')  # its own: replaced when done
    _refuse_other_results(VariantPaths(tmp_path / "work", out), "mine")
