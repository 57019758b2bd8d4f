import dataclasses
import json
import time
import os
import signal
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cifar10_tutorial.evaluation.evaluate import evaluate
from cifar10_tutorial.model import CifarNet
from cifar10_tutorial.params import ParamsError, params_from_dict, to_dict
from cifar10_tutorial.training.deadline import Continuation
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.checkpoint_files import load_checkpoint
from cifar10_tutorial.errors import TrainingError
from cifar10_tutorial.training.optimization import (WeightAverage, averaging_decay, ema_decay,
                                                   learning_rate, loss_terms, make_optimizer,
                                                   make_step, schedule, step_options,
                                                   total_steps, training_model)
from cifar10_tutorial.training.train import train
from conftest import tiny_params, write_train_project


def paths(tmp_path) -> TrainPaths:
    return TrainPaths(tmp_path / "train", tmp_path / "live")


def test_learning_rate_staircase_of_the_reference():
    p = params_from_dict({})  # the defaults: 0.1, x0.1 every 350 epochs
    assert learning_rate(0, schedule(p, 50000, 128)) == 0.1
    assert learning_rate(136_717, schedule(p, 50000, 128)) == 0.1  # decay_steps = int(50000/128*350)
    assert learning_rate(136_718, schedule(p, 50000, 128)) == pytest.approx(0.01)
    assert learning_rate(100_000, schedule(p, 50000, 128)) == 0.1  # constant over a 100K-step run
    assert learning_rate(2 * 136_718, schedule(p, 50000, 128)) == pytest.approx(0.001)


def test_fast_schedule_warms_up_then_decays_linearly_over_the_run():
    p = params_from_dict({"train": {"schedule": "fast", "max_epochs": 10},
                          "fast": {"peak_lr": 0.2, "warmup_epochs": 1, "final_lr_fraction": 0.0}})
    assert total_steps(p.train, 1000, 100) == 100  # 10 epochs of 10 steps
    rates = [learning_rate(s, schedule(p, 1000, 100)) for s in range(100)]
    assert rates[0] == pytest.approx(0.2 / 11) and rates[9] == pytest.approx(0.2 * 10 / 11)
    assert rates[10] == pytest.approx(0.2) and max(rates) == pytest.approx(0.2)
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))  # decays monotonically
    assert rates[55] == pytest.approx(0.2 * (1 - 45 / 89))
    # max_epochs also sets the tutorial run's length; without it, max_steps does
    assert total_steps(params_from_dict({"train": {"max_epochs": 2.5}}).train, 1000, 128) == 20
    assert total_steps(params_from_dict({"train": {"max_steps": 7}}).train, 1000, 128) == 7


def test_fast_schedule_optimiser_and_loss():
    p = params_from_dict({"train": {"schedule": "fast"},
                          "fast": {"momentum": 0.9, "nesterov": True, "label_smoothing": 0.1,
                                   "weight_decay": 0.01, "moving_average_decay": 0.99}})
    model = CifarNet()
    opt = make_optimizer(model, p)
    assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[0]["nesterov"]
    assert averaging_decay(p) == 0.99 and averaging_decay(params_from_dict({})) == 0.9999
    tutorial = make_optimizer(model, params_from_dict({}))
    assert tutorial.param_groups[0]["momentum"] == 0 and not tutorial.param_groups[0]["nesterov"]
    # the loss of the fast schedule: label smoothing, and decay over every weight matrix/kernel
    x, y = torch.randn(4, 3, 24, 24), torch.tensor([0, 1, 2, 3])
    _, state = _one_step(p, x, y)
    torch.manual_seed(0)
    model = training_model(p, 10, torch.device("cpu"))
    logits = model(x)
    ce, l2 = loss_terms(model, logits, y, 0.01, 0.1, [w for w in model.parameters() if w.dim() > 1])
    smooth = -(0.9 * F.log_softmax(logits, 1)[torch.arange(4), y] + 0.1 * F.log_softmax(logits, 1).mean(1))
    assert ce.item() == pytest.approx(smooth.mean().item(), rel=1e-5)
    every = sum(w.pow(2).sum() for n, w in model.named_parameters() if n.endswith("weight")) / 2
    assert l2.item() == pytest.approx(0.01 * every.item(), rel=1e-5)


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_our_sgd_is_torchs_bit_for_bit_and_reads_its_checkpoints(momentum, nesterov):
    """The written-out SGD (no torch._dynamo import) makes torch.optim.SGD's weights exactly,
    and each reads the other's state_dict, so checkpoints of either version resume."""
    from cifar10_tutorial.training.optimization import SGD

    def run(make, steps, start=None):
        torch.manual_seed(0)
        model = CifarNet()
        opt = make(model)
        if start is not None:
            model.load_state_dict(start[0])
            opt.load_state_dict(start[1])
        for i in range(steps):
            for group in opt.param_groups:
                group["lr"] = 0.1 / (i + 1)
            torch.manual_seed(100 + i)
            x, y = torch.randn(8, 3, 24, 24), torch.randint(0, 10, (8,))
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return model.state_dict(), opt.state_dict()

    ours = lambda m: SGD(m.parameters(), lr=0.1, momentum=momentum, nesterov=nesterov)
    torchs = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=momentum, nesterov=nesterov)
    (w1, s1), (w2, s2) = run(ours, 3), run(torchs, 3)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert s1["param_groups"] == s2["param_groups"] and s1["state"].keys() == s2["state"].keys()
    assert all(torch.equal(s1["state"][i]["momentum_buffer"], s2["state"][i]["momentum_buffer"])
               for i in s1["state"])
    # one more step from torch's state with ours and torch's, and from ours with torch's
    # (last: torch's load_state_dict adopts the buffers it is given and steps them in place)
    ahead = [run(make, 1, start=start)[0]
             for make, start in ((ours, (w2, s2)), (torchs, (w1, s1)), (torchs, (w2, s2)))]
    assert all(torch.equal(ahead[0][k], ahead[2][k]) and torch.equal(ahead[1][k], ahead[2][k])
               for k in w1)
    with pytest.raises(ValueError, match="parameters"):
        SGD(CifarNet().parameters(), lr=0.1).load_state_dict(
            {"state": {}, "param_groups": [{"params": [0, 1]}]})


