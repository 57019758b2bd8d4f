"""What rank 0 shows and records while training: the progress bar and the reference's
log line, DVCLive metrics, TensorBoard summaries, and held-out precision while training.
"""
from __future__ import annotations

import json
import logging
import math
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..errors import TrainingError
from ..files import write_text_atomic, writing
from ..scoring import precision_at_1
from ..model import CifarNet
from ..params import Params
from ..data.prepared import Prepared
from .live import open_live, truncate_plots
from .optimization import WeightAverage, training_model
from .paths import PLAIN_NAME, experiment_name

log = logging.getLogger(__name__)


def duration_text(seconds: Optional[float]) -> str:
    """``3h 12m``, ``4m 05s``, ``9s``; ``?`` when not known yet."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


SPEED_KEYS = ("examples_per_sec", "examples_per_sec_per_device", "wall_time_s", "num_params",
              "time_to_first_batch_s", "train_seconds", "held_out_eval_seconds",
              "macs_per_image", "time_to_target")  # the train stage's speed.json


class Monitor:
    """The progress bar, the reference's log line and DVCLive's train/* curves (rank 0), and
    the examples/sec of the window since the last log line (every rank)."""

    def __init__(self, live_dir: Path, start: int, max_steps: int, resumed: bool,
                 main: bool, progress: Optional[bool]):
        self.main, self.live = main, None
        if main:
            if resumed:
                truncate_plots(live_dir, start)
            self.live = open_live(live_dir, resume=resumed)
        self.bar = tqdm(total=max_steps, initial=start, unit="step", leave=False,
                        disable=(not main or not sys.stderr.isatty()) if progress is None
                        else not (progress and main))
        self.say = self.bar.write if not self.bar.disable else print
        self.window_t, self.window_steps = time.perf_counter(), 0
        self.start, self.max_steps, self.t0 = start, max_steps, time.perf_counter()

    def progress(self, step: int) -> str:
        """``[N/M, P%, ETA ...]`` for the log line: where the run stands and, at this
        process's pace so far (held-out evaluations included), when it ends. Every log line
        carries it, so logs without a terminal (nohup, CI, a batch job) have it too."""
        done = step - self.start
        eta = ((time.perf_counter() - self.t0) / done * (self.max_steps - step)
               if done > 0 else None)
        return (f"[{step:,}/{self.max_steps:,}, {100 * step / max(1, self.max_steps):.1f}%, "
                f"ETA {duration_text(eta)}]")

    def stepped(self) -> None:
        self.window_steps += 1
        self.bar.update(1)

    def examples_per_sec(self, global_batch: int) -> tuple[float, float]:
        """(seconds per step, examples/sec) of the steps since the last log line."""
        dt = (time.perf_counter() - self.window_t) / self.window_steps
        return dt, global_batch / dt

    def log_line(self, step: int, loss: float, loss_avg: float, lr: float, ce: float,
                 dt: float, eps: float, per_device: Optional[float]) -> None:
        """``step N, loss = ... (examples/sec; sec/batch)``, as cifar10_train.py prints it."""
        if self.main:
            each = f", {per_device:.1f} per device" if per_device is not None else ""
            self.say(f"{datetime.now():%Y-%m-%d %H:%M:%S}: step {step}, loss = {loss:.2f} "
                     f"({eps:.1f} examples/sec{each}; {dt:.3f} sec/batch) {self.progress(step)}")
            self.log(step, {"train/loss": loss, "train/loss_avg": loss_avg, "train/lr": lr,
                            "train/cross_entropy": ce, "train/examples_per_sec": eps})
            self.bar.set_postfix(loss=f"{loss_avg:.3f}", eps=f"{eps:.0f}")
        self.window_t, self.window_steps = time.perf_counter(), 0

    def log(self, step: int, values: dict) -> None:
        """One DVCLive row at ``step``. DVCLive's own writes raise without a file name; a
        full disk names the curve or metrics file that failed."""
        self.live.step = step
        for k, v in values.items():
            with writing(Path(self.live.dir) / "plots" / "metrics" / f"{k}.tsv"):
                self.live.log_metric(k, v)
        with writing(Path(self.live.dir) / "metrics.json"):
            self.live.next_step()

    def finish(self, step: int, metrics: dict, speed_file: Optional[Path] = None) -> None:
        """metrics.json: ``metrics`` and the step, nothing else (DVCLive would repeat the last
        value of every curve); with ``speed_file``, the :data:`SPEED_KEYS` and step go there."""
        summary = dict(metrics)
        if speed_file is not None:
            speed = {k: summary.pop(k) for k in SPEED_KEYS if k in summary}
            write_text_atomic(speed_file, json.dumps({**speed, "step": step}, indent=4) + "\n")
        self.live.step = step
        self.live.summary = summary
        with writing(Path(self.live.dir) / "metrics.json"):
            self.live.end()

    def close(self) -> None:
        self.bar.close()


class HeldOut:
    """Held-out precision @ 1 while training (every ``eval.every_steps`` steps and at the
    end), averaged and raw weights, and when the averaged one first reaches each of
    ``eval.targets``: step, epoch and training seconds (these evaluations excluded).

    ``final``: a dict the evaluation of the last step fills with its full
    :func:`.scoring.precision_at_1` results and ``step``, the mirrored images'
    (``eval.flip_tta``) included: the trained model's evaluation (``train``'s
    ``final_evaluation``)."""

    def __init__(self, params: Params, data: Prepared, device: torch.device, reached: dict,
                 ckpt: Optional[dict], final: Optional[dict] = None):
        self.every, self.batch = params.eval.every_steps, params.eval.batch_size
        self.targets = sorted(params.eval.targets)
        self.reached = reached  # "0.8" -> {"step", "epoch", "train_seconds"}
        self.seconds = float(ckpt.get("eval_seconds", 0.0)) if ckpt else 0.0
        self.final, self.flip_at_end = final, final is not None and params.eval.flip_tta
        self.last: dict = {}
        if self.targets and not self.every:  # set for the whole file, say, and never timed
            log.warning("eval.targets %s are not timed: eval.every_steps is 0, so no held-out "
                        "evaluation runs while training; set eval.every_steps above 0 to "
                        "time them, or drop eval.targets", self.targets)
        if self.every:
            self.images = torch.from_numpy(data.test_images).to(device)
            self.labels = torch.from_numpy(data.test_labels).to(device)
            self.model = training_model(params, data.num_classes, device).eval()

    def due(self, step: int, max_steps: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == max_steps)

    @torch.no_grad()
    def run(self, step: int, model: CifarNet, ema: WeightAverage, steps_per_epoch: float,
            elapsed: float, monitor: Monitor, last: bool = False) -> dict:
        t = time.perf_counter()
        train_seconds = elapsed - self.seconds

        def loaded(state: dict) -> CifarNet:
            self.model.load_state_dict(state)
            return self.model

        weights = (("", ema.averaged_model_state(model)), ("_raw", model.state_dict()))
        r = precision_at_1(((suffix, loaded(state)) for suffix, state in weights),
                           self.images, self.labels, self.batch, self.flip_at_end and last)
        out = {"step": step, "epoch": step / steps_per_epoch,
               "precision_at_1": r["precision_at_1"], "precision_at_1_raw": r["precision_at_1_raw"]}
        self.seconds += time.perf_counter() - t
        monitor.say(f"step {step} (epoch {out['epoch']:.1f}, {train_seconds:.0f} s of training): "
                    f"held-out precision @ 1 = {out['precision_at_1']:.4f} averaged, "
                    f"{out['precision_at_1_raw']:.4f} raw")
        for target in self.targets:
            if f"{target:g}" not in self.reached and out["precision_at_1"] >= target:
                self.reached[f"{target:g}"] = {"step": step, "epoch": out["epoch"],
                                               "train_seconds": train_seconds}
                monitor.say(f"reached held-out precision {target:g} at step {step} "
                            f"(epoch {out['epoch']:.1f}) after {train_seconds:.0f} s of training")
        monitor.log(step, {f"held_out/{k}": out[k]
                           for k in ("precision_at_1", "precision_at_1_raw", "epoch")})
        self.last = out
        if last and self.final is not None:
            self.final.update(r, step=step)
        return out


class Summaries:
    """TensorBoard summaries of the reference: lr, losses, weights, gradients, activations, images."""

    LAYERS = ("conv1", "conv2", "local3", "local4")

    def __init__(self, folder: Path, model: CifarNet, ckpt: Optional[dict]):
        """Summaries go to ``folder``/RUN, one subfolder per run (``tensorboard --logdir
        folder`` compares them): a new run is named after its DVC experiment, if any, and
        its start time; a resumed run (``ckpt``) goes on in its own folder."""
        from torch.utils.tensorboard import SummaryWriter

        resumed = (ckpt or {}).get("tensorboard_run")
        self.run = (resumed if isinstance(resumed, str) and PLAIN_NAME.fullmatch(resumed)
                    and ".." not in resumed  # a folder of its own under ``folder``, never a path
                    else f"{experiment_name() or 'run'}-{datetime.now():%Y%m%d-%H%M%S}")
        self.writer = SummaryWriter(str(folder / self.run),
                                    purge_step=int(ckpt["step"]) if ckpt else None)
        self.edges = np.asarray(self.writer.default_bins, dtype=np.float64)
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
            _histogram(w, self.edges, f"weights/{name}", p, step)
            if p.grad is not None:
                _histogram(w, self.edges, f"gradients/{name}", p.grad, step)
        for name, act in self.activations.items():
            flat = _histogram(w, self.edges, f"activations/{name}", act, step)
            w.add_scalar(f"sparsity/{name}", 1 - np.count_nonzero(flat) / flat.size, step)
        self.activations = {}
        shown = images[:10].detach().float().cpu()
        lo = shown.amin(dim=(1, 2, 3), keepdim=True)
        hi = shown.amax(dim=(1, 2, 3), keepdim=True)
        w.add_images("images", (shown - lo) / (hi - lo).clamp_min(1e-6), step)
        w.flush()

    def close(self) -> None:
        self.writer.close()


def _histogram(writer, edges: np.ndarray, tag: str, values: torch.Tensor,
               step: int) -> np.ndarray:
    """The histogram ``writer.add_histogram(tag, values, step)`` records (TensorFlow's
    default buckets, ``edges``), computed without its two copies of the values: they stay
    float32 and in their memory order (:func:`in_memory_order`). Each summary step bins
    about 8M values, 4.7M of them conv1's activations. Returns the values, flat.

    Values it cannot bin (infinite, NaN, or beyond the last bucket: a diverged run) are a
    clear error."""
    v = in_memory_order(values.detach().float().cpu()).numpy()
    lo, hi = float(v.min()), float(v.max())  # NaN if any is
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(-lo, hi) > edges[-1]:
        top = float(np.abs(v).max())
        raise TrainingError(f"{tag} holds values up to {top:.3g} at step {step}: training "
                            f"diverged. Lower train.initial_lr or check the input data.")
    counts, limits = np.histogram(v, bins=edges)
    filled = np.flatnonzero(counts)
    start, end = int(filled[0]), int(filled[-1]) + 1
    # as TensorBoard keeps it: the buckets from the first filled one to the last, each
    # named by its right edge, after an empty one that carries the left edge
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    writer.add_histogram_raw(tag, min=lo, max=hi, num=v.size, sum=float(v.sum(dtype=np.float64)),
                             sum_squares=float(np.einsum("i,i->", v, v, dtype=np.float64)),
                             bucket_limits=limits[start:end + 1].tolist(),
                             bucket_counts=counts.tolist(), global_step=step)
    return v


def in_memory_order(t: torch.Tensor) -> torch.Tensor:
    """``t`` flattened in the order its elements lie in memory: a view, not a copy, for a
    dense tensor in any layout. A channels_last activation read in logical order is a
    gather over every element (conv1's: 4.7M of them at each summary step); a histogram,
    a sum and a minimum do not depend on the order."""
    dims = sorted(range(t.dim()), key=lambda d: t.stride(d), reverse=True)
    return t.permute(dims).reshape(-1)
