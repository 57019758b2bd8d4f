"""The training loop (cifar10_train.py), readable in one sitting.

Plain SGD on mean cross-entropy + weight decay, a staircase learning rate, TF's
moving averages of every weight, the reference's log line every few steps,
checkpoints that resume exactly, DVCLive metrics and TensorBoard summaries.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .errors import PipelineError
from .inputs import PermutationBatches, ShuffleQueue
from .model import CifarNet, build_model, macs_per_image, num_params
from .params import Params, flush_reads, to_dict
from .prepare import Prepared

log = logging.getLogger(__name__)

# Keys the train stage reads that cannot change its DVC outputs (model.pt, metrics, plots):
# they are left out of the resume signature. Every other key it reads is in it.
NOT_RUN_DEFINING = {"train": {"checkpoint_every", "summary_every", "max_restarts",
                              "collective_timeout_s", "device"}}
KEEP_CHECKPOINTS = 2


class TrainingError(PipelineError):
    """Training cannot go on (diverged, corrupt checkpoint...)."""


@dataclass
class TrainPaths:
    out_dir: Path = Path("data/train")  # checkpoints/, tensorboard/, model.pt
    live_dir: Path = Path("reports/train")  # DVCLive: metrics.json, plots/

    @property
    def checkpoints(self) -> Path:
        return self.out_dir / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.out_dir / "tensorboard"

    @property
    def model(self) -> Path:
        return self.out_dir / "model.pt"


# --------------------------------------------------------------------------- the rules


def total_steps(tr, num_train: int, global_batch: int) -> int:
    """The run's length: ``train.max_epochs`` epochs when set, else ``train.max_steps``."""
    if tr.max_epochs is not None:
        return max(1, math.ceil(tr.max_epochs * num_train / global_batch))
    return tr.max_steps


