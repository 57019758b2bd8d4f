"""The reference implementation's runs (devtools/tf_reference.py, run outside the package)
and the report's section on them (cifar10_tutorial.report.against_reference)."""
import hashlib
import importlib.util
import json
import shutil

import pandas as pd
import pytest

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.report.against_reference import against_reference, load_reference_runs
from cifar10_tutorial.report.results import Results
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("tf_reference", ROOT / "devtools" / "tf_reference.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

LOG = ("2026-12-02 18:14:36.5: step 0, loss = 4.67 (126.3 examples/sec; 1.014 sec/batch)\n"
       "I1202 noise\n"
       "2026-12-02 18:14:56.1: step 1000, loss = 2.29 (364.1 examples/sec; 0.352 sec/batch)\n"
       "2026-12-02 18:14:59.5: step 1010, loss = 2.33 (380.0 examples/sec; 0.338 sec/batch)\n")


def _run(tmp_path, steps=(10000,)):
    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    last = steps[-1]
    for ext in ("index", "meta", "data-00000-of-00001"):
        (run / "train" / f"model.ckpt-{last}.{ext}").write_bytes(b"new")
        (run / "train" / f"model.ckpt-9000.{ext}").write_bytes(b"old")
    (run / "train" / "checkpoint").write_text(
        f'model_checkpoint_path: "{run}/train/model.ckpt-{last}"\n'
        f'all_model_checkpoint_paths: "{run}/train/model.ckpt-9000"\n')
    (run / "evals.tsv").write_text("".join(f"{s}\t0.78{i}\t0.74{i}\t2026-12-02T19:00:00Z\n"
                                           for i, s in enumerate(steps)))
    (run / "segments.tsv").write_text(f"{last}\t2026-12-02T18:14:16Z\t2026-12-02T19:00:00Z\tvm\tAMD EPYC\n")
    (run / "train.log").write_text(LOG)
    return run


def test_collect_records_the_evaluations_and_the_provenance(tmp_path):
    run = _run(tmp_path)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"archive")
    rec = tool.collect(run, "tf_10k_a", "2.21.0", archive, 10000)
    assert rec["evaluations"] == [{"step": 10000, "precision_at_1": 0.780,
                                   "precision_at_1_raw": 0.740, "date": "2026-12-02T19:00:00Z"}]
    assert rec["steps_planned"] == 10000 and rec["tensorflow"] == "2.21.0" and rec["upstream"]["files"]["cifar10.py"].startswith("05a434d")
    assert rec["data"]["archive_md5"] == hashlib.md5(b"archive").hexdigest()
    assert rec["segments"][0]["cpu"] == "AMD EPYC"
    assert rec["examples_per_sec_median"] == pytest.approx(364.1)  # step 0 left out, every 100th
    assert rec["loss_every_1000"] == [{"step": 0, "loss": 4.67}, {"step": 1000, "loss": 2.29}]
    (run / "evals.tsv").write_text("")
    with pytest.raises(PipelineError, match="no evaluation of the finished run"):
        tool.collect(run, "x", "2.21.0", archive, 10000)
    early = tool.collect(run, "x", "2.21.0", archive, 100000)  # under way: no evaluation yet
    assert early["reached_step"] == 10000 and early["evaluations"] == []


def test_keep_takes_the_newest_checkpoint_alone_and_restore_gives_it_back(tmp_path):
    run = _run(tmp_path, (10000, 20000))
    dest = tmp_path / "repo" / "runs" / "tf_reference_100k"
    (dest / "train").mkdir(parents=True)
    (dest / "train" / "model.ckpt-10000.index").write_bytes(b"stale")
    assert tool.keep(run, dest) == "model.ckpt-20000"
    assert sorted(p.name for p in (dest / "train").iterdir()) == [
        "checkpoint", "model.ckpt-20000.data-00000-of-00001", "model.ckpt-20000.index",
        "model.ckpt-20000.meta"]
    assert '"model.ckpt-20000"' in (dest / "train" / "checkpoint").read_text()
    assert (dest / "evals.tsv").read_text() == (run / "evals.tsv").read_text()
    again = tmp_path / "next"
    tool.restore(dest, again)
    assert (again / "train" / "model.ckpt-20000.index").read_bytes() == b"new"
    with pytest.raises(PipelineError, match="already there"):
        tool.restore(dest, again)


def test_losses_of_continuations_count_from_their_start_and_travel_with_the_checkpoint(tmp_path):
    """Each continuation's log counts steps from 0; the rows of earlier machines come back
    from losses.tsv after keep and restore."""
    run = _run(tmp_path, (10000, 20000))
    (run / "logs").mkdir()
    (run / "logs" / "train-from-10000.log").write_text(LOG.replace("step 1000,", "step 900,"))
    assert tool.losses(run) == [(0, 4.67, None), (1000, 2.29, 364.1), (10000, 4.67, None),
                                (10900, 2.29, 364.1)]
    dest, again = tmp_path / "kept", tmp_path / "again"
    tool.keep(run, dest)
    tool.restore(dest, again)
    assert not (again / "train.log").exists() and not (again / "logs").exists()
    assert tool.losses(again) == tool.losses(run)
    (again / "logs").mkdir()
    (again / "logs" / "train-from-20000.log").write_text(LOG)
    rec = tool.collect(again, "x", "2.21.0", dest / "evals.tsv", 100000)
    assert [r["step"] for r in rec["loss_every_1000"]] == [0, 1000, 10000, 20000, 21000]


def _results(tmp_path, seeds=(0.784, 0.787, 0.791)):
    df = pd.DataFrame({"precision_at_1": list(seeds), "precision_at_1_raw": [0.747, 0.75, 0.751],
                       "steps": [10000] * 3}, index=["baseline", "baseline_seed1", "baseline_seed2"])
    return Results(df, df, df.iloc[:0], tmp_path, tmp_path / "tables", tmp_path / "plots", df)


def _record(folder, name, evals, planned=10000):
    folder.mkdir(exist_ok=True)
    rec = {"run": name, "tensorflow": "2.21.0",
           "data": {"archive_md5": "c" * 32, "evaluated_images": 10112},
           "steps_planned": planned,
           "evaluations": [{"step": s, "precision_at_1": p, "precision_at_1_raw": r}
                           for s, p, r in evals]}
    (folder / f"{name}.json").write_text(json.dumps(rec))