def test_a_training_process_does_not_import_the_compiler(tmp_path):
    """torch.optim imports torch._dynamo, about 2 s of every short process's start (each
    exercise variant): the train loop runs without it."""
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import prepare
    from conftest import make_cifar10_archive

    make_cifar10_archive(tmp_path / "a.tar.gz", train_per_batch=40, test=40, seed=3)
    prepare(tmp_path / "a.tar.gz", tmp_path / "prepared", CIFAR10)
    code = ("import sys; from pathlib import Path; from conftest import tiny_params; "
            "from cifar10_tutorial.training.train import train; "
            "from cifar10_tutorial.data.prepared import load_prepared; "
            "from cifar10_tutorial.training.checkpoints import TrainPaths; "
            "train(tiny_params(train={'max_steps': 3}), load_prepared(Path(sys.argv[1])), "
            "TrainPaths(Path(sys.argv[2]), Path(sys.argv[3])), progress=False); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "prepared"),
                          str(tmp_path / "w"), str(tmp_path / "o")],
                         capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_ema_rule():
    assert ema_decay(0.9999, 0) == pytest.approx(0.1)
    assert ema_decay(0.9999, 1) == pytest.approx(2 / 11)
    assert ema_decay(0.9999, 10**6) == 0.9999
    model = torch.nn.Linear(2, 1)
    avg = WeightAverage(model, 0.9999)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    avg.update(model, 1)
    d = 2 / 11
    torch.testing.assert_close(avg.shadow["weight"], d * start + (1 - d) * (start + 1))
    assert set(avg.shadow) == {"weight", "bias"}


def test_checkpoints_and_model_file_hold_the_averages_in_one_format(synth_data, tmp_path):
    """"ema" is the whole averaged model state in both: a checkpoint evaluates and resumes
    with the same reader as model.pt."""
    paths = TrainPaths(tmp_path / "train", tmp_path / "live")
    train(tiny_params(train={"max_steps": 4}, run={"checkpoint_every": 2, "summary_every": 100}),
          synth_data, paths, progress=False)
    ck, final = load_checkpoint(paths.checkpoints / "ckpt-00000004.pt"), load_checkpoint(paths.model)
    assert set(ck["ema"]) == set(ck["model"]) == set(final["ema"]) == set(final["model"])
    for name in final["ema"]:
        torch.testing.assert_close(ck["ema"][name], final["ema"][name], rtol=0, atol=0)
    older = {k: v for k, v in ck["ema"].items() if v.is_floating_point()}  # the older form
    avg = WeightAverage(CifarNet(), 0.9999)
    avg.load_state_dict(older)
    assert all(torch.equal(avg.shadow[k], ck["ema"][k]) for k in avg.shadow)


def test_loss_and_weight_decay_on_a_known_case():
    model = CifarNet()
    with torch.no_grad():
        model.local3.weight.fill_(0.01)
        model.local4.weight.fill_(-0.02)
    logits = torch.tensor([[2.0, 0.0] + [0.0] * 8, [0.0] * 10])
    labels = torch.tensor([0, 3])
    ce, wd = loss_terms(model, logits, labels, 0.004)
    expected_ce = (-(2 - torch.log(torch.exp(torch.tensor(2.0)) + 9)) + torch.log(torch.tensor(10.0))) / 2
    assert ce.item() == pytest.approx(expected_ce.item(), rel=1e-6)
    l2 = (384 * 2304 * 0.01 ** 2 + 192 * 384 * 0.02 ** 2) / 2
    assert wd.item() == pytest.approx(0.004 * l2, rel=1e-5)


def _one_step(params, x, y, steps=1):
    """Loss of the first step and the weights after ``steps`` steps, from the same start."""
    model = training_model(params, 10, torch.device("cpu"))
    opt = make_optimizer(model, params)
    step = make_step(model, model, opt, torch.device("cpu"), **step_options(params))
    first = step(x, y)[0].item()
    for _ in range(steps - 1):
        step(x, y)
    return first, model.state_dict()


