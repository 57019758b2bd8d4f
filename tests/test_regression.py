import json
import re
import os
import shutil
import subprocess
import tempfile
import signal
import sys
from pathlib import Path

import pytest

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.params import ParamsError, params_from_dict
from cifar10_tutorial.regression import (RegressionError, collect_metrics, compare, gate,
                                         markdown_table, update_baseline)
from conftest import DVC, ROOT, children_of, dvc, processes_in, set_params

TOL = {"eval.precision_at_1": {"max_drop": 0.02}, "train.loss_avg": {"max_rise": 0.15}}
# what the train and eval stages record of the model (provenance.json), at step 100
RECORD = {"steps": 100, "data_hash": "d" * 32, "params_hash": "e" * 16}


def write_eval(folder: Path, evals: dict) -> Path:
    """The eval stage's set in ``folder``: metrics.json (``evals``) and the predictions.csv
    and per_class.csv of its num_examples images that give its precision."""
    folder.mkdir(parents=True, exist_ok=True)
    n, p = evals.get("num_examples", 1000), evals.get("precision_at_1", 0.0)
    right = round(p * n) if isinstance(p, float) and 0 <= p <= 1 else 0
    rows = ["cat,cat"] * right + ["cat,dog"] * (n - right)
    (folder / "predictions.csv").write_text("\n".join(["actual,predicted"] + rows) + "\n")
    (folder / "per_class.csv").write_text("class,count,precision_at_1,precision_at_1_raw\n"
                                          f"cat,{n},{right / n:.4f},{right / n:.4f}\n"
                                          "dog,0,nan,nan\n")
    (folder / "metrics.json").write_text(json.dumps(evals))
    (folder / "provenance.json").write_text(json.dumps({**RECORD, "model": "data/train/model.pt"}))
    return folder / "metrics.json"


def write_train(folder: Path, train: dict) -> Path:
    """The train stage's metrics.json (``train``) in ``folder``, with the loss curve the run
    logs beside it: its last point, at the run's step, the figure's loss_avg."""
    curve = folder / "plots" / "metrics" / "train" / "loss_avg.tsv"
    curve.parent.mkdir(parents=True, exist_ok=True)
    step, loss = train.get("step", 100), train.get("loss_avg", 1.0)
    curve.write_text(f"step\tloss_avg\n{step // 2}\t{loss + 1}\n{step}\t{loss}\n")
    (folder / "metrics.json").write_text(json.dumps(train))
    (folder / "provenance.json").write_text(json.dumps({**RECORD, "steps": step}))
    return folder / "metrics.json"


def write_run(tmp_path, precision=0.80, loss=1.0, drop=()):
    train = {"loss_avg": loss, "step": 100}
    evals = {"precision_at_1": precision, "num_examples": 1000}
    for key in drop:
        train.pop(key, None)
        evals.pop(key, None)
    return {"train": write_train(tmp_path / "train", train),
            "eval": write_eval(tmp_path / "eval", evals)}


def write_baseline(tmp_path, **values):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"eval.precision_at_1": 0.80, "train.loss_avg": 1.0, **values}))
    return str(path)

def _refused_by_gate_and_update(tmp_path, files, said, baseline=None):
    """The run's files ``files`` refused in one line matching ``said`` by the gate (against
    ``baseline``, else a passing one) and by --update, which writes no baseline."""
    with pytest.raises(PipelineError, match=said):
        gate(str(baseline) if baseline else write_baseline(tmp_path), TOL, files)
    with pytest.raises(PipelineError, match=said):
        update_baseline(str(tmp_path / "new.json"), TOL, files)
    assert not (tmp_path / "new.json").exists()



def test_metrics_are_collected_flat_and_numeric_only(tmp_path):
    m = collect_metrics(write_run(tmp_path))
    assert m == {"train.loss_avg": 1.0, "train.step": 100.0, "eval.precision_at_1": 0.8,
                 "eval.num_examples": 1000.0}


def test_within_tolerance_passes(tmp_path):
    text = gate(write_baseline(tmp_path), TOL, write_run(tmp_path, precision=0.785, loss=1.1))
    assert "| eval.precision_at_1 | 0.8000 | 0.7850 | -0.0150 | >= -0.0200 | ok |" in text
    assert "| train.loss_avg | 1.0000 | 1.1000 | +0.1000 | <= +0.1500 | ok |" in text


def test_a_baseline_key_without_a_tolerance_is_named(tmp_path):
    """A key of the baseline that regression.tolerances does not gate (a misspelt metric)
    gates nothing: the gate's text says so, and which."""
    text = gate(write_baseline(tmp_path, **{"eval.bogus": 1}), TOL, write_run(tmp_path))
    assert "Not gated: eval.bogus (in the baseline, without a tolerance in " \
           "regression.tolerances)" in text
    assert "Not gated" not in gate(write_baseline(tmp_path), TOL, write_run(tmp_path))


def test_a_drop_past_the_tolerance_fails_with_the_table(tmp_path):
    with pytest.raises(RegressionError) as err:
        gate(write_baseline(tmp_path), TOL, write_run(tmp_path, precision=0.75))
    msg = str(err.value)
    assert "| eval.precision_at_1 | 0.8000 | 0.7500 | -0.0500 | >= -0.0200 | **FAIL**: dropped " \
           "more than allowed |" in msg
    assert "| train.loss_avg | 1.0000 | 1.0000 | +0.0000 | <= +0.1500 | ok |" in msg
    assert "REGRESSION in eval.precision_at_1" in msg and "--update" in msg


def test_a_rise_of_a_lower_is_better_metric_fails(tmp_path):
    with pytest.raises(RegressionError, match=r"train.loss_avg.*rose more than allowed"):
        gate(write_baseline(tmp_path), TOL, write_run(tmp_path, loss=1.2))


def test_a_missing_metric_fails(tmp_path):
    with pytest.raises(RegressionError, match=r"\| eval.precision_at_1 \| 0.8000 \| - \| - .*"
                                              r"missing from this run"):
        gate(write_baseline(tmp_path), TOL, write_run(tmp_path, drop=("precision_at_1",)))
    rows = compare({"eval.precision_at_1": 0.8}, {}, {"eval.precision_at_1": {"max_drop": 0.02}})
    assert not rows[0].ok and "missing from the baseline" in markdown_table(rows)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_metric_that_is_not_finite_fails_never_ok(tmp_path, value):
    """A precision that is not finite, in the run or in the baseline, fails the gate in
    one line: it is never compared as a number, so never "ok"."""
    with pytest.raises(RegressionError, match=r"eval.precision_at_1 .*not a finite number"):
        gate(write_baseline(tmp_path), TOL, write_run(tmp_path, precision=value))
    with pytest.raises(RegressionError, match=r"the baseline is not finite"):
        gate(write_baseline(tmp_path, **{"eval.precision_at_1": value}), TOL, write_run(tmp_path))


