"""run.capture_step: the whole train step as one CUDA graph. Its body is the eager step's
arithmetic with the learning rate and the averages' weight read from device tensors; on
the CPU, where there is no graph, that body runs as it is, and must give the eager run's
outputs bit for bit (so a capture can only differ from eager by the graph, never by the
math). Where the step cannot be captured, `on` is one line and `auto` stays eager."""
import time

import pytest
import torch

from cifar10_tutorial.errors import TrainingError
from cifar10_tutorial.training.optimization import (CapturedStep, WeightAverage,
                                                    averaging_decay, make_optimizer,
                                                    make_step, step_options, training_model,
                                                    use_capture)
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.training.train import train
from conftest import tiny_params
from test_train import assert_same_outputs


def paths(root) -> TrainPaths:
    return TrainPaths(root / "train", root / "live")


@pytest.mark.parametrize("sections", [
    {},  # the tutorial: plain SGD, the staircase, the shuffle queue
    {"train": {"schedule": "fast", "max_epochs": 0.35}, "input": {"shuffle": "permutation"}},
], ids=["tutorial", "fast"])
def test_the_captured_steps_body_is_the_eager_step_bit_for_bit(synth_data, tmp_path, sections):
    """Capture on (the CPU runs the body) against off, resumed midway too: the same raw
    and averaged weights, metrics and curves; summary steps (run eagerly) included."""
    common = {"train": {"max_steps": 11, "log_every": 3, **sections.get("train", {})},
              "eval": {"every_steps": 5}, "input": sections.get("input", {})}
    off = tiny_params(run={"capture_step": "never", "checkpoint_every": 4, "summary_every": 4},
                      **common)
    on = tiny_params(run={"capture_step": "always", "checkpoint_every": 4, "summary_every": 4},
                     **common)
    train(off, synth_data, paths(tmp_path / "off"), progress=False)
    train(on, synth_data, paths(tmp_path / "on"), progress=False)
    assert_same_outputs(paths(tmp_path / "off"), paths(tmp_path / "on"))
    # stopped after a checkpoint, resumed with capture: the loss average and the
    # optimizer's buffers come back into the captured step's own tensors
    resumed = paths(tmp_path / "resumed")
    train(off, synth_data, resumed, progress=False)
    last = sorted(resumed.checkpoints.glob("ckpt-*.pt"))[-1]
    last.unlink()
    resumed.model.unlink()
    time.sleep(1.1)
    train(on, synth_data, resumed, progress=False)
    assert_same_outputs(paths(tmp_path / "off"), resumed)


def test_where_a_step_cannot_be_captured_on_is_refused_and_auto_stays_eager():
    cpu = torch.device("cpu")
    assert not use_capture(tiny_params(), cpu, 1)  # auto: no graph to gain on a CPU
    assert use_capture(tiny_params(run={"capture_step": "always"}), cpu, 1)
    assert not use_capture(tiny_params(run={"capture_step": "never"}), torch.device("cuda"), 1)
    for params, world, why in [
            (tiny_params(run={"capture_step": "always"}), 2, "2 processes average their gradients"),
            (tiny_params(run={"capture_step": "always"}, model={"dropout": 0.5}), 1,
             "model.dropout draws its masks")]:
        with pytest.raises(TrainingError, match=rf"^run.capture_step is always but the step "
                                                rf"cannot be captured: {why}.*; set "
                                                rf"run.capture_step: auto \(or never\)$"):
            use_capture(params, cpu, world)
        auto = tiny_params(model={"dropout": params.model.dropout})
        assert not use_capture(auto, torch.device("cuda"), world)  # auto: eager there


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs exist on CUDA only")
def test_a_replayed_graph_trains_as_the_eager_step_does():
    """On a GPU: warm-up, capture, then replays; the weights after 12 steps within float
    rounding of the eager step's (the rate is read from a tensor), and a graph was made."""
    params = tiny_params(train={"device": "cuda"})
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 3, 24, 24, generator=gen).to(device),
                torch.randint(0, 10, (32,), generator=gen).to(device)) for _ in range(12)]
    results = []
    for capture in (False, True):
        torch.manual_seed(0)
        model = training_model(params, 10, device)
        optimizer = make_optimizer(model, params)
        ema = WeightAverage(model, averaging_decay(params))
        if capture:
            stepper = CapturedStep(model, optimizer, ema, device, None, **step_options(params))
            for n, (x, y) in enumerate(batches, 1):
                stepper(x, y, 0.1, n)
            assert stepper.graph is not None
        else:
            step = make_step(model, model, optimizer, device, **step_options(params))
            for n, (x, y) in enumerate(batches, 1):
                step(x, y)
                ema.update(model, n)
        results.append({k: v.clone() for k, v in ema.averaged_model_state(model).items()})
    for name, eager in results[0].items():
        torch.testing.assert_close(results[1][name], eager, rtol=1e-4, atol=1e-5)


def test_always_with_several_processes_is_refused_before_torchrun_starts():
    """Several processes cannot share one graph: refused once, in the launching process,
    before torchrun would start them (and refuse it in each)."""
    from cifar10_tutorial.training.distributed import relaunch_on_devices

    params = tiny_params(train={"num_devices": 2}, run={"capture_step": "always"})
    with pytest.raises(TrainingError, match=r"^run.capture_step is always but the step cannot "
                                            r"be captured: 2 processes average"):
        relaunch_on_devices(params.train, params.run, "stages/train.py", [])


def test_the_values_are_not_words_yaml_reads_as_booleans(tmp_path):
    """`on`/`off` unquoted are true/false in YAML (and `dvc exp run -S` writes them so):
    the values are auto, always and never, which YAML reads as words."""
    import yaml

    from cifar10_tutorial.params import params_from_dict

    for word in ("auto", "always", "never"):
        raw = yaml.safe_load(f"run: {{capture_step: {word}}}")
        assert params_from_dict(raw).run.capture_step == word