@pytest.mark.parametrize("option", [{"channels_last": False}, {"precision": "bf16"}])
def test_speed_options_train_the_same_network(option):
    """NCHW and bf16 autocast: the same loss and update as the default, up to rounding."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, 24, 24), torch.randint(0, 10, (32,))
    torch.manual_seed(1)
    ref_loss, ref = _one_step(tiny_params(), x, y, steps=3)
    torch.manual_seed(1)
    loss, got = _one_step(tiny_params(train=option), x, y, steps=3)
    tol = 2e-2 if option.get("precision") == "bf16" else 1e-5  # bf16: 8 bits of mantissa
    assert loss == pytest.approx(ref_loss, rel=tol)
    # NCHW and NHWC kernels sum in other orders: after 3 updates at lr 0.1 the weights
    # (scale 1e-2..1e-4) differ by up to ~6e-6 on some CPUs (AMD EPYC, oneDNN); a wrong
    # layout would move them by the weights' own scale
    atol = tol * 0.1 if option.get("precision") == "bf16" else 2e-5
    for k in ref:
        torch.testing.assert_close(got[k].float(), ref[k], rtol=tol, atol=atol)
        assert got[k].dtype == torch.float32  # weights stay float32 under autocast
    if option.get("precision") == "bf16":  # and bf16 really ran: not bit-identical
        assert any(not torch.equal(got[k], ref[k]) for k in ref)


def test_short_run_learns_the_synthetic_set(synth_data, tmp_path):
    params = tiny_params(train={"max_steps": 60, "batch_size": 64, "initial_lr": 0.05})
    metrics = train(params, synth_data, paths(tmp_path), progress=False)
    assert metrics["num_params"] == 1_068_298 and metrics["macs_per_image"] == 18_470_784
    assert metrics["step"] == 60 and metrics["loss_avg"] < 3.6  # from 4.6: ce 2.3 + wd 2.3
    result = evaluate(synth_data, paths(tmp_path).model, tmp_path / "eval", 64, "cpu")
    assert result["precision_at_1"] >= 0.9
    assert result["num_examples"] == 200


def test_held_out_precision_during_training_and_time_to_target(synth_data, tmp_path, capsys):
    n = len(synth_data.train_labels)
    params = tiny_params(train={"schedule": "fast", "max_epochs": 19 * 64 / n, "batch_size": 64},
                         fast={"peak_lr": 0.02, "warmup_epochs": 0.3},
                         eval={"every_steps": 5, "targets": [0.3, 0.999], "batch_size": 64})
    metrics = train(params, synth_data, paths(tmp_path), progress=False)
    assert metrics["step"] == 19 and metrics["epochs"] == pytest.approx(19 * 64 / n)
    out = capsys.readouterr().out
    assert out.count("held-out precision @ 1 =") == 4  # steps 5, 10, 15 and the last, 19
    # the curve, for the report: DVCLive's held_out/precision_at_1 at each evaluated step
    tsv = paths(tmp_path).live_dir / "plots/metrics/held_out/precision_at_1.tsv"
    rows = [r.split("\t") for r in tsv.read_text().splitlines()]
    assert rows[0][:2] == ["step", "precision_at_1"]
    curve = [(int(r[0]), float(r[1])) for r in rows[1:]]
    assert [s for s, _ in curve] == [5, 10, 15, 19]
    assert curve[-1][1] == pytest.approx(metrics["held_out"]["precision_at_1"])
    assert metrics["held_out"]["precision_at_1"] >= 0.3  # the synthetic set is easy
    # time to target: the first evaluated step at or above each target, none for the others
    ttt = metrics["time_to_target"]
    for target in (0.3, 0.999):
        first = next((s for s, v in curve if v >= target), None)
        assert (ttt[f"{target:g}"]["step"] if f"{target:g}" in ttt else None) == first
    assert f"reached held-out precision 0.3 at step {ttt['0.3']['step']}" in out
    assert 0 < ttt["0.3"]["train_seconds"] <= metrics["train_seconds"] < metrics["wall_time_s"]


def test_truncated_dvclive_summary_does_not_stop_a_resume(synth_data, tmp_path):
    train(tiny_params(train={"max_steps": 10}), synth_data, paths(tmp_path), progress=False)
    summary = paths(tmp_path).live_dir / "metrics.json"
    summary.write_text(summary.read_text()[:20])  # as a kill during DVCLive's write leaves it
    m = train(tiny_params(train={"max_steps": 20}), synth_data, paths(tmp_path), progress=False)
    assert m["step"] == 20 and json.loads(summary.read_text())["step"] == 20


def test_reference_log_lines_with_progress_and_eta(synth_data, tmp_path, capsys):
    """The reference's line, then where the run stands and when it ends, on every line (no
    terminal here: progress=False, as under nohup or in CI)."""
    import re

    train(tiny_params(train={"max_steps": 10, "log_every": 5}), synth_data, paths(tmp_path), progress=False)
    lines = [l for l in capsys.readouterr().out.splitlines() if "loss =" in l]
    assert len(lines) == 2
    assert re.search(r": step 10, loss = \d+\.\d\d \(\d+\.\d examples/sec; \d+\.\d{3} sec/batch\) "
                     r"\[10/10, 100\.0%, ETA 0s\]$", lines[1])
    assert re.search(r": step 5, .* \[5/10, 50\.0%, ETA (\d+s|\d+m \d\ds)\]$", lines[0])


def test_durations_read_as_people_write_them():
    from cifar10_tutorial.training.monitoring import duration_text

    assert [duration_text(x) for x in (None, float("nan"), 0.4, 9, 245, 3600 * 3 + 720)] == \
        ["?", "?", "0s", "9s", "4m 05s", "3h 12m"]


def test_nan_loss_aborts_with_a_clear_message(synth_data, tmp_path):
    params = tiny_params(train={"initial_lr": 1e6, "max_steps": 50, "log_every": 1}, run={"checkpoint_every": 1000})
    with pytest.raises(TrainingError, match=r"the loss became (nan|inf) at step \d+ .*diverged"):
        train(params, synth_data, paths(tmp_path), progress=False)
    assert not paths(tmp_path).model.exists()


TIMINGS = {"examples_per_sec", "examples_per_sec_per_device", "wall_time_s",
           "time_to_first_batch_s", "train_seconds", "held_out_eval_seconds", "time_to_target"}


def _outputs(p: TrainPaths) -> tuple:
    """A run's DVC outputs with timings left out: weights, metrics, plot rows."""
    ckpt = load_checkpoint(p.model)

    def untimed(d: dict) -> dict:
        return {k: untimed(v) if isinstance(v, dict) else v for k, v in d.items()
                if k not in TIMINGS}
    metrics = untimed(json.loads((p.live_dir / "metrics.json").read_text()))
    plots = {}
    for tsv in sorted((p.live_dir / "plots").rglob("*.tsv")):
        rows = [line.split("\t") for line in tsv.read_text().splitlines()]
        keep = [i for i, name in enumerate(rows[0]) if name not in ("timestamp", "examples_per_sec")]
        plots[tsv.name] = [[r[i] for i in keep] for r in rows]
    return ckpt, metrics, plots