def test_the_section_weighs_the_short_runs_against_the_seed_band(tmp_path):
    r, tf = _results(tmp_path), tmp_path / "tf"
    tf.mkdir()
    assert "No runs of the reference implementation yet" in "\n".join(against_reference(r, tf))
    _record(tf, "tf_10k_a", [(10000, 0.786, 0.745)])
    text = "\n".join(against_reference(r, tf))
    assert "| reference `tf_10k_a` | 78.6% | 74.5% |" in text
    assert "within the seed-to-seed spread: noise" in text
    _record(tf, "tf_10k_b", [(10000, 0.75, 0.70)])
    _record(tf, "tf_10k_a", [(10000, 0.752, 0.70)])
    text = "\n".join(against_reference(r, tf))
    assert "below this project's by more than the seed-to-seed spread" in text
    assert "No 100,000-step run of the reference yet." in text


def test_the_section_follows_the_long_run_until_it_ends(tmp_path):
    r, tf = _results(tmp_path), tmp_path / "tf"
    _record(tf, "tf_reference_100k", [], planned=100000)
    (tf / "tf_reference_100k.json").write_text(json.dumps(
        {**json.loads((tf / "tf_reference_100k.json").read_text()), "reached_step": 7000}))
    assert ("Under way: it has reached step 7,000 of 100,000" in
            "\n".join(against_reference(r, tf)))
    _record(tf, "tf_reference_100k", [(10000, 0.78, 0.74)], planned=100000)
    text = "\n".join(against_reference(r, tf))
    assert "The run has reached step 10,000 of 100,000" in text
    assert "No 10,000-step run of the reference has finished yet." in text  # not a short run
    assert "| 10,000 | 78.0% | 74.0% |" in text and (tmp_path / "plots/against_reference.png").is_file()
    _record(tf, "tf_reference_100k", [(10000, 0.78, 0.74), (100000, 0.84, 0.80)], planned=100000)
    text = "\n".join(against_reference(r, tf))
    assert "At 100,000 steps the reference reads 84.0% on the dev split" in text


def test_the_section_gives_the_operation_level_check_beside_the_runs(tmp_path):
    r, tf = _results(tmp_path), tmp_path / "tf"
    _record(tf, "tf_10k_a", [(10000, 0.786, 0.745)])
    rows = [{"what": "logits, raw weights", "max_abs_diff": 1e-5, "max_rel_diff": 4e-7,
             "tolerance": 1e-4, "ok": True},
            {"what": "gradient of conv1/biases", "max_abs_diff": 1e-7, "max_rel_diff": 1.7e-6,
             "tolerance": 1e-4, "ok": True}]
    check = {"checkpoint_step": 80000, "images": {"train": 128, "held_out": 128},
             "same_predictions_held_out": 1.0, "checks": rows}
    (tf / "opcheck.json").write_text(json.dumps(check))
    assert set(load_reference_runs(tf)) == {"tf_10k_a"}  # not a run's record
    text = "\n".join(against_reference(r, tf))
    assert ("the gradient of every variable (2 tensors in all) each within 1.7e-06 of "
            "TensorFlow's, relative to the tensor's largest value (the largest: gradient of "
            "conv1/biases)") in text
    assert "checkpoint at step 80,000" in text and "100% of 128 held-out images" in text
    rows[0].update(max_rel_diff=0.5, ok=False)
    (tf / "opcheck.json").write_text(json.dumps(check))
    text = "\n".join(against_reference(r, tf))
    assert "**outside the tolerance of 1e-04: logits, raw weights**" in text


def test_the_gap_at_100k_is_weighed_against_the_seed_spread(tmp_path):
    from cifar10_tutorial.report.against_reference import _gap

    df = pd.DataFrame({"precision_at_1": [0.784, 0.787, 0.791, 0.828],
                       "precision_at_1_raw": [0.747, 0.75, 0.751, 0.79],
                       "steps": [10000] * 3 + [100000]},
                      index=["baseline", "baseline_seed1", "baseline_seed2", "tutorial_100k"])
    r = Results(df, df.iloc[:3], df.iloc[3:], tmp_path, tmp_path / "t", tmp_path / "p", df.iloc[:3])
    close = _gap(r, {"evals": [(100000, 0.830, 0.79)]}, 100000)
    assert ("`tutorial_100k` reads 82.8% on the same images. Of the gap to the tutorial's "
            "figure, the part between it and 83.0% is the reference's own on this data") in close
    assert ("0.2 points lie between the two implementations (the reference the higher; one "
            "run each, within the "
            "0.7-point spread of the baseline's seeds at 10,000 steps: noise, no difference "
            "between them shown)") in close
    far = _gap(r, {"evals": [(100000, 0.85, 0.79)]}, 100000)
    assert "2.2 points lie between the two implementations (the reference the higher; one run " \
        "each, beyond the 0.7" in far
    mine = _gap(r, {"evals": [(100000, 0.825, 0.79)]}, 100000)  # the reproduction above it
    assert "0.3 points lie between the two implementations (this project the higher" in mine
    assert "noise" not in far


@pytest.mark.parametrize("how", ["copy", "rename", "copy-renamed-inside",
                                 "copy-renamed-inside-one-date-changed",
                                 "copy-renamed-inside-its-figure-changed"])
