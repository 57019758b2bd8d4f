import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from cifar10_tutorial.evaluate import evaluate, watch
from cifar10_tutorial.predict import predict
from cifar10_tutorial.train import TrainPaths, train
from conftest import tiny_params


@pytest.fixture(scope="module")
def trained(synth_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    paths = TrainPaths(root / "train", root / "live")
    train(tiny_params(train={"max_steps": 60, "batch_size": 64, "initial_lr": 0.05,
                             "checkpoint_every": 30}), synth_data, paths, progress=False)
    return paths


def test_evaluate_writes_metrics_tables_and_plots(synth_data, trained, tmp_path):
    out = tmp_path / "eval"
    m = evaluate(synth_data, trained.model, out, batch_size=64, device_name="cpu")  # 200 = 3x64 + 8
    assert m["num_examples"] == 200 and m["step"] == 60
    saved = json.loads((out / "metrics.json").read_text())
    assert set(saved) >= {"precision_at_1", "precision_at_1_raw", "loss", "loss_raw"}
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
    with pytest.raises(PipelineError, match="no trained model; run the train stage first"):
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
    cli = subprocess.run([sys.executable, "-m", "cifar10_tutorial.predict", str(files[0]),
                          "--model", str(trained.model), "--top", "2"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(f"{files[0]}: {ranked[0][0][0]} ")
    bad = subprocess.run([sys.executable, "-m", "cifar10_tutorial.predict", str(tmp_path / "x.png"),
                          "--model", str(trained.model)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "x.png: no such file" in bad.stderr


def test_flip_test_time_augmentation_is_reported_beside(synth_data, trained, tmp_path):
    from cifar10_tutorial.evaluate import load_trained, predict_logits

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