@pytest.mark.parametrize("text, found", [
    ("{bad", r"not valid JSON"), ("[1, 2]", r"expected a JSON object of metrics, found a list"),
    ('{"eval.precision_at_1": "0.5", "train.loss_avg": 1}', r"eval.precision_at_1 is '0.5', "
                                                            r"expected a number"),
    ('{"eval.precision_at_1": true, "train.loss_avg": 1}', r"is True, expected a number"),
    (b"\xff\xfe\x00garbage", r"not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, r"not valid JSON"),
    # figures no run makes: against them every run would pass
    ('{"eval.precision_at_1": -5, "train.loss_avg": 1}', r"eval.precision_at_1 is -5, expected "
                                                         r"a fraction from 0 to 1"),
    ('{"eval.precision_at_1": 1.5, "train.loss_avg": 1}', r"eval.precision_at_1 is 1.5, expected "
                                                          r"a fraction from 0 to 1"),
    ('{"eval.precision_at_1": 0.5, "train.loss_avg": -1}', r"train.loss_avg is -1, expected a "
                                                           r"number from 0 to 3.403e\+38"),
    # a loss past float32's largest number, in which a run computes it
    ('{"eval.precision_at_1": 0.5, "train.loss_avg": 1e308}', r"train.loss_avg is 1e\+308, "
                                                              r"expected a number from 0 to "
                                                              r"3.403e\+38, as a run's loss is "
                                                              r"\(computed in float32")])
def test_a_damaged_baseline_is_one_line_naming_it(tmp_path, text, found):
    """A damaged baseline, or a folder in its place, is one line naming it and saying how
    to restore it: never a traceback."""
    path = tmp_path / "baseline.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(PipelineError, match=rf"^{path}: .*{found}.*restore it from git"):
        gate(str(path), TOL, write_run(tmp_path))
    with pytest.raises(PipelineError, match=rf"^{tmp_path}: a folder, expected a JSON file"):
        gate(str(tmp_path), TOL, write_run(tmp_path))


def test_run_metrics_of_the_wrong_shape_are_one_line(tmp_path):
    """Eval metrics that are not a JSON object (`[1]`) are one line naming the file and
    the stage that writes it."""
    files = write_run(tmp_path)
    files["eval"].write_text("[1]")
    with pytest.raises(PipelineError, match=r"eval/metrics.json: expected a JSON object of metrics, "
                                            r"found a list; rerun the stage that writes it"):
        collect_metrics(files)


def test_no_metrics_at_all_fails(tmp_path):
    files = {"train": tmp_path / "none1.json", "eval": tmp_path / "none2.json"}
    with pytest.raises(RegressionError, match="no metrics at all"):
        gate(write_baseline(tmp_path), TOL, files)
    with pytest.raises(RegressionError, match="no metrics at all"):
        gate(None, TOL, files)


def test_missing_baseline_file_and_no_baseline(tmp_path):
    files = write_run(tmp_path)
    with pytest.raises(RegressionError, match=r"no such baseline file.*--update"):
        gate(str(tmp_path / "absent.json"), TOL, files)
    assert "No baseline set" in gate(None, TOL, files)


def test_update_writes_the_gated_metrics(tmp_path):
    out = tmp_path / "base" / "b.json"
    values = update_baseline(str(out), TOL, write_run(tmp_path, precision=0.7))
    assert json.loads(out.read_text()) == values == {"eval.precision_at_1": 0.7,
                                                     "train.loss_avg": 1.0}
    assert gate(str(out), TOL, write_run(tmp_path, precision=0.7))


@pytest.mark.parametrize("edit", ["figures", "files-deleted"])
def test_figures_the_evaluations_own_files_contradict_pass_no_gate(tmp_path, edit):
    """The gate and --update read the eval stage's metrics.json: a figure edited there by
    hand (its predictions.csv and per_class.csv left as the evaluation wrote them, or
    deleted) is one line naming both, never a pass or a baseline."""
    ev = tmp_path / "eval"
    ev.mkdir()
    files = {"train": write_train(tmp_path / "train", {"loss_avg": 1.0, "step": 100}),
             "eval": ev / "metrics.json"}
    files["eval"].write_text(json.dumps({"precision_at_1": 0.7, "precision_at_1_raw": 0.68,
                                         "num_examples": 1000}))
    rows = ["cat,cat"] * 350 + ["cat,dog"] * 150 + ["dog,dog"] * 350 + ["dog,cat"] * 150
    (ev / "predictions.csv").write_text("\n".join(["actual,predicted"] + rows) + "\n")
    (ev / "per_class.csv").write_text("class,count,precision_at_1,precision_at_1_raw\n"
                                      "cat,500,0.7000,0.6800\ndog,500,0.7000,0.6800\n")
    (ev / "provenance.json").write_text(json.dumps(RECORD))  # the eval stage's record
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"eval.precision_at_1": 0.7, "train.loss_avg": 1.0}))
    assert "| ok |" in gate(str(baseline), TOL, files)
    files["eval"].write_text(json.dumps({"precision_at_1": 0.95, "precision_at_1_raw": 0.68,
                                         "num_examples": 1000}))
    said = r"eval/metrics.json: eval.precision_at_1 is 0.9500, where its .*predictions.csv gives"
    if edit == "files-deleted":
        (ev / "predictions.csv").unlink()
        (ev / "per_class.csv").unlink()
        said = r"eval/predictions.csv: missing beside .*eval/metrics.json"
    _refused_by_gate_and_update(tmp_path, files, said, baseline)


def test_a_lone_eval_metrics_file_passes_no_gate(tmp_path):
    """--eval-metrics a metrics.json alone (a copy, its figures edited, no CSVs beside it):
    the eval stage writes every metrics.json with its predictions.csv and per_class.csv,
    so one without them is no evaluation's; never a pass or a baseline."""
    lone = tmp_path / "lone"
    lone.mkdir()
    files = {"train": write_train(tmp_path / "train", {"loss_avg": 1.0, "step": 100}),
             "eval": lone / "metrics.json"}
    files["eval"].write_text(json.dumps({"precision_at_1": 0.95, "num_examples": 1000}))
    said = r"lone/predictions.csv: missing beside .*lone/metrics.json"
    _refused_by_gate_and_update(tmp_path, files, said)


@pytest.mark.parametrize("edit, said", [
    ("edited", r"train/metrics.json: train.loss_avg is 1.0000, where .*train/plots/metrics/train/"
               r"loss_avg.tsv gives 4.7024 at the run's last step \(6\)"),
    ("same", None),  # the figure is the curve's last point
    # the curve deleted, cut short of the run's step, or not a curve; the step edited too
    ("curve-deleted", r"train/plots/metrics/train/loss_avg.tsv: missing beside .*train/"
                      r"metrics.json, whose train.loss_avg is the curve's point at the run's "
                      r"last step"),
    ("no-last-point", r"loss_avg.tsv: no point at the run's last step \(6\), where the run logs "
                      r"its loss and .*metrics.json states 1.0000"),
    ("not-text", r"loss_avg.tsv: expected the training run's curve \(step, loss_avg\), "
                 r"found bytes that are not UTF-8 text"),
    ("a-folder", r"loss_avg.tsv: expected the training run's curve \(step, loss_avg\), "
                 r"found a folder"),
    ("step-edited", r"train/metrics.json: train.step is 7, where .*train/provenance.json "
                    r"records 6 steps"),
    ("lone-copy", r"lone/plots/metrics/train/loss_avg.tsv: missing beside .*lone/metrics.json"),
    ("no-step", r"train/metrics.json: expected the training run's step and loss_avg"),
], ids=["edited", "same", "curve-deleted", "no-last-point", "not-text", "a-folder",
        "step-edited", "lone-copy", "no-step"])
def test_a_train_loss_its_own_files_contradict_passes_no_gate(tmp_path, edit, said):
    """train.loss_avg edited by hand in the train stage's metrics.json (the loss curve the
    same run logged left as it was, or removed, cut short or damaged with it; the step
    edited too): one line naming both, never a pass or a baseline."""
    files = write_run(tmp_path)
    train = tmp_path / "train"
    curve = train / "plots/metrics/train/loss_avg.tsv"
    figures = {"loss_avg": 1.0, "step": 6}
    (train / "metrics.json").write_text(json.dumps(figures))
    for stage in ("train", "eval"):  # the model of step 6
        (tmp_path / stage / "provenance.json").write_text(json.dumps({**RECORD, "steps": 6}))
    curve.write_text("step\tloss_avg\n3\t5.0\n6\t" + ("1.0" if edit == "same" else
                                                    "4.702444076538086") + "\n")
    files["train"] = train / "metrics.json"
    if edit == "curve-deleted":
        curve.unlink()
    elif edit == "no-last-point":
        curve.write_text("step\tloss_avg\n3\t1.7\n")
    elif edit == "not-text":
        curve.write_bytes(b"\xff\xfe\x00garbage")
    elif edit == "a-folder":
        curve.unlink()
        curve.mkdir()
    elif edit == "step-edited":
        (train / "metrics.json").write_text(json.dumps({**figures, "step": 7}))
    elif edit == "lone-copy":
        (tmp_path / "lone").mkdir()
        files["train"] = tmp_path / "lone" / "metrics.json"
        files["train"].write_text(json.dumps(figures))
    elif edit == "no-step":
        (train / "metrics.json").write_text(json.dumps({"loss_avg": 1.0}))
    if said is None:
        assert "| ok |" in gate(write_baseline(tmp_path), TOL, files)
        return
    _refused_by_gate_and_update(tmp_path, files, said)


