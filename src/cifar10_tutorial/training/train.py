"""The training loop (cifar10_train.py), readable in one sitting, in the order it runs:
set up (or resume), then for each step: learning rate, batch, train step, weight
averages, log line, held-out evaluation, checkpoint; then the trained model and the
run's metrics.

One batch, from the prepared tensors to the logged loss: ``data.train_images`` go to the
device once; :func:`.inputs.make_batches` hands out batch ``step`` (distorted by
:mod:`.distortions`); :func:`.optimization.make_step` runs forward, loss, backward and the SGD
update; :meth:`.monitoring.Monitor.log_line` prints and logs the loss.
"""
from __future__ import annotations

import json
import logging
import math
import signal
import socket
import time
from typing import Optional

import torch

from .paths import TrainPaths
from .checkpoints import resume_point, restore, run_signature, save_checkpoint
from ..checkpoint_files import run_params
from .deadline import NONE, Continuation
from .mirror import Mirror
from .segments import Segments
from .distributed import (Dist, agree, exit_paused, gather_on_main, init_distributed, replicate,
                          same_job, shut_down)
from ..errors import TrainingError
from ..files import torch_save_atomic
from .host_memory import keep_freed_memory
from .distortions import STEP_DRAWS, derive_seed
from .inputs import RunShape, input_options, make_batches, run_shape
from ..model import macs_per_image, num_params
from .monitoring import HeldOut, Monitor, Summaries
from .. import provenance
from ..params import Params
from ..data.prepared import Prepared
from .optimization import (CapturedStep, Schedule, WeightAverage, averaging_decay,
                           learning_rate, make_optimizer, make_step, schedule, step_options,
                           training_model, use_capture)

log = logging.getLogger(__name__)


def train(params: Params, data: Prepared, paths: TrainPaths,
          progress: Optional[bool] = None, continuation: Continuation = NONE,
          final_evaluation: Optional[dict] = None) -> dict:
    """Train to ``train.max_steps`` (resuming from the newest matching checkpoint, or from
    the mirror's when there is none here).

    ``continuation``: a deadline at which the run checkpoints and exits with
    :data:`.distributed.PAUSED_EXIT`, and the mirror its newest checkpoint is copied to
    (:mod:`.deadline`, :mod:`.mirror`). Neither changes what the run computes.

    Run alone, or as one of ``train.num_devices`` processes under torchrun: then
    each process trains a replica on its own ``batch_size`` examples,
    DistributedDataParallel averages the gradients, and every replica makes the
    same synchronous update. Only rank 0 keeps the averaged weights and writes
    checkpoints, logs, DVCLive and TensorBoard.

    ``final_evaluation``, for a caller that evaluates the trained model next (an exercise
    variant): rank 0 fills it with the held-out evaluation of the last step (the
    :func:`.scoring.precision_at_1` results, ``eval.flip_tta``'s included, and
    ``step``), the same weights and images, so that they need not be evaluated twice. It
    stays empty where this run made no such evaluation (``eval.every_steps: 0``, or a
    finished run found again).
    """
    keep_freed_memory()  # each step's buffers stay mapped between steps: no page faults
    d, device = init_distributed(params.train, params.run)
    if params.train.precision == "bf16" and device.type == "cpu" and d.main:
        _warn_without_bf16_units()
    try:
        return _train(params, data, paths, progress, d, device, continuation, final_evaluation)
    finally:
        shut_down(d)


def _warn_without_bf16_units() -> None:
    """bf16 on a CPU without bf16 units (AVX512_BF16, AMX) runs emulated, many times slower
    than fp32: say so once instead of running slowly in silence."""
    flags = provenance.cpu_flags()
    if flags is not None and not flags & {"avx512_bf16", "amx_bf16"}:
        log.warning("train.precision is bf16 but this CPU (%s) has no bf16 units (AVX512_BF16 "
                    "or AMX): bf16 is emulated here and runs many times slower than fp32; "
                    "set train.precision=fp32", provenance.cpu_model())


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


def _nan(value: Optional[float]) -> float:
    return value if value is not None else float("nan")


