"""The training rules of the tutorial (cifar10.py's loss() and train()), and of the
``fast`` schedule: the run's length, the learning rate of each step, the loss (mean
cross-entropy + weight decay), the optimizer, TF's moving averages of the weights, and
the train step that puts them together.
"""
from __future__ import annotations

import functools
import operator

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from ..errors import TrainingError
from ..model import CifarNet, build_model
from ..params import Params, to_dict


def total_steps(tr, num_train: int, global_batch: int) -> int:
    """The run's length: ``train.max_epochs`` epochs when set, else ``train.max_steps``.
    A global batch larger than the training set is refused (each batch would repeat images)."""
    if global_batch > num_train:
        raise TrainingError(f"train.batch_size {tr.batch_size} x {global_batch // tr.batch_size} "
                            f"process(es) = {global_batch} images a step, more than the "
                            f"{num_train} training images: lower train.batch_size to "
                            f"{max(1, num_train * tr.batch_size // global_batch)} or less")
    if tr.max_epochs is not None:
        return max(1, math.ceil(tr.max_epochs * num_train / global_batch))
    return tr.max_steps


@dataclass(frozen=True)
class Schedule:
    """The run's length and learning rates, as plain numbers computed once
    (:func:`schedule`): ``steps`` in all, ``steps_per_epoch`` (training images / global
    batch), and the rate's rule: the tutorial's staircase (``initial_lr`` x
    ``decay_factor`` every ``decay_steps``) or the fast schedule's linear warm-up to
    ``peak_lr`` over ``warmup_steps``, then linear decay to ``final_lr_fraction`` x
    ``peak_lr`` at the last step."""

    steps: int
    steps_per_epoch: float
    kind: str = "tutorial"
    initial_lr: float = 0.1
    decay_factor: float = 0.1
    decay_steps: int = 1
    peak_lr: float = 0.0
    warmup_steps: float = 0.0
    final_lr_fraction: float = 0.0


def schedule(params: Params, num_train: int, global_batch: int) -> Schedule:
    """The run's :class:`Schedule` from ``train`` (and ``fast``), for ``num_train``
    training images in batches of ``global_batch`` (``train.batch_size`` x processes)."""
    tr, f = params.train, params.fast
    steps = total_steps(tr, num_train, global_batch)
    per_epoch = num_train / global_batch
    if tr.schedule == "tutorial":
        return Schedule(steps, per_epoch, "tutorial", tr.initial_lr, tr.lr_decay_factor,
                        max(1, int(per_epoch * tr.epochs_per_decay)))
    return Schedule(steps, per_epoch, "fast", peak_lr=f.peak_lr,
                    warmup_steps=min(f.warmup_epochs * num_train / global_batch, steps - 1),
                    final_lr_fraction=f.final_lr_fraction)


def learning_rate(step: int, s: Schedule) -> float:
    """The rate of step ``step`` (0-based). tutorial: initial x factor^floor(step /
    decay_steps), decay_steps = int(batches/epoch x epochs_per_decay). fast: linear warm-up
    from 0 to the peak, then linear decay to the final fraction of it at the last step."""
    if s.kind == "tutorial":
        return s.initial_lr * s.decay_factor ** (step // s.decay_steps)
    warm = s.warmup_steps
    if step < warm:
        return s.peak_lr * (step + 1) / (warm + 1)
    frac = (step - warm) / max(1.0, s.steps - 1 - warm)
    return s.peak_lr * (1.0 - min(frac, 1.0) * (1.0 - s.final_lr_fraction))


def ema_decay(decay: float, num_updates: int) -> float:
    """TF's ExponentialMovingAverage with num_updates: min(decay, (1 + n) / (10 + n))."""
    return min(decay, (1.0 + num_updates) / (10.0 + num_updates))


class WeightAverage:
    """Moving averages of every floating-point entry of the model's state (weights, buffers)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        state = model.state_dict()  # detached tensors that share the live ones' storage
        self.shadow = {k: v.detach().clone() for k, v in state.items()
                       if v.dtype.is_floating_point}
        # the entries averaged, read in place at each update: the optimizer and the
        # layers update them in place, so no state_dict() (an op per entry) per step
        self._live = [state[k] for k in self.shadow]
        self._targets = list(self.shadow.values())

    @torch.no_grad()
    def update(self, model: torch.nn.Module, num_updates: int,
               weight: Optional[torch.Tensor] = None) -> None:
        """One update after ``num_updates`` steps; or with ``weight`` (a device tensor
        holding 1 - the decay, as a captured step reads it: the same bits)."""
        if weight is None:
            weight = 1.0 - ema_decay(self.decay, num_updates)
        torch._foreach_lerp_(self._targets, self._live, weight)

    def load_state_dict(self, state: dict) -> None:
        """From a checkpoint's ``ema``: the averaged model state (:meth:`averaged_model_state`,
        the form model.pt holds too)."""
        for k, v in self.shadow.items():
            v.copy_(state[k])

    def averaged_model_state(self, model: torch.nn.Module) -> dict:
        """The model's state with every averaged entry replaced by its average."""
        return {k: self.shadow.get(k, v) for k, v in model.state_dict().items()}