def assert_same_outputs(a: TrainPaths, b: TrainPaths) -> None:
    (ca, ma, pa), (cb, mb, pb) = _outputs(a), _outputs(b)
    for key in ("model", "ema"):
        for name in ca[key]:
            torch.testing.assert_close(ca[key][name], cb[key][name], rtol=0, atol=0)
    assert ca["params"] == cb["params"] and ca["step"] == cb["step"]
    assert ma == mb and None not in ma.values()
    assert pa == pb and pa


@pytest.mark.parametrize("shuffle", ["permutation", "queue"])
def test_resumed_run_ends_with_the_same_outputs(synth_data, tmp_path, shuffle):
    full = tiny_params(input={"shuffle": shuffle}, train={"max_steps": 20}, run={"checkpoint_every": 8},
                       eval={"every_steps": 5})
    train(full, synth_data, paths(tmp_path / "a"), progress=False)
    # the same run killed after step 16's checkpoint, having logged up to step 20: resumed
    train(full, synth_data, paths(tmp_path / "b"), progress=False)
    (paths(tmp_path / "b").checkpoints / "ckpt-00000020.pt").unlink()
    paths(tmp_path / "b").model.unlink()
    time.sleep(1.1)  # a new run would get a TensorBoard folder of another name
    m = train(full, synth_data, paths(tmp_path / "b"), progress=False)
    assert m["step"] == 20
    assert_same_outputs(paths(tmp_path / "a"), paths(tmp_path / "b"))
    assert len(list(paths(tmp_path / "b").tensorboard.iterdir())) == 1  # resumed in its folder


def test_a_network_that_draws_random_numbers_resumes_to_the_same_outputs(synth_data, tmp_path):
    """With model.dropout the step draws masks. They come from the seed, the rank and the
    step, not from a generator's state (which a resume would not restore: the weights
    would drift apart without a warning), so a resume draws what the uninterrupted run
    drew."""
    drop = tiny_params(model={"dropout": 0.5}, input={"shuffle": "permutation"},
                       train={"max_steps": 20}, run={"checkpoint_every": 8},
                       eval={"every_steps": 5})
    train(drop, synth_data, paths(tmp_path / "a"), progress=False)
    train(drop, synth_data, paths(tmp_path / "b"), progress=False)
    (paths(tmp_path / "b").checkpoints / "ckpt-00000020.pt").unlink()
    paths(tmp_path / "b").model.unlink()
    time.sleep(1.1)
    assert train(drop, synth_data, paths(tmp_path / "b"), progress=False)["step"] == 20
    assert_same_outputs(paths(tmp_path / "a"), paths(tmp_path / "b"))
    # the masks act: without dropout the same run ends elsewhere
    plain = dataclasses.replace(drop, model=dataclasses.replace(drop.model, dropout=0.0))
    train(plain, synth_data, paths(tmp_path / "c"), progress=False)
    a, c = (load_checkpoint(paths(tmp_path / n).model)["model"] for n in "ac")
    assert not torch.equal(a["local4.weight"], c["local4.weight"])


def test_the_run_section_does_not_change_a_result(synth_data, tmp_path):
    """params.yaml `run:` (how a run is carried out): declared to no stage, left out of the
    resume signature and model.pt."""
    from cifar10_tutorial.checkpoint_files import run_params

    base = {"max_steps": 12, "log_every": 2}
    quick = tiny_params(train=base, eval={"every_steps": 4},
                        run={"checkpoint_every": 3, "summary_every": 2, "max_restarts": 0,
                             "collective_timeout_s": 10})
    slow = tiny_params(train=base, run={"checkpoint_every": 1000, "summary_every": 1000},
                       eval={"every_steps": 4})
    assert "run" not in run_params(quick) and run_params(quick) == run_params(slow)
    train(quick, synth_data, paths(tmp_path / "a"), progress=False)
    train(slow, synth_data, paths(tmp_path / "b"), progress=False)
    assert_same_outputs(paths(tmp_path / "a"), paths(tmp_path / "b"))


def test_a_finished_run_run_again_gives_the_same_outputs(synth_data, tmp_path, caplog):
    """`dvc repro -f`, or a rerun after a failed experiment, trains again from step 0 and
    gives the first run's outputs: never a run of 0 steps with null metrics."""
    caplog.set_level("INFO")
    params = tiny_params(train={"max_steps": 10}, eval={"every_steps": 5})
    train(params, synth_data, paths(tmp_path / "a"), progress=False)
    train(params, synth_data, paths(tmp_path / "b"), progress=False)
    m = train(params, synth_data, paths(tmp_path / "b"), progress=False)
    assert "holds the finished run (step 10 of 10): training again from step 0" in caplog.text
    assert m["step"] == 10 and m["loss"] > 0 and m["examples_per_sec"] > 0
    assert_same_outputs(paths(tmp_path / "a"), paths(tmp_path / "b"))


def test_checkpoints_of_other_params_are_not_resumed(synth_data, tmp_path, caplog):
    caplog.set_level("INFO")
    train(tiny_params(train={"max_steps": 20}), synth_data, paths(tmp_path), progress=False)
    (paths(tmp_path).checkpoints / "ckpt-00000020.pt").unlink()  # unfinished, at step 10
    train(tiny_params(train={"max_steps": 20, "initial_lr": 0.05}), synth_data, paths(tmp_path),
          progress=False)
    assert "made with other data or params: starting afresh" in caplog.text
    assert "resuming" not in caplog.text


