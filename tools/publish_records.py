"""What publish reads, read and checked whole before anything is written: the model file
and the finished variant's records (train and eval provenance, metrics, variant.json),
checked to be one run of the variant named, and every field the model card states
checked to be there and of its kind.

A field found missing only while the card was written left the published folder half
replaced (new weights beside the old card's figures); a model swapped in under the same
step was published with another run's card. Hence: everything here, first.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.eval_files import loads_once
from cifar10_tutorial.checkpoint_files import run_defining
from cifar10_tutorial.files import read_small_file, sha256_of
from cifar10_tutorial.model_files import load_model_file
from cifar10_tutorial.provenance import params_hash
from cifar10_tutorial.report.results import check_results_folder, refuse_other_network_of

RERUN = "rerun the variant (`dvc repro reports/dvc.yaml`)"
USE = ("the same command that wrote it: `cifar10 publish NAME` (or `python "
       "tools/publish.py NAME`) after the variant has finished "
       "(`dvc repro reports/dvc.yaml`)")
# variant.json's key -> where the model file's params hold the same setting: a model
# trained under other settings (another seed, batch, head...) is not the variant's
VARIANT_PARAMS = {"seed": ("train", "seed"), "batch_size": ("train", "batch_size"),
                  "schedule": ("train", "schedule"), "world_size": ("train", "num_devices"),
                  "shuffle": ("input", "shuffle"),
                  "min_fraction_of_examples_in_queue": ("input",
                                                        "min_fraction_of_examples_in_queue"),
                  "head": ("model", "head"), "output": ("model", "output"),
                  "lrn": ("model", "lrn")}
NUMBER, INTEGER, TEXT = (int, float), int, str


@dataclass(frozen=True)
class Records:
    """A finished variant's model and records, checked to belong together."""

    name: str
    model: Path
    results: Path
    ckpt: dict
    train: dict
    eval: dict
    metrics: dict
    variant: dict
    sha256: str
    size: int


GIVE_RESULTS = "give --results the variant's results folder"


def read_json(path: Path, fix: Optional[str] = None) -> dict:
    """A JSON record; else one line naming it and ``fix``, what to do (by default, for a
    record of the variant's results: publish a finished variant, rerun it, or give
    --results its folder)."""
    try:  # a regular file of a record's size (a FIFO would block for ever)
        doc = loads_once(read_small_file(path, 16 << 20).decode("utf-8"))
    except FileNotFoundError:
        raise PipelineError(f"{path}: not found; "
                            f"{fix or 'publish a variant that has finished, with ' + USE}") \
            from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # a key twice too
        raise PipelineError(f"{path}: not valid JSON ({str(exc)[:80]}); {fix or RERUN}") \
            from None
    except OSError as exc:  # a folder or file in the way, a FIFO, a loop of links
        raise PipelineError(f"{path}: expected a record (a JSON file), found "
                            f"{exc.strerror or exc}; "
                            f"{fix or GIVE_RESULTS}") \
            from None
    if not isinstance(doc, dict):
        raise PipelineError(f"{path}: expected a JSON object, found {type(doc).__name__}; "
                            f"{fix or RERUN}")
    return doc


def field(doc: dict, key: str, path: Path, kind: Any) -> Any:
    """``doc``'s dotted ``key``, which must be there and of ``kind`` (a type or tuple of
    types; numbers finite): one line naming the file and key otherwise."""
    value: Any = doc
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise PipelineError(f"{path}: expected {key}, found none; {RERUN}")
        value = value[part]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds) \
            or (isinstance(value, float) and not math.isfinite(value)):
        raise PipelineError(f"{path}: expected {key} to be "
                            f"{' or '.join(k.__name__ for k in kinds)}, found {value!r}; {RERUN}")
    return value


def recorded_model(results: Path, ev: dict) -> Path:
    """The model file the eval record names: a relative path is relative to the root of
    the repository the results lie in (the eval stage ran there), not to the folder this
    runs in (another checkout's file of that path is another model)."""
    from cifar10_tutorial.ownership import repository_at, repository_root

    named = Path(str(ev.get("model") or ""))
    if named.is_absolute() or not str(ev.get("model") or ""):
        return named
    return (repository_at(Path(results).resolve()) or repository_root(Path(results))) / named


def _check_one_run(model: Path, results: Path, ckpt: dict, train: dict, ev: dict) -> None:
    """The model's step is the step both records name, the eval record names this model
    file, and both records name the same data."""
    step = int(ckpt["step"])
    for name, rec in (("train/provenance.json", train), ("eval/provenance.json", ev)):
        if rec.get("steps") != step:
            raise PipelineError(f"{results / name}: records step {rec.get('steps')}, but "
                                f"{model} is at step {step}: they come from different runs; "
                                f"publish the model of the run whose results these are")
    if recorded_model(results, ev).resolve() != model.resolve():
        # no hash of the model is recorded, so a file of that path in another checkout
        # (a worktree's, a clone's) cannot be told from another run's: publish from the
        # checkout that holds both
        there = recorded_model(results, ev)
        where = ("" if there.exists() else f" ({there}, not here: models are not kept in "
                 f"git, so a worktree or clone lacks them; publish from the checkout that "
                 f"trained it, where its results are too)")
        raise PipelineError(f"{results / 'eval/provenance.json'}: evaluated {ev.get('model')}"
                            f"{where}, not {model}; give --model the file the eval record "
                            f"names")
    if train.get("data_hash") != ev.get("data_hash"):
        raise PipelineError(f"{results}: trained on data {train.get('data_hash')} but "
                            f"evaluated on {ev.get('data_hash')}; {RERUN}")


