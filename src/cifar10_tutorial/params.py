"""One typed, validated view of ``params.yaml``.

Every stage reads its parameters through :func:`load_params`. Each section of
the file is a frozen dataclass below; the loader checks every key against the
dataclass fields and every value against the field's type, so a misspelled key
(``dvc exp run -S +train.batchsize=64``) or a wrong type fails at once with a
message that names the key and the valid ones, instead of being ignored.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from .param_reads import Section, not_recording, record_read
from .param_types import (ParamsError, Tolerance, build as _build, parse_tolerance,
                          read_params_yaml)


@dataclass(frozen=True)
class DataParams(Section):
    """Where the raw data comes from (download and preprocess stages)."""

    _SECTION: ClassVar[str] = "data"

    dataset: Literal["cifar10", "cifar100", "svhn"] = "cifar10"
    # official: the data set's official source (datasets.py). Else http(s)://, file://
    # or a plain path: the archive (CIFAR) or the folder holding the files (SVHN).
    url: str = "official"
    # official: the data set's official md5s; a 32-digit md5 of the archive (CIFAR);
    # null skips the check (a warning says so).
    md5: Optional[str] = "official"
    label: Literal["fine", "coarse"] = "fine"  # CIFAR-100: 100 fine or 20 coarse classes
    svhn_extra: bool = False  # SVHN: add extra_32x32.mat (531,131 images) to training

    def __post_init__(self) -> None:
        if self.md5 not in (None, "official") and not re.fullmatch(r"[0-9a-fA-F]{32}", self.md5):
            raise ParamsError(f"data.md5: expected official, 32 hexadecimal digits or null, "
                              f"found {self.md5!r}")
        if not self.url:
            raise ParamsError("data.url: expected official, a URL or a path, found an empty string")
        if self.dataset == "svhn" and self.md5 not in (None, "official"):
            raise ParamsError("data.md5: SVHN has several files; use official (their official "
                              "md5s) or null (no check)")


@dataclass(frozen=True)
class ModelParams(Section):
    """The network (docs/reference.md's layer table and the exercises' variants)."""

    _SECTION: ClassVar[str] = "model"

    head: Literal["fc", "local"] = "fc"  # local: exercise 2, locally connected local3/local4
    output: Literal["logits", "softmax"] = "logits"  # softmax: exercise 1
    lrn: bool = True  # false drops norm1 and norm2 (an ablation)


@dataclass(frozen=True)
class InputParams(Section):
    """The training input pipeline."""

    _SECTION: ClassVar[str] = "input"

    shuffle: Literal["queue", "permutation"] = "queue"
    min_fraction_of_examples_in_queue: float = 0.4  # queue fill before the first batch
    flip: Optional[bool] = None  # random left-right flips; null: the data set's default

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_fraction_of_examples_in_queue <= 1.0:
            raise ParamsError("input.min_fraction_of_examples_in_queue: expected a number in "
                              f"[0, 1], found {self.min_fraction_of_examples_in_queue}")


@dataclass(frozen=True)
class TrainParams(Section):
    """Training (docs/reference.md, "Training")."""

    _SECTION: ClassVar[str] = "train"

    batch_size: int = 128  # per device
    num_devices: int = 1  # processes (one per GPU, or CPU processes) under torchrun
    max_steps: int = 100000
    initial_lr: float = 0.1
    lr_decay_factor: float = 0.1
    epochs_per_decay: float = 350.0
    weight_decay: float = 0.004  # on local3/local4 weights, times sum(W^2)/2
    moving_average_decay: float = 0.9999
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    log_every: int = 10
    schedule: Literal["tutorial", "fast"] = "tutorial"  # fast: the `fast:` section (docs/training.md)
    max_epochs: Optional[float] = None  # set: the run length in epochs, instead of max_steps
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast of the forward pass (GPUs)
    channels_last: bool = True  # NHWC activations (faster convolutions on CPU and GPU)

    def __post_init__(self) -> None:
        for name in ("batch_size", "num_devices", "max_steps", "log_every"):
            if getattr(self, name) < 1:
                raise ParamsError(f"train.{name}: expected >= 1, found {getattr(self, name)}")
        if self.initial_lr <= 0 or self.epochs_per_decay <= 0:
            raise ParamsError("train.initial_lr and train.epochs_per_decay must be > 0")
        if not 0 < self.lr_decay_factor <= 1:  # negative: the rate turns negative at a decay
            raise ParamsError(f"train.lr_decay_factor: expected a number in (0, 1], found "
                              f"{self.lr_decay_factor}")
        if self.weight_decay < 0:
            raise ParamsError(f"train.weight_decay: expected >= 0, found {self.weight_decay}")
        if not 0.0 <= self.moving_average_decay < 1.0:
            raise ParamsError("train.moving_average_decay: expected a number in [0, 1), found "
                              f"{self.moving_average_decay}")
        if self.max_epochs is not None and self.max_epochs <= 0:
            raise ParamsError(f"train.max_epochs: expected > 0 or null, found {self.max_epochs}")
        if not 0 <= self.seed < 2**63:
            raise ParamsError(f"train.seed: expected an integer from 0 to 2**63 - 1, found "
                              f"{self.seed}")


@dataclass(frozen=True)
class RunParams(Section):
    """How a run is carried out, never what it computes (what follows from that:
    docs/training.md#what-each-stages-hash-covers)."""

    _SECTION: ClassVar[str] = "run"

    checkpoint_every: int = 1000  # steps between checkpoints (and the last step)
    summary_every: int = 100  # steps between TensorBoard summaries
    max_restarts: int = 3  # torchrun restarts of a failed multi-process job (then resume)
    collective_timeout_s: float = 300.0  # a rank that stops answering fails the job after this
    join_timeout_s: float = 600.0  # several nodes: how long each waits for the others to join
    # workers that fill the shuffle queue; 0: filled inline between steps (the same batches
    # either way, and inline is the fastest on CPU; the tutorial used 16 threads)
    queue_threads: int = 0

    def __post_init__(self) -> None:
        for name in ("checkpoint_every", "summary_every"):
            if getattr(self, name) < 1:
                raise ParamsError(f"run.{name}: expected >= 1, found {getattr(self, name)}")
        if self.max_restarts < 0 or self.collective_timeout_s <= 0 or self.join_timeout_s <= 0:
            raise ParamsError("run.max_restarts must be >= 0, run.collective_timeout_s and "
                              "run.join_timeout_s > 0")
        if self.queue_threads < 0:
            raise ParamsError(f"run.queue_threads: expected >= 0, found {self.queue_threads}")


@dataclass(frozen=True)
class FastParams(Section):
    """``train.schedule: fast``: the same network and data, a modern optimiser and schedule."""

    _SECTION: ClassVar[str] = "fast"

    peak_lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = True
    warmup_epochs: float = 1.0  # linear from 0 to peak_lr, then linear down to the end
    final_lr_fraction: float = 0.0  # the rate at the last step, as a fraction of peak_lr
    label_smoothing: float = 0.1
    weight_decay: float = 1e-3  # on every weight matrix and kernel (not biases), x sum(W^2)/2
    moving_average_decay: float = 0.999

    def __post_init__(self) -> None:
        if self.peak_lr <= 0 or not 0 <= self.momentum < 1 or self.warmup_epochs < 0:
            raise ParamsError("fast: expected peak_lr > 0, 0 <= momentum < 1, warmup_epochs >= 0")
        if not 0 <= self.final_lr_fraction <= 1 or not 0 <= self.label_smoothing < 1:
            raise ParamsError("fast: expected final_lr_fraction in [0, 1], label_smoothing in [0, 1)")
        if self.weight_decay < 0 or not 0 <= self.moving_average_decay < 1:
            raise ParamsError("fast: expected weight_decay >= 0, moving_average_decay in [0, 1)")


@dataclass(frozen=True)
class EvalParams(Section):
    """Evaluation (docs/reference.md, "Evaluation")."""

    _SECTION: ClassVar[str] = "eval"

    batch_size: int = 250
    device: Literal["auto", "cpu", "cuda"] = "auto"  # the eval stage's (train.device: train's)
    interval_secs: float = 300.0  # watch mode: seconds between evaluations
    flip_tta: bool = False  # also report precision of image + mirror image (*_flip metrics)
    every_steps: int = 5000  # > 0: the train stage evaluates the held-out split this often
    targets: list[float] = field(default_factory=lambda: [0.80, 0.84, 0.85, 0.86])  # time to these

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ParamsError(f"eval.batch_size: expected >= 1, found {self.batch_size}")
        if not self.interval_secs > 0:  # 0 spun a core on 'waiting'; below 0 was a traceback
            raise ParamsError(f"eval.interval_secs: expected > 0, found {self.interval_secs}")
        if self.every_steps < 0 or any(not 0 < t <= 1 for t in self.targets):
            raise ParamsError("eval.every_steps must be >= 0 and eval.targets precisions in (0, 1]")


@dataclass(frozen=True)
class AblationParams(Section):
    """What every ablation variant shares."""

    _SECTION: ClassVar[str] = "ablation"

    max_steps: int = 10000  # the training budget of each variant (replaces train.max_steps)
    # set: a trial of the whole exercise pipeline; every variant trains at most this many
    # steps, those with a budget of their own (tutorial_100k, schedule_*) included
    trial_steps: Optional[int] = None
    # in a trial (trial_steps set): precision over the first this many held-out images
    # only (null: all of them); evaluating is most of a trial's time
    trial_eval_images: Optional[int] = 2000

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ParamsError(f"ablation.max_steps: expected >= 1, found {self.max_steps}")
        for key in ("trial_steps", "trial_eval_images"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ParamsError(f"ablation.{key}: expected >= 1 or null, found {value}")


@dataclass(frozen=True)
class RegressionParams(Section):
    """The regression gate (the `regression` stage): this run's metrics against a baseline."""

    _SECTION: ClassVar[str] = "regression"

    baseline: Optional[str] = None  # a JSON file of metrics; null: show the metrics, gate nothing
    # metric -> {max_drop: N} (higher is better) or {max_rise: N} (lower is better); read
    # as Any and checked here, so that a bare signed number is refused with its fix
    tolerances: dict[str, Any] = field(default_factory=lambda: {
        "eval.precision_at_1": {"max_drop": 0.02}, "eval.precision_at_1_raw": {"max_drop": 0.03},
        "train.loss_avg": {"max_rise": 0.15}})

    def __post_init__(self) -> None:
        parsed = {name: value if isinstance(value, Tolerance) else parse_tolerance(name, value)
                  for name, value in self.tolerances.items()}
        object.__setattr__(self, "tolerances", parsed)  # frozen: set once, here
        if self.baseline is not None and not parsed:
            raise ParamsError(f"regression.tolerances: expected at least one metric while "
                              f"regression.baseline is set ({self.baseline}), found none: the "
                              f"gate would compare nothing and pass; add one, e.g. "
                              f"`eval.precision_at_1: {{max_drop: 0.02}}`, or set "
                              f"regression.baseline: null")


@dataclass(frozen=True)
class Params(Section):
    _SECTION: ClassVar[str] = ""
    data: DataParams = field(default_factory=DataParams)
    model: ModelParams = field(default_factory=ModelParams)
    input: InputParams = field(default_factory=InputParams)
    train: TrainParams = field(default_factory=TrainParams)
    run: RunParams = field(default_factory=RunParams)
    fast: FastParams = field(default_factory=FastParams)
    eval: EvalParams = field(default_factory=EvalParams)
    ablation: AblationParams = field(default_factory=AblationParams)
    regression: RegressionParams = field(default_factory=RegressionParams)
    # name -> overrides of the sections above, e.g. {"model": {"output": "softmax"}}
    ablations: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the same, for variants on another data set (exercise 6): each fetches its own data
    dataset_ablations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        both = set(self.ablations) & set(self.dataset_ablations)
        if both:
            raise ParamsError(f"ablations and dataset_ablations share the names {sorted(both)}")
        for name, overrides in {**self.ablations, **self.dataset_ablations}.items():
            if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
                raise ParamsError(f"ablations: variant name {name!r} may hold only letters, "
                                  f"digits, '_' and '-'")
            bad = set(overrides) & {"ablation", "ablations", "dataset_ablations"}
            if bad:
                raise ParamsError(f"ablations.{name}: a variant cannot override {sorted(bad)}")
            try:
                variant_params(self, name)
            except ParamsError as exc:
                raise ParamsError(f"ablations.{name}: {exc}") from None


def _deep_merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for k, v in overrides.items():
        out[k] = _deep_merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def variant_params(params: "Params", name: str) -> "Params":
    """The params of ablation variant ``name``: the baseline sections with the variant's
    overrides, trained for ``ablation.max_steps``. A variant of ``dataset_ablations`` brings
    its whole ``data`` section (keys it leaves out take their defaults, not the main
    pipeline's ``data``: its data are its own). With ``ablation.trial_steps`` set, no
    variant trains longer: a budget in steps is cut to it, one in epochs (``max_epochs``)
    becomes exactly ``trial_steps`` steps, its schedule fitted to them.

    Each field remembers the params key it came from, so a recorded read names the key a
    stage must declare (``ablations.NAME.model.lrn``, ``ablation.max_steps``, ``train.seed``)."""
    trial = params.ablation.trial_steps  # read (recorded) whether set or not
    with not_recording():
        group = "ablations" if name in params.ablations else "dataset_ablations"
        variants = {**params.ablations, **params.dataset_ablations}
        if name not in variants:
            raise ParamsError(f"no ablation variant {name!r}; defined: {', '.join(variants)}")
        overrides = variants[name]
        base = dataclasses.asdict(params)
        base.pop("ablations")
        base.pop("dataset_ablations")
        # the budget is ablation.max_steps: the main run's length (train.max_steps,
        # train.max_epochs) never reaches a variant, nor its hash (reports/dvc.yaml)
        base["train"]["max_steps"] = base["ablation"]["max_steps"]
        base["train"]["max_epochs"] = None
        if group == "dataset_ablations":
            base["data"] = {}
        raw = _deep_merge(base, overrides)
        if trial is not None:
            raw["train"]["max_steps"] = (trial if raw["train"].get("max_epochs") is not None
                                         else min(raw["train"]["max_steps"], trial))
            raw["train"]["max_epochs"] = None
        merged = _build(Params, raw, "")
        for section in dataclasses.fields(Params):
            value = getattr(merged, section.name)
            if not isinstance(value, Section):
                continue
            origin = {}
            for f in dataclasses.fields(value):
                if trial is not None and section.name == "train" and f.name in ("max_steps",
                                                                                 "max_epochs"):
                    origin[f.name] = "ablation.trial_steps"
                elif f.name in overrides.get(section.name, {}):
                    origin[f.name] = f"{group}.{name}.{section.name}.{f.name}"
                elif section.name == "train" and f.name in ("max_steps", "max_epochs"):
                    origin[f.name] = "ablation.max_steps"
                elif section.name == "data" and group == "dataset_ablations":
                    origin[f.name] = None  # a default: no params key set it
            object.__setattr__(value, "_origin", origin)
    record_read(f"{group}.{name}")  # the variant's entry is read, even when it is empty
    return merged


# --------------------------------------------------------------------------- loader


def params_from_dict(raw: Optional[dict]) -> Params:
    """Validate a parsed params mapping (``None`` gives the defaults)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"expected a mapping at the top level of params, found {raw!r}")
    with not_recording():  # validation reads every key: not a use of them
        return _build(Params, raw, "")


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate ``path``; every problem is a :class:`ParamsError` naming the file."""
    path = Path(path)
    raw = read_params_yaml(path)
    try:
        return params_from_dict(raw)
    except ParamsError as exc:
        undo = (f" (a failed `dvc exp run -S` leaves its change in {path}: `git checkout "
                f"{path}` undoes it)" if os.environ.get("DVC_ROOT") else "")  # hostile case W25
        raise ParamsError(f"{path}: {exc}{undo}") from None


def to_dict(params: Any) -> dict:
    """The params (or one section) as plain data; every field counts as read."""
    return dataclasses.asdict(params)
