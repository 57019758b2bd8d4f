import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.evaluation.evaluate import evaluate, watch
from cifar10_tutorial.evaluation.predict import predict
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.training.train import train
from conftest import tiny_params, write_prepared


@pytest.fixture(scope="module")
def trained(synth_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    paths = TrainPaths(root / "train", root / "live")
    train(tiny_params(train={"max_steps": 60, "batch_size": 64, "initial_lr": 0.05}, run={"checkpoint_every": 30}), synth_data, paths, progress=False)
    return paths


def test_evaluate_writes_metrics_tables_and_plots(synth_data, trained, tmp_path):
    out = tmp_path / "eval"
    m = evaluate(synth_data, trained.model, out, batch_size=64, device_name="cpu")  # 200 = 3x64 + 8
    assert m["num_examples"] == 200
    saved = json.loads((out / "metrics.json").read_text())
    assert set(saved) >= {"precision_at_1", "precision_at_1_raw", "loss", "loss_raw"}
    assert all(isinstance(v, (int, float)) for v in saved.values())  # numbers only
    assert "step" not in saved  # the train stage's figure; the model's step is provenance
    assert json.loads((out / "provenance.json").read_text())["steps"] == 60
    assert saved["precision_at_1"] == m["precision_at_1"] >= 0.9
    # each test image exactly once: the predictions file has one row per image, in order
    rows = (out / "predictions.csv").read_text().splitlines()
    assert rows[0] == "actual,predicted" and len(rows) == 201
    actual = [r.split(",")[0] for r in rows[1:]]
    assert actual == [synth_data.classes[i] for i in synth_data.test_labels]
    correct = np.mean([r.split(",")[0] == r.split(",")[1] for r in rows[1:]])
    assert correct == pytest.approx(m["precision_at_1"])
    table = (out / "per_class.csv").read_text().splitlines()
    assert table[0] == "class,count,precision_at_1,precision_at_1_raw" and len(table) == 11
    assert sum(int(r.split(",")[1]) for r in table[1:]) == 200
    assert (out / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batch_size_does_not_change_the_result(synth_data, trained, tmp_path):
    a = evaluate(synth_data, trained.model, tmp_path / "a", batch_size=7, device_name="cpu")
    b = evaluate(synth_data, trained.model, tmp_path / "b", batch_size=1000, device_name="cpu")
    assert a["precision_at_1"] == b["precision_at_1"]
    assert a["precision_at_1_raw"] == b["precision_at_1_raw"]


def test_missing_model_is_a_clear_error(synth_data, tmp_path):
    from cifar10_tutorial.errors import PipelineError
    with pytest.raises(PipelineError, match=r"not found, where a trained model is expected; "
                                            r"give the path of one \(a mistyped path\?\), or "
                                            r"train it first"):
        evaluate(synth_data, tmp_path / "nope.pt", tmp_path / "eval", device_name="cpu")


def test_watch_mode_evaluates_the_newest_checkpoint(synth_data, trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    results = watch(synth_data, trained.checkpoints, trained.tensorboard, interval_secs=0.1,
                    batch_size=100, device_name="cpu", max_evals=1)
    assert [r["step"] for r in results] == [60]
    acc = EventAccumulator(str(trained.tensorboard / "eval"))
    acc.Reload()
    assert "eval/precision_at_1" in acc.Tags()["scalars"]
    assert acc.Scalars("eval/precision_at_1")[0].value == pytest.approx(results[0]["precision_at_1"])


def test_watch_mode_refuses_a_checkpoint_of_other_classes(synth_data, trained, tmp_path):
    """Watch mode refuses a checkpoint of other classes as the eval stage does, in one line
    naming it, instead of logging a precision for it."""
    ckpt = torch.load(sorted(trained.checkpoints.glob("ckpt-*.pt"))[-1], weights_only=True)
    ckpt["classes"] = list(reversed(ckpt["classes"]))
    (tmp_path / "ck").mkdir()
    torch.save(ckpt, tmp_path / "ck" / "ckpt-00000060.pt")
    with pytest.raises(PipelineError, match=r"ckpt-00000060.pt: a model of other classes than "
                                            r"the prepared data's"):
        watch(synth_data, tmp_path / "ck", tmp_path / "tb", interval_secs=0.1, batch_size=100,
              device_name="cpu", max_evals=1)


def test_predict_on_image_files_of_any_size(synth_data, trained, tmp_path):
    from PIL import Image

    files, truth = [], []
    for i in range(6):
        img = synth_data.test_images[i].transpose(1, 2, 0)
        path = tmp_path / f"img{i}.{'png' if i % 2 else 'jpg'}"
        Image.fromarray(img).resize((96, 96), Image.Resampling.NEAREST).save(path, quality=95)
        files.append(path)
        truth.append(synth_data.classes[synth_data.test_labels[i]])
    ranked = predict(files, trained.model, top=3)
    assert all(len(r) == 3 for r in ranked)
    assert all(0 < sum(p for _, p in r) <= 1 + 1e-6 for r in ranked)
    assert all(r[0][1] >= r[1][1] >= r[2][1] for r in ranked)
    assert sum(r[0][0] == t for r, t in zip(ranked, truth)) >= 5
    cli = subprocess.run([sys.executable, "-m", "cifar10_tutorial.evaluation.predict", str(files[0]),
                          "--model", str(trained.model), "--top", "2"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(f"{files[0]}: {ranked[0][0][0]} ")
    odd = tmp_path / "a\nb.png"  # one line a file, whatever its name
    odd.write_bytes(files[1].read_bytes())
    cli = subprocess.run([sys.executable, "-m", "cifar10_tutorial.evaluation.predict", str(odd),
                          "--model", str(trained.model), "--top", "1"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout.count("\n") == 1, cli.stdout + cli.stderr
    assert cli.stdout.startswith(repr(str(odd)) + ": ")
    bad = subprocess.run([sys.executable, "-m", "cifar10_tutorial.evaluation.predict", str(tmp_path / "x.png"),
                          "--model", str(trained.model)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "x.png: no such file" in bad.stderr


def test_flip_test_time_augmentation_is_reported_beside(synth_data, trained, tmp_path):
    from cifar10_tutorial.model_files import load_trained
    from cifar10_tutorial.scoring import predict_logits

    plain = evaluate(synth_data, trained.model, tmp_path / "a", batch_size=64, device_name="cpu")
    m = evaluate(synth_data, trained.model, tmp_path / "b", batch_size=64, device_name="cpu",
                 flip_tta=True)
    assert "precision_at_1_flip" not in plain
    assert m["precision_at_1"] == plain["precision_at_1"]  # the single-view figure is unchanged
    model, _ = load_trained(trained.model, "cpu")
    images = torch.from_numpy(synth_data.test_images)
    labels = torch.from_numpy(synth_data.test_labels)
    with torch.no_grad():
        probs = (predict_logits(model, images).softmax(1)
                 + predict_logits(model, images.flip(-1)).softmax(1)) / 2
    assert m["precision_at_1_flip"] == pytest.approx((probs.argmax(1) == labels).float().mean().item())
    saved = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert saved["precision_at_1_raw_flip"] == m["precision_at_1_raw_flip"]


# ----------------------------------------------------------------------------- bad model files


def _bad_model_files(trained, tmp_path) -> dict:
    good = torch.load(trained.model, weights_only=True)
    files = {}
    files["bare state dict"] = good["model"]
    files["a tensor"] = torch.zeros(3)
    wrong = {**good, "params": {**good["params"], "model": {**good["params"]["model"], "head": "local"}}}
    files["shapes that disagree"] = wrong
    files["num_classes ten"] = {**good, "num_classes": "ten"}
    files["ema a list"] = {**good, "ema": [1, 2]}
    files["head bogus"] = {**good, "params": {**good["params"],
                                              "model": {**good["params"]["model"], "head": "bogus"}}}
    files["two class names"] = {**good, "classes": ["cat", "dog"]}
    files["nan averages"] = {**good, "ema": {k: torch.full_like(v, float("nan"))
                                             if v.is_floating_point() else v
                                             for k, v in good["ema"].items()}}
    # well-formed files whose params, weight dtypes or step are wrong
    files["train params a string"] = {**good, "params": {**good["params"], "train": "oops"}}
    files["eval params a list"] = {**good, "params": {**good["params"], "eval": [1, 2]}}
    files["int64 averages"] = {**good, "ema": {k: v.long() for k, v in good["ema"].items()}}
    files["complex averages"] = {**good, "ema": {k: v.to(torch.complex64)
                                                 for k, v in good["ema"].items()}}
    files["negative step"] = {**good, "step": -5}
    out = {}
    for name, obj in files.items():
        path = tmp_path / f"{name.replace(' ', '_')}.pt"
        torch.save(obj, path)
        out[name] = path
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(trained.model.read_bytes()[:5000])
    out["truncated"] = truncated
    pickled = tmp_path / "foreign.pt"
    torch.save({"model": np.zeros(2)}, pickled)  # needs unpickling of numpy objects: refused
    out["foreign pickle"] = pickled
    return out


BAD_MODEL_FILES = ["bare state dict", "a tensor", "shapes that disagree", "truncated",
                   "foreign pickle", "num_classes ten", "ema a list", "head bogus",
                   "two class names", "nan averages", "train params a string",
                   "eval params a list", "int64 averages", "complex averages", "negative step"]


def _one_line_for_a_bad_model_file(err: str, path) -> None:
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert str(path) in err and "dvc repro train" in err, err
    assert "weights_only" not in err and "delete" not in err.lower(), err


@pytest.mark.parametrize("kind", BAD_MODEL_FILES)
def test_evaluate_and_predict_explain_a_bad_model_file(synth_data, trained, tmp_path, kind,
                                                      capsys):
    """Both commands as their processes run them (run_stage), in this process: exit status
    1 and one line naming the file and the command that remakes it."""
    from cifar10_tutorial.cli import run_stage
    from cifar10_tutorial.evaluation.predict import main as predict_main

    path = _bad_model_files(trained, tmp_path)[kind]
    img = tmp_path / "img.png"
    from PIL import Image
    Image.fromarray(synth_data.test_images[0].transpose(1, 2, 0)).save(img)
    for command in (lambda: evaluate(synth_data, path, tmp_path / "ev", 100, "cpu"),
                    lambda: predict_main([str(img), "--model", str(path)])):
        with pytest.raises(SystemExit) as exc:
            run_stage(command)
        assert exc.value.code == 1
        err = capsys.readouterr().err
        _one_line_for_a_bad_model_file(err, path)
        # a file that is no model of this project (a mistyped path, say): the fix is the
        # right file first; retraining cannot mend a wrong path
        other = kind in ("bare state dict", "a tensor", "truncated", "foreign pickle")
        assert ("ive a model file that the train stage or publish wrote" in err) == other, err
    assert not (tmp_path / "ev" / "metrics.json").exists()  # nothing that looks complete


@pytest.mark.parametrize("kind", ["truncated", "foreign pickle", "nan averages"])
@pytest.mark.e2e
def test_bad_model_files_are_one_line_from_the_commands_themselves(synth_data, trained,
                                                                  tmp_path, kind, prepared_copy):
    """The same, each command in a process of its own (what torch and the logging print
    there counts too), for the kinds that fail inside torch.load or on the numbers."""
    path = _bad_model_files(trained, tmp_path)[kind]
    img = tmp_path / "img.png"
    from PIL import Image
    Image.fromarray(synth_data.test_images[0].transpose(1, 2, 0)).save(img)
    for cmd in (["-c", "import sys; from cifar10_tutorial.cli import run_stage; "
                       "from cifar10_tutorial.evaluation.evaluate import evaluate; "
                       "from cifar10_tutorial.data.prepared import load_prepared; "
                       f"run_stage(lambda: evaluate(load_prepared({str(tmp_path / 'prep')!r}), "
                       f"__import__('pathlib').Path({str(path)!r}), "
                       f"__import__('pathlib').Path({str(tmp_path / 'ev')!r}), 100, 'cpu'))"],
                ["-m", "cifar10_tutorial.evaluation.predict", str(img), "--model", str(path)]):
        proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        _one_line_for_a_bad_model_file(proc.stderr, path)


@pytest.fixture
def prepared_copy(synth_data, tmp_path):
    """synth_data written under tmp_path/prep for the subprocess checks."""
    write_prepared(synth_data, tmp_path / "prep")


def test_predict_top_is_validated_and_a_decompression_bomb_is_one_line(trained, tmp_path, capsys):
    from PIL import Image
    img = tmp_path / "img.png"
    Image.new("RGB", (8, 8)).save(img)
    from cifar10_tutorial.evaluation.predict import main as predict_main
    for top in ("0", "-2", "x"):  # argparse's usage error, in process (a subprocess each: 3 s)
        with pytest.raises(SystemExit) as exc:
            predict_main([str(img), "--model", str(trained.model), "--top", top])
        assert exc.value.code == 2
        assert "expected a whole number >= 1" in capsys.readouterr().err
    bomb = tmp_path / "bomb.png"
    Image.new("1", (20000, 20000)).save(bomb)  # 400 Mpixels, a few kB on disk
    proc = subprocess.run([sys.executable, "-m", "cifar10_tutorial.evaluation.predict", str(bomb),
                           "--model", str(trained.model)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "bomb.png: refused" in proc.stderr and "Traceback" not in proc.stderr


def test_more_devices_than_gpus_is_a_clear_error_before_anything_starts(monkeypatch):
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.training.distributed import relaunch_on_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    p = tiny_params(train={"num_devices": 4, "device": "auto"})
    with pytest.raises(PipelineError, match=r"train.num_devices is 4 but 2 GPU\(s\) are visible"):
        relaunch_on_devices(p.train, p.run, "stages/train.py", [])  # raises before torchrun


def test_cuda_devices_without_a_gpu_fail_once_before_torchrun(monkeypatch):
    """num_devices: 2 with device: cuda on a machine without a GPU: one error, not one per
    process and restart followed by a torchrun traceback."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.training.distributed import relaunch_on_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    p = tiny_params(train={"num_devices": 2, "device": "cuda"})
    with pytest.raises(PipelineError, match="train.device is cuda but no CUDA device is available"):
        relaunch_on_devices(p.train, p.run, "stages/train.py", [])


def test_watch_mode_passes_over_a_damaged_newest_checkpoint(synth_data, trained, tmp_path,
                                                           caplog):
    import shutil

    caplog.set_level("INFO")
    ckpts = tmp_path / "checkpoints"
    shutil.copytree(trained.checkpoints, ckpts)
    newest = sorted(ckpts.glob("ckpt-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:3000])
    results = watch(synth_data, ckpts, tmp_path / "tb", interval_secs=0.1, batch_size=100,
                    device_name="cpu", max_evals=1)
    assert [r["step"] for r in results] == [30]
    assert f"{newest} is damaged or truncated: passing over it" in caplog.text


def test_class_names_with_commas_stay_one_field_in_the_csvs(synth_data, trained, tmp_path):
    """The class 'air,plane' is one quoted field of per_class.csv and predictions.csv."""
    import csv
    import dataclasses

    import torch

    meta = {**synth_data.meta, "classes": ["air,plane", *synth_data.meta["classes"][1:]]}
    data = dataclasses.replace(synth_data, meta=meta)
    model = torch.load(trained.model, weights_only=True)
    torch.save({**model, "classes": meta["classes"]}, tmp_path / "model.pt")
    evaluate(data, tmp_path / "model.pt", tmp_path / "ev", 100, "cpu")
    rows = list(csv.reader((tmp_path / "ev" / "per_class.csv").open()))
    assert rows[1][0] == "air,plane" and all(len(r) == 4 for r in rows)
    assert all(len(r) == 2 for r in csv.reader((tmp_path / "ev" / "predictions.csv").open()))


def test_a_model_of_other_class_names_is_refused(synth_data, trained, tmp_path):
    """A model whose class names differ from the prepared data's is refused, naming the
    first that differs, before anything is written: the data's names are never used
    for it silently."""
    import dataclasses

    from cifar10_tutorial.errors import PipelineError

    meta = {**synth_data.meta, "classes": [*synth_data.meta["classes"][:3], "zebra",
                                           *synth_data.meta["classes"][4:]]}
    with pytest.raises(PipelineError, match=r"a model of other classes than the prepared data's "
                                            r"\(class 3: .* in the model, 'zebra' in the data\)"):
        evaluate(dataclasses.replace(synth_data, meta=meta), trained.model, tmp_path / "ev", 100,
                 "cpu")
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("where", ["confusion.png", "metrics.json", "predictions.csv"])
def test_a_folder_where_the_evaluation_writes_a_file_is_refused_before_it_writes(
        synth_data, trained, tmp_path, where):
    """A folder at one of the evaluation's files made it fail half-way, some files
    rewritten and others old; it is named before anything is computed or written."""
    out = tmp_path / "eval"
    (out / where).mkdir(parents=True)
    (out / "per_class.csv").write_text("old\n")
    with pytest.raises(PipelineError, match=rf"eval/{where}: a folder, where the eval stage "
                                            rf"writes a file"):
        evaluate(synth_data, trained.model, out, batch_size=64, device_name="cpu")
    assert (out / "per_class.csv").read_text() == "old\n" and (out / where).is_dir()


def test_a_model_path_that_is_a_folder_or_fifo_is_named_for_what_it_is(tmp_path):
    """--model naming a folder or a FIFO is said as such (not 'no trained model', nor
    torch.load waiting on the FIFO forever)."""
    import os

    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.model_files import load_model_file

    fifo = tmp_path / "f.pt"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        with pytest.raises(PipelineError, match=rf"^{path}: not a regular file \(a folder, FIFO "
                                                rf"or device\), expected a model.pt"):
            load_model_file(path)


@pytest.mark.parametrize("what", ["train-live", "published", "a-file", "other-record",
                                  "no-record"])
def test_eval_never_writes_over_another_stages_folder(synth_data, trained, tmp_path, what):
    """--out at the train stage's --live folder (metrics.json, provenance.json, plots/),
    at published weights, at a file, or at a folder whose provenance.json is not an
    evaluation's: one line before anything is computed, every file as it was."""
    import json

    from cifar10_tutorial.errors import PipelineError

    out = tmp_path / "out"
    if what == "a-file":
        out.write_text("mine\n")
        said = r"must be a folder, found a file"
    else:
        out.mkdir()
        (out / "metrics.json").write_text('{"loss": 1.0}\n')
        if what != "no-record":  # a user's own metrics and predictions, no record beside
            (out / "provenance.json").write_text('{"steps": 4}\n')
        else:
            (out / "predictions.csv").write_text("mine\n")
        if what == "no-record":
            said = (r"holds metrics.json, predictions.csv but no evaluation's record "
                    r"\(provenance.json\)")
        elif what == "train-live":
            (out / "plots").mkdir()
            (out / "speed.json").write_text("{}\n")
            said = r"holds plots, speed.json, which the eval stage did not make"
        elif what == "published":
            (out / "published.json").write_text('{"files": {}}\n')
            said = r"holds published.json, which the eval stage did not make"
        else:
            said = r"provenance.json: not an evaluation's record \(it names no model\)"
    before = {p: (p.read_bytes() if p.is_file() else None) for p in [out, *out.rglob("*")]}
    with pytest.raises(PipelineError, match=said):
        evaluate(synth_data, trained.model, out, device_name="cpu")
    assert {p: (p.read_bytes() if p.is_file() else None)
            for p in [out, *out.rglob("*")]} == before
    if what == "other-record":  # an evaluation's own record is replaced, as DVC reruns it
        (out / "provenance.json").write_text(json.dumps({"model": "m.pt"}))
        evaluate(synth_data, trained.model, out, device_name="cpu")


def _files(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_an_evaluation_stopped_while_it_writes_leaves_the_old_set_whole(
        synth_data, trained, tmp_path, prepared_copy, how):
    """A kill -9 or SIGTERM between the evaluation's files (metrics.json written, its record
    not yet): --out holds the old set, every file of it, never a mix of two evaluations; the
    next evaluation removes what the killed one left beside it and writes its whole set."""
    import logging
    import os

    out = tmp_path / "ev"
    evaluate(synth_data, trained.model, out, 64, "cpu")
    before = _files(out)
    stop = ("os._exit(9)" if how == "kill-9" else "os.kill(os.getpid(), signal.SIGTERM)")
    code = (f"import os, signal\nfrom pathlib import Path\n"
            f"import cifar10_tutorial.provenance as P\n"
            f"from cifar10_tutorial.evaluation.evaluate import evaluate\n"
            f"from cifar10_tutorial.data.prepared import load_prepared\n"
            f"def stopped(*a):\n    {stop}\n"
            f"P.write = stopped\n"
            f"evaluate(load_prepared({str(tmp_path / 'prep')!r}), Path({str(trained.model)!r}), "
            f"Path({str(out)!r}), 64, 'cpu', True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == (9 if how == "kill-9" else 128 + 15), proc.stderr
    assert _files(out) == before
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".ev.staging-")]
    assert len(left) == (1 if how == "kill-9" else 0), left
    logger = logging.getLogger("cifar10_tutorial.evaluation.evaluate")
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logger.addHandler(handler)
    try:
        m = evaluate(synth_data, trained.model, out, 64, "cpu", flip_tta=True)
    finally:
        logger.removeHandler(handler)
    saved = json.loads((out / "metrics.json").read_text())
    assert "precision_at_1_flip" in saved and saved["precision_at_1"] == m["precision_at_1"]
    assert sorted(_files(out)) == sorted(before)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ev.")] == []
    assert how == "sigterm" or any(f"{left[0]}: removed" in line for line in said), said


@pytest.mark.parametrize("kind, beside", [("staging", True), ("replaced", True),
                                          ("replaced", False)])
def test_a_staging_named_folder_without_the_evaluations_mark_is_kept(synth_data, trained,
                                                                     tmp_path, kind, beside):
    """A folder named as an evaluation's staging one (or as an old set a swap put aside),
    of a process that has ended, but without the mark an evaluation writes there first (or
    the record it writes last): someone else's (a user's notes, or files a user kept
    there), whatever its files are called; left, and named. Never restored as --out."""
    import logging

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    if beside:
        evaluate(synth_data, trained.model, tmp_path / "ev", 64, "cpu")
    mine = tmp_path / f".ev.{kind}-{proc.pid}-yyyyyyyy"
    mine.mkdir()
    (mine / "metrics.json").write_text("mine")
    (mine / "predictions.csv").write_text("mine2")
    logger = logging.getLogger("cifar10_tutorial.evaluation.evaluate")
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logger.addHandler(handler)
    try:
        evaluate(synth_data, trained.model, tmp_path / "ev", 64, "cpu")
    finally:
        logger.removeHandler(handler)
    assert _files(mine) == {"metrics.json": b"mine", "predictions.csv": b"mine2"}
    assert any(f"{mine}: left by an interrupted swap, and holds files it did not write"
               in line or f"{mine}: the folder an interrupted swap set aside" in line
               for line in said), said
    assert "metrics.json" in _files(tmp_path / "ev")


def test_an_eval_out_that_is_a_link_stays_a_link(synth_data, trained, tmp_path):
    """--out a link to a folder: the results go into the folder it points to, swapped in
    there; the link itself is neither replaced nor moved."""
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    evaluate(synth_data, trained.model, link, 64, "cpu")
    evaluate(synth_data, trained.model, link, 64, "cpu")
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert "provenance.json" in _files(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_max_evals_without_watch_is_refused_not_ignored(tmp_path):
    """--max-evals bounds --watch's evaluations: given alone it would silently bound
    nothing; argparse's one line, before anything is read or written."""
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / "stages/eval.py"), "--max-evals", "2",
                           "--data", "d", "--model", "m.pt", "--out", "o"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "--max-evals: bounds the evaluations of --watch; give --watch too, or leave "
        "--max-evals out (without --watch the model is evaluated once)"), proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["directly", "through-a-link"])
def test_the_eval_stage_by_hand_keeps_another_models_evaluation(synth_data, trained, tmp_path,
                                                                 how):
    """`stages/eval.py --model A --out F` where F holds B's evaluation (a variant's, one
    you kept), given directly or through a link: one line naming both models, every file
    as it was; A's own earlier evaluation there is replaced, as a rerun does."""
    import shutil

    from conftest import ROOT

    data = write_prepared(synth_data, tmp_path / "prepared")
    theirs, mine = tmp_path / "b" / "model.pt", tmp_path / "a" / "model.pt"
    for model in (theirs, mine):
        model.parent.mkdir()
        shutil.copy(trained.model, model)
    kept = tmp_path / "kept"
    evaluate(synth_data, theirs, kept, 64, "cpu")
    out = kept
    if how == "through-a-link":
        out = tmp_path / "link"
        out.symlink_to(kept)
    before = _files(kept)

    def run(model):
        env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("DVC_STAGE", None)
        return subprocess.run([sys.executable, str(ROOT / "stages/eval.py"), "--params",
                               str(ROOT / "params.yaml"), "--data", str(data), "--model",
                               str(model), "--out", str(out)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    proc = run(mine)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert f"holds the evaluation of {theirs}, not known to be of {mine}" in line, line
    assert "Nothing was changed" in line
    assert _files(kept) == before
    proc = run(theirs)  # its own: replaced
    assert proc.returncode == 0, proc.stderr
    assert json.loads((kept / "provenance.json").read_text())["model"] == str(theirs)


def test_an_evaluation_by_hand_outside_the_checkout_keeps_another_checkouts(synth_data,
                                                                            trained, tmp_path):
    """Two checkouts each evaluate their own data/train/model.pt (another model each) into
    one folder outside both: the record's relative path names a model from the folder it
    was evaluated in, so the second is refused, naming it; the first checkout's model, as
    it is, is re-evaluated there; a record whose model is no path is not an evaluation's."""
    import os
    import shutil

    from cifar10_tutorial.evaluation.evaluate import refuse_another_models_evaluation

    kept = tmp_path / "kept"
    checkouts = []
    for name, steps in (("e1", 60), ("e2", 30), ("e3", 60), ("e4", 60)):
        model = tmp_path / name / "data" / "train" / "model.pt"
        model.parent.mkdir(parents=True)
        shutil.copy(trained.model, model)
        if steps != 60:  # another model: the same file format, of another step
            ckpt = torch.load(model, weights_only=False)
            ckpt["step"] = steps
            torch.save(ckpt, model)
        if name in ("e3", "e4"):  # another model of the same step and params: other weights
            ckpt = torch.load(model, weights_only=False)
            for state in (ckpt["model"], ckpt["ema"]):
                for key in state:
                    if key.endswith("weight"):
                        state[key] = state[key] * (1.5 if name == "e3" else 1.0001)
            torch.save(ckpt, model)
        checkouts.append(tmp_path / name)
    here = os.getcwd()
    try:
        os.chdir(checkouts[0])
        evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu")
        # itself, as it is: its figures again, replaced
        same = refuse_another_models_evaluation(kept, "data/train/model.pt")
        assert same
        evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu", same_figures_only=same)
        os.chdir(checkouts[1])
        before = _files(kept)
        with pytest.raises(PipelineError, match=r"holds the evaluation of data/train/model.pt "
                                                r"\(a path from the folder it was evaluated "
                                                r"in, which need not be .*e2"):
            refuse_another_models_evaluation(kept, "data/train/model.pt")
        assert _files(kept) == before
        # of the same step and params, other weights: its figures tell, and it is kept
        os.chdir(checkouts[2])
        assert refuse_another_models_evaluation(kept, "data/train/model.pt")
        with pytest.raises(PipelineError, match=r"kept/provenance.json: holds the evaluation "
                                                r"of data/train/model.pt as another folder "
                                                r"evaluated it .* with another "
                                                r"'[a-z_0-9]+' in its metrics.json \(\d\.\d+, "
                                                r"where this model gives \d\.\d+\)"):
            evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu",
                     same_figures_only=True)
        assert _files(kept) == before
        # weights barely apart: every prediction the same, the losses not: kept too
        os.chdir(checkouts[3])
        evaluate(synth_data, "data/train/model.pt", tmp_path / "e4-own", 64, "cpu")
        assert (tmp_path / "e4-own" / "predictions.csv").read_bytes() == \
            (kept / "predictions.csv").read_bytes()
        with pytest.raises(PipelineError, match=r"with another '(precision_at_1_raw|loss|"
                                                r"loss_raw)' in its metrics.json"):
            evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu",
                     same_figures_only=True)
        assert _files(kept) == before
        # its own model again, the folder's files edited: what differs is named
        os.chdir(checkouts[0])
        lines = (kept / "predictions.csv").read_text().splitlines(keepends=True)
        lines[1] = "x,y\n"
        (kept / "predictions.csv").write_text("".join(lines))
        edited = _files(kept)
        with pytest.raises(PipelineError, match=r"with the same figures but other predictions "
                                                rf"in its predictions.csv \(1 of {len(lines) - 1} "):
            evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu",
                     same_figures_only=True)
        metrics = json.loads((kept / "metrics.json").read_text())
        (kept / "metrics.json").write_text(json.dumps({**metrics, "note": "mine"}))
        with pytest.raises(PipelineError, match=r"with another 'note' in its metrics.json "
                                                r"\(mine, where this model gives absent\)"):
            evaluate(synth_data, "data/train/model.pt", kept, 64, "cpu",
                     same_figures_only=True)
        assert _files(kept)["predictions.csv"] == edited["predictions.csv"]
    finally:
        os.chdir(here)
    (kept / "provenance.json").write_text('{"model": 5}')
    with pytest.raises(PipelineError, match=r"provenance.json: not an evaluation's record"):
        evaluate(synth_data, trained.model, kept, 64, "cpu")


def test_the_eval_stage_by_hand_keeps_an_evaluation_on_other_data(synth_data, trained,
                                                                   tmp_path):
    """--out holding an evaluation of the same model file made on other data (another
    checkout's data/train/model.pt of the same params and step, trained on another
    archive): not this evaluation's to replace; one line naming both data hashes, every
    file as it was. On its own data it is replaced."""
    from conftest import ROOT

    data = write_prepared(synth_data, tmp_path / "prepared")
    kept = tmp_path / "kept"
    evaluate(synth_data, trained.model, kept, 64, "cpu")
    record = json.loads((kept / "provenance.json").read_text())
    ours = record["data_hash"]
    record["data_hash"] = "0" * 32
    (kept / "provenance.json").write_text(json.dumps(record))
    before = _files(kept)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("DVC_STAGE", None)
    cmd = [sys.executable, str(ROOT / "stages/eval.py"), "--params", str(ROOT / "params.yaml"),
           "--data", str(data), "--model", str(trained.model), "--out", str(kept)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert (f"holds an evaluation on other data (data_hash 000000000000, where --data is "
            f"{ours[:12]})") in line, line
    assert _files(kept) == before
    del record["data_hash"]  # a record that names no data: not known to be of this data
    (kept / "provenance.json").write_text(json.dumps(record))
    before = _files(kept)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "provenance.json: names no data_hash (the data every evaluation records)" in line
    assert _files(kept) == before
    record["data_hash"] = ours
    (kept / "provenance.json").write_text(json.dumps(record))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_eval_stage_by_hand_names_a_fifo_record_without_waiting(synth_data, trained,
                                                                    tmp_path):
    """--out holding a FIFO named provenance.json: one line naming it, never a read that
    waits for a writer for ever."""
    import os

    from conftest import ROOT

    data = write_prepared(synth_data, tmp_path / "prepared")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "provenance.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("DVC_STAGE", None)
    proc = subprocess.run([sys.executable, str(ROOT / "stages/eval.py"), "--params",
                           str(ROOT / "params.yaml"), "--data", str(data), "--model",
                           str(trained.model), "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {out / 'provenance.json'}: not a regular file"), proc.stderr


def test_the_eval_stage_by_hand_from_a_folder_inside_the_checkout_works_as_from_its_root(
        synth_data, trained, tmp_path):
    """Run by hand from the checkout's data/ or reports/ (which holds a dvc.yaml of its
    own), the stage takes the paths given from there and works from the checkout's
    folder: its record names the model as the stage's own does (data/train/model.pt), so
    the stage's evaluation is replaced, and the stage run after it replaces it in turn."""
    import os
    import shutil

    from conftest import ROOT

    co = tmp_path / "co"
    (co / ".dvc").mkdir(parents=True)
    (co / "reports").mkdir()
    shutil.copy(ROOT / "dvc.yaml", co / "dvc.yaml")
    shutil.copy(ROOT / "params.yaml", co / "params.yaml")
    (co / "reports" / "dvc.yaml").write_text("stages: {}\n")
    write_prepared(synth_data, co / "data" / "prepared")
    (co / "data" / "train").mkdir()
    shutil.copy(trained.model, co / "data" / "train" / "model.pt")

    def run(cwd, *args):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("DVC_STAGE", None)
        proc = subprocess.run([sys.executable, str(ROOT / "stages/eval.py"), *args], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        record = json.loads((co / "reports" / "eval" / "provenance.json").read_text())
        assert record["model"] == "data/train/model.pt", record
        return proc

    run(co)  # as DVC runs it: every path from dvc.yaml
    run(co / "reports", "--params", "../params.yaml", "--data", "../data/prepared", "--model",
        "../data/train/model.pt", "--out", "eval")
    run(co / "data", "--params", "../params.yaml", "--data", "prepared", "--model",
        "train/model.pt", "--out", "../reports/eval")
    run(co / "data")  # from data/, nothing given: the stage's own paths
    run(co)
    assert not (co / "reports" / "reports").exists() and not (co / "data" / "reports").exists()
