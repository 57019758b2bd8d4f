import json
from pathlib import Path

import pytest
import torch

from speed.benchmark import format_table, run_benchmark
from conftest import tiny_params


def test_benchmark_measures_every_pipeline_and_writes_json(synth_data, tmp_path):
    params = tiny_params(train={"batch_size": 16})
    out = tmp_path / "benchmark.json"
    # a small matmul for the peak: 2048 x 2048 in bf16 takes minutes on a CPU without bf16 units
    r = run_benchmark(params, synth_data, warmup=1, windows=2, steps=2, typical_workers=0, out=out,
                      peak_size=256, compiled=False, train_stage=3,
                      conv_shape=(2, 32, 8, 3))
    saved = json.loads(out.read_text())
    for key in ("project", "fixed_batch", "project_bf16", "typical", "eval"):
        assert len(saved[key]) == (3 if key == "eval" else 2) and all(v > 0 for v in saved[key])
    med = r["median_examples_per_sec"]
    assert saved["ratios"]["project_vs_typical"] == med["project"] / med["typical"]
    assert saved["ratios"]["project_bf16_vs_typical"] == med["project_bf16"] / med["typical"]
    assert saved["ratios"]["project_bf16_vs_fp32"] == med["project_bf16"] / med["project"]
    # the machine by name (the CPU model and threads), as the results page shows it
    from cifar10_tutorial.provenance import cpu_model
    assert saved["machine"].startswith(cpu_model()) and saved["torch"] == torch.__version__
    assert "commit" in saved and "dirty" in saved and saved["data_hash"] == synth_data.content_hash
    paired = sorted(1 - p / f for p, f in zip(saved["project"], saved["fixed_batch"]))
    assert saved["ratios"]["input_pipeline_overhead"] == pytest.approx(sum(paired) / 2)
    assert "tensorflow" not in saved and "project_vs_tensorflow" not in saved["ratios"]
    table = format_table(r)
    assert "project / typical" in table and "TensorFlow not measured" in table
    # the roofline: measured peaks, the network's own count, each pipeline's fraction
    roof = saved["roofline"]
    assert roof["peak_gflops"]["fp32"] > 1 and roof["peak_gflops"]["bf16"] > 0
    for precision, kernels in roof["peak_kernels"].items():  # the faster of the two
        assert set(kernels) == {"mm", "conv"} and min(kernels.values()) > 0
        assert roof["peak_gflops"][precision] == max(kernels.values())
    assert roof["flops_per_example"] == {"train": 2 * (3 * 18_470_784 - 24 * 24 * 75 * 64),
                                         "eval": 2 * 18_470_784}
    for key, pipe in roof["pipelines"].items():
        flops = roof["flops_per_example"]["eval" if key == "eval" else "train"]
        assert pipe["gflops"] == pytest.approx(med[key] * flops / 1e9)
        assert pipe["fraction_of_peak"] == pytest.approx(
            pipe["gflops"] / roof["peak_gflops"][pipe["precision"]])
    assert roof["pipelines"]["project_bf16"]["precision"] == "bf16"
    assert "GFLOP/s" in table and "of peak" in table and "roofline: peak " in table
    assert "(torch.mm " in table and ", convolution " in table
    # docs/results.md names the two kernels this result measured
    from speed.roofline_table import roofline_markdown
    assert ("each the faster of `torch.mm` of two 256 x 256 matrices and a 3 x 3 convolution "
            "of 32 channels") in roofline_markdown(saved, "b.json")
    split = roof["time_breakdown"]
    assert 0 < split["gemm_share"] < 1 and split["top_other_ops"]
    assert sum(o["share"] for o in split["top_other_ops"]) <= 1 - split["gemm_share"] + 1e-9
    assert "in convolutions and matrix products" in table
    # the train stage itself: its own loop, read from its DVCLive rows after the warm-up
    stage = saved["train_stage"]
    # 3 runs of warmup=1 + summaries every 10 = 11 steps; log rows at 5, 10, 11, the first
    # window (which holds the warm-up) left out: 6 timed steps each
    assert stage["steps"] == 1 + 10 and stage["timed_steps"] == 3 * 6
    assert stage["log_every"] == 5 and len(stage["runs"]) == 3
    fixed = stage["fixed_batch"]
    assert len(fixed) == 4 and min(fixed) > 0  # one before the first run, one after each
    for i, run in enumerate(stage["runs"]):
        assert (run["fixed_before"], run["fixed_after"]) == (fixed[i], fixed[i + 1])
        assert run["gap"] == pytest.approx(1 - run["examples_per_sec"] / ((fixed[i] + fixed[i + 1]) / 2))
    assert stage["gap"] == sorted(run["gap"] for run in stage["runs"])[1]
    seconds = sum(run["timed_steps"] * 16 / run["examples_per_sec"] for run in stage["runs"])
    assert stage["examples_per_sec"] == pytest.approx(18 * 16 / seconds)
    assert "train stage: " in table and "steps in 3 runs" in table
    assert "slower than the fixed batch timed beside each run (the median of " in table