def _check_variant(name: str, model: Path, results: Path, ckpt: dict, variant: dict) -> None:
    """The results are of the variant named, and the model was trained under its settings."""
    path = results / "variant.json"
    recorded = field(variant, "variant", path, TEXT)
    if recorded != name:
        raise PipelineError(f"{path}: these are the results of the variant {recorded!r}, not "
                            f"{name!r}; publish them as {recorded} (`cifar10 publish "
                            f"{recorded}`), or give --results the folder of {name}")
    params = ckpt["params"]
    for key, (section, setting) in VARIANT_PARAMS.items():
        if key not in variant:
            continue  # a record written before the key was
        trained = (params.get(section) or {}).get(setting) if isinstance(params, dict) else None
        if trained != variant[key]:
            raise PipelineError(f"{model}: trained with {section}.{setting} = {trained!r}, but "
                                f"{path} records {key} = {variant[key]!r}: the model is not the "
                                f"one these results are of; give --model the variant's own "
                                f"model (or rerun the variant)")


def _check_params(model: Path, results: Path, ckpt: dict, ev: dict) -> None:
    """The eval record's params are the model's (its hash of them): a model of other params
    at the same path and step (the variant rerun since its results were copied) is not the
    one evaluated, whatever variant.json's few settings say."""
    made = params_hash(run_defining(ckpt["params"])) if isinstance(ckpt.get("params"), dict) \
        else None
    if "params_hash" in ev and ev["params_hash"] != made:
        raise PipelineError(f"{results / 'eval/provenance.json'}: evaluated a model of params "
                            f"{ev['params_hash']}, but {model} was trained with params {made}: "
                            f"these results are of another run; publish the model of the run "
                            f"whose results these are")


def _model_section(model: Path, ckpt: dict) -> dict:
    """The model section of the params the model file records (load_model_file checked
    it), a key it lacks at the code's default, as the network is built from it."""
    import dataclasses

    from cifar10_tutorial.params import ModelParams

    recorded = ckpt["params"]["model"]
    return {f.name: recorded.get(f.name, f.default) for f in dataclasses.fields(ModelParams)}


def _check_card_fields(r: Records) -> None:
    """Every field the card states, there and of its kind."""
    res, m = r.results, r.results / "metrics.json"
    for key in ("eval.precision_at_1", "eval.precision_at_1_raw", "train.epochs"):
        field(r.metrics, key, m, NUMBER)
    field(r.metrics, "eval.num_examples", m, INTEGER)
    if "precision_at_1_flip" in r.metrics["eval"]:
        for key in ("eval.precision_at_1_flip", "eval.precision_at_1_raw_flip"):
            field(r.metrics, key, m, NUMBER)
    field(r.eval, "data_hash", res / "eval" / "provenance.json", TEXT)
    field(r.variant, "num_train", res / "variant.json", INTEGER)
    tp = res / "train" / "provenance.json"
    field(r.train, "wall_time_s", tp, NUMBER)
    for i, segment in enumerate(r.train.get("segments") or []):
        key = f"segments[{i}]"
        if not isinstance(segment, dict):
            raise PipelineError(f"{tp}: expected {key} to be a mapping, found {segment!r}; "
                                f"{RERUN}")
        for part in ("from_step", "to_step"):
            field(segment, part, tp, INTEGER)
        if segment.get("wall_time_s") is not None:
            field(segment, "wall_time_s", tp, NUMBER)
    for key in ("train.batch_size", "train.moving_average_decay"):
        field(r.ckpt["params"], key, r.model, NUMBER)


def read_records(name: str, model: Path, results: Path) -> Records:
    """The model file and the variant's records, checked to be one run of ``name``, with
    every field the card needs."""
    model, results = Path(model), Path(results)
    if not model.exists():  # a variant's model: its own stage trains it, not the main one
        raise PipelineError(f"{model}: no trained model for {name}; run the variant first "
                            f"(`dvc repro -s reports/dvc.yaml:ablation@{name}`), or give "
                            f"--model the model file to publish, or publish from the checkout "
                            f"that trained it (models are not kept in git: a worktree or a "
                            f"clone lacks them)")
    ckpt = load_model_file(model)
    digest, size = sha256_of(model), model.stat().st_size
    train = read_json(results / "train" / "provenance.json")
    ev = read_json(results / "eval" / "provenance.json")
    metrics = read_json(results / "metrics.json")
    variant = read_json(results / "variant.json")
    _check_one_run(model, results, ckpt, train, ev)
    if not isinstance(metrics.get("eval"), dict) or not isinstance(metrics.get("train"), dict):
        raise PipelineError(f"{results / 'metrics.json'}: expected a record with train and "
                            f"eval; {RERUN}")
    # the figures the card states and metrics.json carries: one run's, checked as the
    # report checks them (its size, speed, times, evaluation)
    check_results_folder(results, metrics, variant)
    _check_variant(name, model, results, ckpt, variant)
    _check_params(model, results, ckpt, ev)
    refuse_other_network_of(results, name, metrics["train"], _model_section(model, ckpt),
                            f"the model section of the params {model.name} was trained with")
    records = Records(name, model, results, ckpt, train, ev, metrics, variant, digest, size)
    _check_card_fields(records)
    return records