@pytest.mark.parametrize("edit, said", [
    ({"steps": 90}, r"eval/provenance.json: steps is 90, where .*train/provenance.json records "
                    r"100: the step of the model evaluated is not the run's"),
    # another variant's model (its params), of the same step and data
    ({"params_hash": "0" * 16, "model": "data/ablations/softmax/model.pt"},
     r"eval/provenance.json: params_hash is '0000000000000000', where .*train/provenance.json "
     r"records 'eeeeeeeeeeeeeeee': the model \(its params\) evaluated is not the run's"),
    ("deleted", r"eval/provenance.json: missing, where the evaluation's record of the model "
                r"\(its step, data and params\) is written with its figures; rerun the eval"),
    ("garbage", r"eval/provenance.json: expected the evaluation's record \(a JSON object\), "
                r"found no JSON"),
    ("fifo", r"eval/provenance.json: expected the evaluation's record \(a JSON object\), found "
             r"not a regular file"),
    ("no-hash", r"eval/provenance.json: expected the evaluation's record with steps, data_hash, "
                r"params_hash, found no params_hash"),
    ("train-fifo", r"train/provenance.json: expected the training run's record \(a JSON "
                   r"object\), found not a regular file.*; rerun the train stage"),
    ("train-deleted", r"train/provenance.json: missing, where the training run's record .*; "
                      r"rerun the train stage"),
], ids=["other-step", "other-variant", "deleted", "garbage", "fifo", "no-hash", "train-fifo",
        "train-deleted"])
def test_an_evaluation_of_another_runs_model_passes_no_gate(tmp_path, edit, said):
    """reports/eval/provenance.json names the step, data and params of the model it
    evaluated: the train stage's (reports/train/provenance.json). Another run's evaluation
    beside this run's training (another step, another variant's model), or a record
    missing, damaged or a FIFO (which would leave the two untold), is one line naming it,
    never a pass or a baseline."""
    files = write_run(tmp_path)
    assert "| ok |" in gate(write_baseline(tmp_path), TOL, files)
    stage = "train" if edit in ("train-fifo", "train-deleted") else "eval"
    record = tmp_path / stage / "provenance.json"
    if isinstance(edit, dict):
        record.write_text(json.dumps({**json.loads(record.read_text()), **edit}))
    elif edit.endswith("deleted"):
        record.unlink()
    elif edit == "garbage":
        record.write_text("{garbage")
    elif edit.endswith("fifo"):
        record.unlink()
        os.mkfifo(record)
    else:
        record.write_text(json.dumps({k: v for k, v in RECORD.items() if k != "params_hash"}))
    _refused_by_gate_and_update(tmp_path, files, said)


