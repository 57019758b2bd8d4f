"""The prepared GPU run, end to end in its CPU dry mode (the GPU figures need a GPU)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cifar10_tutorial.params import to_dict
from conftest import ROOT, tiny_params, write_train_project

from gpu_parts import DRIFT_FACTOR, STEP1_RTOL  # benchmarks/, on the path by conftest

GPU_RUN = str(ROOT / "benchmarks" / "gpu_run.py")


def _without_dvc(tmp_path, *also: str) -> dict:
    """An environment whose processes cannot import dvc or dvclive (as on the GPU machine),
    nor the modules ``also`` names."""
    block = tmp_path / "no-dvc"
    block.mkdir(exist_ok=True)
    names = ("dvc", "dvclive", "scmrepo", *also)
    (block / "sitecustomize.py").write_text(
        f"import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(block), os.environ.get("PYTHONPATH")]))}


@pytest.mark.e2e
def test_gpu_run_dry_mode_on_cpu(synth_data, tmp_path):
    """As on the GPU machine this project may be lent, which has neither dvc nor dvclive:
    here they are made unimportable in the script and every process it starts."""
    params = to_dict(tiny_params(train={"batch_size": 32, "max_steps": 20}))
    proj = write_train_project(tmp_path / "proj", synth_data, params)
    out = tmp_path / "gpu"
    env = _without_dvc(tmp_path)
    check = subprocess.run([sys.executable, "-c", "import dvclive"], env=env, capture_output=True)
    assert check.returncode != 0  # the block works
    proc = subprocess.run([sys.executable, GPU_RUN, "--dry", "--device",
                           "cpu", "--data", "data/prepared", "--params", "params.yaml", "--out",
                           str(out)], cwd=proj, capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "cpu-dry.json").read_text())
    assert r["dry"] and r["device"] == "cpu"
    losses = r["correctness"]["losses"]
    assert len(losses["cpu"]) == len(losses["device"]) == 6
    assert losses["step1"]["tolerance"] == STEP1_RTOL and losses["drift_factor"] == DRIFT_FACTOR
    assert losses["ok"] and losses["max_rel_diff"] == 0  # CPU against CPU: the same numbers
    assert r["correctness"]["host_syncs_per_step"] is None
    short = r["correctness"]["short_run"]
    assert short["steps"] == 20 and 0 <= short["precision_at_1"] <= 1
    rows = {row["batch_size"]: row for row in r["throughput"]}
    assert set(rows) == {32, 64}
    # the train stage's own loop, eager and captured (on a CPU the graph's body, bit for
    # bit the eager step: the same loss after the same steps)
    stage = {row["batch_size"]: row for row in r["train_stage"]}
    assert set(stage) == {32, 64}
    for row in stage.values():
        assert row["eager"]["examples_per_sec"] > 0 and row["captured"]["examples_per_sec"] > 0
        assert row["captured"]["loss_avg"] == row["eager"]["loss_avg"]
    for row in rows.values():
        for key in ("eager_input_pipeline", "eager_fixed_batch"):
            assert row[key]["examples_per_sec"] > 0
            assert abs(row[key]["ms_per_step"] - 1000 * row["batch_size"]
                       / row[key]["examples_per_sec"]) < 1e-6
        assert "compiled_fixed_batch" not in row  # CUDA graphs: GPU only
        assert "eager_fixed_batch_cudnn_benchmark" not in row  # cuDNN: GPU only
    # bf16 beside fp32, at the first batch size
    assert rows[32]["eager_fixed_batch_bf16"]["examples_per_sec"] > 0
    assert "eager_fixed_batch_bf16" not in rows[64]
    assert rows[32]["typical_dataloader"]["examples_per_sec"] > 0
    fast, tut = r["fast"], r["tutorial"]
    assert fast["epochs"] == 2 and fast["steps"] == 63 and len(fast["curve"]) >= 2
    assert set(fast["reached"]) <= {"0.8", "0.84", "0.86"}
    assert tut["steps"] == 40 and [c["step"] for c in tut["curve"]] == [20, 40]
    # every device: on a CPU, 2 processes (gloo) stand in for 2 GPUs
    multi = r["multi_device"]
    assert multi["devices"] == 2 and multi["device"] == "cpu"
    tp, ex5, w = multi["throughput"], multi["exercise5"], multi["same_weights"]
    assert (tp["one"]["devices"], tp["one"]["batch_size"]) == (1, 128)
    assert (tp["all"]["devices"], tp["all"]["batch_size"]) == (2, 128)
    assert (ex5["2x64"]["devices"], ex5["2x64"]["batch_size"]) == (2, 64)
    assert tp["scaling_efficiency"] == tp["all"]["examples_per_sec"] / (2 * tp["one"]["examples_per_sec"])
    assert ex5["2x64"]["sec_per_batch"] == pytest.approx(64 / ex5["2x64"]["examples_per_sec"])
    assert w["steps"] == 4 and w["ok"] and 0 <= w["max_abs_diff"] <= w["atol"]
    sbs = r["side_by_side"]
    assert sbs["alone"]["processes"] == 1 and sbs["together"]["processes"] == 2
    assert sbs["speedup"] == sbs["together"]["examples_per_sec_total"] / sbs["alone"]["examples_per_sec_total"]
    for text in ("first 6 losses vs CPU", "| 32 |", "| 64 |", "fast, 2 epochs", "side by side:",
                 "| 2 x 64 (exercise 5) |", "scaling to 2 devices: "):
        assert text in proc.stdout, proc.stdout


def test_gpu_run_without_a_gpu_says_so(tmp_path):
    proc = subprocess.run([sys.executable, GPU_RUN, "--data",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "no CUDA device here" in proc.stderr and "--dry" in proc.stderr


def test_a_budget_shrinks_every_part_and_never_grows_one():
    from gpu_plan import DRY, Sizes, fit

    full = Sizes()
    roomy = fit(full, 10 ** 6, 500.0, 128, 312.5)
    assert roomy == full  # time for everything: the full sizes
    quick = fit(full, 300, 500.0, 128, 312.5)  # a fast device, five minutes
    assert quick.tutorial_seconds == pytest.approx(48 / 1.1) and quick.parallel_steps < full.parallel_steps
    assert quick.compiled_batches == 1 and quick.short_steps == full.short_steps
    tight = fit(full, 300, 50.0, 128, 312.5)  # a slower one: every part shrinks
    assert tight.short_steps == 818 and tight.fast_epochs == 10 and tight.parallel_steps == 109
    assert tight.stage_steps == 193 < quick.stage_steps < full.stage_steps  # the stage's loop
    assert 1 <= len(tight.batches) < len(full.batches) and tight.compiled_batches == 0
    assert tight.check_steps == full.check_steps and tight.windows == full.windows
    slow_eval = fit(full, 300, 50.0, 128, 312.5, eval_seconds=5.0)  # evaluations cost time too
    assert slow_eval.fast_epochs == 5 and slow_eval.short_steps == 668
    assert slow_eval.tutorial_seconds < tight.tutorial_seconds
    slow = fit(full, 300, 5.0, 128, 312.5)  # a slow device: the smallest of each part
    assert slow.batches == (128,) and slow.compiled_batches == 0 and slow.fast_epochs == 1
    assert fit(DRY, 10 ** 6, 500.0, 32, 31.25) == DRY
    # with several devices visible their part takes a share of the budget from the others
    multi = fit(full, 300, 500.0, 128, 312.5, devices=8)
    assert multi.tutorial_seconds == pytest.approx(48 / 1.25) and multi.multi_steps == 20
    assert fit(full, 700, 500.0, 128, 312.5, devices=8).multi_steps == full.multi_steps


def test_a_run_past_its_budget_skips_the_parts_and_says_so(synth_data, tmp_path):
    params = to_dict(tiny_params(train={"batch_size": 32, "max_steps": 20}))
    proj = write_train_project(tmp_path / "proj", synth_data, params)
    proc = subprocess.run([sys.executable, GPU_RUN, "--dry", "--device",
                           "cpu", "--data", "data/prepared", "--budget-s", "0.01", "--out",
                           str(tmp_path / "gpu")], cwd=proj, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "gpu" / "cpu-dry.json").read_text())
    assert r["finished"] and r["budget_s"] == 0.01
    assert r["skipped"] == ["correctness", "throughput", "train_stage", "fast", "tutorial",
                            "multi_device", "side_by_side"]
    assert "skipped (out of budget): correctness, throughput" in proc.stdout
    bad = subprocess.run([sys.executable, GPU_RUN, "--dry", "--device",
                          "cpu", "--budget-s", "0"], cwd=proj, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1 and "--budget-s 0: give a number of seconds above 0" in bad.stderr


TOOL = Path(__file__).resolve().parents[2] / "shared" / "tools" / "make_dev_archive.py"


@pytest.mark.e2e
@pytest.mark.skipif(not TOOL.is_file(), reason="needs ../shared/tools/make_dev_archive.py")
def test_gpu_run_from_the_zip_in_a_budget_writes_each_part_as_it_finishes(synth_data, tmp_path):
    """The lent GPU machine's command (devtools/README.md): the dev split built from a JPEG
    zip with make_dev_archive.py beside it, the run fitted to a budget, no dvc or dvclive;
    the JSON is there after the first part, before the run ends."""
    import io
    import time
    import zipfile

    from PIL import Image

    carry = tmp_path / "proj" / ".carry"
    carry.mkdir(parents=True)
    shutil.copy2(TOOL, carry / TOOL.name)
    classes = synth_data.classes
    with zipfile.ZipFile(carry / "cifar10-train-jpeg.zip", "w") as z:
        for i, (img, label) in enumerate(zip(synth_data.train_images, synth_data.train_labels)):
            buf = io.BytesIO()
            hwc = img if img.shape[-1] == 3 else img.transpose(1, 2, 0)
            Image.fromarray(hwc).save(buf, format="JPEG", quality=95)
            z.writestr(f"train/{classes[label]}/{i:04d}.jpg", buf.getvalue())
    params = to_dict(tiny_params(train={"batch_size": 32, "max_steps": 20}))
    proj = write_train_project(tmp_path / "proj", synth_data, params)
    out = tmp_path / "gpu" / "cpu-dry.json"
    check = Path(__file__).resolve().parents[1] / "devtools" / "gpu_check.py"
    proc = subprocess.Popen([sys.executable, str(check), "--dry", "--device",
                             "cpu", "--zip", ".carry/cifar10-train-jpeg.zip", "--split", "800,200",
                             "--budget-s", "600", "--out", str(out.parent)], cwd=proj,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_without_dvc(tmp_path, "torchvision"))  # none there either
    first = None
    while proc.poll() is None and first is None:
        if out.is_file():
            first = json.loads(out.read_text())
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    assert first is not None and not first["finished"] and "correctness" in first
    assert "side_by_side" not in first  # written after the first part, before the last
    r = json.loads(out.read_text())
    assert r["finished"] and r["budget_s"] == 600 and "skipped" not in r
    built = r["data"]["built"]
    assert built["train"] == 800 and built["test"] == 200 and r["data"]["train"] == 800
    assert len(built["archive_md5"]) == 32 and built["zip"] == "cifar10-train-jpeg.zip"
    assert r["planned_at_steps_per_sec"] > 0 and r["total_seconds"] > built["build_seconds"]
    assert f"(archive md5 {built['archive_md5']})" in stdout and "side by side:" in stdout
    typical = r["throughput"][0]["typical_dataloader"]  # torchvision's pipeline: not there
    assert typical == {"error": "not measured (no torchvision here)"}


OLD_PYTHON = os.environ.get("CIFAR10_OLD_TORCH_PYTHON")


@pytest.mark.e2e
@pytest.mark.skipif(not OLD_PYTHON, reason="set CIFAR10_OLD_TORCH_PYTHON to a Python with an "
                                           "older torch (docs/benchmark.md)")
def test_gpu_run_on_an_older_torch_from_the_checkout(synth_data, tmp_path):
    """The GPU machine's way: another Python with an older torch, the package not installed
    (PYTHONPATH=src), no dvc, dvclive or torchvision."""
    src = Path(__file__).resolve().parents[1] / "src"
    params = to_dict(tiny_params(train={"batch_size": 32, "max_steps": 20}))
    proj = write_train_project(tmp_path / "proj", synth_data, params)
    env = _without_dvc(tmp_path, "torchvision")
    env["PYTHONPATH"] = os.pathsep.join([str(src), env["PYTHONPATH"]])
    proc = subprocess.run([OLD_PYTHON, GPU_RUN, "--dry", "--device",
                           "cpu", "--data", "data/prepared", "--budget-s", "600", "--out",
                           str(tmp_path / "gpu")], cwd=proj, capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "gpu" / "cpu-dry.json").read_text())
    import torch

    assert r["finished"] and r["torch"] != torch.__version__, r["torch"]
    assert r["correctness"]["losses"]["ok"] and r["side_by_side"]["together"]["processes"] == 2


@pytest.mark.parametrize("before", [(True, True), (False, True), (True, False)])
def test_the_correctness_check_restores_the_tf32_settings(synth_data, before):
    """The check turns TF32 off for its comparison and puts the settings back as they were,
    so that the timed parts run as the user's settings say."""
    import torch

    from gpu_parts import losses_against_cpu

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
        out = losses_against_cpu(tiny_params(), synth_data, torch.device("cpu"), 2)
        assert out["ok"] and out["max_rel_diff"] == 0.0  # CPU against CPU
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_a_failing_part_records_its_error_and_the_others_still_run(synth_data, tmp_path,
                                                                     monkeypatch):
    """Each part, and each of correctness's measurements, stands alone: one that raises
    leaves ``{"error": "<type>: <message>"}`` in the JSON and the table, the run goes on,
    and the command ends with status 1 naming what failed."""
    import gpu_run
    from cifar10_tutorial.errors import PipelineError
    from conftest import write_prepared

    def fail(exc):
        def part(*args, **kwargs):
            raise exc
        return part
    mismatch = ("Input type (torch.cuda.FloatTensor) and weight type (CUDABFloat16Type) "
                "should be the same")
    short = {"steps": 20, "precision_at_1": 0.5, "precision_at_1_raw": 0.4, "examples_per_sec": 9}
    ran = {}
    monkeypatch.setattr(gpu_run, "losses_against_cpu", fail(RuntimeError(mismatch)))
    monkeypatch.setattr(gpu_run, "host_syncs_per_step", lambda *a: None)
    monkeypatch.setattr(gpu_run, "short_run", lambda *a: short)
    monkeypatch.setattr(gpu_run, "throughput", fail(ValueError("no\nbatch")))
    monkeypatch.setattr(gpu_run, "train_stage", lambda *a: [
        {"batch_size": 32, "eager": {"error": "RuntimeError: x"},
         "captured": {"error": "RuntimeError: y"}}])  # no rate measured: planned on its own
    monkeypatch.setattr(gpu_run, "quick_rate", lambda *a: 7.0)
    monkeypatch.setattr(gpu_run, "fast_schedule", lambda *a: ran.setdefault("fast", {
        "epochs": 2, "steps": 63, "train_seconds": 1.0, "reached": {},
        "final_precision_at_1": 0.5}))
    monkeypatch.setattr(gpu_run, "tutorial_schedule", lambda p, d, s, rate, root: ran.setdefault(
        "tutorial", {"steps": 40, "of_steps": 40, "train_seconds": 1.0, "reached": {},
                     "curve": [], "planned_at": rate}))
    monkeypatch.setattr(gpu_run, "multi_device", lambda *a: {"skipped": "one device"})
    monkeypatch.setattr(gpu_run, "side_by_side", fail(PipelineError("a stage failed")))
    data = write_prepared(synth_data, tmp_path / "prepared")
    params = tmp_path / "params.yaml"
    params.write_text("train: {batch_size: 32}\n")
    out = tmp_path / "gpu"
    with pytest.raises(PipelineError, match=r"failed: correctness\.losses, throughput, "
                                            r"train_stage\.32\.eager, train_stage\.32\."
                                            r"captured, side_by_side; each one's error is in "):
        gpu_run.main(["--dry", "--device", "cpu", "--data", str(data), "--params", str(params),
                      "--out", str(out)])
    r = json.loads((out / "cpu-dry.json").read_text())
    assert r["finished"] and r["failed"] == ["correctness.losses", "throughput",
                                             "train_stage.32.eager", "train_stage.32.captured",
                                             "side_by_side"]
    assert r["correctness"] == {"losses": {"error": f"RuntimeError: {mismatch}"},
                                "host_syncs_per_step": None, "short_run": short}
    assert r["throughput"] == {"error": "ValueError: no\nbatch"}
    assert r["side_by_side"] == {"error": "PipelineError: a stage failed"}
    assert r["fast"] == ran["fast"] and r["multi_device"] == {"skipped": "one device"}
    assert r["tutorial"]["planned_at"] == 7.0  # no throughput: the rate measured on its own
    assert list(r["part_seconds"]) == ["correctness", "throughput", "train_stage", "fast",
                                       "tutorial",
                                       "multi_device", "side_by_side"]
    table = gpu_run.format_table(r)
    assert f"| losses | FAILED: RuntimeError: {mismatch} |" in table
    assert "| held-out precision @ 1 after 20 steps | 50.0% averaged, 40.0% raw |" in table
    assert "throughput: FAILED: ValueError: no batch" in table
    assert "side_by_side: FAILED: PipelineError: a stage failed" in table
    assert "fast, 2 epochs" in table and "every device: one device" in table


def test_the_correctness_check_passes_drift_and_fails_a_planted_sign_error(synth_data):
    """The check of the device against the CPU, run CPU against CPU: it passes, with the
    CPU's own drift (the other memory layout) measured and the bound above it; with one
    gradient's sign flipped on the "device" side it fails at step 1 and over the losses."""
    import torch

    from gpu_parts import losses_against_cpu

    params = tiny_params(train={"batch_size": 32})
    cpu = torch.device("cpu")
    good = losses_against_cpu(params, synth_data, cpu, 5)
    assert good["ok"] and good["step1"]["gradient_rel_diff"] == 0.0
    assert good["bound"] == DRIFT_FACTOR * max(good["cpu_drift"], 1e-7)

    def wrong_sign(model):
        model.local4.weight.register_hook(lambda g: -g)

    bad = losses_against_cpu(params, synth_data, cpu, 5, plant=wrong_sign)
    assert not bad["ok"] and not bad["step1"]["ok"]
    assert bad["step1"]["worst_gradient"] == "local4.weight"
    assert bad["step1"]["gradient_rel_diff"] > 1.0  # -g against g: 2
    assert bad["max_rel_diff"] > bad["bound"]  # the run goes elsewhere, past the drift
