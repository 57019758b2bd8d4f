import json

import torch

from cifar10_tutorial.benchmark import TutorialJitter, format_table, run_benchmark, typical_model
from cifar10_tutorial.model import num_params
from conftest import tiny_params


def test_benchmark_measures_every_pipeline_and_writes_json(synth_data, tmp_path):
    params = tiny_params(train={"batch_size": 16})
    out = tmp_path / "benchmark.json"
    r = run_benchmark(params, synth_data, warmup=1, windows=2, steps=2, typical_workers=0, out=out)
    saved = json.loads(out.read_text())
    for key in ("project", "fixed_batch", "typical", "eval"):
        assert len(saved[key]) == (3 if key == "eval" else 2) and all(v > 0 for v in saved[key])
    assert saved["ratios"]["project_vs_typical"] == r["median_examples_per_sec"]["project"] / \
        r["median_examples_per_sec"]["typical"]
    assert "project / typical" in format_table(r)


def test_typical_pipeline_is_the_same_network_and_distortions():
    model = typical_model(10)
    assert num_params(model) == 1_068_298
    assert isinstance(model.norm1, torch.nn.LocalResponseNorm)
    x = TutorialJitter()(torch.randint(0, 256, (3, 24, 24), dtype=torch.uint8))
    assert abs(x.mean().item()) < 1e-4 and abs(x.std(correction=0).item() - 1) < 1e-3