def learning_rate(step: int, params: Params, num_train: int, global_batch: int,
                  total: Optional[int] = None) -> float:
    """The rate of step ``step`` (0-based).

    tutorial: initial x factor^floor(step / decay_steps), decay_steps =
    int(batches/epoch x epochs_per_decay). fast: linear warm-up from 0 to
    ``fast.peak_lr`` over ``warmup_epochs``, then linear decay to
    ``final_lr_fraction x peak_lr`` at the last of ``total`` steps.
    """
    tr = params.train
    if tr.schedule == "tutorial":
        decay_steps = max(1, int(num_train / global_batch * tr.epochs_per_decay))
        return tr.initial_lr * tr.lr_decay_factor ** (step // decay_steps)
    f = params.fast
    total = total or total_steps(tr, num_train, global_batch)
    warm = min(f.warmup_epochs * num_train / global_batch, total - 1)
    if step < warm:
        return f.peak_lr * (step + 1) / (warm + 1)
    frac = (step - warm) / max(1.0, total - 1 - warm)
    return f.peak_lr * (1.0 - min(frac, 1.0) * (1.0 - f.final_lr_fraction))


def ema_decay(decay: float, num_updates: int) -> float:
    """TF's ExponentialMovingAverage with num_updates: min(decay, (1 + n) / (10 + n))."""
    return min(decay, (1.0 + num_updates) / (10.0 + num_updates))


class WeightAverage:
    """Moving averages of every floating-point entry of the model's state (weights, buffers)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()
                       if v.dtype.is_floating_point}

    @torch.no_grad()
    def update(self, model: torch.nn.Module, num_updates: int) -> None:
        d = ema_decay(self.decay, num_updates)
        state = model.state_dict()
        keys = list(self.shadow)
        torch._foreach_lerp_([self.shadow[k] for k in keys], [state[k] for k in keys], 1.0 - d)

    def state_dict(self) -> dict:
        return self.shadow

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            self.shadow[k].copy_(v)

    def averaged_model_state(self, model: torch.nn.Module) -> dict:
        """The model's state with every averaged entry replaced by its average."""
        return {k: self.shadow.get(k, v) for k, v in model.state_dict().items()}


def loss_terms(model: CifarNet, logits: torch.Tensor, labels: torch.Tensor,
               weight_decay: float, label_smoothing: float = 0.0,
               decayed: Optional[list[torch.Tensor]] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, weight-decay term wd x sum(W^2)/2), the decay by default over
    local3/local4 weights (the tutorial), or over ``decayed``."""
    ce = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    l2 = sum(w.pow(2).sum() for w in (model.decayed_weights() if decayed is None else decayed)) / 2
    return ce, weight_decay * l2


def make_optimizer(model: CifarNet, params: Params) -> torch.optim.Optimizer:
    """Plain SGD (tutorial) or SGD with (Nesterov) momentum (fast); rates are set per step."""
    if params.train.schedule == "fast":
        f = params.fast
        return torch.optim.SGD(model.parameters(), lr=f.peak_lr, momentum=f.momentum,
                               nesterov=f.nesterov and f.momentum > 0)
    return torch.optim.SGD(model.parameters(), lr=params.train.initial_lr)


def averaging_decay(params: Params) -> float:
    return params.fast.moving_average_decay if params.train.schedule == "fast" \
        else params.train.moving_average_decay


def training_model(params: Params, num_classes: int, device: torch.device) -> CifarNet:
    """The network on its device, in the memory layout of ``train.channels_last``."""
    model = build_model(num_classes, params.model.head, params.model.output, params.model.lrn)
    model = model.to(device)
    return model.to(memory_format=torch.channels_last) if params.train.channels_last else model


def make_step(net: torch.nn.Module, model: CifarNet, optimizer: torch.optim.Optimizer,
              params: Params, device: torch.device):
    """The train step ``step(x, y, eager=False) -> (loss, cross-entropy, weight decay)``:
    forward (compiled with ``train.compile``, under bf16 autocast with
    ``train.precision: bf16``), the loss in float32 (the schedule's label
    smoothing and weight decay), backward, one SGD update. ``net`` may be the
    DistributedDataParallel wrapper of ``model``; ``eager`` skips the compiled
    graph (for steps that need forward hooks)."""
    tr = params.train
    compiled = torch.compile(net) if tr.compile else net
    bf16 = tr.precision == "bf16"
    if tr.schedule == "fast":
        wd, smoothing = params.fast.weight_decay, params.fast.label_smoothing
        decayed = [p for p in model.parameters() if p.dim() > 1]
    else:
        wd, smoothing, decayed = tr.weight_decay, 0.0, None

    def step(x: torch.Tensor, y: torch.Tensor, eager: bool = False):
        if tr.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = (net if eager else compiled)(x, return_logits=True)
        ce, l2 = loss_terms(model, logits.float(), y, wd, smoothing, decayed)
        loss = ce + l2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DistributedDataParallel averages the gradients here
        optimizer.step()
        return loss.detach(), ce, l2
    return step


class HeldOut:
    """Held-out precision @ 1 while training (every ``eval.every_steps`` steps and at the
    end), averaged and raw weights, and when the averaged one first reaches each of
    ``eval.targets``: step, epoch and training seconds (these evaluations excluded)."""

    def __init__(self, params: Params, data: Prepared, device: torch.device, reached: dict,
                 ckpt: Optional[dict]):
        self.every, self.batch = params.eval.every_steps, params.eval.batch_size
        self.targets = sorted(params.eval.targets)
        self.reached = reached  # "0.8" -> {"step", "epoch", "train_seconds"}
        self.seconds = float(ckpt.get("eval_seconds", 0.0)) if ckpt else 0.0
        self.last: dict = {}
        if self.every:
            self.images = torch.from_numpy(data.test_images).to(device)
            self.labels = torch.from_numpy(data.test_labels).to(device)
            self.model = training_model(params, data.num_classes, device).eval()

    def due(self, step: int, max_steps: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == max_steps)

    @torch.no_grad()
    def run(self, step: int, model: CifarNet, ema: WeightAverage, steps_per_epoch: float,
            elapsed: float, live, say) -> dict:
        from .evaluate import predict_logits

        t = time.perf_counter()
        train_seconds = elapsed - self.seconds
        out = {"step": step, "epoch": step / steps_per_epoch}
        for key, state in (("precision_at_1", ema.averaged_model_state(model)),
                           ("precision_at_1_raw", model.state_dict())):
            self.model.load_state_dict(state)
            logits = predict_logits(self.model, self.images, self.batch)
            out[key] = (logits.argmax(dim=1) == self.labels).float().mean().item()
        self.seconds += time.perf_counter() - t
        say(f"step {step} (epoch {out['epoch']:.1f}, {train_seconds:.0f} s of training): held-out "
            f"precision @ 1 = {out['precision_at_1']:.4f} averaged, "
            f"{out['precision_at_1_raw']:.4f} raw")
        for target in self.targets:
            if f"{target:g}" not in self.reached and out["precision_at_1"] >= target:
                self.reached[f"{target:g}"] = {"step": step, "epoch": out["epoch"],
                                               "train_seconds": train_seconds}
                say(f"reached held-out precision {target:g} at step {step} "
                    f"(epoch {out['epoch']:.1f}) after {train_seconds:.0f} s of training")
        live.step = step
        for key in ("precision_at_1", "precision_at_1_raw", "epoch"):
            live.log_metric(f"eval/{key}", out[key])
        live.next_step()
        self.last = out
        return out


# --------------------------------------------------------------------------- checkpoints


def atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, device="cpu") -> dict:
    """Load a checkpoint without unpickling code; a damaged file is a clear error."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises several types; its text may advise unsafe loading
        raise TrainingError(f"{path}: cannot be loaded as a checkpoint ({type(exc).__name__}): "
                            f"it is damaged or truncated. Delete this file to resume from the "
                            f"checkpoint before it.") from None


def list_checkpoints(folder: Path) -> list[Path]:
    return sorted(folder.glob("ckpt-*.pt"))


def run_params(params: Params) -> dict:
    """The params the train stage reads, as plain data: stored in checkpoints and model.pt
    (keys the stage does not declare in dvc.yaml must not reach its outputs)."""
    ev = params.eval
    return {"model": to_dict(params.model), "input": to_dict(params.input),
            "train": to_dict(params.train), "fast": to_dict(params.fast),
            "eval": {"batch_size": ev.batch_size, "every_steps": ev.every_steps,
                     "targets": list(ev.targets)}}


def run_signature(params: Params, data_hash: str, device: torch.device, world: int) -> dict:
    """What defines a run: a checkpoint made under anything else is not resumed. The prepared
    data's content, every param the stage reads except those that cannot change its outputs
    (``NOT_RUN_DEFINING``), the kind of device and the number of processes."""
    run = run_params(params)
    for section, keys in NOT_RUN_DEFINING.items():
        run[section] = {k: v for k, v in run[section].items() if k not in keys}
    return {"data": data_hash, "params": run, "device": device.type, "world_size": world}


def truncate_plots(live_dir: Path, step: int) -> None:
    """Drop the DVCLive plot rows logged after ``step`` (a run killed after its last
    checkpoint logged them; the resumed run logs those steps again)."""
    for tsv in sorted((live_dir / "plots").rglob("*.tsv")):
        lines = tsv.read_text().splitlines(keepends=True)
        if not lines:
            continue
        col = lines[0].rstrip("\n").split("\t").index("step")
        kept = [lines[0]] + [ln for ln in lines[1:] if int(ln.split("\t")[col]) <= step]
        if len(kept) < len(lines):
            tmp = tsv.with_name(tsv.name + ".tmp")
            tmp.write_text("".join(kept))
            os.replace(tmp, tsv)


# --------------------------------------------------------------------------- summaries


class Summaries:
    """TensorBoard summaries of the reference: lr, losses, weights, gradients, activations, images."""

    LAYERS = ("conv1", "conv2", "local3", "local4")

    def __init__(self, folder: Path, model: CifarNet, purge_step: Optional[int]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder), purge_step=purge_step)
        self.model = model
        self.activations: dict[str, torch.Tensor] = {}
        self._hooks = []

    def capture(self) -> None:
        """Record the ReLU outputs of the next forward pass."""
        def hook(name):
            def fn(_module, _inp, out):
                self.activations[name] = F.relu(out.detach())
            return fn
        self._hooks = [getattr(self.model, n).register_forward_hook(hook(n)) for n in self.LAYERS]

    def write(self, step: int, scalars: dict, images: torch.Tensor) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        w = self.writer
        for tag, value in scalars.items():
            w.add_scalar(tag, value, step)
        for name, p in self.model.named_parameters():
            w.add_histogram(f"weights/{name}", p.detach().float().cpu(), step)
            if p.grad is not None:
                w.add_histogram(f"gradients/{name}", p.grad.detach().float().cpu(), step)
        for name, act in self.activations.items():
            w.add_histogram(f"activations/{name}", act.float().cpu(), step)
            w.add_scalar(f"sparsity/{name}", (act == 0).float().mean().item(), step)
        self.activations = {}
        shown = images[:10].detach().float().cpu()
        lo = shown.amin(dim=(1, 2, 3), keepdim=True)
        hi = shown.amax(dim=(1, 2, 3), keepdim=True)
        w.add_images("images", (shown - lo) / (hi - lo).clamp_min(1e-6), step)
        w.flush()

    def close(self) -> None:
        self.writer.close()


