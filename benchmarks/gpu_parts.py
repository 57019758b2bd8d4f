"""Parts 1 and 2 of the prepared GPU run (:mod:`.gpu_run`): correctness (the first steps'
losses on the device against the CPU, host syncs per step, held-out precision after a
short run) and throughput of the train step (eager in fp32 and bf16, with cuDNN's autotuner,
compiled, the typical DataLoader
pipeline), with the helpers the later parts share."""
from __future__ import annotations

import dataclasses
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch

from speed.baselines import typical_step
from speed.benchmark import with_input
from speed.steps import project_step, window
from cifar10_tutorial.params import Params
from cifar10_tutorial.data.prepared import Prepared
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.training.inputs import input_options, make_batches
from cifar10_tutorial.training.train import train
from gpu_plan import Sizes

# step 1 from the same weights and batch (TF32 off): the loss and every gradient on the
# device within this relative difference of the CPU's (the norm of the difference over the
# norm): float32 rounding of other kernels is ~1e-7 there, a wrong kernel or sign is ~1
STEP1_RTOL = 1e-5
# the losses of the first steps: the device's largest difference from the CPU within this
# factor of the CPU's own drift (the same run in another summation order: the other memory
# layout), measured in the same call. Float drift grows step by step on any two machines;
# a bug's difference is far above it
DRIFT_FACTOR = 10.0


def with_sections(params: Params, **sections) -> Params:
    """``params`` with some fields of some sections replaced."""
    return dataclasses.replace(params, **{name: dataclasses.replace(getattr(params, name), **v)
                                          for name, v in sections.items()})


def attempt(measure: Callable[[], Any]) -> Any:
    """``measure()``, or ``{"error": "<exception type>: <message>"}`` where it raises (the
    traceback on stderr): one failing measurement leaves the others to run."""
    try:
        return measure()
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {str(exc).strip()[:1000]}"}


def syncer(device: torch.device):
    return (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)


@contextmanager
def input_step(params: Params, data: Prepared, device: torch.device, images=None, labels=None):
    """The train step with its real input pipeline on ``device`` (the training set moved
    there once, or ``images``/``labels`` already there): yields (step, batches), closes the
    pipeline after."""
    if images is None:
        images = torch.from_numpy(data.train_images).to(device)
        labels = torch.from_numpy(data.train_labels).to(device)
    _, step, batches, _ = with_input(params, data, images, labels, device)
    try:
        yield step, batches
    finally:
        batches.close()


# --------------------------------------------------------------------------- 1. correctness


def losses_against_cpu(params: Params, data: Prepared, device: torch.device, steps: int,
                       plant: Callable[[torch.nn.Module], None] | None = None) -> dict:
    """Is the step on ``device`` the CPU's, up to float rounding? Step 1 from the same
    weights and batch: loss and gradients within :data:`STEP1_RTOL`; then the first
    ``steps`` losses of a run from the same seed and batches, their largest difference from
    the CPU's within :data:`DRIFT_FACTOR` times the CPU's own drift (the same run in the
    other memory layout). float32 throughout, TF32 off for the comparison and restored after
    it (the timed parts run as users do). ``plant(model)``: alters the device's network
    before anything runs (a test plants a wrong gradient there, which must fail)."""
    params = with_sections(params, train={"precision": "fp32"})
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        first = _step_one(params, data, device, plant)
        ref = _losses(params, data, torch.device("cpu"), steps)
        other = with_sections(params, train={"channels_last": not params.train.channels_last})
        drift = _rel_diff(ref, _losses(other, data, torch.device("cpu"), steps))
        got = _losses(params, data, device, steps, plant)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    worst = _rel_diff(ref, got)
    bound = DRIFT_FACTOR * max(drift, 1e-7)  # a drift of 0 (one kernel either way): rounding
    return {"steps": steps, "step1": first, "cpu": ref, "device": got,
            "cpu_drift": drift, "max_rel_diff": worst, "drift_factor": DRIFT_FACTOR,
            "bound": bound, "ok": first["ok"] and worst <= bound}


def _rel_diff(a: list, b: list) -> float:
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


def _step_one(params: Params, data: Prepared, device: torch.device, plant) -> dict:
    """Loss and gradients of step 1 on the CPU and on ``device``, same weights and batch."""
    from cifar10_tutorial.training.optimization import loss_terms, step_options, training_model

    cpu, opts = torch.device("cpu"), step_options(params)
    images, labels = torch.from_numpy(data.train_images), torch.from_numpy(data.train_labels)
    batches = make_batches(images, labels, **input_options(params, data))
    try:
        x, y = batches.get(0)
    finally:
        batches.close()
    torch.manual_seed(params.train.seed)
    models = {"cpu": training_model(params, data.num_classes, cpu),
              "device": training_model(params, data.num_classes, device)}
    models["device"].load_state_dict(models["cpu"].state_dict())
    if plant is not None:
        plant(models["device"])
    out = {}
    for name, model in models.items():
        at = cpu if name == "cpu" else device
        xs = x.to(at)
        if params.train.channels_last:
            xs = xs.contiguous(memory_format=torch.channels_last)
        decayed = [q for q in model.parameters() if q.dim() > 1] \
            if opts["decay_every_matrix"] else None
        ce, l2 = loss_terms(model, model(xs, return_logits=True).float(), y.to(at),
                            opts["weight_decay"], opts["label_smoothing"], decayed)
        loss = ce + l2
        loss.backward()
        out[name] = (loss.item(), {n: q.grad.detach().cpu() for n, q in model.named_parameters()})
    (loss_cpu, g_cpu), (loss_dev, g_dev) = out["cpu"], out["device"]
    grads = {n: ((g_dev[n] - g).norm() / g.norm().clamp_min(1e-30)).item()
             for n, g in g_cpu.items()}
    worst = max(grads, key=grads.get)
    loss_diff = abs(loss_dev - loss_cpu) / abs(loss_cpu)
    return {"loss_rel_diff": loss_diff, "worst_gradient": worst,
            "gradient_rel_diff": grads[worst], "tolerance": STEP1_RTOL,
            "ok": loss_diff <= STEP1_RTOL and grads[worst] <= STEP1_RTOL}