def test_a_copied_or_renamed_record_is_not_another_run(tmp_path, how):
    """A byte copy of a run's record under another name (or a record moved to another
    name) would count the same run twice in the reference's average: one line naming
    it."""
    from conftest import ROOT

    tf = tmp_path / "tf"
    shutil.copytree(ROOT / "reports/tf_reference", tf)
    assert set(load_reference_runs(tf)) == {"tf_10k_a", "tf_10k_b", "tf_reference_100k"}
    rec = json.loads((tf / "tf_10k_a.json").read_text())
    if how == "rename":
        (tf / "tf_10k_a.json").rename(tf / "tf_10k_c.json")
    else:
        if how.startswith("copy-renamed-inside"):
            rec["run"] = "tf_10k_c"
        if how.endswith("one-date-changed"):  # its segments still the run's own
            rec["evaluations"][-1]["date"] = "2026-12-03"
        if how.endswith("its-figure-changed"):  # the run's start changed too: its loss curve
            rec["evaluations"][-1]["precision_at_1"] = 0.95
            rec["segments"][0]["start"] = "2026-12-01T00:00:00Z"
        (tf / "tf_10k_c.json").write_text(json.dumps(rec))
    said = ("a record of the same run as tf_10k_a.json" if how.startswith("copy-renamed")
            else "the record of run 'tf_10k_a'")
    with pytest.raises(PipelineError, match=rf"tf_10k_c.json: expected the record of run "
                                            rf"tf_10k_c, found {said}"):
        load_reference_runs(tf)


def test_a_record_the_tables_do_not_show_is_named(tmp_path):
    """A run of another length, a 10,000-step run still under way, a second 100,000-step
    run: each named with why it is not compared, never dropped unsaid."""
    r, tf = _results(tmp_path), tmp_path / "tf"
    _record(tf, "tf_10k_a", [(10000, 0.786, 0.745)])
    assert "Not compared" not in "\n".join(against_reference(r, tf))
    _record(tf, "tf_9k", [(9000, 0.77, 0.74)], planned=9000)
    _record(tf, "tf_10k_b", [(5000, 0.6, 0.55)])
    rec = json.loads((tf / "tf_10k_b.json").read_text())
    (tf / "tf_10k_b.json").write_text(json.dumps({**rec, "reached_step": 6000}))
    _record(tf, "tf_long_a", [(10000, 0.78, 0.74)], planned=100000)
    _record(tf, "tf_long_b", [(10000, 0.79, 0.75)], planned=100000)
    text = "\n".join(against_reference(r, tf))
    assert ("Not compared: `tf_10k_b` (under way, at step 6,000 of 10,000); `tf_9k` (a run of "
            "9,000 steps: the section compares runs of 10,000 and 100,000); `tf_long_b` (a "
            "second run of 100,000 steps: the section follows one).") in text


def test_a_record_of_other_data_is_refused_or_not_compared(tmp_path):
    """The section compares the reference with this project on the same images: a record
    of another archive than the other runs' is one line naming it; records of another
    number of images than the baseline ran on (yours on another data set) are not
    compared, and the section says so."""
    from conftest import ROOT

    tf = tmp_path / "tf"
    shutil.copytree(ROOT / "reports/tf_reference", tf)
    rec = json.loads((tf / "tf_reference_100k.json").read_text())
    good = json.dumps(rec)
    rec["data"]["archive_md5"] = "0" * 32
    (tf / "tf_reference_100k.json").write_text(json.dumps(rec))
    with pytest.raises(PipelineError, match=r"tf_reference_100k.json: data.archive_md5 is "
                                            r"'0{32}', where tf_10k_a.json, tf_10k_b.json give "
                                            r"'cbbdb9d17d"):
        load_reference_runs(tf)
    # the odd record named whichever its place in the folder's order
    (tf / "tf_reference_100k.json").write_text(good)
    first = json.loads((tf / "tf_10k_a.json").read_text())
    first["data"]["archive_md5"] = "0" * 32
    (tf / "tf_10k_a.json").write_text(json.dumps(first))
    with pytest.raises(PipelineError, match=r"/tf_10k_a.json: data.archive_md5 is '0{32}', "
                                            r"where tf_10k_b.json, tf_reference_100k.json give"):
        load_reference_runs(tf)
    shutil.copy(ROOT / "reports/tf_reference/tf_10k_a.json", tf / "tf_10k_a.json")
    second = json.loads((tf / "tf_10k_b.json").read_text())  # one record's archive left out
    del second["data"]["archive_md5"]
    (tf / "tf_10k_b.json").write_text(json.dumps(second))
    with pytest.raises(PipelineError, match=r"/tf_10k_b.json: expected a reference run's "
                                            r"record .*: no data.archive_md5, the archive the "
                                            r"run was trained on \(every record names it\)"):
        load_reference_runs(tf)
    for name in ("tf_10k_a", "tf_reference_100k"):  # left out of every record: the same
        rec = json.loads((tf / f"{name}.json").read_text())
        del rec["data"]["archive_md5"]
        (tf / f"{name}.json").write_text(json.dumps(rec))
    with pytest.raises(PipelineError, match=r"no data.archive_md5"):
        load_reference_runs(tf)
    for name in ("tf_10k_a", "tf_10k_b", "tf_reference_100k"):
        shutil.copy(ROOT / f"reports/tf_reference/{name}.json", tf / f"{name}.json")
    # the runs of one archive disagreeing on the images they evaluated
    rec = json.loads((tf / "tf_10k_a.json").read_text())
    rec["data"]["evaluated_images"] = 10113
    (tf / "tf_10k_a.json").write_text(json.dumps(rec))
    with pytest.raises(PipelineError, match=r"/tf_10k_a.json: data.evaluated_images is 10113, "
                                            r"where tf_10k_b.json gives 10112 of the same "
                                            r"archive"):
        load_reference_runs(tf)
    shutil.copy(ROOT / "reports/tf_reference/tf_10k_a.json", tf / "tf_10k_a.json")
    shutil.copy(ROOT / "reports/tf_reference/tf_10k_b.json", tf / "tf_10k_b.json")
    df = pd.DataFrame({"precision_at_1": [0.784], "precision_at_1_raw": [0.747],
                       "steps": [10000], "num_train": [5000], "num_examples": [10000]},
                      index=["baseline"])
    r = Results(df, df, df.iloc[:0], tmp_path, tmp_path / "tables", tmp_path / "plots", df)
    text = "\n".join(against_reference(r, tf))
    assert ("Not compared: the reference's runs were made on other data than the baseline's "
            f"(`{tf}/tf_10k_a.json`: 40,000 training images, the baseline 5,000).") in text
    assert "| reference `tf_10k_a` |" not in text and "reference reads" not in text


def test_a_damaged_record_is_one_line(tmp_path):
    (tmp_path / "bad.json").write_text('{"evaluations": [{"step": "x"}]}')
    with pytest.raises(PipelineError, match=r"bad.json: expected a reference run's record"):
        load_reference_runs(tmp_path)


