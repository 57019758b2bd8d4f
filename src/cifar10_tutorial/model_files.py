"""Model files: the trained model file (model.pt) read and checked field by field, and a
network rebuilt from stored weights (a checkpoint's or a model file's). Shared by the
eval stage, predictions and publishing; the evaluation itself is in :mod:`.scoring`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .errors import PipelineError
from .model import CifarNet, build_model


REMAKE = "remake it with `dvc repro train`"
# a file that is no model of this project at all (a mistyped path, another tool's file):
# remaking the train stage's model would not help with that
NOT_OURS = ("give a model file that the train stage or publish wrote, or, where this was "
            "one, remake it with `dvc repro train`")
MODEL_KEYS = ("model", "ema", "params", "num_classes", "classes", "step")
STATE_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
                torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def model_from_state(params: dict, num_classes: int, state: dict, device,
                     source: str = "the checkpoint") -> CifarNet:
    import dataclasses

    from .params import ModelParams

    # the whole section the file records (load_model_file checked its keys and values),
    # a key it lacks at the code's default: the model file's params, not params.yaml's
    m = params["model"]
    section = {f.name: m.get(f.name, f.default) for f in dataclasses.fields(ModelParams)}
    model = build_model(num_classes, **section).to(device)
    own = model.state_dict()
    # each entry of the kind the network holds there: floating point where it has weights,
    # its own integer or boolean type where it counts or flags (load_state_dict would cast
    # an int64 copy of float weights without a word)
    kind = [n for n, v in state.items() if n in own and (
        v.is_floating_point() != own[n].is_floating_point()
        or (not v.is_floating_point() and v.dtype != own[n].dtype))]
    if kind:
        raise PipelineError(f"{source}: {kind[0]} is {state[kind[0]].dtype} where the network "
                            f"holds {own[kind[0]].dtype}; the file is damaged or was edited; "
                            f"{REMAKE}.")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:  # names or shapes that do not fit the network
        detail = next((ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()), str(exc))
        raise PipelineError(
            f"{source}: its weights do not fit the network its own params describe "
            f"(model: {', '.join(f'{k}={v}' for k, v in m.items())}; {num_classes} classes): "
            f"{detail[:200]}. The file is damaged or was edited; {REMAKE}.") from None
    return model.eval()


def load_model_file(path: Path, device="cpu") -> dict:
    """A model.pt written by the train stage, checked; clear words for anything else."""
    path = Path(path)
    if path.exists() and not path.is_file():  # torch.load would block on a FIFO
        raise PipelineError(f"{path}: not a regular file (a folder, FIFO or device), expected "
                            f"a model.pt; give the model file itself.")
    if not path.is_file():
        raise PipelineError(f"{path}: not found, where a trained model is expected; give "
                            f"the path of one (a mistyped path?), or train it first (`dvc "
                            f"repro train`).")
    try:
        obj = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises several types; its text may advise unsafe loading
        raise PipelineError(f"{path}: cannot be read as a model file ({type(exc).__name__}): it "
                            f"is damaged, truncated or not a file of this project; {NOT_OURS}.") \
            from None
    expected = ("a model file of the train stage: a mapping with " + ", ".join(MODEL_KEYS))
    if not isinstance(obj, dict):
        raise PipelineError(f"{path}: expected {expected}; found a {type(obj).__name__}. "
                            f"{NOT_OURS[0].upper() + NOT_OURS[1:]}.")
    missing = [k for k in MODEL_KEYS if k not in obj]
    if missing:
        found = ("a bare state dict of weights" if all(isinstance(v, torch.Tensor) for v in obj.values())
                 else f"a mapping with {', '.join(map(str, list(obj)[:6]))}")
        raise PipelineError(f"{path}: expected {expected}; found {found} (missing "
                            f"{', '.join(missing)}). {NOT_OURS[0].upper() + NOT_OURS[1:]}.")
    model = obj["params"].get("model") if isinstance(obj["params"], dict) else None
    if not isinstance(model, dict) or not {"head", "output", "lrn"} <= set(model):
        raise PipelineError(f"{path}: its params lack the model section (head, output, lrn); "
                            f"{REMAKE}.")
    problem = _field_problem(obj, model)
    if problem:
        raise PipelineError(f"{path}: {problem}; the file is damaged or was edited: {REMAKE}.")
    return obj


def is_state_dict(x) -> bool:
    """A non-empty mapping of names to tensors: the weights of a model file or checkpoint."""
    return (isinstance(x, dict) and bool(x) and all(isinstance(k, str) for k in x)
            and all(isinstance(v, torch.Tensor) for v in x.values()))


def _field_problem(obj: dict, model: dict) -> str | None:
    """What is wrong with the fields of a model file, in words (None: nothing)."""
    from .params import ParamsError, params_from_dict

    try:
        params_from_dict({"model": model})
    except ParamsError as exc:
        return f"its params: {exc}"
    bad = [k for k, v in obj["params"].items() if not isinstance(v, dict)]
    if bad:  # sections the eval stage and the card read (train, eval, ...)
        return f"its params: {bad[0]}: expected a section (a mapping), found {obj['params'][bad[0]]!r:.40}"
    k = obj["num_classes"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        return f"num_classes: expected an integer >= 2, found {k!r}"
    classes = obj["classes"]
    if not (isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
            and len(classes) == k):
        return f"classes: expected {k} class names (num_classes), found {classes!r:.80}"
    if isinstance(obj["step"], bool) or not isinstance(obj["step"], int) or obj["step"] < 0:
        return f"step: expected a whole number >= 0, found {obj['step']!r:.40}"
    for key, what in (("model", "raw"), ("ema", "averaged")):
        state = obj[key]
        if not is_state_dict(state):
            return f"{key}: expected the {what} weights (a mapping of tensors), found {state!r:.60}"
        # real numbers: weights and buffers in floating point, counters (a BatchNorm's
        # num_batches_tracked) in integers, flags in booleans; complex or quantized
        # tensors are no state this project writes
        kind = [n for n, v in state.items() if v.dtype not in STATE_DTYPES]
        if kind:
            return (f"its {what} weights ({key}) hold a tensor of a kind no network of this "
                    f"project has ({kind[0]}: {state[kind[0]].dtype})")
        bad = [n for n, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
        if bad:
            return f"its {what} weights ({key}) hold NaN or infinite values ({', '.join(bad[:3])})"
    return None


def load_trained(path: Path, device="cpu", averaged: bool = True) -> tuple[CifarNet, dict]:
    """The trained model in ``path`` (model.pt), with averaged or raw weights."""
    ckpt = load_model_file(path, device)
    state = ckpt["ema"] if averaged else ckpt["model"]
    return model_from_state(ckpt["params"], int(ckpt["num_classes"]), state, device, str(path)), ckpt