# --------------------------------------------------------------------------- the loop


class _Stop:
    """SIGTERM/SIGINT ask the loop to checkpoint and stop after the current step."""

    def __init__(self):
        self.requested: Optional[int] = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, _frame):
        if self.requested is not None:  # a second signal: stop at once
            raise KeyboardInterrupt
        self.requested = signum

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def open_live(folder: Path, resume: bool):
    """DVCLive logging to ``folder`` (metrics.json, plots/, params.yaml), no dvc.yaml of its own."""
    from dvclive import Live
    from scmrepo.exceptions import SCMError

    if resume:  # a kill during DVCLive's (non-atomic) write leaves a truncated metrics.json
        summary = folder / "metrics.json"
        try:
            json.loads(summary.read_text()) if summary.exists() else None
        except ValueError:
            log.info("%s is damaged (the run was killed while writing it): rewriting it", summary)
            summary.unlink()
    try:
        return Live(str(folder), resume=resume, dvcyaml=None, save_dvc_exp=False, report=None)
    except SCMError as exc:  # dvclive cannot read HEAD of a repository without commits
        raise PipelineError(f"DVCLive cannot start in this git repository ({exc}): make a first "
                            f"commit (`git add -A && git commit -m init`) and rerun.") from None


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise PipelineError("train.device is cuda but no CUDA device is available; "
                            "use train.device=auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}" if name == "cuda" else name)