@pytest.mark.parametrize("edit, said", [
    ({"data": None}, "data is null, expected the data set's record"),
    ({"data": "x"}, 'data is "x", expected the data set\'s record'),
    ({"tensorflow": {"x": 1}}, 'tensorflow is {"x": 1}, expected its version'),
    ({"segments": "x"}, "segments is not a list of records"),
    ({"evaluations": None}, "evaluations is null, expected a list of records"),
    ({"precision_at_1": 1.5}, "an evaluation's precision_at_1 is 1.5, expected a fraction"),
    ({"precision_at_1": float("nan")}, "an evaluation's precision_at_1 is NaN, expected a"),
    ({"precision_at_1_raw": "0.78"}, 'an evaluation\'s precision_at_1_raw is "0.78", expected a fraction'),
    ({"precision_at_1": True}, "an evaluation's precision_at_1 is true, expected a fraction"),
    ({"step": "10000"}, "an evaluation's step is \"10000\", expected a whole number"),
    ({"step": 12000}, r"an evaluation at step 12000, past the step the run reached \(10000\)"),
    ({"reached_step": 9000}, r"an evaluation at step 10000, past the step the run reached"),
    ({"reached_step": 10001}, "reached_step is 10001, past steps_planned 10000"),
    ({"steps_planned": 10000.5}, "steps_planned is 10000.5, expected a whole number"),
    ({"twice": True}, "two evaluations of one step"),
    ({"evaluated_images": 10}, "data.evaluated_images is 10, fewer than held_out_images "
                               r"10,000 \(cifar10_eval.py evaluates whole batches of 128\): "
                               "its evaluations were not of the held-out images"),
    # the queue's wrap-around adds less than one batch (10,112 = 79 x 128)
    ({"evaluated_images": 19_999}, "data.evaluated_images is 19,999, a batch or more past "
                                   "held_out_images 10,000"),
    ({"held_out_images": -1}, "data.held_out_images is -1, expected a whole number"),
    ({"evaluated_images": 10 ** 12}, "data.evaluated_images is 1,000,000,000,000, a batch or "
                                     "more past held_out_images 10,000"),
    ({"archive_md5": "not-an-md5; rm -rf /"}, 'data.archive_md5 is "not-an-md5; rm -rf /", '
                                              'expected the archive\'s md5'),
    ({"steps_planned": 10 ** 400}, "steps_planned is a number of 401 digits, expected at most "
                                   "1,000,000,000"),
])
def test_a_record_with_figures_no_run_gives_is_one_line(tmp_path, edit, said):
    """A precision outside 0 to 1, not finite or written as text, or an evaluation of a
    step the run never reached: a figure the section would state as the reference's; one
    line naming the record and the figure, never a table of it."""
    from conftest import ROOT

    tf = tmp_path / "tf"
    shutil.copytree(ROOT / "reports/tf_reference", tf)
    rec = json.loads((tf / "tf_10k_a.json").read_text())
    last = rec["evaluations"][-1]
    for key, value in edit.items():
        if key == "twice":
            rec["evaluations"].append(dict(last))
        elif key in ("reached_step", "steps_planned", "data", "tensorflow", "segments",
                     "evaluations"):
            rec[key] = value
        elif key.endswith("_images") or key == "archive_md5":
            rec["data"][key] = value
        else:
            last[key] = value
    (tf / "tf_10k_a.json").write_text(json.dumps(rec))
    with pytest.raises(PipelineError, match=rf"tf_10k_a.json: expected a reference run's "
                                            rf"record .*: {said}"):
        load_reference_runs(tf)


def test_the_opcheck_maps_the_tutorials_variables_onto_this_network():
    """devtools/tf_opcheck.py's layout change: the tutorial's network (NHWC, HWIO kernels,
    local3 reading pool2 flattened as H, W, C) computed in numpy from TF-layout weights
    must give this network's logits once the weights are moved into its layout."""
    import numpy as np
    import torch

    from cifar10_tutorial.model import build_model

    spec = importlib.util.spec_from_file_location("tf_opcheck", ROOT / "devtools" / "tf_opcheck.py")
    opcheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(opcheck)
    rng = np.random.default_rng(1)
    shapes = {"conv1/weights": (5, 5, 3, 64), "conv2/weights": (5, 5, 64, 64),
              "local3/weights": (2304, 384), "local4/weights": (384, 192),
              "softmax_linear/weights": (192, 10)}
    tf_w = {k: rng.normal(0, 0.05, s).astype(np.float32) for k, s in shapes.items()}
    model = build_model(10)
    with torch.no_grad():
        for k, v in tf_w.items():
            layer = getattr(model, k.split("/")[0])
            layer.weight.copy_(torch.from_numpy(opcheck.to_torch_layout(k, v)))
            layer.bias.zero_()
        model.norm1, model.norm2 = torch.nn.Identity(), torch.nn.Identity()
        x = torch.from_numpy(rng.normal(0, 1, (2, 3, 24, 24)).astype(np.float32))
        pool2 = model.features(x).permute(0, 2, 3, 1).numpy()  # NHWC, as TF holds it
        h = np.maximum(pool2.reshape(2, -1) @ tf_w["local3/weights"], 0)  # TF's flattening
        h = np.maximum(h @ tf_w["local4/weights"], 0)
        expected = h @ tf_w["softmax_linear/weights"]
        got = model.logits(x).numpy()
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
    # and the kernels: a TF conv (HWIO on NHWC) as an explicit sum over one output pixel
    k = tf_w["conv1/weights"]
    patch = x[0, :, 8:13, 8:13].permute(1, 2, 0).numpy()  # the 5x5 window centred on (10, 10)
    ref = np.einsum("hwi,hwio->o", patch, k)
    with torch.no_grad():
        out = torch.nn.functional.conv2d(x, model.conv1.weight, padding=2)[0, :, 10, 10]
    assert np.allclose(out.numpy(), ref, atol=1e-4)