@pytest.mark.e2e
def test_compiled_against_eager_times_three_setups_in_both_precisions(synth_data):
    """Why the train stage has no compile option: the benchmark's measurement of it, here
    in bf16 alone (about 20 s on 2 CPU cores: three compilations; fp32 is the same code)."""
    from speed.compiled import compiled_against_eager

    params = tiny_params(train={"batch_size": 16})
    x, y = torch.randn(16, 3, 24, 24), torch.randint(0, 10, (16,))
    r = compiled_against_eager(params, synth_data, torch.device("cpu"), x, y, lambda: None,
                               warmup=1, windows=2, steps=2, precisions=("bf16",))
    assert list(r) == ["bf16"]
    for precision in r:
        c = r[precision]
        assert set(c["windows"]) == {"eager", "forward_compiled", "step_compiled"}
        med = c["median_examples_per_sec"]
        assert c["vs_eager"]["forward_compiled"] == med["forward_compiled"] / med["eager"]
        assert all(len(v) == 2 and min(v) > 0 for v in c["windows"].values())
        assert c["other_ms_per_step"]["eager"] > 0 and c["compile_s"]["forward_compiled"] > 0
    from speed.benchmark import _compiled_lines
    lines = _compiled_lines({"compiled": r})
    assert lines[0].startswith("torch.compile, bf16: forward compiled ") and "eager" in lines[0]


def test_matmul_peak_counts_2n3_operations(monkeypatch):
    """2 n^3 operations per product over the median time (a clock that ticks 0.5 s a call)."""
    import itertools

    from speed import roofline

    ticks = itertools.count(0, 0.25)
    monkeypatch.setattr(roofline.time, "perf_counter", lambda: next(ticks))
    peak = roofline.matmul_peak(torch.float32, torch.device("cpu"), n=64, reps=3)
    assert peak == pytest.approx(2 * 64 ** 3 / 0.25 / 1e9)
    # a convolution: 2 x batch x height x width x channels in x out x kernel area
    peak = roofline.conv_peak(torch.float32, torch.device("cpu"), shape=(2, 8, 6, 3), reps=3)
    assert peak == pytest.approx(2 * 2 * 6 * 6 * 8 * 8 * 9 / 0.25 / 1e9)


def test_the_tensorflow_baseline_runs_its_own_script_in_the_python_given(tmp_path, monkeypatch):
    """The TensorFlow baseline is a script beside the benchmark, run by the Python given
    (which needs no install of this package). Given one without TensorFlow (its import
    blocked here), the script starts and the error names the import that failed. Run by
    hand from any folder, without TensorFlow or without the prepared data, the script
    says so in one line."""
    import subprocess
    import sys

    from cifar10_tutorial.errors import PipelineError
    from speed.baselines import tensorflow_figures

    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    data = tmp_path / "prepared"
    data.mkdir()
    for name in ("train_images.npy", "train_labels.npy", "meta.json"):
        (data / name).write_bytes(b"")  # the script checks they are there before TF's import
    with pytest.raises(PipelineError, match="the TensorFlow baseline failed") as exc:
        tensorflow_figures(sys.executable, data, batch=8, warmup=1, windows=1, steps=1)
    assert "tf_baseline.py" in str(exc.value) and "import of tensorflow halted" in str(exc.value)
    assert "No module named" not in str(exc.value) and "Traceback" not in str(exc.value)
    script = str(Path(__file__).resolve().parents[1] / "benchmarks/speed/tf_baseline.py")
    for given, expected in ((data, "cannot import tensorflow (import of tensorflow halted"),
                            (tmp_path / "none", "none: no train_images.npy, train_labels.npy, "
                                                "meta.json; give --data the prepared data")):
        proc = subprocess.run([sys.executable, script, "--data", str(given)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("error: ") and expected in proc.stderr, proc.stderr