# --------------------------------------------------------------------------- several devices


@dataclass
class Dist:
    """Where this process stands in a torchrun job (rank 0 of 1 when run alone)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def check_devices(tr) -> None:
    """Fail before anything starts when ``train.num_devices`` asks for more GPUs than exist."""
    if tr.num_devices > 1 and tr.device != "cpu" and torch.cuda.is_available():
        have = torch.cuda.device_count()
        if tr.num_devices > have:
            raise PipelineError(
                f"train.num_devices is {tr.num_devices} but {have} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); set "
                f"train.num_devices={have}, or train.device=cpu to run {tr.num_devices} CPU "
                f"processes.")


def relaunch_on_devices(tr, script: str, argv: list[str]) -> None:
    """With ``train.num_devices`` > 1, outside torchrun: replace this process by torchrun
    running ``script`` as one process per device (it then returns in each of them)."""
    if tr.num_devices <= 1 or launched_by_torchrun():
        return
    check_devices(tr)
    cmd = torchrun_command(tr.num_devices, tr.max_restarts, script, argv)
    print("launching:", " ".join(cmd), file=sys.stderr, flush=True)
    flush_reads()
    sys.stdout.flush()
    os.execv(cmd[0], cmd)


def torchrun_command(num_devices: int, max_restarts: int, script: str, args: list[str]) -> list[str]:
    """The command that runs ``script`` as ``num_devices`` processes on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={num_devices}", f"--max-restarts={max_restarts}", script, *args]


def init_distributed(tr) -> tuple[Dist, torch.device]:
    """Join the torchrun job if there is one: NCCL on GPUs, gloo on CPU."""
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return Dist(), pick_device(tr.device)
    import torch.distributed as dist

    d = Dist(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))
    check_devices(tr)
    if d.world != tr.num_devices:
        raise PipelineError(f"torchrun started {d.world} processes but train.num_devices is "
                            f"{tr.num_devices}; set train.num_devices={d.world} (the global batch "
                            f"and the checkpoints depend on it).")
    device = pick_device(tr.device, d.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # share the cores among the processes of this node
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", d.world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    # The store outlives a torchrun restart; without a fresh prefix per attempt, the
    # restarted ranks can read the dead ranks' addresses and fail to connect.
    store, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=tr.collective_timeout_s)))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            store=dist.PrefixStore(f"cifar10-attempt-{attempt}", store),
                            rank=d.rank, world_size=d.world,
                            timeout=timedelta(seconds=tr.collective_timeout_s))
    return d, device