def _losses(params: Params, data: Prepared, device: torch.device, steps: int,
            plant=None) -> list[float]:
    """The first ``steps`` losses of the train step on ``device``, from the seed's weights
    and the input pipeline's batches (made on the CPU, the same for every device)."""
    images, labels = torch.from_numpy(data.train_images), torch.from_numpy(data.train_labels)
    batches = make_batches(images, labels, **input_options(params, data))
    try:
        model, step = project_step(params, data, device, with_loss=True)
        if plant is not None:
            plant(model)
        losses = []
        for i in range(steps):
            x, y = batches.get(i)
            losses.append(step(x.to(device), y.to(device)).item())
        return losses
    finally:
        batches.close()


def host_syncs_per_step(params: Params, data: Prepared, device: torch.device, steps: int) -> float:
    """Host syncs CUDA reports per step of the real GPU path (input, step, averages); None
    on a CPU, where nothing waits for a device."""
    if device.type != "cuda":
        return None
    with input_step(params, data, device) as (step, _):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(steps):
                    step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught) / steps


def short_run(params: Params, data: Prepared, steps: int, root: Path) -> dict:
    """Train ``steps`` steps with the train stage's own code; held-out precision at the end."""
    p = with_sections(params, train={"max_steps": steps, "log_every": max(1, steps // 10)},
              run={"checkpoint_every": steps}, eval={"every_steps": steps})
    m = train(p, data, TrainPaths(root / "short", root / "short-live"), progress=False)
    return {"steps": steps, "precision_at_1": m["held_out"]["precision_at_1"],
            "precision_at_1_raw": m["held_out"]["precision_at_1_raw"],
            "examples_per_sec": m["examples_per_sec"]}


# --------------------------------------------------------------------------- 2. throughput


def throughput(params: Params, data: Prepared, device: torch.device, sizes: Sizes) -> list[dict]:
    """Examples/sec and ms per step of the train step at each batch size, several ways."""
    sync, rows = syncer(device), []
    images = torch.from_numpy(data.train_images).to(device)
    labels = torch.from_numpy(data.train_labels).to(device)
    for i, batch in enumerate(sizes.batches):
        p = with_sections(params, train={"batch_size": batch})
        row = {"batch_size": batch}
        with input_step(p, data, device, images, labels) as (step, batches):
            row["eager_input_pipeline"] = _best(step, batch, sizes, sync)
            x, y = batches.get(10 ** 6)
        _, fixed = project_step(p, data, device)
        row["eager_fixed_batch"] = _best(lambda: fixed(x, y), batch, sizes, sync)
        if i == 0:  # at the first batch size: the other precision, and cuDNN's autotuner
            other = "fp32" if p.train.precision == "bf16" else "bf16"  # beside the params' own

            def other_precision():
                _, step = project_step(with_sections(p, train={"precision": other}), data,
                                       device)
                return _best(lambda: step(x, y), batch, sizes, sync)
            row[f"eager_fixed_batch_{other}"] = attempt(other_precision)
            if device.type == "cuda":
                row["eager_fixed_batch_cudnn_benchmark"] = _cudnn_benchmark(
                    p, data, device, x, y, sizes, sync)
        if device.type == "cuda" and i < sizes.compiled_batches:
            row["compiled_fixed_batch"] = _compiled(p, data, device, x, y, sizes, sync)
        if batch == sizes.batches[0]:
            row["typical_dataloader"] = _typical(p, data, device, sizes, sync)
        rows.append(row)
    return rows


def _typical(params: Params, data: Prepared, device, sizes: Sizes, sync) -> dict:
    """The torchvision DataLoader pipeline, where torchvision is installed (a GPU box with
    torch alone has none: the comparison is then left out, and says why)."""
    try:
        typ, close = typical_step(params, data, device,
                                  workers=4 if device.type == "cuda" else 0)
    except ImportError as exc:
        return {"error": f"not measured (no {(exc.name or 'torchvision').split('.')[0]} here)"}
    try:
        return _best(typ, params.train.batch_size, sizes, sync)
    finally:
        close()


def _best(step, batch: int, sizes: Sizes, sync) -> dict:
    for _ in range(3):
        step()
    rates = sorted(window(step, batch, sizes.window_steps, sync) for _ in range(sizes.windows))
    eps = rates[len(rates) // 2]
    return {"examples_per_sec": eps, "ms_per_step": 1000 * batch / eps}


def _cudnn_benchmark(params: Params, data: Prepared, device, x, y, sizes: Sizes, sync) -> dict:
    """The eager step with ``torch.backends.cudnn.benchmark`` on (cuDNN times its
    algorithms for each shape first); the setting is restored after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        _, step = project_step(params, data, device)
        return _best(lambda: step(x, y), len(y), sizes, sync)
    finally:
        torch.backends.cudnn.benchmark = before


def _compiled(params: Params, data: Prepared, device, x, y, sizes: Sizes, sync) -> dict:
    """The whole step (forward, loss, backward, update) compiled with CUDA graphs."""
    try:
        _, step = project_step(params, data, device, compile_mode="reduce-overhead")
        return _best(lambda: step(x, y), len(y), sizes, sync)
    except Exception as exc:  # report, do not stop the run: this path is what is being tried
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