def test_a_reference_folder_given_is_named_as_given_and_a_non_folder_refused(tmp_path):
    """--tf-reference a typo: one line naming it (never a report without the section); an
    empty folder given: the report says which folder had no runs, not the default's name;
    a file or a loop of links there is one line."""
    r = _results(tmp_path)
    with pytest.raises(PipelineError, match=r"^--tf-reference .*nxdir: not found, where the "
                                            r"reference implementation's runs are read from"):
        against_reference(r, tmp_path / "nxdir")
    (tmp_path / "nxdir").mkdir()
    text = "\n".join(against_reference(r, tmp_path / "nxdir"))
    assert "No runs of the reference implementation yet (`" in text \
        and "nxdir/`)" in text and "reports/tf_reference" not in text
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("x")
    for bad in ("loop", "file"):
        with pytest.raises(PipelineError, match=rf"^--tf-reference .*{bad}: not a folder"):
            against_reference(r, tmp_path / bad)


def test_a_fifo_among_the_runs_or_a_damaged_opcheck_is_one_line(tmp_path):
    """A FIFO named like a run's record would hold the report for ever; an operation-level
    check missing a field cannot be stated. One line each, naming the file."""
    import os

    r, tf = _results(tmp_path), tmp_path / "tf"
    _record(tf, "tf_10k_a", [(10000, 0.786, 0.745)])
    (tf / "opcheck.json").write_text('{"checks": []}')
    with pytest.raises(PipelineError, match=r"opcheck.json: expected the operation-level "
                                            r"check's record"):
        against_reference(r, tf)
    (tf / "opcheck.json").unlink()
    os.mkfifo(tf / "zz.json")
    with pytest.raises(PipelineError, match=r"zz.json: expected a reference run's record, "
                                            r"found not a regular file"):
        against_reference(r, tf)


def test_keep_replaces_only_a_run_it_kept(tmp_path):
    """keep replaces its destination whole: a folder holding anything keep does not write
    there (a user's file, a link) is refused naming it, and nothing is changed; a folder of
    only what it writes (the committed runs/ copy) is replaced, built aside first."""
    run = _run(tmp_path, (10000, 20000))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("my thesis\n")
    with pytest.raises(PipelineError, match=rf"^{mine}: holds thesis.txt, which keep did not "
                                            r"write there .* Nothing was changed."):
        tool.keep(run, mine)
    assert (mine / "thesis.txt").read_text() == "my thesis\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "run"]
    kept = tmp_path / "kept"
    tool.keep(run, kept)
    (kept / "train" / "notes").mkdir()
    with pytest.raises(PipelineError, match=r"holds train/notes, which keep did not write"):
        tool.keep(run, kept)
    (kept / "train" / "notes").rmdir()
    assert tool.keep(run, kept) == "model.ckpt-20000"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left aside


@pytest.mark.parametrize("name, said", [
    ("../devices_timing", r"NAME '../devices_timing': expected a run's name \(a letter, then "
                          r"letters, digits, '_' or '-', at most 64\), not a path"),
    ("notes", r"NAME .*notes.json: holds a file that is not a reference run's record"),
])
def test_collect_writes_only_a_record_of_its_own_name(tmp_path, name, said, capsys):
    """collect's NAME names its record's file in --out: a path in it, or a file there that
    is no reference record (the devices timing beside them, a user's notes), is refused in
    one line, the file kept; a run folder without its checkpoint is one line too."""
    run = _run(tmp_path)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"archive")
    out = tmp_path / "records"
    out.mkdir()
    (out / "notes.json").write_text('{"mine": 1}\n')
    (tmp_path / "devices_timing.json").write_text('{"machine": "x"}\n')
    args = ["collect", str(run), name, "--tensorflow", "2.21.0", "--archive", str(archive),
            "--steps-planned", "10000", "--out", str(out)]
    with pytest.raises(SystemExit, match=r"^error: " + said):
        tool.main(args)
    assert (out / "notes.json").read_text() == '{"mine": 1}\n'
    assert (tmp_path / "devices_timing.json").read_text() == '{"machine": "x"}\n'
    shutil.rmtree(run / "train")
    with pytest.raises(SystemExit, match=r"^error: .*run/train/checkpoint: not found, where a "
                                         r"run of the reference code names its newest"):
        tool.main(args[:2] + ["fresh"] + args[3:])


def test_evaluations_out_of_step_order_are_one_line(tmp_path):
    """collect writes a run's evaluations in the order it made them, step by step: two
    swapped would be listed as they stand in the section's table. One line naming them."""
    from conftest import ROOT

    tf = tmp_path / "tf"
    shutil.copytree(ROOT / "reports/tf_reference", tf)
    rec = json.loads((tf / "tf_reference_100k.json").read_text())
    first, second = rec["evaluations"][:2]
    rec["evaluations"][:2] = [second, first]
    (tf / "tf_reference_100k.json").write_text(json.dumps(rec))
    with pytest.raises(PipelineError, match=rf"tf_reference_100k.json: expected a reference "
                                            rf"run's record .*: an evaluation at step "
                                            rf"{first['step']:,} after one at step "
                                            rf"{second['step']:,}, where a run evaluates in "
                                            rf"step order"):
        load_reference_runs(tf)