def shard_file_counts(file_counts: list[int], rank: int, world: int) -> list[int]:
    """Records per file that rank ``rank`` gets when it takes every ``world``-th record."""
    return [len(range(rank, c, world)) for c in file_counts]


def make_batches(params: Params, data: Prepared, images: torch.Tensor, labels: torch.Tensor,
                 state: Optional[dict], d: Dist = Dist()):
    """The batch source of this rank: its slice of each global batch (permutation), or a
    shuffle queue over its own disjoint shard of the records (queue)."""
    inp, tr = params.input, params.train
    flip = inp.flip if inp.flip is not None else bool(data.meta.get("flip", True))
    if inp.shuffle == "permutation":
        return PermutationBatches(images, labels, tr.batch_size, tr.seed, flip=flip,
                                  rank=d.rank, world=d.world)
    file_counts = data.meta.get("file_counts", {}).get("train") or [len(labels)]
    if d.active:  # every world-th record of each file
        idx = torch.cat([torch.arange(s + d.rank, s + c, d.world, device=images.device)
                         for s, c in zip([0, *torch.tensor(file_counts).cumsum(0).tolist()[:-1]],
                                         file_counts)])
        images, labels = images[idx], labels[idx]
        file_counts = shard_file_counts(file_counts, d.rank, d.world)
    min_after = int(inp.min_fraction_of_examples_in_queue * len(labels))
    return ShuffleQueue(images, labels, tr.batch_size, tr.seed, min_after_dequeue=min_after,
                        file_counts=file_counts, num_threads=inp.num_threads, flip=flip,
                        state=state or None, rank=d.rank)


def _gather_states(batches, d: Dist) -> list:
    """The input state of every rank, on rank 0 (exact resume needs each rank's queue)."""
    if not d.active:
        return [batches.state()]
    import torch.distributed as dist

    out = [None] * d.world if d.main else None
    dist.gather_object(batches.state(), out, dst=0)
    return out


# --------------------------------------------------------------------------- the loop


def train(params: Params, data: Prepared, paths: TrainPaths = TrainPaths(),
          progress: Optional[bool] = None) -> dict:
    """Train to ``train.max_steps`` (resuming from the newest matching checkpoint).

    Run alone, or as one of ``train.num_devices`` processes under torchrun: then
    each process trains a replica on its own ``batch_size`` examples,
    DistributedDataParallel averages the gradients, and every replica makes the
    same synchronous update. Only rank 0 keeps the averaged weights and writes
    checkpoints, logs, DVCLive and TensorBoard.
    """
    tr = params.train
    d, device = init_distributed(tr)
    try:
        return _train(params, data, paths, progress, d, device)
    finally:
        if d.active:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()