class _Run:
    """The run's state: the network, its optimizer and averages, the loop's counters, the
    values derived from the params once (its shape: the batches, steps per epoch; its
    schedule: length and rates) and what rank 0 records; carried from phase to phase, and
    into checkpoints."""

    def __init__(self, counters: dict, sched: Schedule, shape: RunShape, d: Dist,
                 device: torch.device):
        self.start = self.step = counters["step"]
        self.elapsed = counters["elapsed"]  # seconds of the sessions before this one
        self.reached = counters["reached"]
        self.loss = None  # the last step's loss, on the device
        loss_avg = counters["loss_avg"]  # the loss's moving average (decay 0.9), on the device
        self.loss_avg = (torch.tensor(loss_avg, device=device) if loss_avg is not None
                         else None)  # None: the first step's loss starts it
        self.first_batch_s: Optional[float] = None
        self.sched, self.d, self.device = sched, d, device
        self.batch_size, self.global_batch = shape.batch_size, shape.global_batch
        self.t0 = time.perf_counter()

    def _avg(self) -> Optional[float]:
        return self.loss_avg.item() if self.loss_avg is not None else None

    def seconds(self) -> float:
        return self.elapsed + time.perf_counter() - self.t0

    def log(self, monitor: Monitor, summaries: Optional[Summaries], lr: float, ce, wd, x,
            log_step: bool, stop_now: bool) -> bool:
        """The log line and DVCLive row (log steps), TensorBoard summaries (summary steps);
        returns whether any rank was asked to stop."""
        # the loss averaged over ranks, and this rank's others: one read-back from the device
        value, stop_now, (loss_avg, ce, wd) = agree(self.loss, stop_now, self.d, self.device,
                                                    self.loss_avg, ce, wd)
        if not math.isfinite(value):
            raise TrainingError(f"the loss became {value} at step {self.step} (lr {lr:g}): "
                                f"training diverged. Lower train.initial_lr or check the input "
                                f"data.")
        dt, eps = monitor.examples_per_sec(self.global_batch)
        if log_step:
            monitor.log_line(self.step, value, loss_avg, lr, ce, dt, eps,
                             self.batch_size / dt if self.d.active else None)
        if summaries is not None:
            summaries.write(self.step, {"learning_rate": lr, "loss/total": value,
                                        "loss/total_avg": loss_avg,
                                        "loss/cross_entropy": ce,
                                        "loss/weight_decay": wd,
                                        "examples_per_sec": eps}, x)
        return stop_now

    def checkpoint(self, model, optimizer, ema, inputs: list, signature: dict, params: Params,
                   data: Prepared, held_out: HeldOut, summaries: Summaries,
                   segments: Segments) -> dict:
        """What a checkpoint holds: enough to go on exactly (weights, optimizer, averages,
        every rank's input state, the counters) and what made it (signature, params)."""
        return {"step": self.step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "ema": ema.averaged_model_state(model),
                "input": inputs, "signature": signature, "params": run_params(params),
                "classes": data.classes, "num_classes": data.num_classes,
                "world_size": self.d.world, "loss_avg": self._avg(),
                "elapsed": self.seconds(), "targets_reached": json.dumps(self.reached),
                "eval_seconds": held_out.seconds,
                "tensorboard_run": summaries.run, "segments": segments.to_checkpoint(self.step)}

    def metrics(self, model, held_out: Optional[HeldOut], eval_before: float,
                num_train: int) -> dict:
        """The run's metrics (DVCLive's metrics.json, beside its ``step``): numbers only,
        each once. What describes the run rather than measures it (device, schedule, world
        size, commit) is in provenance.json; the time of held-out evaluations is left out of
        the speed figures."""
        total_time = self.seconds()
        session = (time.perf_counter() - self.t0
                   - (held_out.seconds - eval_before if held_out else 0.0))
        done = self.step - self.start
        metrics = {
            "epochs": self.step * self.global_batch / num_train,
            "loss": self.loss.item() if self.loss is not None else float("nan"),  # the last step's
            "loss_avg": _nan(self._avg()),  # its moving average (decay 0.9)
            "examples_per_sec": done * self.global_batch / max(session, 1e-9),
            "examples_per_sec_per_device": done * self.batch_size / max(session, 1e-9),
            "wall_time_s": total_time,
            "time_to_first_batch_s": self.first_batch_s if self.first_batch_s is not None else 0.0,
            "num_params": num_params(model),
            "macs_per_image": macs_per_image(model),
        }
        if held_out is not None and held_out.every:
            metrics.update({"held_out_eval_seconds": held_out.seconds,
                            "train_seconds": total_time - held_out.seconds,
                            "held_out": {k: held_out.last[k]
                                         for k in ("precision_at_1", "precision_at_1_raw")
                                         if k in held_out.last}})
            if held_out.reached:  # an empty {} is no number: DVC warns about it, so leave it out
                metrics["time_to_target"] = held_out.reached
        return metrics