def test_a_metrics_file_of_another_kind_or_a_key_twice_is_one_line(tmp_path):
    """--eval-metrics a FIFO is named (not 'missing from this run'); a baseline with a key
    twice (which one counts is the parser's accident) is refused in one line."""
    import os

    files = write_run(tmp_path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(PipelineError, match=r"fifo.json: not a regular file"):
        gate(write_baseline(tmp_path), TOL, {**files, "eval": fifo})
    twice = tmp_path / "twice.json"
    twice.write_text('{"eval.precision_at_1": 0.1, "eval.precision_at_1": 0.8, '
                     '"train.loss_avg": 1.0}')
    with pytest.raises(PipelineError, match=r"twice.json: not valid JSON \(the key "
                                            r"'eval.precision_at_1' twice\)"):
        gate(str(twice), TOL, files)


def test_tolerances_are_validated():
    with pytest.raises(ParamsError, match="regression.tolerances.precision: expected a metric "
                                          "named train.<key> or eval.<key>"):
        params_from_dict({"regression": {"tolerances": {"precision": {"max_drop": 0.1}}}})
    for zero in (0, -0.02, float("nan"), True, "0.02"):
        with pytest.raises(ParamsError, match=r"regression.tolerances.eval.precision_at_1."
                                              r"max_drop: expected a positive number"):
            params_from_dict({"regression": {"tolerances": {"eval.precision_at_1":
                                                            {"max_drop": zero}}}})
    with pytest.raises(ParamsError, match=r"regression.tolerances.train.step: expected \{max_drop: "
                                          r"N\} \(higher is better\) or \{max_rise: N\}"):
        params_from_dict({"regression": {"tolerances": {"train.step": {"max_drop": 1,
                                                                      "max_rise": 1}}}})
    reg = params_from_dict({"regression": {"tolerances": {"train.step": {"max_rise": 5}}}})
    assert reg.regression.tolerances["train.step"].signed == 5.0  # a name that says nothing


@pytest.mark.parametrize("metric, value, expected", [
    # the minus forgotten: a bare number would allow a drop of precision up to 5
    ("eval.precision_at_1", 5.0, r"expected \{max_drop: N\} \(higher is better: a drop is the "
                                 r"regression\), found the bare number 5.0, whose sign said the "
                                 r"direction; write `eval.precision_at_1: \{max_drop: 5.0\}`"),
    ("eval.precision_at_1", -0.02, r"found the bare number -0.02.*write `eval.precision_at_1: "
                                   r"\{max_drop: 0.02\}`"),
    ("train.loss_avg", -0.15, r"expected \{max_rise: N\} \(lower is better: a rise is the "
                              r"regression\), found the bare number -0.15.*\{max_rise: 0.15\}"),
    ("eval.precision_at_1_raw", {"max_rise": 0.03},
     r"expected \{max_drop: N\} .*found \{max_rise: 0.03\}, which gates nothing that matters; "
     r"write `eval.precision_at_1_raw: \{max_drop: 0.03\}`"),
    ("train.loss", {"max_drop": 0.1}, r"expected \{max_rise: N\} .*found \{max_drop: 0.1\}"),
    ("eval.precision_at_1", {"max_drop": 5.0}, r"max_drop: expected a fraction below 1 .*lets "
                                               r"every drop pass"),
    ("eval.precision_at_1", {"max_dorp": 0.02}, r"expected \{max_drop: N\} .*found "
                                                r"\{'max_dorp': 0.02\}"),
])
def test_a_tolerance_in_the_wrong_direction_is_one_line_with_its_fix(metric, value, expected):
    """A tolerance states its direction ({max_drop: N} or {max_rise: N}), checked against
    what the metric's name says: a bare signed number, whose forgotten minus would pass
    anything (`eval.precision_at_1: 5.0` would pass a fall from 0.99 to 0.195), is one line with
    its fix."""
    with pytest.raises(ParamsError, match=rf"^regression.tolerances.{metric}.*{expected}") as err:
        params_from_dict({"regression": {"baseline": "b.json", "tolerances": {metric: value}}})
    assert "\n" not in str(err.value)


def test_a_collapse_fails_the_gate_however_its_tolerance_is_written(tmp_path):
    """Through the gate: a precision fallen from 0.99 to 0.195 under a bare 5.0 is refused
    as a tolerance; under {max_drop: 0.02} it fails."""
    base = write_baseline(tmp_path, **{"eval.precision_at_1": 0.99})
    with pytest.raises(ParamsError, match="found the bare number 5.0"):
        gate(base, {"eval.precision_at_1": 5.0}, write_run(tmp_path, precision=0.195))
    with pytest.raises(RegressionError, match=r"0.9900 \| 0.1950 \| -0.7950 \| >= -0.0200 \| "
                                              r"\*\*FAIL\*\*"):
        gate(base, {"eval.precision_at_1": {"max_drop": 0.02}},
             write_run(tmp_path, precision=0.195))


def test_a_baseline_with_no_tolerances_is_an_error_not_a_pass(tmp_path):
    """`regression.tolerances: {}` with a baseline set is an error (the gate would compare
    nothing and pass), both when the params are read and in the gate itself."""
    with pytest.raises(ParamsError, match=r"^regression.tolerances: expected at least one "
                                          r"metric while regression.baseline is set \(b.json\), "
                                          r"found none: the gate would compare nothing and pass"):
        params_from_dict({"regression": {"baseline": "b.json", "tolerances": {}}})
    assert params_from_dict({"regression": {"baseline": None, "tolerances": {}}})  # shows only
    with pytest.raises(RegressionError, match="tolerances is empty while the baseline"):
        gate(write_baseline(tmp_path), {}, write_run(tmp_path))
    # the stage itself: one line, exit 1, no table that says ok
    (tmp_path / "params.yaml").write_text(
        f"regression: {{baseline: {write_baseline(tmp_path)}, tolerances: {{}}}}\n")
    files = write_run(tmp_path)
    proc = subprocess.run([sys.executable, str(ROOT / "stages/regression.py"), "--train-metrics",
                           str(files["train"]), "--eval-metrics", str(files["eval"]), "--out",
                           "gate.md"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: " in proc.stderr and "tolerances: expected at least one metric" in proc.stderr
    assert not (tmp_path / "gate.md").exists()


def test_variants_keep_the_checked_tolerances():
    """An ablation variant's params are rebuilt from the checked ones (dataclasses.asdict):
    the tolerances survive the round trip."""
    from cifar10_tutorial.params import variant_params

    params = params_from_dict({"ablations": {"v": {"model": {"lrn": False}}}})
    assert variant_params(params, "v").regression.tolerances == params.regression.tolerances


def test_the_stage_exits_1_with_the_table(tmp_path):
    (tmp_path / "reports/train").mkdir(parents=True)
    (tmp_path / "reports/eval").mkdir(parents=True)
    write_train(tmp_path / "reports/train", {"loss_avg": 1.0, "step": 100})
    write_eval(tmp_path / "reports/eval", {"precision_at_1": 0.5, "num_examples": 1000})
    baseline = write_baseline(tmp_path)
    (tmp_path / "params.yaml").write_text(f"regression: {{baseline: {baseline}}}\n")
    shutil.copy2(ROOT / "dvc.yaml", tmp_path)  # run by hand: the paths come from there
    proc = subprocess.run([sys.executable, str(ROOT / "stages/regression.py")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "**FAIL**: dropped more than allowed" in proc.stdout
    assert "the regression gate failed" in proc.stderr
    assert "**FAIL**" in (tmp_path / "reports/regression.md").read_text()
    (tmp_path / "dvc.yaml").unlink()  # no dvc.yaml and no paths: say what to do
    proc = subprocess.run([sys.executable, str(ROOT / "stages/regression.py")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "give the paths as options" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "stages/regression.py"),
                           "--train-metrics", "reports/train/metrics.json", "--eval-metrics",
                           "reports/eval/metrics.json", "--out", "gate.md"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and (tmp_path / "gate.md").is_file()


def test_ci_run_fails_with_the_table_on_a_deliberate_regression(tmp_path):
    """The whole CI path: a configuration whose learning rate is ~0 learns nothing, and the
    runner exits 1 with the gate's table naming precision @ 1."""
    from conftest import copy_project
    from conftest import init_repo

    project = copy_project(tmp_path / "p")
    (project / ".ci/configs").mkdir(parents=True)
    (project / ".ci/configs/broken.yaml").write_text(
        "archive: synthetic\n"
        "archive_args: {train_per_batch: 40, test: 100, seed: 1}\n"
        "report: false\n"
        "params:\n"
        "  train.max_steps: 8\n  train.batch_size: 32\n  train.initial_lr: 1.0e-7\n"
        "  train.log_every: 4\n  run.checkpoint_every: 8\n  train.device: cpu\n"
        "  input.min_fraction_of_examples_in_queue: 0.1\n"
        "  regression.baseline: reports/baseline/broken.json\n")
    (project / "reports/baseline/broken.json").write_text(json.dumps(
        {"eval.precision_at_1": 0.95, "eval.precision_at_1_raw": 0.95, "train.loss_avg": 2.4}))
    init_repo(project)
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "ci.py"), "broken"], cwd=project,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "| eval.precision_at_1 | 0.9500 |" in proc.stdout
    assert "**FAIL**: dropped more than allowed" in proc.stdout
    assert "CI configuration broken: FAILED" in proc.stdout
    assert "CI configuration(s) failed: broken" in proc.stderr
    table = (project / "regression-broken.md").read_text()
    assert "REGRESSION in eval.precision_at_1" in table
    # then the main metrics' diff, not every exercise variant's, against a commit named
    # for what it is (in the runner's scratch copy: the snapshot of this project's HEAD)
    head = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=project,
                          capture_output=True, text=True).stdout.strip()
    assert f'("CI scratch copy of {head}"), the commit that last changed' in table, table
    diff = table.split("the commit that last changed", 1)[1]
    assert "| reports/eval/metrics.json " in diff and "reports/ablations" not in diff, diff
    made = {f.relative_to(project).as_posix() for f in (project / "data").rglob("*") if f.is_file()}
    assert made == {"data/.gitignore", "data/train/.gitignore"}  # it ran in a scratch copy


def test_a_real_configuration_takes_the_archive_it_is_given(tmp_path):
    """The real-image configurations run on the archive passed with --real-archive (copied
    into the scratch copy, its md5 pinned there), are skipped with a line without one, and a
    missing file is one line naming it."""
    from ci import build_archive
    from cifar10_tutorial.data.synthetic import make_cifar10_archive
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.files import md5_of

    archive = tmp_path / "real.tar.gz"
    make_cifar10_archive(archive, train_per_batch=10, test=20, seed=3)
    out = tmp_path / "copy.tar.gz"
    assert build_archive({"archive": "given"}, archive, out) == md5_of(archive)
    assert out.read_bytes() == archive.read_bytes()
    assert build_archive({"archive": "given"}, None, out) is None
    with pytest.raises(PipelineError, match=r"--real-archive .*nope.tar.gz: no such file"):
        build_archive({"archive": "given"}, tmp_path / "nope.tar.gz", out)


def test_ci_run_names_the_archive_it_lacks(tmp_path, capsys):
    from ci import run_config

    project = tmp_path / "p"
    (project / ".ci/configs").mkdir(parents=True)
    (project / ".ci/configs/real.yaml").write_text((ROOT / ".ci/configs/real.yaml").read_text())
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    assert run_config("real", project) == 0
    assert ("CI configuration real: SKIPPED, nothing gated by it: it runs on a real archive, "
            "and none was given (--real-archive" in capsys.readouterr().out)


@pytest.mark.e2e
def test_the_official_gate_downloads_once_and_runs_until_a_baseline_is_committed(tmp_path):
    """GitHub's runners download the official archive and gate on it. Here
    a local HTTP server serves an archive in the official layout; .ci/official-gate fetches
    it into its cache (once: the second run keeps the verified copy), then runs the
    `official` configuration, which without a committed baseline runs and gates nothing."""
    import functools
    import http.server
    import shutil
    import threading

    import yaml

    from conftest import copy_project, init_repo
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    served = tmp_path / "served"
    served.mkdir()
    info = make_cifar10_archive(served / "cifar-10-binary.tar.gz", train_per_batch=40, test=100,
                                seed=1)
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            hits.append(self.path)

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        project = copy_project(tmp_path / "p")
        shutil.copytree(ROOT / ".ci", project / ".ci")
        config = yaml.safe_load((project / ".ci/configs/official.yaml").read_text())
        assert config["params"]["regression.baseline"] == "reports/baseline/ci-official.json"
        config["params"].update({"train.max_steps": 8, "train.batch_size": 32,
                                 "train.log_every": 4, "run.checkpoint_every": 8,
                                 "input.min_fraction_of_examples_in_queue": 0.1})
        (project / ".ci/configs/official.yaml").write_text(yaml.safe_dump(config))
        params = yaml.safe_load((project / "params.yaml").read_text())
        params["data"].update(url=f"http://127.0.0.1:{httpd.server_port}/cifar-10-binary.tar.gz",
                              md5=info["md5"])
        (tmp_path / "served-params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        init_repo(project)
        # not GitHub's variables (these tests run on GitHub too): without them the script
        # gates against a committed baseline (tests/test_github_gate.py: with them)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")},
               "CIFAR10_CI_PARAMS": str(tmp_path / "served-params.yaml"),
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        cache = tmp_path / "cache"
        for _ in range(2):
            proc = subprocess.run(["bash", ".ci/official-gate", str(cache)], cwd=project, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            assert "CI configuration official: NO BASELINE (reports/baseline/ci-official" \
                   ".json is not committed; measure one with" in proc.stdout
            assert "GATED NOTHING; the pipeline ran through" in proc.stdout
            assert "(ok)" not in proc.stdout
        assert hits.count("/cifar-10-binary.tar.gz") == 1  # the second run kept the copy
        assert (cache / "cifar-10-binary.tar.gz").read_bytes() == \
            (served / "cifar-10-binary.tar.gz").read_bytes()
    finally:
        httpd.shutdown()
        httpd.server_close()
    workflow = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    gate = workflow["jobs"]["gate"]
    assert "CIFAR10_CI_OFFICIAL" in gate["env"] and any(
        s.get("uses", "").startswith("actions/cache") for s in gate["steps"])
    assert any(".ci/official-gate \"$CIFAR10_CI_OFFICIAL\"" in s.get("run", "")
               for s in gate["steps"])


def test_ci_options_for_a_baseline_kept_elsewhere_are_checked_in_one_line(tmp_path, capsys):
    """--baseline and --metrics-out (what .ci/github_gate.py uses) take one configuration
    and an existing file; anything else is one line, before any run."""
    from ci import main

    (tmp_path / "impossible.json").write_text('{"eval.precision_at_1": 95, '
                                              '"train.loss_avg": 1.0}')
    (tmp_path / "infinite.json").write_text('{"eval.precision_at_1": NaN, '
                                            '"train.loss_avg": 1.0}')
    (tmp_path / "twice.json").write_text('{"eval.precision_at_1": 0.9, '
                                         '"eval.precision_at_1": 0.2, "train.loss_avg": 1.0}')
    for argv, found in ((["synthetic", "real", "--metrics-out", "m.json"],
                         "--baseline and --metrics-out take one configuration, found 2"),
                        # a figure no run gives: said before the run, not after it
                        (["synthetic", "--baseline", str(tmp_path / "impossible.json")],
                         "impossible.json: eval.precision_at_1 is 95, expected a fraction "
                         "from 0 to 1"),
                        (["synthetic", "--baseline", str(tmp_path / "infinite.json")],
                         "infinite.json: eval.precision_at_1 is nan, expected a finite "
                         "number"),
                        # which of a key's two values counts is the parser's accident
                        (["synthetic", "--baseline", str(tmp_path / "twice.json")],
                         "twice.json: a file that is not a baseline (the key "
                         "'eval.precision_at_1' twice)"),
                        (["official", "--baseline", str(tmp_path / "nope.json")],
                         "nope.json: no such file; give a baseline JSON file")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 1 and err.startswith("error: ") and found in err, err
        assert err.count("\n") == 1


def test_a_baseline_that_is_a_device_is_one_line():
    """regression.baseline: /dev/zero is refused as not a regular file, never read (it
    would fill the memory)."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.regression import read_json_object

    with pytest.raises(PipelineError, match=r"^/dev/zero: not a regular file .*expected a JSON "
                                            r"file of metrics; fix it"):
        read_json_object("/dev/zero", "fix it")


def test_a_ci_configuration_whose_committed_baseline_is_gone_fails(tmp_path):
    """A CI configuration whose committed baseline is gone (`git rm` of ci-synthetic.json)
    fails in one line saying how to restore or remeasure it, before anything runs; a
    --real-archive that is not a gzip tar is one line too."""
    import subprocess
    import sys

    from conftest import ROOT

    clone = tmp_path / "c"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / "reports/baseline/ci-synthetic.json").unlink()
    proc = subprocess.run([sys.executable, ".ci/ci.py", "synthetic"], cwd=clone,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("error: reports/baseline/ci-synthetic.json: missing, and CI configuration "
                    "synthetic gates against it: restore it (`git checkout -- reports/baseline/"
                    "ci-synthetic.json`) or measure a new one with `python .ci/ci.py "
                    "synthetic --update-baseline` and commit it"), last
    assert "$ dvc repro" not in proc.stdout  # nothing ran
    notgz = tmp_path / "passwd"
    notgz.write_text("root:x:0:0\n")
    proc = subprocess.run([sys.executable, ".ci/ci.py", "real", "--real-archive",
                           str(notgz)], cwd=clone, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--real-archive {notgz}: not a gzip tar" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("text, message", [
    ("", r"expected a mapping with keys archive .*; found nothing$"),
    ("- a\n- b\n", r"expected a mapping with keys archive .*; found a list$"),
    ("archive: synthetic\nparams: [1]\n", r"params: expected a mapping of names to values, "
                                           r"found a list$"),
    ("archive: synthetic\narchive_args: {bogus: 1}\n", r"archive_args: bogus: expected "
                                                        r"train_per_batch, test or seed"),
    ("archive: synthetic\nreport: yes please\n", r"report: expected true or false, found "
                                                  r"'yes please'$"),
    ("archive: [synthetic\n", r"cannot be read as YAML \(\w+ at line \d+\); fix it, or "
                              r"`git checkout .*`$"),
    ("archive: synthetic\narchive_args: {train_per_batch: -5}\n",
     r"archive_args: train_per_batch: expected a whole number from 1 to 10,000, found -5$"),
    ("archive: synthetic\narchive_args: {test: 1.5}\n",
     r"archive_args: test: expected a whole number from 1 to 10,000, found 1.5$"),
    ("archive: synthetic\narchive_args: {seed: -1}\n",
     r"archive_args: seed: expected a whole number from 0 to 4,294,967,295, found -1$"),
    ("archive: synthetic\narchive_args: {train_per_batch: 300000}\n",
     r"archive_args: train_per_batch: expected a whole number from 1 to 10,000, found 300000$"),
    ("archive: synthetic\nparams:\n  regression: {baseline: /tmp/fake.json}\n",
     r"params: regression: a section, which would replace params.yaml's whole regression: "
     r"section; write each key dotted \(regression.KEY: value\)$"),
    ("archive: synthetic\nreport: true\nexercise_params: {train: {max_steps: 6}, ablations: {}}\n",
     r"exercise_params: train: a section, which would replace"),
    ("archive: synthetic\narchive: given\n", r"the key 'archive' appears twice \(line 2\); "
                                             r"keep one$"),
    ("archive: synthetic\nparams:\n  train.max_steps: 2\n  train.max_steps: 3\n",
     r"the key 'train.max_steps' appears twice \(line 4\); keep one$"),
    ("archive: synthetic\nparams: {train.max_steps: 2, train: {batch_size: 8}}\n",
     r"params: train is given both as a section and as dotted keys \(train.KEY\); write "
     r"each as train.KEY$"),
    ("archive: synthetic\nreport: true\n",
     r"report: true runs the exercise pipeline, and without exercise_params it runs "),
    ("archive: synthetic\nexercise_params: {ablation.max_steps: 3}\n",
     r"exercise_params: set, but report is false, and only report: true runs the exercise "
     r"pipeline that reads them"),
    ("archive: synthetic\nparams: {data.url: 'file:///x.tar.gz', data.md5: '0'}\n",
     r"params: data.md5: the runner sets the data to the archive of archive:"),
    ("archive: synthetic\nparams: {data.dataset: cifar100}\n",
     r"params: data.dataset: 'cifar100', but the runner's archive \(archive: synthetic\) is "
     r"CIFAR-10's layout"),
], ids=["empty", "list", "params-list", "archive-args", "report-words", "bad-yaml",
        "negative-size", "fraction", "negative-seed", "too-large", "section-baseline",
        "section-exercise", "twice", "twice-in-params",
        "section-and-dotted", "report-without-exercise-params", "exercise-params-unread",
        "data-url-is-the-runners", "dataset-the-archive-is-not"])
def test_a_damaged_ci_configuration_is_one_line_naming_it(tmp_path, text, message):
    """`cifar10 ci NAME` reads .ci/configs/NAME.yaml: an empty one, a list, a params list,
    an unknown archive argument, a report that is not true or false, or YAML that does not
    parse is one line naming the file, not a traceback from deep in the run."""
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import ci
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    (tmp_path / ".ci" / "configs").mkdir(parents=True)
    path = tmp_path / ".ci" / "configs" / "mine.yaml"
    path.write_text(text)
    with pytest.raises(PipelineError, match=rf"^{path}: {message}"):
        ci.load_config("mine", tmp_path)


def _clone_with_working_ci(clone):
    """A git clone of the project at ``clone`` whose .ci/ci.py and src/ are the working
    tree's (the code under test), so that `.ci/ci.py` runs as CI runs it."""
    import shutil
    import subprocess

    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    shutil.copy2(ROOT / ".ci/ci.py", clone / ".ci/ci.py")
    shutil.copytree(ROOT / "src", clone / "src", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return clone


@pytest.mark.parametrize("key, text, said", [
    ("params", "params: {train.max_steps: 2, train.max_stpes: 5}\n",
     "params: unknown key train.max_stpes in params; valid keys in 'train': "),
    ("exercise_params", "exercise_params: {ablation.max_stpes: 5}\n",
     "exercise_params: unknown key ablation.max_stpes in "),
], ids=["params", "exercise-params"])
def test_a_misspelled_key_of_a_ci_configuration_is_named_in_it(tmp_path, key, text, said):
    """A key the configuration misspells is one line naming the configuration and the key,
    before anything runs: not the scratch copy's params file, nor DVC's undo hint."""
    import subprocess
    import sys

    clone = _clone_with_working_ci(tmp_path / "c")
    config = clone / ".ci" / "configs" / "typo.yaml"
    config.write_text("archive: synthetic\narchive_args: {train_per_batch: 10, test: 20}\n"
                      f"report: {'true' if key == 'exercise_params' else 'false'}\n" + text)
    proc = subprocess.run([sys.executable, ".ci/ci.py", "typo"], cwd=clone,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {config}: {said}"), last
    assert "dvc exp run" not in last and "$ dvc repro" not in proc.stdout


@pytest.mark.e2e
def test_update_baseline_refuses_a_link_at_the_baseline(tmp_path):
    """`cifar10 ci NAME --update-baseline` writes the configuration's baseline file beside
    it and renames it over: a link there (to a file of someone else's) is refused in one
    line, and the file it points to is not written."""
    import subprocess
    import sys

    clone = _clone_with_working_ci(tmp_path / "c")
    (clone / ".ci/configs/tiny.yaml").write_text(
        "archive: synthetic\narchive_args: {train_per_batch: 20, test: 50}\nreport: false\n"
        "params: {train.max_steps: 2, train.batch_size: 16, eval.every_steps: 0, "
        "regression.baseline: reports/baseline/tiny.json}\n")
    victim = tmp_path / "victim.json"
    victim.write_text('{"victim": "precious"}\n')
    (clone / "reports/baseline/tiny.json").symlink_to(victim)
    proc = subprocess.run([sys.executable, ".ci/ci.py", "tiny", "--update-baseline"],
                          cwd=clone, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"regression.baseline: 'reports/baseline/tiny.json' leads out of the checkout "
            f"({victim})") in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "$ dvc repro" not in proc.stdout  # refused before anything ran
    assert victim.read_text() == '{"victim": "precious"}\n'
    assert (clone / "reports/baseline/tiny.json").is_symlink()
    # a link inside the checkout, to a file of it: still never written through
    inside = clone / "reports/baseline/elsewhere.json"
    inside.write_text('{"mine": 1}\n')
    (clone / "reports/baseline/tiny.json").unlink()
    (clone / "reports/baseline/tiny.json").symlink_to(inside)
    proc = subprocess.run([sys.executable, ".ci/ci.py", "tiny", "--update-baseline"],
                          cwd=clone, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("regression.baseline: reports/baseline/tiny.json: a link, not a baseline file"
            in proc.stderr.strip().splitlines()[-1]), proc.stderr
    assert "$ dvc repro" not in proc.stdout
    assert inside.read_text() == '{"mine": 1}\n'


def _ci_module():
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import ci
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    return ci


@pytest.mark.parametrize("name", ["../../../tmp/x", "/tmp/x", "a/b", "-x", "", "x" * 65,
                                  "x;touch y"])
def test_a_ci_configuration_name_is_never_a_path(tmp_path, name):
    """`cifar10 ci NAME`: NAME is a configuration of .ci/configs/, never a path to a file
    elsewhere (nor an option, nor shell text): one line, before anything is read."""
    ci = _ci_module()
    outside = tmp_path / "x.yaml"
    outside.write_text("archive: synthetic\n")
    (tmp_path / "r" / ".ci" / "configs").mkdir(parents=True)
    with pytest.raises(PipelineError, match=r"expected the name of a configuration in "
                                            r"\.ci/configs/ .*not a path"):
        ci.load_config(name, tmp_path / "r")


@pytest.mark.parametrize("baseline, how", [
    ("../../outside.json", "goes up"), ("/tmp/outside.json", "is an absolute path"),
    ("reports/../../outside.json", "goes up"), (".", "names the checkout itself"),
    ("ABS/reports/baseline/b.json", "is an absolute path")])
def test_a_baseline_outside_the_checkout_is_refused_before_the_run(tmp_path, baseline, how,
                                                                   capsys):
    """regression.baseline is read and (--update-baseline) written in the checkout: a path
    out of it is refused in one line before anything runs or is written."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    baseline = baseline.replace("ABS", str(root))  # inside the checkout, but not relative
    (root / ".ci/configs/esc.yaml").write_text(
        f"archive: synthetic\nparams: {{regression.baseline: '{baseline}'}}\n")
    with pytest.raises(PipelineError, match=rf"esc.yaml: regression.baseline: .* {how} "):
        ci.run_config("esc", root, update_baseline=True)
    assert "$ dvc" not in capsys.readouterr().out


@pytest.mark.parametrize("baseline, made, why", [
    (".git/config", "[core]\n", "not a baseline's path"),
    ("README.md", "# my project\n", "not a baseline's path"),
    ("reports/notes.json", '{"mine": "text"}\n', "a file that is not a baseline"),
    ("reports/baseline/a-folder.json", None, "a folder or special file, not a baseline file"),
    ("reports/baseline/deep.json", "[" * 100_000 + "]" * 100_000,
     r"a file that is not a baseline \(not JSON\)"),
], ids=["git-config", "readme", "json-not-a-baseline", "folder", "nested-past-the-parser"])
@pytest.mark.parametrize("update", [True, False], ids=["update", "gate"])
def test_a_baseline_path_naming_another_file_is_refused_before_the_run(tmp_path, baseline,
                                                                       made, why, update, capsys):
    """regression.baseline naming a file of the checkout that is no baseline (git's config,
    the README, a JSON file of other content, a folder): --update-baseline would overwrite
    it, the gate would read it; refused before anything runs, the file as it was."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    target = root / baseline
    target.parent.mkdir(parents=True, exist_ok=True)
    target.mkdir() if made is None else target.write_text(made)
    (root / ".ci/configs/b.yaml").write_text(
        f"archive: synthetic\nparams: {{regression.baseline: '{baseline}'}}\n")
    with pytest.raises(PipelineError, match=rf"b.yaml: regression.baseline: {baseline}: {why}.*"
                                            rf"Nothing was run\.$"):
        ci.run_config("b", root, update_baseline=update)
    assert "$ dvc" not in capsys.readouterr().out
    assert made is None or target.read_text() == made


def test_update_baseline_of_a_baseline_another_configuration_gates_against_is_refused(
        tmp_path, capsys):
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    for name in ("mine", "theirs"):
        (root / f".ci/configs/{name}.yaml").write_text(
            "archive: synthetic\nparams: {regression.baseline: reports/baseline/b.json}\n")
    with pytest.raises(PipelineError, match=r"mine.yaml: regression.baseline reports/baseline/"
                                            r"b.json is also the baseline of theirs"):
        ci.run_config("mine", root, update_baseline=True)
    assert "$ dvc" not in capsys.readouterr().out


def test_a_config_folder_and_an_unread_real_archive_are_one_line(tmp_path, monkeypatch, capsys):
    ci = _ci_module()
    (tmp_path / ".ci" / "configs" / "odd.yaml").mkdir(parents=True)
    (tmp_path / ".ci/configs/syn.yaml").write_text("archive: synthetic\n")
    (tmp_path / "a.tar.gz").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"odd.yaml: a folder, expected a configuration's "
                                            r"YAML file"):
        ci.load_config("odd", tmp_path)
    for argv, said in ((["syn", "--real-archive", "none.tar.gz"],
                        r"--real-archive none.tar.gz: no such file"),
                       (["syn", "--real-archive", "a.tar.gz"],
                        r"--real-archive: no configuration given reads it \(syn build")):
        with pytest.raises(SystemExit):
            ci.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(said, err[0]), err


def test_metrics_out_onto_a_committed_file_or_with_both_baseline_options_is_refused(
        tmp_path, capsys, monkeypatch):
    """--metrics-out naming a file the checkout's git tracks (another configuration's
    committed baseline) is refused before the run; so is --baseline with
    --update-baseline (one would be read, the other written)."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text("archive: synthetic\n")
    committed = root / "reports/baseline/ci-other.json"
    committed.parent.mkdir(parents=True)
    committed.write_text('{"eval.precision_at_1": 0.5}\n')
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    with pytest.raises(PipelineError, match=r"--metrics-out .*ci-other.json: a file the "
                                            r"checkout's git tracks .* Nothing was run\.$"):
        ci.run_config("t", root, metrics_out=committed)
    assert committed.read_text() == '{"eval.precision_at_1": 0.5}\n'
    monkeypatch.chdir(root)
    for argv, said in ((["--baseline", str(committed), "--update-baseline"],
                        "--baseline and --update-baseline: give one"),
                       (["--baseline", str(committed), "--no-baseline", "why"],
                        "--baseline and --no-baseline: give one"),
                       (["--update-baseline", "--no-baseline", "why"],
                        "--update-baseline and --no-baseline: give one"),
                       (["--no-baseline", " "], "--no-baseline: expected the reason"),
                       (["--no-baseline", "why\n**PASSED**"],
                        "--no-baseline: the reason holds a newline")):
        with pytest.raises(SystemExit):
            ci.main(["t", *argv])
        assert said in capsys.readouterr().err


@pytest.mark.parametrize("option, value, said", [
    ("baseline_file", "README.md", r"--baseline .*README.md: not a baseline's path"),
    ("baseline_file", "notes.json", r"--baseline .*notes.json: a file that is not a baseline"),
    ("metrics_out", "afile/m.json", r"afile: a file, where the run needs a folder"),
])
def test_the_runs_files_given_as_options_are_checked_before_it_runs(tmp_path, option, value,
                                                                    said):
    """--baseline that is no baseline, a --metrics-out whose folder cannot be made: one line
    before the pipeline runs (not after minutes of it, naming the scratch copy)."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text("archive: synthetic\n")
    (root / "README.md").write_text("# mine\n")
    (root / "notes.json").write_text('{"a": 1}\n')
    (root / "afile").write_text("mine\n")
    with pytest.raises(PipelineError, match=said):
        ci.run_config("t", root, **{option: root / value})
    assert not list(Path(tempfile.gettempdir()).glob(f"cifar10-ci-{os.getpid()}-*"))


def test_the_regression_stage_updates_only_a_baseline(tmp_path):
    """`python stages/regression.py --update` with regression.baseline naming a file that is
    no baseline: one line, nothing written; a baseline (or no file yet) is written."""
    for name, text in (("README.md", "# mine\n"), ("notes.json", '["mine"]\n'),
                       # a stage's own metrics: numbers, under names that are no gated metric
                       ("metrics.json", '{"precision_at_1": 0.8, "loss": 1.2}\n')):
        (tmp_path / name).write_text(text)
        with pytest.raises(PipelineError, match=rf"{name}: .*--update writes only a baseline"):
            update_baseline(str(tmp_path / name), TOL, write_run(tmp_path, precision=0.7))
        assert (tmp_path / name).read_text() == text
    for _ in range(2):  # a new file, then the baseline it wrote
        assert update_baseline(str(tmp_path / "b.json"), TOL, write_run(tmp_path, precision=0.7))


@pytest.mark.parametrize("what", ["users-file", "folder", "link", "metrics-link",
                                  "metrics-folder"])
def test_what_the_run_keeps_beside_the_checkout_is_checked_before_it_runs(tmp_path, what):
    """regression-NAME.md is the command's own: a file it did not write (its sha256 not
    recorded), a folder or a link there is refused before the run, never replaced; so is
    a --metrics-out that is a link or a folder."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text("archive: synthetic\n")
    kept, foreign = root / "regression-t.md", tmp_path / "foreign"
    foreign.write_text("mine\n")
    metrics = None
    if what == "users-file":
        kept.write_text("my notes\n")
    elif what == "folder":
        kept.mkdir()
    elif what == "link":
        kept.symlink_to(foreign)
    else:
        metrics = tmp_path / "m.json"
        metrics.symlink_to(foreign) if what == "metrics-link" else metrics.mkdir()
    with pytest.raises(PipelineError, match=r"Nothing was run\.$"):
        ci.run_config("t", root, metrics_out=metrics)
    assert foreign.read_text() == "mine\n"
    if what == "users-file":
        assert kept.read_text() == "my notes\n"


def test_the_kept_table_is_known_by_its_recorded_digest(tmp_path):
    """The table a run keeps is recorded (sha256) before it is written: the next run may
    replace it; once edited, it is the user's."""
    ci = _ci_module()
    table, kept = tmp_path / "regression.md", tmp_path / "regression-t.md"
    table.write_text("| metric | ok |\n")
    assert ci._owned_table(kept) is None  # nothing there
    ci._keep_table(table, kept)
    assert kept.read_text() == "| metric | ok |\n" and ci._owned_table(kept) is None
    table.write_text("| metric | FAIL |\n")
    ci._keep_table(table, kept)
    assert kept.read_text() == "| metric | FAIL |\n" and ci._owned_table(kept) is None
    kept.write_text("| metric | FAIL |\nmy note\n")
    assert ci._owned_table(kept) == "a file this command did not write (or edited since)"


def _tiny_ci_config(clone: Path, name: str, train_per_batch: int, max_steps: int) -> None:
    """A CI configuration of synthetic images, at one batch of 16 and no baseline."""
    (clone / f".ci/configs/{name}.yaml").write_text(
        f"archive: synthetic\narchive_args: {{train_per_batch: {train_per_batch}, test: 50}}\n"
        f"report: false\nparams: {{train.max_steps: {max_steps}, train.batch_size: 16, "
        f"eval.every_steps: 0, train.device: cpu, regression.baseline: null}}\n")


def _ci_run_training(tmp_path: Path):
    """`.ci/ci.py long` started in a clone (100,000 steps: it trains until stopped), once its
    train stage runs: (clone, the runner's process, its log, its one scratch folder, the
    environment it ran with). Its temporary folder is the test's own: a CI run that another
    test starts meanwhile sweeps the dead runs' scratch folders of the system's one."""
    import time

    clone = _clone_with_working_ci(tmp_path / "c")
    _tiny_ci_config(clone, "long", 40, 100_000)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    log = tmp_path / "long.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, ".ci/ci.py", "long", "--no-baseline", "test"],
                                cwd=clone, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 300
    while "Running stage 'train'" not in log.read_text() and time.time() < deadline:
        time.sleep(0.5)
    assert "Running stage 'train'" in log.read_text(), log.read_text()
    scratch = list((tmp_path / "tmp").glob(f"cifar10-ci-{proc.pid}-*"))
    assert len(scratch) == 1
    return clone, proc, log, scratch, env


@pytest.mark.e2e
def test_a_killed_guard_takes_the_pipeline_with_it_before_the_scratch_goes(tmp_path):
    """kill -9 of the guard process itself (not of `cifar10 ci`): DVC and the stage under it
    run on in its process group; the runner stops them, says so in one line, and only then
    removes the scratch, so that no stage writes on into a removed folder."""
    clone, proc, log, scratch, env = _ci_run_training(tmp_path)
    guards = children_of(proc.pid)
    assert len(guards) == 1, guards
    os.kill(guards[0], signal.SIGKILL)
    assert proc.wait(timeout=120) == 1, log.read_text()
    text = log.read_text()
    assert (f"error: the guard of `dvc repro` (pid {guards[0]}) was killed by signal 9; its "
            f"processes are stopped and the run ends here") in text, text
    assert "Traceback" not in text, text
    assert processes_in(scratch[0]) == [] and not scratch[0].exists()


@pytest.mark.e2e
def test_a_killed_ci_run_leaves_no_process_and_its_scratch_goes_next_time(tmp_path):
    """kill -9 of `cifar10 ci` (no clean-up of its own runs): the pipeline it started,
    DVC and the stage under it, is stopped (the guard's parent-death signal); the next
    run removes the scratch folder it left."""
    import time

    clone, proc, log, scratch, env = _ci_run_training(tmp_path)
    time.sleep(3)
    proc.kill()
    proc.wait()

    deadline = time.time() + 30
    while processes_in(scratch[0]) and time.time() < deadline:
        time.sleep(0.5)
    assert processes_in(scratch[0]) == []
    assert scratch[0].is_dir()  # a kill -9 cleans nothing up itself
    _tiny_ci_config(clone, "short", 20, 2)
    # (and a configuration whose baseline is null gates nothing: never a pass, even without
    # --no-baseline)
    done = subprocess.run([sys.executable, ".ci/ci.py", "short"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not scratch[0].exists()
    assert ("CI configuration short: NO BASELINE (regression.baseline is null in "
            ".ci/configs/short.yaml's run): GATED NOTHING; the pipeline ran through") in \
        done.stdout, done.stdout
    assert "passed" not in done.stdout.splitlines()[-1]


@pytest.mark.e2e
def test_a_configuration_with_the_report_runs_it_also_without_a_baseline(tmp_path):
    """report: true asks for the exercise pipeline: a run that gates nothing (no baseline)
    still runs it, and says NO BASELINE."""
    clone = _clone_with_working_ci(tmp_path / "c")
    (clone / ".ci/configs/rep.yaml").write_text(
        "archive: synthetic\narchive_args: {train_per_batch: 20, test: 50}\nreport: true\n"
        "params: {train.max_steps: 2, train.batch_size: 16, eval.every_steps: 0, "
        "train.device: cpu, regression.baseline: null}\n"
        "exercise_params: {ablation.max_steps: 2, train.batch_size: 16, train.device: cpu, "
        "eval.batch_size: 50, input.min_fraction_of_examples_in_queue: 0.1, "
        "ablations: {baseline: {}, softmax: {model: {output: softmax}}, "
        "no_lrn: {model: {lrn: false}}}, dataset_ablations: {}}\n")
    done = subprocess.run([sys.executable, ".ci/ci.py", "rep"], cwd=clone, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "$ dvc repro reports/dvc.yaml:report" in done.stdout
    assert "wrote reports/report.md" in done.stdout, done.stdout[-3000:]
    assert "NO BASELINE (regression.baseline is null" in done.stdout.splitlines()[-1]


def test_every_ci_run_takes_one_thread_count_whatever_the_shell_says(tmp_path, monkeypatch):
    """The sums a run makes depend on its thread count: with a user's OMP_NUM_THREADS=1 the
    synthetic configuration's loss_avg moved past its tolerance. The runner gives its
    pipeline the thread count the committed baselines were measured at."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text("archive: synthetic\n")
    seen = []
    for name in ("copy_worktree", "apply_overrides", "_check_overrides", "_keep_results"):
        monkeypatch.setattr(ci, name, lambda *args: None)
    monkeypatch.setattr(ci, "build_archive", lambda *args: "0" * 32)
    monkeypatch.setattr(ci, "_place_baseline", lambda *args: "none here")
    monkeypatch.setattr(ci, "_outputs", lambda project: [])
    monkeypatch.setattr(ci, "_run", lambda cmd, cwd, env: seen.append(env) or 0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    # nor a user's own run's deadline or mirror: a CI run is whole, of this code, from step 0
    monkeypatch.setenv("CIFAR10_STOP_AT", "1s")
    monkeypatch.setenv("CIFAR10_CHECKPOINT_MIRROR", str(tmp_path / "mirror"))
    assert ci.run_config("t", root) == 0
    assert seen and all(env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == ci.THREADS == "2"
                        for env in seen)
    assert not any(var in env for env in seen for var in ci.RUN_VARIABLES)


def test_metrics_out_in_the_code_or_a_stages_output_is_refused(tmp_path, monkeypatch):
    """--metrics-out inside src/ (the code) or data/prepared (the preprocess stage's
    output): one line before the run, nothing written there."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text("archive: synthetic\n")
    (root / "src").mkdir()
    (root / "dvc.yaml").write_text("stages:\n  preprocess:\n    cmd: x\n    outs:\n"
                                   "    - data/prepared\n")
    monkeypatch.chdir(root)
    for out, said in (("src/m.json", "inside src/, the project's code"),
                      ("data/prepared/m.json", "an output of the DVC stage 'preprocess'")):
        with pytest.raises(PipelineError, match=rf"--metrics-out {out}: .*{re.escape(said)}"):
            ci.run_config("t", root, metrics_out=Path(out))
    assert sorted(p.name for p in (root / "src").iterdir()) == []
    assert not (root / "data/prepared/m.json").exists()


@pytest.mark.parametrize("baseline, said", [
    ("src/ci-t.json", "inside src/, the project's code"),
    ("data/prepared/ci-t.json", "an output of the DVC stage 'preprocess'"),
])
def test_a_configurations_baseline_in_the_code_or_a_stages_output_is_refused(tmp_path, baseline,
                                                                            said):
    """regression.baseline of a configuration is the file --update-baseline writes and asks
    to commit: not in the code, nor in a stage's output (its next run deletes it)."""
    ci = _ci_module()
    root = tmp_path / "r"
    (root / ".ci" / "configs").mkdir(parents=True)
    (root / ".ci/configs/t.yaml").write_text(f"archive: synthetic\nparams: "
                                             f"{{regression.baseline: {baseline}}}\n")
    (root / "dvc.yaml").write_text("stages:\n  preprocess:\n    cmd: x\n    outs:\n"
                                   "    - data/prepared\n")
    with pytest.raises(PipelineError, match=rf"t.yaml: regression.baseline {baseline}: "
                                            rf".*{re.escape(said)}.*Nothing was run\.$"):
        ci.run_config("t", root, update_baseline=True)
    assert not (root / baseline).exists()


@pytest.mark.parametrize("train, evals, said", [
    ({"loss_avg": -0.5}, {}, r"train/metrics.json: loss_avg is -0.5, expected a number from "
                             r"0 to 3.403e\+38, as a run's loss is"),
    ({"loss_avg": 1e39}, {}, r"train/metrics.json: loss_avg is 1e\+39, expected a number "
                             r"from 0 to 3.403e\+38"),
], ids=["negative-loss", "past-float32"])
def test_a_run_figure_no_run_gives_passes_no_gate_and_is_no_baseline(tmp_path, train, evals,
                                                                     said):
    """This run's metrics edited to a figure no run gives (a loss below 0, its curve and
    every record edited alike): gated, it would pass; written by --update as the baseline,
    it would let every later run pass, and `cifar10 ci --baseline` refuse the file. One
    line naming the file, before either."""
    files = write_run(tmp_path, loss=train.get("loss_avg", 1.0),
                      precision=evals.get("precision_at_1", 0.80))
    _refused_by_gate_and_update(tmp_path, files, said)


def test_an_empty_row_in_the_evaluations_csv_is_named_so(tmp_path):
    """Blank lines at the end of predictions.csv (a hand edit; the eval stage writes none):
    one line saying the row is empty, not 'found the row ' and nothing."""
    files = write_run(tmp_path)
    path = files["eval"].parent / "predictions.csv"
    path.write_text(path.read_text() + "\n\n")
    with pytest.raises(PipelineError, match=r"predictions.csv: expected the evaluation's rows "
                                            r"under the header actual,predicted, found an empty "
                                            r"row; rerun the eval stage"):
        gate(write_baseline(tmp_path), TOL, files)


def test_epochs_the_runs_record_contradicts_pass_no_gate(tmp_path):
    """train.epochs edited in the train stage's metrics.json (its record, provenance.json,
    written by the same run, gives the epochs it trained): one line naming both."""
    files = write_run(tmp_path)
    record = tmp_path / "train" / "provenance.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "epochs": 0.32}))
    train = json.loads(files["train"].read_text())
    files["train"].write_text(json.dumps({**train, "epochs": 0.32}))
    assert "| ok |" in gate(write_baseline(tmp_path), TOL, files)
    files["train"].write_text(json.dumps({**train, "epochs": 3.2}))
    said = r"train/metrics.json: train.epochs is 3.2, where .*train/provenance.json records 0.32"
    _refused_by_gate_and_update(tmp_path, files, said)


@pytest.mark.e2e
def test_dvc_runs_the_gate_only_against_a_baseline_it_tracks(tmp_path):
    """The regression stage depends on reports/baseline/: a regression.baseline elsewhere
    could be edited to fail while `dvc status` calls the recorded "ok" up to date. Run by
    DVC, the gate refuses it in one line, writing nothing; one in reports/baseline/ is
    gated, and an edit to it makes the stage stale. By hand, any path is read."""
    from conftest import copy_project, init_repo

    project = copy_project(tmp_path / "p")
    write_train(project / "reports" / "train", {"loss_avg": 1.0, "step": 100})
    write_eval(project / "reports" / "eval", {"precision_at_1": 0.8, "precision_at_1_raw": 0.8,
                                              "num_examples": 1000})
    outside = write_baseline(tmp_path, **{"eval.precision_at_1_raw": 0.8})
    set_params(project, "regression", baseline=outside)
    init_repo(project)
    proc = subprocess.run([DVC, "repro", "-s", "regression"], cwd=project, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert (f"error: regression.baseline {outside}: outside reports/baseline/, the folder the "
            f"regression stage depends on, so DVC would not see the file change"
            in proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert not (project / "reports" / "regression.md").exists()
    # by hand: nothing records the verdict
    by_hand = subprocess.run([sys.executable, "stages/regression.py", "--out", str(tmp_path / "g.md")],
                             cwd=project, capture_output=True, text=True, timeout=120)
    assert by_hand.returncode == 0 and "| ok |" in by_hand.stdout, by_hand.stdout
    inside = project / "reports" / "baseline" / "mine.json"
    shutil.copy2(outside, inside)
    set_params(project, "regression", baseline="reports/baseline/mine.json")
    dvc(project, "repro", "-s", "regression")
    assert "| ok |" in (project / "reports" / "regression.md").read_text()
    inside.write_text(json.dumps({"eval.precision_at_1": 0.9, "eval.precision_at_1_raw": 0.8,
                                  "train.loss_avg": 1.0}))
    assert "reports/baseline" in dvc(project, "status", "regression").stdout