def _train(params: Params, data: Prepared, paths: TrainPaths, progress: Optional[bool],
           d: Dist, device: torch.device) -> dict:
    tr = params.train
    torch.manual_seed(tr.seed)
    model = training_model(params, data.num_classes, device)
    optimizer = make_optimizer(model, params)
    ema = WeightAverage(model, averaging_decay(params)) if d.main else None
    signature = run_signature(params, data.content_hash, device, d.world)
    num_train, global_batch = len(data.train_labels), tr.batch_size * d.world
    max_steps = total_steps(tr, num_train, global_batch)

    # ---- resume, or start afresh (every rank decides alike; rank 0 cleans up)
    if d.main:
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        for tmp in paths.checkpoints.glob("*.tmp"):
            tmp.unlink()
    _barrier(d)
    ckpts = list_checkpoints(paths.checkpoints)
    ckpt = load_checkpoint(ckpts[-1], device) if ckpts else None
    # Resuming is a cache: only an unfinished run of the same data, params, kind of device
    # and number of processes is resumed; a finished one is run again, from step 0.
    if ckpt is not None and ckpt.get("signature") != signature:
        if d.main:
            log.info("checkpoints in %s were made with other data or params: starting afresh",
                     paths.checkpoints)
        ckpt = None
    elif ckpt is not None and int(ckpt["step"]) >= max_steps:
        if d.main:
            log.info("the newest checkpoint holds the finished run (step %d of %d): training "
                     "again from step 0", int(ckpt["step"]), max_steps)
        ckpt = None
    _barrier(d)
    if ckpt is None:
        if d.main:
            for old in ckpts:
                old.unlink()
            for f in (paths.live_dir / "metrics.json", paths.model):
                f.unlink(missing_ok=True)
            for folder in (paths.tensorboard, paths.live_dir / "plots"):
                if folder.exists():
                    shutil.rmtree(folder)
        start, loss_avg, elapsed, reached = 0, None, 0.0, {}
    else:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if ema is not None:
            ema.load_state_dict(ckpt["ema"])
        start, loss_avg, elapsed = int(ckpt["step"]), ckpt["loss_avg"], float(ckpt["elapsed"])
        reached = json.loads(ckpt.get("targets_reached", "{}"))
        if d.main:
            log.info("resuming from %s at step %d", ckpts[-1], start)
    net = model
    if d.active:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_step = make_step(net, model, optimizer, params, device)

    images = torch.from_numpy(data.train_images).to(device)
    labels = torch.from_numpy(data.train_labels).to(device)
    t0 = time.perf_counter()
    batches = make_batches(params, data, images, labels,
                           ckpt["input"][d.rank] if ckpt else None, d)

    live = summaries = None
    if d.main:
        if ckpt is not None:
            truncate_plots(paths.live_dir, start)
        live = open_live(paths.live_dir, resume=ckpt is not None)
        summaries = Summaries(paths.tensorboard, model, purge_step=start if ckpt else None)

    def save(step: int) -> None:
        inputs = _gather_states(batches, d)  # a collective: every rank takes part
        if not d.main:
            return
        state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "ema": ema.state_dict(), "input": inputs, "signature": signature,
                 "params": run_params(params), "classes": data.classes,
                 "num_classes": data.num_classes, "world_size": d.world,
                 "loss_avg": loss_avg_t.item(), "elapsed": elapsed + time.perf_counter() - t0,
                 "targets_reached": json.dumps(reached), "eval_seconds": held_out.seconds,
                 "torch_rng": torch.get_rng_state()}
        atomic_save(state, paths.checkpoints / f"ckpt-{step:08d}.pt")
        for old in list_checkpoints(paths.checkpoints)[:-KEEP_CHECKPOINTS]:
            old.unlink()

    held_out = HeldOut(params, data, device, reached, ckpt) if d.main else None
    eval_before = held_out.seconds if held_out else 0.0  # of the runs before a resume
    bar = tqdm(total=max_steps, initial=start, unit="step", leave=False,
               disable=(not d.main or not sys.stderr.isatty()) if progress is None
               else not (progress and d.main))
    say = bar.write if not bar.disable else print
    step = start
    first_batch_s, loss_d = None, None
    window_t, window_steps = time.perf_counter(), 0
    loss_avg_t = torch.tensor(loss_avg if loss_avg is not None else float("nan"), device=device)
    try:
        with _Stop() as stop:
            while step < max_steps:
                lr = learning_rate(step, params, num_train, global_batch, max_steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                x, y = batches.get(step)
                if first_batch_s is None:
                    first_batch_s = time.perf_counter() - t0
                summary_step = (step + 1) % tr.summary_every == 0
                summarize = d.main and summary_step
                if summarize:
                    summaries.capture()
                loss_d, ce, wd = train_step(x, y, eager=summarize)
                step += 1
                if ema is not None:
                    ema.update(model, step)
                loss_avg_t = torch.where(torch.isnan(loss_avg_t), loss_d, 0.9 * loss_avg_t + 0.1 * loss_d)
                window_steps += 1
                bar.update(1)

                log_step = step % tr.log_every == 0 or step == max_steps
                stop_now = stop.requested is not None
                if log_step or summary_step or (stop_now and not d.active):
                    # one collective at log steps: the mean loss over ranks, and any stop request
                    status = torch.stack([loss_d.float(), torch.tensor(float(stop_now), device=device)])
                    if d.active:
                        import torch.distributed as dist
                        dist.all_reduce(status)
                        status[0] /= d.world
                    value, stop_now = status[0].item(), bool(status[1].item())
                    if not math.isfinite(value):
                        raise TrainingError(
                            f"the loss became {value} at step {step} (lr {lr:g}): training "
                            f"diverged. Lower train.initial_lr or check the input data.")
                    loss_avg = loss_avg_t.item()
                    now = time.perf_counter()
                    dt = (now - window_t) / window_steps
                    eps = global_batch / dt
                    if log_step and d.main:
                        per_device = f", {tr.batch_size / dt:.1f} per device" if d.active else ""
                        say(f"{datetime.now():%Y-%m-%d %H:%M:%S}: step {step}, loss = {value:.2f} "
                            f"({eps:.1f} examples/sec{per_device}; {dt:.3f} sec/batch)")
                        live.step = step
                        for k, v in (("loss", value), ("loss_avg", loss_avg), ("lr", lr),
                                     ("cross_entropy", ce.item()), ("examples_per_sec", eps)):
                            live.log_metric(f"train/{k}", v)
                        live.next_step()
                        bar.set_postfix(loss=f"{loss_avg:.3f}", eps=f"{eps:.0f}")
                    if summarize:
                        summaries.write(step, {"learning_rate": lr, "loss/total": value,
                                               "loss/total_avg": loss_avg,
                                               "loss/cross_entropy": ce.item(),
                                               "loss/weight_decay": wd.item(),
                                               "examples_per_sec": eps}, x)
                    if log_step:
                        window_t, window_steps = time.perf_counter(), 0
                else:
                    stop_now = False  # several processes agree on stopping at log steps only
                if held_out is not None and held_out.due(step, max_steps):
                    held_out.run(step, model, ema, num_train / global_batch,
                                 elapsed + time.perf_counter() - t0, live, say)
                if step % tr.checkpoint_every == 0 or step == max_steps:
                    save(step)
                if stop_now:
                    signum = stop.requested or signal.SIGTERM
                    if step % tr.checkpoint_every and step != max_steps:
                        save(step)
                    if d.main:
                        say(f"stopped by signal {signum} at step {step}; "
                            f"rerun the same command to resume")
                    raise SystemExit(128 + signum)
    finally:
        bar.close()
        batches.close()
        if summaries is not None:
            summaries.close()

    # ---- the trained model and the run's metrics
    total_time = elapsed + time.perf_counter() - t0
    session = time.perf_counter() - t0 - (held_out.seconds - eval_before if held_out else 0.0)
    metrics = {
        "steps": step,
        "epochs": step * global_batch / num_train,
        "schedule": tr.schedule,
        "final_loss": loss_d.item() if loss_d is not None else None,
        "final_loss_avg": loss_avg_t.item(),
        "examples_per_sec": (step - start) * global_batch / max(session, 1e-9),
        "examples_per_sec_per_device": (step - start) * tr.batch_size / max(session, 1e-9),
        "wall_time_s": total_time,
        "time_to_first_batch_s": first_batch_s,
        "num_params": num_params(model),
        "macs_per_image": macs_per_image(model),
        "world_size": d.world,
        "global_batch_size": global_batch,
        "device": str(device),
    }
    if held_out is not None and held_out.every:
        metrics.update({"held_out_eval_seconds": held_out.seconds,
                        "train_seconds": total_time - held_out.seconds,
                        "time_to_target": held_out.reached,
                        "held_out_precision_at_1": held_out.last.get("precision_at_1"),
                        "held_out_precision_at_1_raw": held_out.last.get("precision_at_1_raw")})
    if not d.main:
        return metrics
    paths.model.parent.mkdir(parents=True, exist_ok=True)
    atomic_save({"model": model.state_dict(), "ema": ema.averaged_model_state(model),
                 "params": run_params(params), "step": step, "classes": data.classes,
                 "num_classes": data.num_classes}, paths.model)
    live.step = step
    for k, v in metrics.items():
        live.summary[k] = v
    live.make_summary()
    live.end()
    log.info("trained %d steps in %.1f s: %s", step, total_time, json.dumps(metrics))
    return metrics


def _barrier(d: Dist) -> None:
    if d.active:
        import torch.distributed as dist
        dist.barrier()