def _same_job(signature: dict, data: Prepared, ckpt: Optional[dict], d: Dist,
              commit: Optional[str]) -> None:
    same_job({"host": socket.gethostname(), "commit": commit,
              "params": provenance.params_hash(signature["params"]), "data": data.content_hash,
              "resume step": int(ckpt["step"]) if ckpt else 0}, d)


def _train(params: Params, data: Prepared, paths: TrainPaths, progress: Optional[bool],
           d: Dist, device: torch.device, cont: Continuation, final: Optional[dict]) -> dict:
    tr = params.train
    # ---- set up: the network, its optimizer and averages; resume or start afresh
    torch.manual_seed(tr.seed)
    model = training_model(params, data.num_classes, device)
    optimizer = make_optimizer(model, params)
    ema = WeightAverage(model, averaging_decay(params)) if d.main else None
    num_train = len(data.train_labels)
    # the run's sizes and schedule, derived once, here, and passed down
    shape = run_shape(params, num_train, data.meta.get("file_counts", {}).get("train"),
                      d.rank, d.world)
    sched = schedule(params, shape.num_train, shape.global_batch)
    max_steps = sched.steps
    signature = run_signature(params, data.content_hash, device, d.world)
    mirror = Mirror.writable(cont.mirror, paths) if cont.mirror and d.main else None
    ckpt = resume_point(paths, signature, max_steps, d, device, mirror)
    counters = (restore(ckpt, model, optimizer, ema) if ckpt is not None
                else {"step": 0, "loss_avg": None, "elapsed": 0.0, "reached": {}})
    segments = Segments.start(ckpt, counters["step"], device, d.world)
    _same_job(signature, data, ckpt, d, segments.current.get("commit"))  # one job on all nodes
    images, labels = (torch.from_numpy(a).to(device) for a in (data.train_images, data.train_labels))
    run = _Run(counters, sched, shape, d, device)
    # the step: one CUDA graph replayed (run.capture_step), or the eager one
    captured = train_step = None
    if use_capture(params, device, d.world):
        captured = CapturedStep(model, optimizer, ema, device, run.loss_avg, **step_options(params))
    else:
        train_step = make_step(replicate(model, device, d), model, optimizer, device,
                               **step_options(params))
    batches = make_batches(images, labels, **input_options(params, data, shape),
                           state=ckpt["input"][d.rank] if ckpt else None, rank=d.rank)
    monitor = Monitor(paths.live_dir, run.start, max_steps, ckpt is not None, d.main, progress)
    summaries = held_out = None
    if d.main:
        summaries = Summaries(paths.tensorboard, model, ckpt)
        held_out = HeldOut(params, data, device, run.reached, ckpt, final)
    eval_before = held_out.seconds if held_out else 0.0  # of the sessions before a resume

    def save() -> None:
        inputs = gather_on_main(batches.state(), d)  # a collective: every rank takes part
        if d.main:
            _save(run.checkpoint(model, optimizer, ema, inputs, signature, params, data,
                                 held_out, summaries, segments), paths, mirror, max_steps)

    # ---- the steps
    try:
        with _Stop() as stop:
            while run.step < max_steps:
                lr = learning_rate(run.step, sched)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                x, y = batches.get(run.step)
                if run.first_batch_s is None:
                    run.first_batch_s = time.perf_counter() - run.t0
                summary_step = ((run.step + 1) % params.run.summary_every == 0 or run.step == 0
                                or run.step + 1 == max_steps)  # the first and last too
                summarize = d.main and summary_step
                if summarize:
                    summaries.capture()
                # the step's own draws (model.dropout's masks), on CPU and GPU alike, from
                # the seed, the rank and the step: a resumed run draws what the
                # uninterrupted one drew, and each rank draws its own
                torch.manual_seed(derive_seed(tr.seed, STEP_DRAWS, d.rank, run.step))
                if captured is not None:  # the same, one graph replay (run.capture_step)
                    run.loss, ce, wd, run.loss_avg = captured(x, y, lr, run.step + 1,
                                                              eager=summarize)
                else:
                    run.loss, ce, wd = train_step(x, y)
                    if ema is not None:
                        ema.update(model, run.step + 1)
                    run.loss_avg = (run.loss if run.loss_avg is None
                                    else 0.9 * run.loss_avg + 0.1 * run.loss)
                run.step += 1
                monitor.stepped()

                log_step = run.step % tr.log_every == 0 or run.step == max_steps
                stop_now = stop.requested is not None or cont.due()
                if log_step or summary_step or (stop_now and not d.active):
                    # several processes agree on stopping at these steps only
                    stop_now = run.log(monitor, summaries if summarize else None, lr, ce, wd,
                                       x, log_step, stop_now)
                else:
                    stop_now = False
                if held_out is not None and held_out.due(run.step, max_steps):
                    held_out.run(run.step, model, ema, sched.steps_per_epoch, run.seconds(),
                                 monitor, last=run.step == max_steps)
                if run.step % params.run.checkpoint_every == 0 or run.step == max_steps:
                    save()
                if stop_now:
                    _stop(stop, run, save, params.run.checkpoint_every, max_steps, monitor, paths)
    finally:
        monitor.close()
        batches.close()
        if summaries is not None:
            summaries.close()
        if mirror is not None:  # paused, stopped or failed: another machine may continue now
            mirror.release()
    # ---- finish: the run's metrics and (rank 0) the trained model
    metrics = run.metrics(model, held_out, eval_before, num_train)
    if d.main:
        _save_model(model, ema, params, data, run.step, paths)
        monitor.finish(run.step, metrics, paths.speed_file)
        # the code is the one this segment started with: edits or commits made while it
        # trained do not change what ran (Python had imported it)
        code = {k: segments.current[k] for k in ("commit", "dirty")}
        provenance.write(paths.live_dir, provenance.record(
            data.content_hash, signature["params"], device, code=code, steps=run.step,
            epochs=metrics["epochs"], wall_time_s=metrics["wall_time_s"], world_size=d.world,
            global_batch_size=run.global_batch, schedule=tr.schedule, device_type=device.type,
            segments=segments.at(run.step),
            # replayed as a CUDA graph (run.capture_step): the rate read from a tensor
            **({"captured_step": True} if captured is not None and captured.graph else {})))
        log.info("trained %d steps in %.1f s: %s", run.step, metrics["wall_time_s"],
                 json.dumps(metrics))
    return {"step": run.step, **metrics}


