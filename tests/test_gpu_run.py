"""The prepared GPU run, end to end in its CPU dry mode (the GPU figures need a GPU)."""
import json
import os
import subprocess
import sys

import pytest

from cifar10_tutorial.gpu_run import LOSS_RTOL
from cifar10_tutorial.params import to_dict
from conftest import tiny_params, write_train_project


@pytest.mark.e2e
def test_gpu_run_dry_mode_on_cpu(synth_data, tmp_path):
    """As on the GPU machine this project may be lent, which has neither dvc nor dvclive:
    here they are made unimportable in the script and every process it starts."""
    params = to_dict(tiny_params(train={"batch_size": 32, "max_steps": 20}))
    proj = write_train_project(tmp_path / "proj", synth_data, params)
    out = tmp_path / "gpu"
    block = tmp_path / "no-dvc"
    block.mkdir()
    (block / "sitecustomize.py").write_text(
        "import sys\nfor name in ('dvc', 'dvclive', 'scmrepo'):\n    sys.modules[name] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(block), os.environ.get("PYTHONPATH")]))}
    check = subprocess.run([sys.executable, "-c", "import dvclive"], env=env, capture_output=True)
    assert check.returncode != 0  # the block works
    proc = subprocess.run([sys.executable, "-m", "cifar10_tutorial.gpu_run", "--dry", "--device",
                           "cpu", "--data", "data/prepared", "--params", "params.yaml", "--out",
                           str(out)], cwd=proj, capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "cpu-dry.json").read_text())
    assert r["dry"] and r["device"] == "cpu"
    losses = r["correctness"]["losses"]
    assert len(losses["cpu"]) == len(losses["device"]) == 6 and losses["tolerance"] == LOSS_RTOL
    assert losses["ok"] and losses["max_rel_diff"] == 0  # CPU against CPU: the same numbers
    assert r["correctness"]["host_syncs_per_step"] is None
    short = r["correctness"]["short_run"]
    assert short["steps"] == 20 and 0 <= short["precision_at_1"] <= 1
    rows = {row["batch_size"]: row for row in r["throughput"]}
    assert set(rows) == {32, 64}
    for row in rows.values():
        for key in ("eager_input_pipeline", "eager_fixed_batch"):
            assert row[key]["examples_per_sec"] > 0
            assert abs(row[key]["ms_per_step"] - 1000 * row["batch_size"]
                       / row[key]["examples_per_sec"]) < 1e-6
        assert "compiled_fixed_batch" not in row  # CUDA graphs: GPU only
    assert rows[32]["typical_dataloader"]["examples_per_sec"] > 0
    fast, tut = r["fast"], r["tutorial"]
    assert fast["epochs"] == 2 and fast["steps"] == 63 and len(fast["curve"]) >= 2
    assert set(fast["reached"]) <= {"0.8", "0.84", "0.86"}
    assert tut["steps"] == 40 and [c["step"] for c in tut["curve"]] == [20, 40]
    sbs = r["side_by_side"]
    assert sbs["alone"]["processes"] == 1 and sbs["together"]["processes"] == 2
    assert sbs["speedup"] == sbs["together"]["examples_per_sec_total"] / sbs["alone"]["examples_per_sec_total"]
    for text in ("first 6 losses vs CPU", "| 32 |", "| 64 |", "fast, 2 epochs", "side by side:"):
        assert text in proc.stdout, proc.stdout


def test_gpu_run_without_a_gpu_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cifar10_tutorial.gpu_run", "--data",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "no CUDA device here" in proc.stderr and "--dry" in proc.stderr