def loss_terms(model: CifarNet, logits: torch.Tensor, labels: torch.Tensor,
               weight_decay: float, label_smoothing: float = 0.0,
               decayed: Optional[list[torch.Tensor]] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, weight-decay term wd x sum(W^2)/2), the decay by default over
    local3/local4 weights (the tutorial), or over ``decayed``."""
    ce = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    l2 = _half_sum_of_squares(model.decayed_weights() if decayed is None else decayed)
    return ce, weight_decay * l2


def _half_sum_of_squares(weights: list[torch.Tensor]) -> torch.Tensor:
    squares = [w.pow(2).sum() for w in weights]
    return functools.reduce(operator.add, squares) / 2  # no 0 + first: an op fewer, same sum


@torch.no_grad()
def decay_gradients(grads: list[torch.Tensor], weights: list[torch.Tensor],
                    weight_decay: float) -> None:
    """Add to ``grads`` (in place) the gradient of ``weight_decay x sum(W^2) / 2`` over
    ``weights`` in the very arithmetic autograd uses for it, so that the sum is bit for bit
    autograd's: the float32 ``weight_decay`` halved (the product's and the division's
    backward), times ``2 W`` (``pow``'s backward: exponent x W^1), added."""
    if not weights or weight_decay == 0:
        return
    half = float(torch.tensor(weight_decay, dtype=torch.float32)) / 2
    twice = torch._foreach_mul(weights, 2.0)
    torch._foreach_mul_(twice, half)
    torch._foreach_add_(grads, twice)


class SGD:
    """``torch.optim.SGD`` without weight decay (the loss carries it), written out: plain
    (the tutorial) or with (Nesterov) momentum (``fast``). The same arithmetic, tensor by
    tensor, as torch's, each operation one ``_foreach`` call for all the parameters on
    every device (on the CPU torch's foreach runs the per-tensor kernels of its default
    path), so the weights are bit for bit those of ``torch.optim.SGD``; the same
    ``state_dict``, so checkpoints load either way.

    Why not torch's own: every ``torch.optim`` optimizer imports ``torch._dynamo`` when it
    is made and stepped, about 2 s of each process's start on a 2-core CPU (each exercise
    variant is a process of its own), for a compiler this loop does not use."""

    def __init__(self, params, lr: float, momentum: float = 0.0, nesterov: bool = False):
        self.params = list(params)
        self.param_groups = [{"lr": lr, "momentum": momentum, "dampening": 0, "weight_decay": 0,
                              "nesterov": nesterov, "maximize": False, "foreach": None,
                              "differentiable": False, "fused": None}]
        self.buffers: list[Optional[torch.Tensor]] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, neg_lr: Optional[torch.Tensor] = None) -> None:
        """One update at ``param_groups[0]["lr"]``, or at the rate ``-neg_lr`` holds (a
        device tensor, as a captured step reads it: the same product and sum, bit for bit
        on the CPU)."""
        g = self.param_groups[0]
        lr, momentum = g["lr"], g["momentum"]
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params, grads = [self.params[i] for i in live], [self.params[i].grad for i in live]
        if not params:
            return
        if momentum != 0:
            if all(self.buffers[i] is not None for i in live):
                bufs = [self.buffers[i] for i in live]
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, grads, alpha=1)
            else:
                bufs = [self._buffer(i, grad, momentum) for i, grad in zip(live, grads)]
            if g["nesterov"]:
                torch._foreach_add_(grads, bufs, alpha=momentum)
            else:
                grads = bufs
        if neg_lr is None:
            torch._foreach_add_(params, grads, alpha=-lr)
        else:
            torch._foreach_addcmul_(params, grads, [neg_lr] * len(grads))

    def _buffer(self, i: int, grad: torch.Tensor, momentum: float) -> torch.Tensor:
        """Parameter ``i``'s momentum buffer, updated with ``grad`` (its first: ``grad``)."""
        if self.buffers[i] is None:
            self.buffers[i] = grad.detach().clone()
        else:
            self.buffers[i].mul_(momentum).add_(grad, alpha=1)
        return self.buffers[i]

    def state_dict(self) -> dict:
        return {"state": {i: {"momentum_buffer": b} for i, b in enumerate(self.buffers)
                          if b is not None},
                "param_groups": [{**self.param_groups[0], "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state: dict) -> None:
        """A state of this class or of ``torch.optim.SGD`` over the same parameters."""
        groups = state["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"the optimizer state has {sum(len(g['params']) for g in groups)} "
                             f"parameters, this network {len(self.params)}")
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})
        self.buffers = [None] * len(self.params)
        for key, entry in state["state"].items():
            i, p = int(key), self.params[int(key)]
            if "momentum_buffer" in entry and entry["momentum_buffer"] is not None:
                self.buffers[i] = entry["momentum_buffer"].to(p.device, p.dtype).clone()


def make_optimizer(model: CifarNet, params: Params) -> SGD:
    """Plain SGD (tutorial) or SGD with (Nesterov) momentum (fast); rates are set per step."""
    if params.train.schedule == "fast":
        f = params.fast
        return SGD(model.parameters(), lr=f.peak_lr, momentum=f.momentum,
                   nesterov=f.nesterov and f.momentum > 0)
    return SGD(model.parameters(), lr=params.train.initial_lr)


def averaging_decay(params: Params) -> float:
    """The decay of the weight averages under the run's schedule."""
    if params.train.schedule == "fast":
        return params.fast.moving_average_decay
    return params.train.moving_average_decay


def training_model(params: Params, num_classes: int, device: torch.device) -> CifarNet:
    """The network on its device, in the memory layout of ``train.channels_last``."""
    model = build_model(num_classes, **to_dict(params.model)).to(device)
    return model.to(memory_format=torch.channels_last) if params.train.channels_last else model


def step_options(params: Params) -> dict:
    """:func:`make_step`'s settings from ``train`` (and, under the fast schedule, ``fast``):
    the weight decay and on which weights, label smoothing, precision and memory layout."""
    tr = params.train
    fast = tr.schedule == "fast"
    return {"weight_decay": params.fast.weight_decay if fast else tr.weight_decay,
            "label_smoothing": params.fast.label_smoothing if fast else 0.0,
            "decay_every_matrix": fast, "bf16": tr.precision == "bf16",
            "channels_last": tr.channels_last}


def make_step(net: torch.nn.Module, model: CifarNet, optimizer: SGD, device: torch.device, *,
              weight_decay: float, label_smoothing: float, decay_every_matrix: bool,
              bf16: bool, channels_last: bool):
    """The train step ``step(x, y[, neg_lr]) -> (loss, cross-entropy, weight decay)``: forward
    (under bf16 autocast with ``bf16``), the loss in float32 (``label_smoothing``, and
    ``weight_decay`` on local3/local4, or with ``decay_every_matrix`` on every weight
    matrix and kernel), backward, one SGD update. ``net`` may be the
    DistributedDataParallel wrapper of ``model``."""
    decayed = [p for p in model.parameters() if p.dim() > 1] if decay_every_matrix else None
    distributed = net is not model
    params = list(model.parameters())
    weights = model.decayed_weights() if decayed is None else decayed

    def step(x: torch.Tensor, y: torch.Tensor, neg_lr: Optional[torch.Tensor] = None):
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = net(x, return_logits=True)
        if distributed:
            ce, l2 = loss_terms(model, logits.float(), y, weight_decay, label_smoothing, decayed)
            loss = ce + l2
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DistributedDataParallel averages the gradients here
        else:
            # the same gradients as autograd of ce + wd x sum(W^2)/2 gives, with fewer ops:
            # the cross-entropy's from autograd (no accumulation into .grad, an op each),
            # the decay's added as autograd would add them (decay_gradients)
            ce = F.cross_entropy(logits.float(), y, label_smoothing=label_smoothing)
            with torch.no_grad():
                l2 = weight_decay * _half_sum_of_squares(weights)
                loss = ce + l2
            grads = dict(zip(params, torch.autograd.grad(ce, params, allow_unused=True)))
            decay_gradients([grads[w] for w in weights], weights, weight_decay)
            for p in params:
                p.grad = grads[p]
        optimizer.step(neg_lr)  # the rate: its param group's, or -neg_lr (CapturedStep)
        return (loss.detach(), ce, l2) if distributed else (loss, ce, l2)  # no graph to drop
    return step


class CapturedStep:
    """The whole step of a one-process run (``run.capture_step``): forward, loss, backward,
    the SGD update, the weight averages and the loss's moving average, as one CUDA graph
    replayed each step; its inputs (the batch, the learning rate and the averages' weight,
    1 - decay) are device tensors filled before each replay, so that no schedule makes
    it capture again, and nothing is read back to the host between log steps.

    The arithmetic is the eager step's (:func:`make_step`, :meth:`WeightAverage.update`,
    the loop's ``0.9 x avg + 0.1 x loss``) with the rate and the weight read from
    tensors; on the CPU, where there are no graphs, the same body runs as it is each step,
    bit for bit the eager run's (a test holds it). On CUDA the first ``WARMUP`` steps run
    the body on a side stream (CUDA's lazy set-ups happen there, before capture), the
    next is captured, and every step after is one replay. ``eager=True`` (a step whose
    activations TensorBoard records: hooks do not run in a replay) runs the body as it is.
    """

    WARMUP = 3

    def __init__(self, model: CifarNet, optimizer: SGD, ema: WeightAverage,
                 device: torch.device, loss_avg: Optional[torch.Tensor], **options):
        self.model, self.ema, self.device = model, ema, device
        self.step_fn = make_step(model, model, optimizer, device, **options)
        self.neg_lr = torch.zeros((), device=device)
        self.weight = torch.zeros((), device=device)
        self.avg = torch.zeros((), device=device)
        self.started = loss_avg is not None  # else: the first loss starts the average
        if self.started:
            self.avg.copy_(loss_avg)
        self.graph, self.static, self.out = None, None, None
        self.calls = 0

    def _body(self, x: torch.Tensor, y: torch.Tensor):
        loss, ce, l2 = self.step_fn(x, y, self.neg_lr)
        self.ema.update(self.model, 0, self.weight)
        with torch.no_grad():
            if self.started:
                self.avg.copy_(0.9 * self.avg + 0.1 * loss)
            else:
                self.avg.copy_(loss)
        return loss, ce, l2

    def __call__(self, x: torch.Tensor, y: torch.Tensor, lr: float, num_updates: int,
                 eager: bool = False):
        """Step ``num_updates`` (1-based) at rate ``lr``: (loss, cross-entropy, weight
        decay, the loss's moving average), device tensors."""
        self.neg_lr.fill_(-lr)
        self.weight.fill_(1.0 - ema_decay(self.ema.decay, num_updates))
        self.calls += 1
        if self.device.type != "cuda" or eager or not self.started:
            out = self._body(x, y)
        elif self.calls <= self.WARMUP:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                out = self._body(x, y)
            torch.cuda.current_stream(self.device).wait_stream(side)
        else:
            if self.graph is None:
                self.static = (x.clone(), y.clone())
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.out = self._body(*self.static)
            else:
                self.static[0].copy_(x)
                self.static[1].copy_(y)
            self.graph.replay()
            out = self.out
        self.started = True
        return (*out, self.avg)


def capture_refusal(params: Params, world: int) -> Optional[str]:
    """Why the step cannot be captured here (None: it can): several processes (their
    gradients are averaged between backward and update), dropout (its masks are drawn
    from a seed set each step, outside a graph)."""
    if world > 1:
        return f"{world} processes average their gradients between backward and update"
    if params.model.dropout > 0:
        return "model.dropout draws its masks from a seed set each step"
    return None


def use_capture(params: Params, device: torch.device, world: int) -> bool:
    """``run.capture_step``: ``auto`` captures on CUDA where it can (on the CPU there is no
    graph to gain); ``always`` everywhere (the CPU runs the graph's body as it is), and
    where it cannot it is refused in one line; ``never`` never."""
    mode = params.run.capture_step
    why = capture_refusal(params, world)
    if mode == "always" and why is not None:
        raise refused_capture(why)
    return mode == "always" or (mode == "auto" and device.type == "cuda" and why is None)


def refused_capture(why: str) -> TrainingError:
    """``run.capture_step: always`` where the step cannot be captured, ``why``."""
    return TrainingError(f"run.capture_step is always but the step cannot be captured: {why}; "
                         f"set run.capture_step: auto (or never)")
