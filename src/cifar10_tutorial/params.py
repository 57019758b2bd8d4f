"""One typed, validated view of ``params.yaml``.

Every stage reads its parameters through :func:`load_params`. Each section of
the file is a frozen dataclass below; the loader checks every key against the
dataclass fields and every value against the field's type, so a misspelled key
(``dvc exp run -S +train.batchsize=64``) or a wrong type fails at once with a
message that names the key and the valid ones, instead of being ignored.

Every number's range is declared beside its field (``Annotated[int, Range(...)]``) and
checked by the same loader (:mod:`.param_types`); docs/params.md lists them.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from .param_types import (ParamsError, Range, Tolerance, build as _build, parse_tolerance,
                          read_params_yaml)


# Upper bounds far above any run of this network, yet low enough that a typo (an extra
# six zeros) fails at load rather than deep in torch, the OS or a loop that never ends.
STEPS = Range(1, 10**9)  # counts of steps (the reference's longest run: 10**6)
BATCH = Range(1, 65536)
UNIT = Range(0.0, 1.0)  # fractions
DECAY = Range(0.0, 1.0, hi_open=True, why="1 would never update the averages")
# wide: a rate that diverges is caught by the loop (the loss or the weights turn non-finite:
# a clear error); only a rate past any such test is a typo
LEARNING_RATE = Range(0.0, 1e6, lo_open=True)
WEIGHT_DECAY = Range(0.0, 10.0)
EPOCHS = Range(0.0, 1e6, lo_open=True)
# torch's collectives and torchrun's rendezvous keep their timeouts in fixed-width
# integers (1e300 s would overflow in every process and every restart); a day is past any
# stall a run survives
TIMEOUT = Range(0.0, 86400.0, lo_open=True, why="seconds, at most a day")


def _check_url(url: str) -> None:
    """``data.url``, when a URL (``scheme://...``), must parse, and carry no password:
    a malformed one would fail only at download, and credentials would be echoed in errors
    and logs (and read by urllib as part of the host)."""
    if "://" not in url:
        return  # official, or a plain path
    # never echo what stands before an '@': it may hold a password
    shown = re.sub(r"(://).*@", r"\1...@", url)
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is what raises for a bad one)
    except ValueError as exc:  # its text may quote a part of the password: not after an '@'
        why = f" ({exc})" if "@" not in url else ""
        raise ParamsError(f"data.url: expected a URL, found {shown!r}, which does not "
                          f"parse{why}; correct it, or give a plain path") from None
    if parts.password is not None or (parts.username is not None
                                      and parts.scheme in ("http", "https", "file")):
        raise ParamsError(f"data.url: credentials in URLs are not supported (found "
                          f"{shown!r}); remove them, and serve the archive where it needs "
                          f"none, or fetch it yourself and give data.url its local path")


@dataclass(frozen=True)
class DataParams:
    """Where the raw data comes from (download and preprocess stages)."""


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
        _check_url(self.url)
        if self.dataset == "svhn" and self.md5 not in (None, "official"):
            raise ParamsError("data.md5: SVHN has several files; use official (their official "
                              "md5s) or null (no check)")
        # read for one data set only: set for another, they would change nothing
        for key, value, default, reader in (("label", self.label, "fine", "cifar100"),
                                            ("svhn_extra", self.svhn_extra, False, "svhn")):
            if value != default and self.dataset != reader:
                raise ParamsError(f"data.{key}: {value!r} is read only for data.dataset: "
                                  f"{reader}, and the data set is {self.dataset}: it would "
                                  f"change nothing; drop it, or set data.dataset: {reader}")


@dataclass(frozen=True)
class ModelParams:
    """The network (docs/reference.md's layer table and the exercises' variants)."""


    head: Literal["fc", "local"] = "fc"  # local: exercise 2, locally connected local3/local4
    output: Literal["logits", "softmax"] = "logits"  # softmax: exercise 1
    lrn: bool = True  # false drops norm1 and norm2 (an ablation)
    # not in the tutorial: zero each output of local3 and local4 with this probability
    # while training (0: no dropout layer, the tutorial's network)
    dropout: Annotated[float, Range(0.0, 1.0, hi_open=True)] = 0.0
    # not in the tutorial: batch normalization after conv1 and conv2, before their ReLUs
    # (false: no layer, the tutorial's network); with lrn: false, BN in place of LRN
    batch_norm: bool = False


@dataclass(frozen=True)
class InputParams:
    """The training input pipeline."""


    shuffle: Literal["queue", "permutation"] = "queue"
    # queue fill before the first batch
    min_fraction_of_examples_in_queue: Annotated[float, UNIT] = 0.4
    flip: Optional[bool] = None  # random left-right flips; null: the data set's default


def queue_sizes(fraction: float, examples: int, batch_size: int) -> tuple[int, int]:
    """The shuffle queue over ``examples`` records (``input.shuffle: queue``): what it
    holds before the first batch (``min_fraction_of_examples_in_queue`` of them) and its
    capacity, 3 batches more (cifar10_input.py's). The one place both are derived: the
    input pipeline's queue and the report's table read them here."""
    min_after = int(fraction * examples)
    return min_after, queue_capacity(min_after, batch_size)


def queue_capacity(min_after_dequeue: int, batch_size: int) -> int:
    return min_after_dequeue + 3 * batch_size


def shard_file_counts(file_counts: list[int], rank: int, world: int) -> list[int]:
    """Records per file that rank ``rank`` gets when it takes every ``world``-th record."""
    return [len(range(rank, c, world)) for c in file_counts]



@dataclass(frozen=True)
class TrainParams:
    """Training (docs/reference.md, "Training")."""


    batch_size: Annotated[int, BATCH] = 128  # per device
    # processes (one per GPU, or CPU processes) under torchrun; at launch also no more than
    # the node's GPUs (or, on the CPU, its CPUs): training/distributed.py check_devices
    num_devices: Annotated[int, Range(1, 1024)] = 1
    max_steps: Annotated[int, STEPS] = 100000
    initial_lr: Annotated[float, LEARNING_RATE] = 0.1
    # below 0 the rate turned negative at the first decay; 0 stopped learning there
    lr_decay_factor: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 0.1
    epochs_per_decay: Annotated[float, EPOCHS] = 350.0
    weight_decay: Annotated[float, WEIGHT_DECAY] = 0.004  # on local3/local4 weights, x sum(W^2)/2
    moving_average_decay: Annotated[float, DECAY] = 0.9999
    seed: Annotated[int, Range(0, 2**63 - 1, why="torch.manual_seed takes 64 bits")] = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    log_every: Annotated[int, STEPS] = 10
    schedule: Literal["tutorial", "fast"] = "tutorial"  # fast: the `fast:` section (docs/training.md)
    # set: the run length in epochs, instead of max_steps
    max_epochs: Optional[Annotated[float, EPOCHS]] = None
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast of the forward pass (GPUs)
    channels_last: bool = True  # NHWC activations (faster convolutions on CPU and GPU)



@dataclass(frozen=True)
class RunParams:
    """How a run is carried out, never what it computes (what follows from that:
    docs/training.md#what-each-stages-hash-covers); ``capture_step`` changes float
    rounding on a GPU only, as another kernel would."""


    checkpoint_every: Annotated[int, STEPS] = 1000  # steps between checkpoints (and the last step)
    summary_every: Annotated[int, STEPS] = 100  # steps between TensorBoard summaries
    # torchrun restarts of a failed multi-process job (then resume)
    max_restarts: Annotated[int, Range(0, 100)] = 3
    # a rank that stops answering fails the job after this
    collective_timeout_s: Annotated[float, TIMEOUT] = 300.0
    # several nodes: how long each waits for the others to join
    join_timeout_s: Annotated[float, TIMEOUT] = 600.0
    # > 0: a background thread makes the shuffle queue's next picks; 0: made inline (the same
    # batches either way, and inline is the fastest on CPU; the tutorial used 16 threads). Bounded
    # at 64: more threads only contend for the cores (the OS refuses them long before a million)
    queue_threads: Annotated[int, Range(0, 64, why="more threads than cores only contend "
                                                    "for them")] = 0
    # the whole train step as one CUDA graph (training/optimization.py CapturedStep): auto on
    # a GPU where it can (one process, no dropout), always (the CPU runs the graph's body as
    # it is, the same bits as never), never. The same arithmetic as eager, the rate read from
    # a tensor: equal to float rounding on a GPU, bit for bit on the CPU. (Not on/off: YAML
    # reads those as true/false)
    capture_step: Literal["auto", "always", "never"] = "auto"


@dataclass(frozen=True)
class FastParams:
    """``train.schedule: fast``: the same network and data, a modern optimiser and schedule."""


    peak_lr: Annotated[float, LEARNING_RATE] = 0.05
    momentum: Annotated[float, Range(0.0, 1.0, hi_open=True)] = 0.9
    nesterov: bool = True
    # linear from 0 to peak_lr, then linear down to the end
    warmup_epochs: Annotated[float, Range(0.0, 1e6)] = 1.0
    # the rate at the last step, as a fraction of peak_lr
    final_lr_fraction: Annotated[float, UNIT] = 0.0
    label_smoothing: Annotated[float, Range(0.0, 1.0, hi_open=True)] = 0.1
    # on every weight matrix and kernel (not biases), x sum(W^2)/2
    weight_decay: Annotated[float, WEIGHT_DECAY] = 1e-3
    moving_average_decay: Annotated[float, DECAY] = 0.999


@dataclass(frozen=True)
class EvalParams:
    """Evaluation (docs/reference.md, "Evaluation")."""


    batch_size: Annotated[int, BATCH] = 250
    device: Literal["auto", "cpu", "cuda"] = "auto"  # the eval stage's (train.device: train's)
    # watch mode: seconds between evaluations; above 0 (0 would spin a core on waiting)
    # and at most a day (a wait past the platform's time_t cannot be slept)
    interval_secs: Annotated[float, Range(0.0, 86400.0, lo_open=True,
                                          why="seconds, at most a day")] = 300.0
    flip_tta: bool = False  # also report precision of image + mirror image (*_flip metrics)
    # > 0: the train stage evaluates the held-out split this often; 0: never
    every_steps: Annotated[int, Range(0, 10**9)] = 5000
    # time to these held-out precisions
    targets: list[Annotated[float, Range(0.0, 1.0, lo_open=True)]] = field(
        default_factory=lambda: [0.80, 0.84, 0.85, 0.86])

    def __post_init__(self) -> None:
        # each target is one row of the curve's times (time_to_target.json): one given twice
        # is a slip (another target meant), and would time nothing more
        twice = sorted({t for t in self.targets if self.targets.count(t) > 1})
        if twice:
            raise ParamsError(f"eval.targets: expected each precision once, found "
                              f"{', '.join(map(str, twice))} more than once in {self.targets}; "
                              f"give each target once")


@dataclass(frozen=True)
class AblationParams:
    """What every ablation variant shares."""


    # the training budget of each variant (replaces train.max_steps)
    max_steps: Annotated[int, STEPS] = 10000
    # set: a trial of the whole exercise pipeline; every variant trains at most this many
    # steps, those with a budget of their own (tutorial_100k, schedule_*) included
    trial_steps: Optional[Annotated[int, STEPS]] = None
    # in a trial (trial_steps set): precision over the first this many held-out images
    # only (null: all of them); evaluating is most of a trial's time
    trial_eval_images: Optional[Annotated[int, Range(1, 10**9)]] = 2000


@dataclass(frozen=True)
class RegressionParams:
    """The regression gate (the `regression` stage): this run's metrics against a baseline."""

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


# A variant's name becomes a DVC stage's name (ablation@NAME), folder names and a command
# line's argument: a letter first (never an option such as --help), then letters, digits,
# '_' and '-', short enough for any file system's names.
VARIANT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
VARIANT_NAME_LIMIT = 64

# What no variant may override, and where it goes instead. An ablation variant trains on
# the main pipeline's prepared data: a data: section there would be ignored.
_SHARED_BY_ALL = {"ablation": "what every variant shares; a variant's own budget is its "
                              "train.max_steps or train.max_epochs",
                  "ablations": "the variants themselves",
                  "dataset_ablations": "the variants themselves",
                  "regression": "the main pipeline's gate, in params.yaml"}
NOT_IN_A_VARIANT = {
    "ablations": {"data": "data-set variants go under dataset_ablations:", **_SHARED_BY_ALL},
    "dataset_ablations": _SHARED_BY_ALL}


def check_variant_name(name: Any, group: str = "ablations") -> str:
    """``name`` if it is a valid variant name (:data:`VARIANT_NAME`, at most
    :data:`VARIANT_NAME_LIMIT` characters), else one line saying what a name is."""
    rule = (f"a string starting with an ASCII letter (a-z, A-Z), then ASCII letters, digits, "
            f"'_' or '-', at most {VARIANT_NAME_LIMIT} characters")
    if not isinstance(name, str):
        kind = ("true or false" if isinstance(name, bool) else "null" if name is None
                else "a number")
        fix = "quote it" if isinstance(name, bool) else "rename it"
        raise ParamsError(f"{group}: variant name {name!r} must be {rule} (YAML reads this "
                          f"key as {kind}: {fix})")
    shown = repr(name) if len(name) <= VARIANT_NAME_LIMIT else f"{name[:20]!r}..."
    if not VARIANT_NAME.fullmatch(name):
        raise ParamsError(f"{group}: variant name {shown} must be {rule}")
    if len(name) > VARIANT_NAME_LIMIT:
        raise ParamsError(f"{group}: variant name {shown} has {len(name)} characters; a name "
                          f"is {rule}")
    if name in RESERVED_NAMES:
        raise ParamsError(f"{group}: variant name {shown} is {RESERVED_NAMES[name]}; give the "
                          f"variant another name")
    return name


def defined_variants(params_yaml: Path) -> Optional[dict[str, set[str]]]:
    """The variant names ``params_yaml`` (reports/params.yaml) defines, by group
    (``ablations``, ``dataset_ablations``), read as DVC and the stages read it (YAML 1.2:
    a variant ``on:`` is named "on"); None where it cannot be read (the stages say why
    where it matters; a FIFO is never read)."""
    import yaml

    from .param_types import load_yaml12

    if not Path(params_yaml).is_file():
        return None
    try:
        p = load_yaml12(Path(params_yaml).read_text(encoding="utf-8")) or {}
        return {group: ({str(n) for n in p[group]} if isinstance(p.get(group), dict) else set())
                for group in ("ablations", "dataset_ablations")}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return None


# names a variant cannot take: its checkpoint mirror's folder would be another run's
RESERVED_NAMES = {"train": "the main pipeline's run in the checkpoint mirror",
                  "trials": "the folder of the trials' runs in the checkpoint mirror"}


@dataclass(frozen=True)
class Params:
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
        for group in ("ablations", "dataset_ablations"):
            for name in getattr(self, group):
                check_variant_name(name, group)
        both = set(self.ablations) & set(self.dataset_ablations)
        if both:
            raise ParamsError(f"ablations and dataset_ablations share the names {sorted(both)}")
        # a variant's name is its folders' name: on a file system that ignores case (macOS's
        # and Windows' by default) two names in other cases are one folder
        seen = {name.lower(): (f"the reserved name {name!r} ({why})", None)
                for name, why in RESERVED_NAMES.items()}
        for group in ("ablations", "dataset_ablations"):
            for name in getattr(self, group):
                other, _ = seen.setdefault(name.lower(), (f"{group}.{name}", name))
                if other != f"{group}.{name}":
                    raise ParamsError(f"{group}.{name}: differs from {other} only in case, and "
                                      f"a variant's name is its folders' name: one folder on a "
                                      f"file system that ignores case (macOS's and Windows' by "
                                      f"default); give the variant another name")
        # each group is compared within itself: the ablations train on the data the
        # pipeline prepared, which this file does not name, and a data-set variant on the
        # data it fetches (the report compares the two groups on the data they recorded:
        # report/results.py refuse_twins_across_groups)
        for group in ("ablations", "dataset_ablations"):
            computed: dict[str, tuple[str, dict, dict]] = {}
            for name, overrides in getattr(self, group).items():
                for section, why in NOT_IN_A_VARIANT[group].items():
                    if section in overrides:
                        raise ParamsError(f"{group}.{name}: a variant cannot override "
                                          f"{section}: ({why})")
                _variant_sections(overrides, group, name)
                try:
                    made = variant_params(self, name)
                except ParamsError as exc:
                    raise ParamsError(f"{group}.{name}: {exc}") from None
                _refuse_unread(overrides, made, group, name)
                _refuse_twin(_merged(self, name, trial=False), f"{group}.{name}", computed)


# what a variant may set that only one value of another setting reads: each schedule's
# (training/optimization.py: the rate's rule, the weight decay and the averages' decay of
# each), and the shuffle queue's fill (training/inputs.py: a permutation has no queue)
# each entry: the keys, the setting that decides whether they are read, which of its
# values read them (a test), and those values in words
READ_ONLY_UNDER = (
    ("train", ("initial_lr", "lr_decay_factor", "epochs_per_decay", "weight_decay",
               "moving_average_decay"), ("train", "schedule"), lambda v: v == "tutorial",
     "train.schedule: tutorial"),
    ("fast", tuple(f.name for f in dataclasses.fields(FastParams)), ("train", "schedule"),
     lambda v: v == "fast", "train.schedule: fast"),
    ("input", ("min_fraction_of_examples_in_queue",), ("input", "shuffle"),
     lambda v: v == "queue", "input.shuffle: queue"),
    # the held-out curve (training/monitoring.py HeldOut) times the targets; 0 makes none
    ("eval", ("targets",), ("eval", "every_steps"), lambda v: v > 0, "eval.every_steps above 0"),
)

# What changes how a run is carried out and never what it computes: the run section
# (RunParams), where a stage runs (as checkpoint_files.NOT_RUN_DEFINING), which steps log
# the loss (its average is updated at every step: training/train.py), the batch of an
# evaluation whose precision does not depend on it, and the watch mode's wait. A variant
# that differs from another only in these trains and scores exactly as that one.
RESULT_NEUTRAL = {"run": None, "train": ("device", "log_every"),
                  "eval": ("batch_size", "device", "interval_secs")}


def _what_it_computes(made: "Params", num_train: Optional[int] = None,
                      flip: Optional[bool] = None,
                      file_counts: Optional[list[int]] = None) -> tuple[dict, dict]:
    """``made`` as its run computes it, and why each setting left out or rewritten computes
    nothing of its own (dotted key -> the reason in words). What a run computes, the same
    however written: :data:`RESULT_NEUTRAL` left out; ``input.flip`` null as the data set's
    default (``flip``, where known); a setting its schedule or queue never reads
    (:data:`READ_ONLY_UNDER`); the held-out targets as the set timed (training/monitoring.py
    sorts them); a held-out interval past the budget as the budget (only the last step is
    evaluated); the averages' decay where the TF rule's step term (1 + n) / (10 + n) stays
    below it for the whole budget; and with ``num_train`` (the training images) a budget in
    epochs as its steps, and the tutorial's decay interval as steps, or left out where no
    decay falls within the budget (training/optimization.py's formulas), and the queue's
    fill as the records each process's queue holds (``file_counts``: the records of each
    training file, which the processes share out record by record; by default one file)."""
    raw = dataclasses.asdict(made)
    why: dict[str, str] = {}
    for section, keys in RESULT_NEUTRAL.items():
        for key in (list(raw[section]) if keys is None else keys):
            raw[section].pop(key)
            why[f"{section}.{key}"] = "how a run is carried out, not what it computes"
    _same_archive(raw["data"], why)
    tr, ev, fast = raw["train"], raw["eval"], raw["fast"]
    if raw["input"]["flip"] is None and flip is not None:
        raw["input"]["flip"] = flip
        why["input.flip"] = f"null is {str(flip).lower()} on this data set"
    for section, keys, (where, setting), reads, read_under in READ_ONLY_UNDER:
        if not reads(raw[where][setting]):
            for key in keys:
                raw[section][key] = None
                why[f"{section}.{key}"] = f"read only under {read_under}"
    if ev["targets"]:
        ev["targets"] = sorted(set(ev["targets"]))
        why["eval.targets"] = "the same targets (the curve times them as a set)"
    steps = tr["max_steps"] if tr["max_epochs"] is None else None
    global_batch = tr["batch_size"] * tr["num_devices"]
    if num_train is not None and tr["max_epochs"] is not None:
        steps = max(1, math.ceil(tr["max_epochs"] * num_train / global_batch))
        tr["max_steps"], tr["max_epochs"] = steps, None
        why["train.max_epochs"] = why["train.max_steps"] = \
            f"the same {steps:,} steps of {num_train:,} training images"
    if steps is None:
        return raw, why
    if ev["every_steps"] > steps:
        ev["every_steps"] = steps
        why["eval.every_steps"] = f"past the {steps:,} steps: the last step's evaluation only"
    averages = fast if tr["schedule"] == "fast" else tr
    if (1.0 + steps) / (10.0 + steps) <= averages["moving_average_decay"]:
        averages["moving_average_decay"] = None
        why[f"{'fast' if averages is fast else 'train'}.moving_average_decay"] = \
            f"above the step term (1 + n) / (10 + n) of all {steps:,} steps, which sets it"
    if num_train is not None and tr["schedule"] == "tutorial":
        decay_steps = max(1, int(num_train / global_batch * tr["epochs_per_decay"]))
        if steps <= decay_steps:
            tr["epochs_per_decay"] = tr["lr_decay_factor"] = None
            why["train.epochs_per_decay"] = why["train.lr_decay_factor"] = \
                f"its first decay falls past the {steps:,} steps"
        else:
            tr["epochs_per_decay"] = ("steps", decay_steps)
            why["train.epochs_per_decay"] = f"the same decay every {decay_steps:,} steps"
    if num_train is not None and raw["input"]["shuffle"] == "queue":
        # each process's queue holds a whole number of records of its share of the data
        # (training/inputs.py run_shape): fills within one record are the same queues
        world, counts = tr["num_devices"], file_counts or [num_train]
        shards = [sum(shard_file_counts(counts, rank, world)) for rank in range(world)]
        queues = tuple(queue_sizes(raw["input"]["min_fraction_of_examples_in_queue"], shard,
                                   tr["batch_size"]) for shard in shards)
        raw["input"]["min_fraction_of_examples_in_queue"] = ("records", queues)
        why["input.min_fraction_of_examples_in_queue"] = (
            f"the same queue of {queues[0][0]:,} records of {num_train:,}" if world == 1 else
            f"the same queues of {', '.join(f'{q[0]:,}' for q in queues)} records of the "
            f"{', '.join(f'{n:,}' for n in shards)} each of the {world} processes trains on")
    if num_train is not None and tr["schedule"] == "fast":
        warmup = min(fast["warmup_epochs"] * num_train / global_batch, steps - 1)
        fast["warmup_epochs"] = ("steps", warmup)
        why["fast.warmup_epochs"] = "the same warm-up steps"
    return raw, why


def _same_archive(data: dict, why: dict) -> None:
    """``data`` (a DataParams as a dict) as the bytes it fetches: where data.md5 gives
    the archive's md5, the download refuses any other bytes, so the url it comes from
    computes nothing (a mirror, another spelling); else a local file's url as its path
    (file:///x is /x, as data/transfer.py reads it), a path otherwise as written: without
    an md5, ``link/../x`` need not be ``x`` (through a link it is another folder's)."""
    # (official, written out as the data set's own url or md5, is not compared as them:
    # those facts are data/datasets.py's, which this module's stages do not hash)
    if isinstance(data["md5"], str) and data["md5"] != "official":
        data["md5"], data["url"] = data["md5"].lower(), None
        why["data.url"] = why["data.md5"] = ("the same archive: data.md5 fixes its bytes, "
                                             "wherever it comes from")
        return
    parsed = urllib.parse.urlparse(data["url"])
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        data["url"] = _as_written(urllib.request.url2pathname(parsed.path))
        why["data.url"] = "the same file, as a file:// URL or its path"
    elif not parsed.scheme or len(parsed.scheme) == 1:  # a plain path (C:\\ on Windows)
        if _as_written(data["url"]) != data["url"]:
            data["url"] = _as_written(data["url"])
            why["data.url"] = "the same file: a path with its '//' and '/./' taken out"


def _as_written(path: str) -> str:
    """``path`` with what never names another file taken out: repeated slashes and ``.``
    folders (``..`` stays: through a link it is another folder's parent)."""
    head = "/" if path.startswith("/") else ""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return head + "/".join(parts) if parts else (head or ".")


def _dotted(raw: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in raw.items():
        out.update(_dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _computes_key(made: "Params", num_train: Optional[int] = None,
                  flip: Optional[bool] = None, file_counts: Optional[list[int]] = None) -> str:
    return repr(sorted(_dotted(_what_it_computes(made, num_train, flip,
                                                 file_counts)[0]).items()))


def twins(raw: dict, num_train: Optional[int] = None, flip: Optional[bool] = None,
          file_counts: Optional[list[int]] = None) -> dict[str, str]:
    """Of the variants of a parsed reports/params.yaml, each that trains and scores exactly
    as one before it -> that one (what :class:`Params` refuses, and with ``num_train`` and
    ``flip``, those of the data the ``ablations`` variants train on, what their stages
    refuse: :func:`refuse_twin_on_data`), at the file's budgets: for a tool that cuts every
    variant to one short budget (tools/check_code.py), where a variant of a budget of its
    own becomes its baseline's twin. None where the file is refused for anything else (its
    own error is the stage's to give)."""
    found: dict[str, str] = {}
    for group in ("ablations", "dataset_ablations"):
        seen: dict[str, str] = {}  # within each group, as the loader (Params) compares
        for name, overrides in (raw.get(group) or {}).items():
            one = {**raw, "ablations": {}, "dataset_ablations": {}, group: {name: overrides}}
            try:
                made = _merged(params_from_dict(one), name, trial=False)
                keys = [_computes_key(made)]
                if group == "ablations" and num_train is not None:
                    keys.append("on the data " + _computes_key(made, num_train, flip,
                                                               file_counts))
            except (ParamsError, TypeError, AttributeError):
                return {}
            other = next((seen[key] for key in keys if key in seen), None)
            if other is not None:
                found[name] = other
            else:
                seen.update(dict.fromkeys(keys, name))
    return found


def _twin_line(label: str, other: str, made: dict, other_made: dict, why: dict) -> str:
    differ = sorted(k for k, v in _dotted(made).items() if _dotted(other_made).get(k) != v)
    reasons: dict[str, list[str]] = {}
    for key in differ:
        reasons.setdefault(why.get(key, "the same value"), []).append(key)
    how = ("; ".join(f"{', '.join(keys)}: {reason}" for reason, keys in reasons.items())
           if differ else "the same params")
    if differ:
        how = f"it differs only in {how}"
    return (f"{label} trains and scores exactly as {other} ({how}): its results would be "
            f"{other}'s, read as an effect; drop the variant, or change a setting that "
            f"computes")


def _refuse_twin(made: "Params", label: str, computed: dict) -> None:
    """A variant that trains and scores exactly as another (:func:`_what_it_computes`: the
    same params but for :data:`RESULT_NEUTRAL`, settings never read or never reached at its
    budget, or none at all: a second ``{}`` beside the baseline's): its results would be the
    other's, read as its overrides' effect; one line naming both. Compared at the variants'
    full budgets (a trial cuts every budget to one length), without the training data
    (:func:`refuse_twin_on_data` compares with them, where the stage has loaded them)."""
    key, why = _computes_key(made), _what_it_computes(made)[1]
    if key in computed:
        other, other_made, other_why = computed[key]
        raise ParamsError(_twin_line(label, other, dataclasses.asdict(made), other_made,
                                     {**other_why, **why}))
    computed[key] = (label, dataclasses.asdict(made), why)


def refuse_twin_on_data(params: "Params", name: str, num_train: Optional[int],
                        flip: Optional[bool], file_counts: Optional[list[int]] = None) -> None:
    """Where a variant's training data are known (``num_train`` images, flipped by default
    or not; None: not known yet): refuse it when a variant before it, training on the same
    data, computes what it does at these data (a budget in epochs equal to another's
    steps, a learning-rate decay that falls past its budget, flips written as the data
    set's default, a queue fill that comes to the same records; ``file_counts``: the
    records of each training file, which the processes of several devices share out): one
    line naming both, as the loader's (:func:`_refuse_twin`)."""
    group = "ablations" if name in params.ablations else "dataset_ablations"
    mine = _merged(params, name, trial=False)
    key = _computes_key(mine, num_train, flip, file_counts)
    for other in getattr(params, group):
        if other == name:
            return
        theirs = _merged(params, other, trial=False)
        # the same data (however their source is spelled) and the same computation
        if _computes_key(theirs, num_train, flip, file_counts) == key:
            why = {**_what_it_computes(theirs, num_train, flip, file_counts)[1],
                   **_what_it_computes(mine, num_train, flip, file_counts)[1]}
            raise ParamsError(_twin_line(f"{group}.{name}", f"{group}.{other}",
                                         dataclasses.asdict(mine), dataclasses.asdict(theirs),
                                         why))


def twin_on_the_same_data(params: "Params", name: str, other: str,
                          num_train: Optional[int] = None,
                          flip: Optional[bool] = None) -> Optional[str]:
    """Where the runs of ``name`` and ``other`` (one of each group) recorded the same
    training data (their train/provenance.json's data_hash: the same bytes, however the
    data were named or fetched): the line of :func:`_twin_line` when ``name`` computes
    what ``other`` does there (the data section aside, which the bytes settle; compared
    at the full budgets, as the loader compares, and with ``num_train`` training images
    flipped by default or not, as the stages compare: :func:`refuse_twin_on_data`), else
    None."""
    made, theirs = (_what_it_computes(_merged(params, n, trial=False), num_train, flip)
                    for n in (name, other))
    mine_raw, their_raw = made[0], theirs[0]
    mine_raw.pop("data"), their_raw.pop("data")
    if _dotted(mine_raw) != _dotted(their_raw):
        return None
    group = "ablations" if name in params.ablations else "dataset_ablations"
    their_group = "ablations" if other in params.ablations else "dataset_ablations"
    mine, their = (dataclasses.asdict(_merged(params, n, trial=False)) for n in (name, other))
    why = {**theirs[1], **made[1]}
    for key in _dotted({"data": mine["data"]}):
        why[key] = "the same training data, by the data hash their runs recorded"
    return _twin_line(f"{group}.{name}", f"{their_group}.{other}", mine, their, why)


def _refuse_unread(overrides: dict, made: "Params", group: str, name: str) -> None:
    """A variant's override that the variant's own params never read (``fast.peak_lr``
    under the tutorial's schedule, the queue's fill under a permutation), or a budget given
    twice (train.max_epochs replaces train.max_steps): it would train exactly as its
    baseline, and its results would be read as the override's effect (none); one line
    naming it."""
    for section, keys, (where, setting), reads, read_under in READ_ONLY_UNDER:
        given = overrides.get(section)
        key = next((k for k in keys if isinstance(given, dict) and k in given), None)
        actual = getattr(getattr(made, where), setting)
        if key is not None and not reads(actual):
            raise ParamsError(f"{group}.{name}: {section}.{key} is read only under "
                              f"{read_under}, and the variant trains under {where}.{setting}:"
                              f" {actual}: it would change nothing; set {read_under} in the "
                              f"variant too, or drop {section}.{key}")
    train = overrides.get("train")
    if isinstance(train, dict) and train.get("max_steps") is not None \
            and train.get("max_epochs") is not None:
        raise ParamsError(f"{group}.{name}: train.max_steps and train.max_epochs both set, "
                          f"and train.max_epochs replaces train.max_steps: the steps would "
                          f"change nothing; set one of them")


def _variant_sections(overrides: dict, group: str, name: str) -> None:
    """A variant's overrides are sections a variant may set, each a mapping: one line for
    anything else, listing those sections (not every section of the file), and for a
    dotted key (``train.seed: 5``) the nested form it takes here."""
    allowed = [f.name for f in dataclasses.fields(Params)
               if f.name not in {*NOT_IN_A_VARIANT[group], "ablations", "dataset_ablations"}]
    for key in overrides:
        head, dot, rest = str(key).partition(".")
        if key in allowed:
            if not isinstance(overrides[key], dict):  # merged into its section as a whole
                raise ParamsError(f"{group}.{name}.{key}: expected a mapping of {key}'s "
                                  f"settings (e.g. {key}: {{...}}), found "
                                  f"{_kind(overrides[key])}")
            continue
        how = (f"; write it nested: {head}: {{{rest}: {overrides[key]!r}}}"
               if dot and head in allowed else "")
        raise ParamsError(f"{group}.{name}: {key!r} is not a section a variant may set "
                          f"(those are {', '.join(allowed)}){how}")


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
    becomes exactly ``trial_steps`` steps, its schedule fitted to them."""
    return _merged(params, name, trial=True)


def _merged(params: "Params", name: str, trial: bool) -> "Params":
    """:func:`variant_params`, or with ``trial`` false the variant at its full budget
    (``ablation.trial_steps`` left aside)."""
    trial = params.ablation.trial_steps if trial else None
    group = "ablations" if name in params.ablations else "dataset_ablations"
    variants = {**params.ablations, **params.dataset_ablations}
    if name not in variants:
        raise ParamsError(f"no ablation variant {name!r}; defined: {', '.join(variants)}")
    base = dataclasses.asdict(params)
    base.pop("ablations")
    base.pop("dataset_ablations")
    # the budget is ablation.max_steps: the main run's length (train.max_steps,
    # train.max_epochs) never reaches a variant, nor its hash (reports/dvc.yaml)
    base["train"]["max_steps"] = base["ablation"]["max_steps"]
    base["train"]["max_epochs"] = None
    if group == "dataset_ablations":
        base["data"] = {}
    raw = _deep_merge(base, variants[name])
    if trial is not None:
        raw["train"]["max_steps"] = (trial if raw["train"].get("max_epochs") is not None
                                     else min(raw["train"]["max_steps"], trial))
        raw["train"]["max_epochs"] = None
    return _build(Params, raw, "")


# --------------------------------------------------------------------------- loader


def _kind(value: Any) -> str:
    """What YAML read, by type only (never the content: a file of another kind linked in
    its place may hold anything)."""
    return {str: "a string", list: "a list", bool: "true or false", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def params_from_dict(raw: Optional[dict]) -> Params:
    """Validate a parsed params mapping (``None`` gives the defaults)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"expected a mapping at the top level of params, found {_kind(raw)}")
    return _build(Params, raw, "")


@dataclass(frozen=True)
class ParamsFile:
    """One of the two params files: ``name`` (as messages say it), the ``sections`` it may
    hold, those it must hold (``required``), and what an empty one would mean."""

    name: str
    sections: tuple[str, ...]
    required: tuple[str, ...]
    empty: str


_BASELINE = ("model", "input", "train", "run", "fast", "eval")
# the main pipeline's (dvc.yaml): its data, its run and its regression gate
MAIN = ParamsFile("params.yaml", ("data", *_BASELINE, "regression"), (),
                  "it would run every default, the official download and 100,000 steps; "
                  "copy the repository's params.yaml and edit it")
# the exercise pipeline's (reports/dvc.yaml): the variants' baseline and the variants;
# reports/dvc.yaml's foreach reads both groups of variants
EXERCISES = ParamsFile("reports/params.yaml",
                       (*_BASELINE, "ablation", "ablations", "dataset_ablations"),
                       ("ablations", "dataset_ablations"),
                       "the exercise pipeline's baseline and variants are set in it; copy "
                       "the repository's reports/params.yaml and edit it (`ablations: {}` and "
                       "`dataset_ablations: {}` run no variant)")
# where a section of the other file belongs, when it is found in the wrong one
_MOVE = {"data": " (the variants train on the main pipeline's prepared data; a variant on "
                 "another data set goes under dataset_ablations: here)",
         "regression": " (the main pipeline's gate)"}


def params_file(path: str | Path) -> ParamsFile:
    """The kind of params file ``path`` is: reports/params.yaml's, or else the main one's."""
    return EXERCISES if Path(path).parts[-2:] == ("reports", "params.yaml") else MAIN


def check_sections(raw: dict, file: ParamsFile) -> None:
    """Every top-level key of ``raw`` one that ``file`` holds; a section of the other file
    named with the file it belongs in."""
    other = EXERCISES if file is MAIN else MAIN
    for section in raw:
        if section in file.sections:
            continue
        if section in other.sections:
            raise ParamsError(f"{section}: lives in {other.name}, not in {file.name}"
                              f"{_MOVE.get(section, '') if file is EXERCISES else ''}; "
                              f"{'move it there' if file is MAIN else 'remove it here'}")
        raise ParamsError(f"unknown key {section} in params; valid keys in the top level of "
                          f"{file.name}: {', '.join(file.sections)}")
    train = raw.get("train")
    budget = [k for k in ("max_steps", "max_epochs")
              if file is EXERCISES and isinstance(train, dict) and k in train]
    if budget:  # variant_params replaces it: set here, it would be read by nothing
        raise ParamsError(f"train.{budget[0]}: the variants' budget is ablation.max_steps (a "
                          f"variant's own train.max_steps or max_epochs goes under its name in "
                          f"ablations:); remove it from the train: section here")
    for section in file.required:
        if section not in raw:
            raise ParamsError(f"has no {section}: section, which reports/dvc.yaml reads; "
                              f"add it (`{section}: {{}}` for no variant)")


def _the_files_kind(raw: dict, file: ParamsFile) -> None:
    """A file of the other kind given where ``file``'s is read (--params): it holds a section
    only the other file holds, and none only ``file`` holds. Said as such, before any of
    its sections is named as misplaced."""
    other = EXERCISES if file is MAIN else MAIN
    theirs = [s for s in raw if s in other.sections and s not in file.sections]
    if theirs and not any(s in file.sections and s not in other.sections for s in raw):
        raise ParamsError(f"the kind of file {other.name} is (it holds {theirs[0]}:), but this "
                          f"reads {file.name}'s ({', '.join(file.sections)}); give --params "
                          f"such a file")


def load_params(path: str | Path = "params.yaml", file: Optional[ParamsFile] = None) -> Params:
    """Read and validate ``path``, a params file of kind ``file`` (by default from its
    path: :func:`params_file`); every problem is a :class:`ParamsError` naming the file.
    Under DVC the message says how to undo a failed `dvc exp run -S` (the exercise stages'
    results are persist outputs: DVC leaves them in place, so the file is all to undo).
    A params file that is a link is read, with a warning: `dvc exp run -S` rewrites the
    file it points at (another project's, a shared one), reformatted."""
    path = Path(path)
    file = file or params_file(path)
    if path.is_symlink():
        import logging

        logging.getLogger(__name__).warning(
            "warning: %s is a link to %s: `dvc exp run -S` and `dvc exp apply` rewrite that "
            "file; keep a copy of your own here to keep it as it is", path, os.path.realpath(path))
    raw = read_params_yaml(path, empty=file.empty)
    try:
        if isinstance(raw, dict):
            _the_files_kind(raw, file)
            check_sections(raw, file)
        return params_from_dict(raw)
    except ParamsError as exc:
        undo = ""
        if os.environ.get("DVC_ROOT"):  # the usual cause under DVC
            undo = (f" (a failed `dvc exp run -S` leaves its change in {path}: "
                    f"`git checkout {path}` undoes it)")
        raise ParamsError(f"{path}: {exc}{undo}") from None


def to_dict(params: Any) -> dict:
    """The params (or one section) as plain data; every field counts as read."""
    return dataclasses.asdict(params)