def test_another_run_length_starts_afresh(synth_data, tmp_path, caplog):
    caplog.set_level("INFO")
    train(tiny_params(train={"max_steps": 20}), synth_data, paths(tmp_path), progress=False)
    (paths(tmp_path).checkpoints / "ckpt-00000020.pt").unlink()  # unfinished, at step 10
    m = train(tiny_params(train={"max_steps": 5}), synth_data, paths(tmp_path), progress=False)
    assert "made with other data or params: starting afresh" in caplog.text
    assert m["step"] == 5 and load_checkpoint(paths(tmp_path).model)["step"] == 5


def test_checkpoints_of_other_data_are_not_resumed(synth_data, tmp_path, caplog):
    """Checkpoints of another archive (data.md5: null) with fewer images are not resumed:
    the run trains from scratch on the new data."""
    from cifar10_tutorial.data.prepared import Prepared

    caplog.set_level("INFO")
    params = tiny_params(train={"max_steps": 20})
    train(params, synth_data, paths(tmp_path), progress=False)
    (paths(tmp_path).checkpoints / "ckpt-00000020.pt").unlink()  # unfinished, at step 10
    n = len(synth_data.train_labels) // 2
    smaller = Prepared(synth_data.train_images[:n], synth_data.train_labels[:n],
                       synth_data.test_images, synth_data.test_labels,
                       {**synth_data.meta, "counts": {"train": n, "test": len(synth_data.test_labels)},
                        "file_counts": {"train": [n], "test": [len(synth_data.test_labels)]}})
    assert smaller.content_hash != synth_data.content_hash
    m = train(params, smaller, paths(tmp_path), progress=False)
    assert "made with other data or params: starting afresh" in caplog.text
    assert "resuming" not in caplog.text and m["step"] == 20


def test_corrupt_checkpoint_is_a_clear_error(synth_data, tmp_path):
    train(tiny_params(train={"max_steps": 10}), synth_data, paths(tmp_path), progress=False)
    ckpt = paths(tmp_path).checkpoints / "ckpt-00000010.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    with pytest.raises(TrainingError, match=r"ckpt-00000010.pt: cannot be loaded as a checkpoint"):
        train(tiny_params(train={"max_steps": 20}), synth_data, paths(tmp_path), progress=False)