def _save(state: dict, paths: TrainPaths, mirror: Optional[Mirror], max_steps: int) -> None:
    """A checkpoint, and its copy in the mirror (a finished run's is not mirrored: the mirror
    is for continuing, and a finished run's results are its outputs)."""
    path = save_checkpoint(state, paths.checkpoints)
    if mirror is not None and state["step"] < max_steps:
        mirror.push(path, paths.live_dir, {"step": state["step"], "max_steps": max_steps,
                                           "signature": state["signature"],
                                           "segments": json.loads(state["segments"])})


def _save_model(model, ema: WeightAverage, params: Params, data: Prepared, step: int,
                paths: TrainPaths) -> None:
    """model.pt: raw and averaged weights, with what is needed to rebuild the network."""
    torch_save_atomic({"model": model.state_dict(), "ema": ema.averaged_model_state(model),
                       "params": run_params(params), "step": step, "classes": data.classes,
                       "num_classes": data.num_classes}, paths.model)


def _stop(stop: _Stop, run: _Run, save, checkpoint_every: int, max_steps: int,
          monitor: Monitor, paths: TrainPaths) -> None:
    """Checkpoint (unless this step just did) and exit: with 128 + the signal's number
    after a signal, with PAUSED_EXIT at the deadline. No final output is left behind: not
    even DVCLive's running summary, which would read like the metrics of a finished run."""
    if run.step % checkpoint_every and run.step != max_steps:
        save()
    if monitor.main:
        (paths.live_dir / "metrics.json").unlink(missing_ok=True)
    if stop.requested is not None:
        if monitor.main:
            monitor.say(f"stopped by signal {stop.requested} at step {run.step}; "
                        f"rerun the same command to resume")
        raise SystemExit(128 + stop.requested)
    if monitor.main:
        monitor.say(f"paused at step {run.step} of {max_steps}; run the same command to continue")
    exit_paused(monitor.main)
