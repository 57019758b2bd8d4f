import importlib.util
import json
import sys

import numpy as np
import pytest
import torch

from cifar10_tutorial.benchmark import (TutorialJitter, format_table, run_benchmark,
                                        tensorflow_figures, typical_model)
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.model import num_params
from conftest import tiny_params


def test_benchmark_measures_every_pipeline_and_writes_json(synth_data, tmp_path):
    params = tiny_params(train={"batch_size": 16})
    out = tmp_path / "benchmark.json"
    r = run_benchmark(params, synth_data, warmup=1, windows=2, steps=2, typical_workers=0, out=out)
    saved = json.loads(out.read_text())
    for key in ("project", "fixed_batch", "project_bf16", "typical", "eval"):
        assert len(saved[key]) == (3 if key == "eval" else 2) and all(v > 0 for v in saved[key])
    med = r["median_examples_per_sec"]
    assert saved["ratios"]["project_vs_typical"] == med["project"] / med["typical"]
    assert saved["ratios"]["project_bf16_vs_typical"] == med["project_bf16"] / med["typical"]
    paired = sorted(1 - p / f for p, f in zip(saved["project"], saved["fixed_batch"]))
    assert saved["ratios"]["input_pipeline_overhead"] == pytest.approx(sum(paired) / 2)
    assert "tensorflow" not in saved and "project_vs_tensorflow" not in saved["ratios"]
    table = format_table(r)
    assert "project / typical" in table and "TensorFlow not measured" in table
    # the roofline: measured peaks, the network's own count, each pipeline's fraction
    roof = saved["roofline"]
    assert roof["peak_gflops"]["fp32"] > 1 and roof["peak_gflops"]["bf16"] > 0
    assert roof["flops_per_example"] == {"train": 2 * (3 * 18_470_784 - 24 * 24 * 75 * 64),
                                         "eval": 2 * 18_470_784}
    for key, pipe in roof["pipelines"].items():
        flops = roof["flops_per_example"]["eval" if key == "eval" else "train"]
        assert pipe["gflops"] == pytest.approx(med[key] * flops / 1e9)
        assert pipe["fraction_of_peak"] == pytest.approx(
            pipe["gflops"] / roof["peak_gflops"][pipe["precision"]])
    assert roof["pipelines"]["project_bf16"]["precision"] == "bf16"
    assert "GFLOP/s" in table and "of peak" in table and "roofline: torch.mm" in table
    split = roof["time_breakdown"]
    assert 0 < split["gemm_share"] < 1 and split["top_other_ops"]
    assert sum(o["share"] for o in split["top_other_ops"]) <= 1 - split["gemm_share"] + 1e-9
    assert "in convolutions and matrix products" in table


def test_matmul_peak_counts_2n3_operations():
    from cifar10_tutorial.benchmark import matmul_peak
    import time
    n = 256
    a = torch.randn(n, n)
    t = time.perf_counter()
    for _ in range(20):
        torch.mm(a, a)
    rough = 2 * n ** 3 * 20 / (time.perf_counter() - t) / 1e9
    peak = matmul_peak(torch.float32, torch.device("cpu"), n=n, reps=5)
    assert rough / 5 < peak < rough * 5  # the same order as timing it by hand


def test_tensorflow_baseline_without_tensorflow_is_a_clear_error(tmp_path):
    with pytest.raises(PipelineError, match="tensorflow-cpu"):
        tensorflow_figures(sys.executable, tmp_path, 16, 1, 2, 2)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed")
def test_tensorflow_baseline_runs(synth_data, tmp_path):
    from cifar10_tutorial.tf_baseline import run

    data = tmp_path / "prepared"
    data.mkdir()
    np.save(data / "train_images.npy", synth_data.train_images)
    np.save(data / "train_labels.npy", synth_data.train_labels)
    (data / "meta.json").write_text(json.dumps(synth_data.meta))
    out = run(data, 16, 1, 2, 2)
    assert len(out["examples_per_sec"]) == 2 and min(out["examples_per_sec"]) > 0


def test_typical_pipeline_is_the_same_network_and_distortions():
    model = typical_model(10)
    assert num_params(model) == 1_068_298
    assert isinstance(model.norm1, torch.nn.LocalResponseNorm)
    x = TutorialJitter()(torch.randint(0, 256, (3, 24, 24), dtype=torch.uint8))
    assert abs(x.mean().item()) < 1e-4 and abs(x.std(correction=0).item() - 1) < 1e-3