def test_tensorboard_summaries_and_dvclive(synth_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(tiny_params(train={"max_steps": 12, "log_every": 4}, run={"summary_every": 5}), synth_data,
          paths(tmp_path), progress=False)
    runs = sorted(paths(tmp_path).tensorboard.iterdir())  # one folder per run
    assert len(runs) == 1 and runs[0].name.startswith("run-")
    acc = EventAccumulator(str(runs[0]), size_guidance={"histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in ("learning_rate", "loss/total", "loss/total_avg", "loss/cross_entropy",
                "loss/weight_decay", "sparsity/conv1", "sparsity/local4"):
        assert tag in tags["scalars"], tag
    for tag in ("weights/conv1.weight", "gradients/local3.weight", "activations/conv2",
                "activations/local3"):
        assert tag in tags["histograms"], tag
    assert "images" in tags["images"]
    # every summary_every steps, and the first and last step of the run
    assert [e.step for e in acc.Scalars("learning_rate")] == [1, 5, 10, 12]
    live = paths(tmp_path).live_dir
    import json
    metrics = json.loads((live / "metrics.json").read_text())
    assert metrics["num_params"] == 1_068_298 and metrics["step"] == 12
    loss_rows = (live / "plots/metrics/train/loss.tsv").read_text().splitlines()
    assert loss_rows[0].split("\t")[:2] == ["step", "loss"] and len(loss_rows) == 1 + 3
    assert not (live / "params.yaml").exists()  # params live in params.yaml, hashed by DVC
    # by default (eval.every_steps 5,000) a short run evaluates the held-out split at its end:
    # the held-out plot is never blank
    held_out = (live / "plots/metrics/held_out/precision_at_1.tsv").read_text().splitlines()
    assert len(held_out) == 2 and held_out[1].split("\t")[0] == "12"
    # a second run (another experiment, say) gets a folder of its own beside the first
    time.sleep(1.1)
    train(tiny_params(train={"max_steps": 6}, run={"summary_every": 5}), synth_data, paths(tmp_path),
          progress=False)
    assert len(list(paths(tmp_path).tensorboard.iterdir())) == 2


def test_histograms_are_tensorboards_own_without_its_copies(tmp_path):
    """Summaries bin float32 values in memory order (no float64 copy, no gather of a
    channels_last activation): the record must be the one add_histogram would write."""
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import make_histogram
    from cifar10_tutorial.training.monitoring import _histogram, in_memory_order

    writer = SummaryWriter(str(tmp_path / "tb"))
    edges = np.asarray(writer.default_bins, dtype=np.float64)
    kept = {}
    writer.add_histogram_raw = lambda tag, global_step, **kw: kept.setdefault(tag, kw)
    g = torch.Generator().manual_seed(0)
    act = F.relu(torch.randn(16, 64, 24, 24, generator=g)).contiguous(memory_format=torch.channels_last)
    weights = torch.randn(384, 2304, generator=g) * 0.04
    edge_values = torch.tensor([0.0, 1e-12, -1e-12, float(edges[700]), float(edges[-2]), -3.5, 7.0])
    transposed = torch.randn(30, 40, generator=g).t()  # not contiguous either
    for name, t in (("act", act), ("weights", weights), ("edges", edge_values),
                    ("transposed", transposed), ("one", torch.tensor([0.25]))):
        assert in_memory_order(t).data_ptr() == t.data_ptr()  # a view, not a copy
        flat = _histogram(writer, edges, name, t, 3)
        assert sorted(flat.tolist()) == sorted(t.reshape(-1).tolist())
        ref = make_histogram(t.reshape(-1).double().numpy(), edges)
        got = kept[name]
        assert list(ref.bucket_limit) == got["bucket_limits"], name
        assert list(ref.bucket) == got["bucket_counts"], name
        assert (got["min"], got["max"], got["num"]) == (ref.min, ref.max, ref.num)
        assert got["sum"] == pytest.approx(ref.sum, rel=1e-9, abs=1e-9)
        assert got["sum_squares"] == pytest.approx(ref.sum_squares, rel=1e-9)
    for bad in (float("nan"), float("inf"), -float("inf"), 1e30):
        with pytest.raises(TrainingError, match=r"weights/x holds values up to \S+ at step 7: "
                                                r"training diverged"):
            _histogram(writer, edges, "weights/x", torch.tensor([0.5, bad, -0.5]), 7)
    writer.close()


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_metrics_hold_numbers_only_each_once(synth_data, tmp_path):
    """What `dvc exp show` and `dvc metrics diff` list: numbers, no figure twice, the held-out
    evaluation apart from the eval stage's figures; what the run is lives in provenance.json."""
    train(tiny_params(train={"max_steps": 10}, eval={"every_steps": 5, "targets": [0.1]}),
          synth_data, paths(tmp_path), progress=False)
    live = paths(tmp_path).live_dir
    flat = _flat(json.loads((live / "metrics.json").read_text()))
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat.values()), flat
    for gone in ("steps", "final_loss", "final_loss_avg", "schedule", "device", "world_size",
                 "held_out_precision_at_1", "train.loss", "eval.precision_at_1"):
        assert gone not in flat
    assert {"step", "loss", "loss_avg", "held_out.precision_at_1",
            "held_out.precision_at_1_raw", "time_to_target.0.1.step"} <= set(flat)
    made = json.loads((live / "provenance.json").read_text())
    assert made["schedule"] == "tutorial" and made["device_type"] == "cpu"
    # no target reached: no empty time_to_target dict (DVC warns about a dict it cannot read)
    train(tiny_params(train={"max_steps": 10}, eval={"every_steps": 5, "targets": [1.0]}),
          synth_data, paths(tmp_path / "none"), progress=False)
    metrics = json.loads((paths(tmp_path / "none").live_dir / "metrics.json").read_text())
    assert "time_to_target" not in metrics and "held_out" in metrics
    assert made["world_size"] == 1 and made["global_batch_size"] == 32 and made["steps"] == 10


def test_targets_never_timed_are_said(synth_data, tmp_path, caplog):
    """eval.targets with eval.every_steps 0 (no held-out evaluation while training, a
    setting of the whole params file) are never timed: a warning says so, naming both,
    and the run records no time_to_target; with evaluations, nothing is said."""
    import logging

    with caplog.at_level(logging.WARNING):
        train(tiny_params(train={"max_steps": 4}, eval={"every_steps": 0, "targets": [0.5]}),
              synth_data, paths(tmp_path), progress=False)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("eval.targets [0.5] are not timed: eval.every_steps is 0" in m for m in said)
    assert "time_to_target" not in json.loads((paths(tmp_path).live_dir / "metrics.json")
                                              .read_text())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(tiny_params(train={"max_steps": 4}, eval={"every_steps": 2, "targets": [0.5]}),
              synth_data, paths(tmp_path / "b"), progress=False)
    assert not any("not timed" in r.getMessage() for r in caplog.records)


def test_provenance_names_the_code_the_run_started_with(synth_data, tmp_path, monkeypatch):
    """The provenance's commit and dirty flag are those read when the run started: code
    edited or committed while a run trains does not run (Python has imported it)."""
    from cifar10_tutorial import provenance

    reads = iter([{"commit": "a" * 40, "dirty": False}])
    monkeypatch.setattr(provenance, "code_version",
                        lambda root=None: next(reads, {"commit": "b" * 40, "dirty": True}))
    train(tiny_params(train={"max_steps": 2}), synth_data, paths(tmp_path), progress=False)
    made = json.loads((paths(tmp_path).live_dir / "provenance.json").read_text())
    assert (made["commit"], made["dirty"]) == ("a" * 40, False)
    assert (made["segments"][-1]["commit"], made["segments"][-1]["dirty"]) == ("a" * 40, False)


def _write_project(tmp_path, synth_data, max_steps, checkpoint_every):
    params = to_dict(tiny_params(input={"shuffle": "queue"},
                                 train={"max_steps": max_steps,
                                        "log_every": 1}, run={"checkpoint_every": checkpoint_every, "summary_every": 1000}))
    return write_train_project(tmp_path / "proj", synth_data, params)


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_killed_training_resumes_to_the_same_weights(synth_data, tmp_path, how):
    reference = tmp_path / "ref"
    train(tiny_params(input={"shuffle": "queue"}, train={"max_steps": 60}, run={"checkpoint_every": 5}),
          synth_data, paths(reference), progress=False)
    proj = _write_project(tmp_path, synth_data, 60, 5)
    cmd = [sys.executable, "stages/train.py"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=proj, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    for line in proc.stdout:  # wait until training is under way
        if ": step 12," in line:
            break
    proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    out = proc.communicate(timeout=60)[0]
    ckpts = sorted((proj / "data/train/checkpoints").glob("ckpt-*.pt"))
    assert ckpts, out
    if how == "sigterm":
        assert proc.returncode == 128 + signal.SIGTERM
        assert "stopped by signal" in out
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not (proj / "data/train/model.pt").exists()
    done = subprocess.run(cmd, cwd=proj, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming from" in done.stderr
    a = load_checkpoint(paths(reference).model)
    b = load_checkpoint(proj / "data/train/model.pt")
    for key in ("model", "ema"):
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=0, atol=0)


def test_a_huge_learning_rate_is_a_clear_error_not_a_tensorboard_traceback(synth_data, tmp_path):
    with pytest.raises(ParamsError, match=r"train.initial_lr: expected a number in \(0, 1000000\]"):
        tiny_params(train={"initial_lr": 1e30})  # past any rate: refused at load
    params = tiny_params(train={"initial_lr": 1e6, "max_steps": 20, "log_every": 1}, run={"checkpoint_every": 1000, "summary_every": 1})
    with pytest.raises(TrainingError, match=r"(the loss became (nan|inf)|holds values up "
                                            r"to \S+) at step \d+.*diverged"):
        train(params, synth_data, paths(tmp_path), progress=False)
    assert not paths(tmp_path).model.exists()


def test_a_torn_last_curve_row_is_cut_on_resume(synth_data, tmp_path):
    """kill -9 during DVCLive's write leaves half a row; the resumed run must not glue its
    next row to it."""
    params = tiny_params(train={"max_steps": 20, "log_every": 5}, run={"checkpoint_every": 10})
    train(params, synth_data, paths(tmp_path / "a"), progress=False)
    b = paths(tmp_path / "b")
    train(params, synth_data, b, progress=False)
    (b.checkpoints / "ckpt-00000020.pt").unlink()
    b.model.unlink()
    loss = b.live_dir / "plots" / "metrics" / "train" / "loss.tsv"
    rows = loss.read_text().splitlines(keepends=True)
    loss.write_text("".join(rows[:3]) + rows[3][:7])  # steps 5, 10, then a torn 15
    train(params, synth_data, b, progress=False)
    assert_same_outputs(paths(tmp_path / "a"), b)


def test_without_dvclive_the_same_curves_and_metrics_are_written(synth_data, tmp_path,
                                                                 monkeypatch):
    """The GPU machine has no dvclive: the run writes DVCLive's files itself, byte for byte
    the same apart from the timings."""
    params = tiny_params(train={"max_steps": 12, "log_every": 2}, run={"checkpoint_every": 5},
                         eval={"every_steps": 4, "targets": [0.1]})
    train(params, synth_data, paths(tmp_path / "with"), progress=False)
    monkeypatch.setitem(sys.modules, "dvclive", None)  # `import dvclive` raises ImportError
    train(params, synth_data, paths(tmp_path / "without"), progress=False)
    a, b = paths(tmp_path / "with").live_dir, paths(tmp_path / "without").live_dir
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    timed = ("examples_per_sec.tsv", "metrics.json", "provenance.json")
    for rel in files:
        if not rel.endswith(timed):
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert_same_outputs(paths(tmp_path / "with"), paths(tmp_path / "without"))
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert list(ma) == list(mb)


def test_dvclive_does_not_reread_its_curves_at_each_step_for_a_studio_that_is_not_set_up(
        tmp_path, monkeypatch):
    """DVCLive re-reads every curve at every next_step to find what Studio has not been sent,
    with no Studio set up too: a cost that grows with the run. open_live's Live skips it,
    and writes the same rows."""
    import dvclive.live
    from cifar10_tutorial.training.live import open_live

    for var in ("DVC_STUDIO_TOKEN", "STUDIO_TOKEN", "DVC_STUDIO_URL", "DVC_STUDIO_REPO_URL"):
        monkeypatch.delenv(var, raising=False)
    reads = []
    real = dvclive.live.parse_metrics
    monkeypatch.setattr(dvclive.live, "parse_metrics", lambda live: reads.append(1) or real(live))
    live = open_live(tmp_path / "live", resume=False)
    for step in range(30):
        live.step = step
        live.log_metric("train/loss", 1.0 / (step + 1))
        live.next_step()
    live.end()
    assert reads == []
    rows = (tmp_path / "live/plots/metrics/train/loss.tsv").read_text().splitlines()
    assert len(rows) == 31 and rows[-1].split("\t") == ["29", str(1.0 / 30)]
    # DVCLive's own Live reads them at each step
    live = dvclive.live.Live(str(tmp_path / "live2"), dvcyaml=None, save_dvc_exp=False,
                             report=None)
    live.log_metric("train/loss", 1.0)
    live.next_step()
    assert reads == [1]


def test_a_lost_vscode_signal_file_does_not_end_the_run(tmp_path, monkeypatch):
    """DVCLive writes .dvc/tmp/exps/run/DVCLIVE_STEP_COMPLETED of the repository at every
    next_step (for DVC's VS Code extension); a DVC command there may remove the folder
    between its makedirs and its write (two processes sharing the repository). That
    FileNotFoundError does not end the run, and the step is kept; other write errors
    still stop the run."""
    import dvclive.live
    from cifar10_tutorial.training.live import open_live

    def lost(step):
        raise FileNotFoundError(2, "No such file or directory",
                                str(tmp_path / "repo/.dvc/tmp/exps/run/DVCLIVE_STEP_COMPLETED"))

    monkeypatch.setattr(dvclive.live, "mark_dvclive_step_completed", lost)
    live = open_live(tmp_path / "live", resume=False)
    for step in range(3):
        live.log_metric("train/loss", 1.0 / (step + 1))
        live.next_step()
    assert live.step == 3
    rows = (tmp_path / "live/plots/metrics/train/loss.tsv").read_text().splitlines()
    assert [r.split("\t")[0] for r in rows] == ["step", "0", "1", "2"]

    def full(step):
        raise OSError(28, "No space left on device", str(tmp_path / "live/metrics.json"))

    monkeypatch.setattr(dvclive.live, "mark_dvclive_step_completed", full)
    with pytest.raises(OSError, match="No space left"):
        live.next_step()


def test_bf16_on_a_cpu_without_bf16_units_says_it_will_be_slow(synth_data, tmp_path,
                                                               monkeypatch, caplog):
    from cifar10_tutorial import provenance

    caplog.set_level("WARNING")
    params = tiny_params(train={"max_steps": 2, "precision": "bf16"})
    monkeypatch.setattr(provenance, "cpu_flags", lambda: {"avx2", "fma"})
    train(params, synth_data, paths(tmp_path / "a"), progress=False)
    assert "has no bf16 units (AVX512_BF16 or AMX): bf16 is emulated" in caplog.text
    caplog.clear()
    monkeypatch.setattr(provenance, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    train(params, synth_data, paths(tmp_path / "b"), progress=False)
    assert "bf16 units" not in caplog.text


def _refuse_writes(folder):
    """Make ``folder`` refuse new files the way a user's would: chmod for a user; root
    passes chmod, so there an immutable folder (chattr +i), or a skip where that fails."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return lambda: folder.chmod(0o755)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root here, and chattr +i does not work on this file system")
    return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_rerun_into_an_unwritable_folder_removes_nothing(synth_data, tmp_path):
    """A finished run trained again (same params) first removes its checkpoints and metrics;
    where it could not write model.pt back it must stop before that, in one line."""
    from cifar10_tutorial.errors import PipelineError

    params = tiny_params(train={"max_steps": 4}, run={"checkpoint_every": 2})
    train(params, synth_data, paths(tmp_path), progress=False)
    out = paths(tmp_path).out_dir
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert "train/model.pt" in before and "live/metrics.json" in before, before
    restore = _refuse_writes(out)
    try:
        with pytest.raises(PipelineError, match=rf"{out}: cannot write there .*nothing was "
                                                r"changed or removed"):
            train(params, synth_data, paths(tmp_path), progress=False)
    finally:
        restore()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc options")
def test_freed_step_buffers_stay_mapped_instead_of_going_back_to_the_kernel():
    """What training sets first (host_memory.keep_freed_memory), seen in glibc's own
    accounting (mallinfo2): a 30 MB buffer comes from the heap instead of its own mmap (which
    free would unmap), and a step's worth of buffers (8 x 20 MB) freed leaves the heap as
    large as it was (not trimmed); under the defaults the 30 MB buffer is mmapped."""
    script = """
import ctypes, sys, torch
from cifar10_tutorial.training.host_memory import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]
libc = ctypes.CDLL("libc.so.6")
if not hasattr(libc, "mallinfo2"):
    print("no mallinfo2"); sys.exit()
libc.mallinfo2.restype = Info
if sys.argv[1] == "kept":
    assert keep_freed_memory()
mapped = libc.mallinfo2().hblkhd
big = torch.empty(7_500_000)  # 30 MB
mapped = libc.mallinfo2().hblkhd - mapped
held = [torch.empty(5_000_000).fill_(1.0) for _ in range(8)]
heap = libc.mallinfo2().arena
del held
print(mapped, heap, libc.mallinfo2().arena)
"""
    def run(mode):
        return subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                              text=True, timeout=120, check=True).stdout
    if "no mallinfo2" in (out := run("kept")):
        pytest.skip("glibc older than 2.33 (no mallinfo2)")
    mapped, heap, after = map(int, out.split())
    assert mapped == 0 and after == heap >= 8 * 20_000_000, (mapped, heap, after)
    assert int(run("default").split()[0]) >= 30_000_000  # the defaults: its own mmap


@pytest.mark.parametrize("damage, expected", [
    (lambda c: [1, 2, 3], r"not a checkpoint of this project \(expected a dict of fields, found a list\)"),
    (lambda c: {**c, "model": {"conv1.weight": torch.zeros(1)}},
     r"the newest checkpoint does not fit this network \("),
    (lambda c: {**c, "step": "abc"}, r"step: expected a whole number >= 0, found 'abc'"),
    (lambda c: {**c, "input": []}, r"input: expected a list of 1 input state\(s\), one per process"),
    (lambda c: {k: v for k, v in c.items() if k != "optimizer"}, r"optimizer: expected a dict"),
    (lambda c: {**c, "loss_avg": "x"}, r"loss_avg: expected a number, found 'x'"),
])
def test_a_damaged_newest_checkpoint_is_one_line(synth_data, tmp_path, damage, expected):
    """A damaged newest checkpoint is one line when the run resumes, saying what is wrong
    and that deleting it resumes from the checkpoint before: never a traceback."""
    from cifar10_tutorial.checkpoint_files import list_checkpoints

    p = tiny_params(train={"max_steps": 8}, run={"checkpoint_every": 2})
    with pytest.raises(SystemExit):  # paused at once, a checkpoint written
        train(p, synth_data, paths(tmp_path), progress=False,
              continuation=Continuation(deadline=0.0))
    newest = list_checkpoints(paths(tmp_path).checkpoints)[-1]
    torch.save(damage(torch.load(newest, weights_only=True)), newest)
    with pytest.raises(TrainingError, match=expected + r".*delete this file to resume from the "
                                                       r"checkpoint before it"):
        train(p, synth_data, paths(tmp_path), progress=False)


def test_a_batch_larger_than_the_training_set_is_refused(synth_data, tmp_path):
    """A global batch larger than the training set (each batch would repeat images) is
    refused in one line with the largest batch_size that fits."""
    with pytest.raises(TrainingError, match=r"train.batch_size 1500 x 1 process\(es\) = 1500 "
                                            r"images a step, more than the 1000 training "
                                            r"images: lower train.batch_size to 1000 or less"):
        train(tiny_params(train={"batch_size": 1500}), synth_data,
              TrainPaths(tmp_path / "o", tmp_path / "l"), progress=False)
    assert not (tmp_path / "o").exists()