def test_collect_writes_where_the_report_reads_the_records(tmp_path, monkeypatch, capsys):
    """collect's default --out is reports/tf_reference, the folder the report stage reads
    (kept in git, made by no stage): the records it exists to write go there, not refused
    as another stage's input; a budget below the step the run reached is refused before
    anything is written (the report would refuse the record)."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "reports" / "tf_reference").mkdir(parents=True)
    shutil.copy(ROOT / "reports" / "dvc.yaml", repo / "reports" / "dvc.yaml")
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    run = _run(tmp_path)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"archive")
    monkeypatch.chdir(repo)
    args = ["collect", str(run), "tf_10k_a", "--tensorflow", "2.21.0", "--archive",
            str(archive), "--steps-planned"]
    with pytest.raises(SystemExit, match=r"^error: --steps-planned 5000: the run's budget, "
                                         r"where .*run reached step 10,000, within it"):
        tool.main(args + ["5000"])
    assert list((repo / "reports" / "tf_reference").iterdir()) == []
    tool.main(args + ["10000"])
    record = json.loads((repo / "reports" / "tf_reference" / "tf_10k_a.json").read_text())
    assert record["run"] == "tf_10k_a" and record["reached_step"] == 10000
    assert "-> reports/tf_reference/tf_10k_a.json" in capsys.readouterr().out


def test_keep_into_a_link_or_a_file_and_after_a_stopped_keep(tmp_path, capsys):
    """DEST a link (to a user's folder) or a file: one line saying so, both kept. A keep
    stopped before its swap leaves .DEST.keeping-*: the next keep removes it with a note
    when it holds only what keep writes, and names it otherwise; one a running keep holds
    is left alone."""
    from cifar10_tutorial.files import hold_folder, release_folder

    run = _run(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "thesis.txt").write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(theirs)
    with pytest.raises(PipelineError, match=rf"^{link}: a link, where keep writes a folder of "
                                            r"its own"):
        tool.keep(run, link)
    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(PipelineError, match=r"file: a file, where keep writes a folder"):
        tool.keep(run, tmp_path / "file")
    assert (theirs / "thesis.txt").read_text() == "mine\n" and link.is_symlink()
    kept = tmp_path / "kept"
    half = tmp_path / ".kept.keeping-abc123"  # a stopped keep's, half copied
    (half / "train").mkdir(parents=True)
    (half / "train" / "model.ckpt-10000.data-00000-of-00001").write_bytes(b"ne")
    other = tmp_path / ".kept.keeping-def456"  # one holding a file of someone's
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    running = tmp_path / ".kept.keeping-ghi789"  # a keep at work now
    running.mkdir()
    hold_folder(running)
    try:
        tool.keep(run, kept)
    finally:
        release_folder(running)
    err = capsys.readouterr().err
    assert not half.exists() and f"note: removed {half}" in err
    assert (other / "notes.txt").read_text() == "mine\n" and f"{other}: left by a keep" in err
    assert running.is_dir() and str(running) not in err
    assert (kept / "train" / "checkpoint").is_file()


@pytest.mark.parametrize("damage, said", [
    (lambda run: (run / "evals.tsv").write_text("10000\tx\t0.74\t2026-12-02\n"),
     r"evals.tsv: row 1: expected step<TAB>precision<TAB>raw precision<TAB>date, found "
     r"'10000\\tx\\t0.74\\t2026-12-02'"),
    (lambda run: (run / "evals.tsv").write_text("10000\t0.78\n"), r"evals.tsv: row 1: expected"),
    (lambda run: (run / "evals.tsv").write_text("10000\t1.5\t0.74\td\n"), r"evals.tsv: row 1"),
    (lambda run: (run / "train" / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-abc"\n'),
     r"train/checkpoint: names 'model.ckpt-abc', expected the reference's model.ckpt-STEP"),
    (lambda run: (run / "segments.tsv").write_text("garbage\n"),
     r"segments.tsv: row 1: expected step<TAB>start<TAB>end<TAB>host<TAB>cpu, found 'garbage'"),
    (lambda run: (run / "losses.tsv").write_text("100\t2.3\t\na\tb\n"),
     r"losses.tsv: row 2: expected step<TAB>loss<TAB>examples/sec \(or empty\), found 'a\\tb'"),
    (lambda run: (run / "losses.tsv").write_bytes(b"100\t2.3\t\xff\n"),
     r"losses.tsv: cannot be read as the run's tab-separated record \(UnicodeDecodeError"),
    # the evaluations out of order, or of a step the run never reached
    (lambda run: (run / "evals.tsv").write_text("10000\t0.78\t0.74\td\n5000\t0.7\t0.7\td\n"),
     r"evals.tsv: row 2: step 5,000 after step 10,000, expected the evaluations at rising "
     r"steps"),
    (lambda run: (run / "evals.tsv").write_text("10000\t0.78\t0.74\td\n20000\t0.8\t0.8\td\n"),
     r"evals.tsv: row 2: step 20,000, past the run's newest checkpoint \(step 10,000\)"),
    # a record that is a FIFO: named, never read (which would hang) nor taken as absent
    (lambda run: ((run / "evals.tsv").unlink(), __import__("os").mkfifo(run / "evals.tsv")),
     r"evals.tsv: not a regular file \(a folder, FIFO, device or a broken link\)"),
    (lambda run: ((run / "train" / "checkpoint").unlink(),
                  __import__("os").mkfifo(run / "train" / "checkpoint")),
     r"train/checkpoint: not a regular file"),
    (lambda run: __import__("os").mkfifo(run / "losses.tsv"), r"losses.tsv: not a regular file"),
    (lambda run: (run / "logs").write_text("x"), r"logs: not a folder \(a file, FIFO or device\)"),
    # the checkpoint it names is not there: no step the run holds
    (lambda run: (run / "train" / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-20000"\n'),
     r"train/checkpoint: names 'model.ckpt-20000', whose files \(model.ckpt-20000.index, "
     r"every .data-\*-of-\* shard, .meta\) are not all in"),
], ids=["eval-not-a-number", "eval-two-columns", "eval-past-one", "checkpoint-step",
        "segments", "losses", "losses-not-utf8", "evals-reversed", "eval-past-reached",
        "evals-fifo", "checkpoint-fifo", "losses-fifo", "logs-a-file", "checkpoint-missing"])
def test_collect_names_a_damaged_record_of_the_run(tmp_path, damage, said, capsys):
    """The run's records (evals.tsv, segments.tsv, losses.tsv, train/checkpoint) come from
    its own scripts: a row that does not parse is one line naming the file and the row,
    through the command, and nothing is written."""
    run = _run(tmp_path)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"archive")
    damage(run)
    out = tmp_path / "records"
    with pytest.raises(SystemExit) as stop:
        tool.main(["collect", str(run), "tfz", "--tensorflow", "2.21.0", "--archive",
                   str(archive), "--steps-planned", "10000", "--out", str(out)])
    assert str(stop.value).startswith("error: ") and "\n" not in str(stop.value)
    assert __import__("re").search(said, str(stop.value)), stop.value
    assert "Nothing was written" in str(stop.value) and not out.exists()


@pytest.mark.parametrize("kind, said", [
    ("missing", r"--archive .*none.tar.gz: not found"),
    ("folder", r"--archive .*: a folder, where the dev split's archive"),
    ("fifo", r"--archive .*fifo: not a regular file \(a FIFO"),
])
def test_collect_refuses_an_archive_that_is_no_file_without_reading_it(tmp_path, kind, said):
    """--archive is the dev split's archive, whose md5 the record keeps: missing, a folder
    or a FIFO (which a read would wait on for ever) is one line, before any read."""
    import os

    run = _run(tmp_path)
    archive = {"missing": tmp_path / "none.tar.gz", "folder": tmp_path,
               "fifo": tmp_path / "fifo"}[kind]
    if kind == "fifo":
        os.mkfifo(archive)
    with pytest.raises(PipelineError, match=said):
        tool.collect(run, "tfz", "2.21.0", archive, 10000)


def test_a_keep_killed_after_moving_the_old_copy_aside_is_cleared_by_the_next(tmp_path, capsys):
    """keep moves the copy it replaces into .DEST.replaced-*/DEST and deletes it after the
    swap: a keep killed before that delete ends leaves it. The next keep removes such a
    folder (or an empty one) with a note where it holds only what keep writes, names one
    holding anything else, and leaves one a running keep holds."""
    from cifar10_tutorial.files import hold_folder, release_folder

    run = _run(tmp_path)
    kept = tmp_path / "kept"
    half = tmp_path / ".kept.replaced-abc" / "kept" / "train"  # the old copy, half deleted
    half.mkdir(parents=True)
    (half / "model.ckpt-9000.index").write_bytes(b"old")
    empty = tmp_path / ".kept.replaced-empty"
    empty.mkdir()
    mine = tmp_path / ".kept.replaced-mine" / "kept"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    running = tmp_path / ".kept.replaced-run"
    (running / "kept").mkdir(parents=True)
    hold_folder(running)
    try:
        tool.keep(run, kept)
    finally:
        release_folder(running)
    err = capsys.readouterr().err
    assert not (tmp_path / ".kept.replaced-abc").exists() and not empty.exists()
    assert f"note: removed {tmp_path / '.kept.replaced-abc'}" in err
    assert (mine / "notes.txt").read_text() == "mine\n"
    assert f"{tmp_path / '.kept.replaced-mine'}: left by a keep" in err
    assert running.is_dir() and str(running) not in err
    assert (kept / "train" / "checkpoint").is_file()
    # a keep over its own copy leaves nothing beside it (the one no keep holds now: gone)
    tool.keep(run, kept)
    assert sorted(p.name for p in tmp_path.glob(".kept.*")) == [".kept.replaced-mine"]


def _refused(argv: list, said: str) -> str:
    """``argv`` through the command: one line starting error:, matching ``said``."""
    with pytest.raises(SystemExit) as stop:
        tool.main(argv)
    assert str(stop.value).startswith("error: ") and "\n" not in str(stop.value)
    assert __import__("re").search(said, str(stop.value)), stop.value
    return str(stop.value)


@pytest.mark.parametrize("src, said", [
    ("missing", r"none: not found, where restore reads a run kept by `keep`"),
    ("file", r"a-file: a file, where restore reads a run kept by `keep`"),
    ("not-kept", r"mine: holds notes.txt, so it is no run kept by `keep`"),
])
def test_restore_names_a_source_that_is_no_kept_run(tmp_path, src, said):
    """restore copies a run keep kept: a source missing, a file, or a folder keep did not
    write is one line through the command, and nothing is written."""
    given = {"missing": tmp_path / "none", "file": tmp_path / "a-file",
             "not-kept": tmp_path / "mine"}[src]
    if src == "file":
        given.write_text("x")
    elif src == "not-kept":
        given.mkdir()
        (given / "notes.txt").write_text("mine\n")
    _refused(["restore", str(given), str(tmp_path / "new")], said)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("where", ["src/cifar10_tutorial/kept", "reports/ablations/baseline/kept"])
def test_keep_and_restore_never_write_into_the_code_or_a_stages_outputs(tmp_path, monkeypatch,
                                                                      where):
    """keep's DEST and restore's RUN are folders of their own: inside the package's code, or
    inside an ablation stage's results (DVC would find them changed), one line, nothing
    written there."""
    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    monkeypatch.chdir(project)
    run = _run(tmp_path)
    kept = tmp_path / "kept"
    tool.main(["keep", str(run), str(kept)])
    for argv in (["keep", str(run), where], ["restore", str(kept), where]):
        with pytest.raises(SystemExit) as stop:
            tool.main(argv)
        assert str(stop.value).startswith(("error: DEST", "error: RUN")), stop.value
        assert not (project / where).exists()


def test_a_keep_stopped_between_its_renames_is_restored_not_deleted(tmp_path, capsys):
    """A keep killed after moving the kept run aside and before putting the new copy in
    place leaves the only copy in .DEST.replaced-*: the next keep puts it back first (and
    then replaces it whole), never deletes it; a restore from DEST puts it back too."""
    run = _run(tmp_path)
    dest = tmp_path / "k"
    tool.main(["keep", str(run), str(dest)])
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    aside = tmp_path / ".k.replaced-abc"
    aside.mkdir()
    dest.rename(aside / "k")
    tool.main(["restore", str(aside / "k"), str(tmp_path / "again")])  # a kept run's copy
    shutil = __import__("shutil")
    shutil.rmtree(tmp_path / "again")
    # the next keep fails after the restore (its run's records damaged): the copy is back
    (run / "evals.tsv").unlink()
    (run / "evals.tsv").mkdir()
    with pytest.raises(SystemExit):
        tool.main(["keep", str(run), str(dest)])
    (run / "evals.tsv").rmdir()
    # restore from the kept run's own name: put back first, then read
    tool.main(["restore", str(dest), str(tmp_path / "again")])
    assert "restored" in capsys.readouterr().err
    assert not aside.exists() and (tmp_path / "again" / "train" / "checkpoint").is_file()
    aside.mkdir()
    dest.rename(aside / "k")
    tool.main(["keep", str(run), str(dest)])
    assert "restored" in capsys.readouterr().err
    assert not aside.exists()
    assert {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*")
            if p.is_file()}.keys() >= before.keys() - {__import__("pathlib").Path("evals.tsv")}


@pytest.mark.parametrize("damage, said", [
    (lambda run: (run / "train" / "checkpoint").write_text('model_checkpoint_path: "*"\n'),
     r"train/checkpoint: names '\*', expected the reference's model.ckpt-STEP"),
    (lambda run: ((run / "train" / "model.ckpt-10000.data-00000-of-00001").unlink(),
                  (run / "train" / "model.ckpt-10000.data-00000-of-00001").mkdir()),
     r"model.ckpt-10000.data-00000-of-00001: not a regular file"),
    (lambda run: ((run / "evals.tsv").unlink(), (run / "evals.tsv").mkdir()),
     r"evals.tsv: not a regular file"),
], ids=["checkpoint-a-pattern", "checkpoint-file-a-folder", "record-a-folder"])
def test_keep_names_what_it_cannot_copy_as_the_run_holds_it(tmp_path, damage, said):
    """keep copies the files the checkpoint names and the run's records: a name that is a
    pattern, or a folder where a file goes, is one line, and nothing is kept."""
    run = _run(tmp_path)
    damage(run)
    _refused(["keep", str(run), str(tmp_path / "k")], said)
    assert not (tmp_path / "k").exists()


MISSING = r"whose files \(model.ckpt-\d+.index, every .data-\*-of-\* shard, .meta\) are not all in"


@pytest.mark.parametrize("name, gone, said", [
    ("model.ckpt-abc", None, r"names 'model.ckpt-abc', expected the reference's model.ckpt-STEP"),
    ("model.ckpt-20", None, r"names 'model.ckpt-20', " + MISSING),
    (None, ".data-00000-of-00001", MISSING),  # its weights gone: index and graph only
    (None, ".meta", MISSING),
    (None, ".index", MISSING),
    (None, "shard-misnumbered", MISSING),  # 00000 and 00007 of 00002: 00001 missing
], ids=["not-a-step", "no-files", "no-weights", "no-graph", "no-index", "shard-misnumbered"])
def test_a_keep_of_a_checkpoint_the_run_does_not_hold_keeps_the_kept_run(tmp_path, name,
                                                                         gone, said):
    """train/checkpoint naming a checkpoint whose files are not all there (a name that is
    no step, a step it does not hold, one of its files gone): one line, and the run kept
    there before stays whole (keep would have replaced it with a copy holding no
    weights)."""
    run = _run(tmp_path)
    kept = tmp_path / "k"
    tool.main(["keep", str(run), str(kept)])
    before = {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    if name is not None:
        (run / "train" / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n')
    elif gone == "shard-misnumbered":
        ckpt = tool.newest_checkpoint(run / "train")
        shard = run / "train" / f"{ckpt}.data-00000-of-00001"
        shard.rename(run / "train" / f"{ckpt}.data-00000-of-00002")
        (run / "train" / f"{ckpt}.data-00007-of-00002").write_bytes(b"x")
    else:
        ckpt = tool.newest_checkpoint(run / "train")
        (run / "train" / f"{ckpt}{gone}").unlink()
    _refused(["keep", str(run), str(kept)], said)
    assert {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*")
            if p.is_file()} == before


@pytest.mark.parametrize("where", ["a-file/run", "/proc/x"])
def test_restore_or_keep_into_a_place_that_cannot_be_written_is_one_line(tmp_path, where):
    """RUN or DEST under a file, or where nothing can be made: what the system said, on
    the path, in one line; nothing left half copied."""
    run = _run(tmp_path)
    kept = tmp_path / "kept"
    tool.main(["keep", str(run), str(kept)])
    (tmp_path / "a-file").write_text("x")
    target = where if where.startswith("/") else str(tmp_path / where)
    for argv in (["restore", str(kept), target], ["keep", str(run), target]):
        with pytest.raises(SystemExit) as stop:
            tool.main(argv)
        assert str(stop.value).startswith("error: ") and "\n" not in str(stop.value), stop.value
        assert "Traceback" not in str(stop.value)
    assert (tmp_path / "a-file").read_text() == "x"


@pytest.mark.parametrize("version", ["2.21\n# x", "latest", "`id`"])
def test_collect_takes_a_tensorflow_version_only(tmp_path, version):
    """--tensorflow is quoted by the report: a version number, never a line of markup."""
    run = _run(tmp_path)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"archive")
    _refused(["collect", str(run), "tfz", "--tensorflow", version, "--archive", str(archive),
              "--steps-planned", "10000", "--out", str(tmp_path / "records")],
             r"--tensorflow .*: expected the version the run used")
    assert not (tmp_path / "records").exists()


def test_a_saves_leftover_beside_the_shards_is_not_kept(tmp_path):
    """A name that starts like a shard and goes on (a save's leftover ``.tempstate`` file)
    is no shard: the checkpoint is whole, and keep copies only its index, graph and
    shards, so the next keep into the folder finds only what it writes."""
    run = _run(tmp_path)
    (run / "train" / "model.ckpt-10000.data-00000-of-00001.tempstate123").write_text("t")
    kept = tmp_path / "kept"
    assert tool.keep(run, kept) == "model.ckpt-10000"
    assert sorted(p.name for p in (kept / "train").iterdir()) == [
        "checkpoint", "model.ckpt-10000.data-00000-of-00001", "model.ckpt-10000.index",
        "model.ckpt-10000.meta"]
    assert tool.keep(run, kept) == "model.ckpt-10000"


@pytest.mark.parametrize("inner", ["inner", "train/inner", "."])
def test_restore_into_the_kept_folder_itself_is_refused(tmp_path, inner):
    """restore copies a kept run into a new folder: one inside the kept folder would make
    it hold what keep never writes there (the next keep would refuse it): one line, and
    nothing written."""
    run, kept = _run(tmp_path), tmp_path / "kept"
    tool.keep(run, kept)
    before = sorted(p.relative_to(kept) for p in kept.rglob("*"))
    target = kept / inner / "again" if inner == "." else kept / inner
    _refused(["restore", str(kept), str(target)], r"inside .*kept, the kept run it would copy")
    assert sorted(p.relative_to(kept) for p in kept.rglob("*")) == before
    tool.keep(run, kept)
