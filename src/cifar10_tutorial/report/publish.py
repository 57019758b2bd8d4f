"""Publish a finished variant's trained model as the project's weights: its model.pt
beside its params, provenance and metrics, and a model card (README.md) that states its
held-out precision, every figure read from those files.

    python -m cifar10_tutorial.report.publish tutorial_100k \\
        --model data/ablations/tutorial_100k/model.pt \\
        --results reports/ablations/tutorial_100k --out models/tutorial_100k \\
        [--check-data data/prepared]

Before anything is written the files must belong together: the model's step is the step
its train and eval records name, the eval record names this model file, and both records
name the same data. With --check-data the model is evaluated again on that prepared data
and must give the precision its metrics state, to the last digit.

A fresh clone then uses the weights before training anything:
``python -m cifar10_tutorial.evaluation.predict cat.jpg --model models/tutorial_100k/model.pt``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Optional

from ..cli import run_stage
from ..errors import PipelineError
from ..files import write_text_atomic
from ..ownership import ensure_writable, refuse_foreign
from ..model_files import load_model_file
from .results import device_text
from ..curves import held_out_curve

CARD = "README.md"
FILES = ("model.pt", "params.yaml", "provenance.json", "metrics.json", CARD)
USE = ("the same command that wrote it: `python -m cifar10_tutorial.report.publish NAME --model ... "
       "--results ... --out ...` after the variant has finished (`dvc repro reports/dvc.yaml`)")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PipelineError(f"{path}: not found; publish a variant that has finished, with "
                            f"{USE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); rerun the variant "
                            f"(`dvc repro reports/dvc.yaml`)") from None


def check_together(model: Path, results: Path) -> tuple[dict, dict, dict, dict]:
    """The model file and the variant's records, checked to come from one run: (model file,
    train provenance, eval provenance, metrics)."""
    ckpt = load_model_file(model)
    train = _json(results / "train" / "provenance.json")
    ev = _json(results / "eval" / "provenance.json")
    metrics = _json(results / "metrics.json")
    step = int(ckpt["step"])
    for name, rec in (("train/provenance.json", train), ("eval/provenance.json", ev)):
        if rec.get("steps") != step:
            raise PipelineError(f"{results / name}: records step {rec.get('steps')}, but "
                                f"{model} is at step {step}: they come from different runs; "
                                f"publish the model of the run whose results these are")
    if Path(ev.get("model", "")).resolve() != model.resolve():
        raise PipelineError(f"{results / 'eval/provenance.json'}: evaluated {ev.get('model')}, "
                            f"not {model}; give --model the file the eval record names")
    if train.get("data_hash") != ev.get("data_hash"):
        raise PipelineError(f"{results}: trained on data {train.get('data_hash')} but "
                            f"evaluated on {ev.get('data_hash')}; rerun the variant")
    if "eval" not in metrics or "precision_at_1" not in metrics["eval"]:
        raise PipelineError(f"{results / 'metrics.json'}: expected eval.precision_at_1; "
                            f"found {', '.join(metrics) or 'nothing'}; rerun the variant")
    return ckpt, train, ev, metrics


def check_precision(model: Path, data_dir: Path, ev: dict, metrics: dict) -> None:
    """Evaluate ``model`` again on ``data_dir``: it must give the stated precision."""
    import torch

    from ..evaluation.evaluate import evaluate_checkpoint
    from ..data.prepared import load_prepared

    data = load_prepared(data_dir)
    if data.content_hash != ev.get("data_hash"):
        raise PipelineError(f"{data_dir}: data {data.content_hash}, but the model was "
                            f"evaluated on {ev.get('data_hash')}; give --check-data the "
                            f"prepared data it was evaluated on")
    ckpt = load_model_file(model)
    r = evaluate_checkpoint(ckpt, torch.from_numpy(data.test_images),
                            torch.from_numpy(data.test_labels), 1000, torch.device("cpu"),
                            False, str(model))
    for key in ("precision_at_1", "precision_at_1_raw"):
        if r[key] != metrics["eval"][key]:
            raise PipelineError(f"{model}: gives {key} = {r[key]:.6f} on {data_dir}, but "
                                f"its metrics state {metrics['eval'][key]:.6f}; not published")


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _segments(train: dict) -> list[str]:
    rows = ["| from step | to step | wall time | machine | commit |", "|---|---|---|---|---|"]
    for s in train.get("segments", []):
        commit = (s.get("commit") or "outside git")[:7] + (" (dirty)" if s.get("dirty") else "")
        wall = f"{s['wall_time_s']:,.0f} s" if s.get("wall_time_s") is not None else "unknown"
        device = device_text(s.get("device") or "unknown")
        rows.append(f"| {s['from_step']:,} | {s['to_step']:,} | {wall} | {device} | {commit} |")
    return rows


def _curve(results: Path) -> list[str]:
    """The held-out precision at each evaluation while training, from the DVCLive TSVs."""
    c = held_out_curve(results / "train")
    if c is None:
        return []
    if "precision_at_1_raw" not in c:
        c["precision_at_1_raw"] = math.nan
    rows = ["| step | averaged | raw |", "|---|---|---|"]
    rows += [f"| {int(r.step):,} | {_pct(r.precision_at_1)} | "
             f"{'' if math.isnan(r.precision_at_1_raw) else _pct(r.precision_at_1_raw)} |"
             for r in c.sort_values("step").itertuples()]
    return ["Held-out precision @ 1 while it trained (from its DVCLive curves):", "", *rows, ""]


def _made(train: dict) -> str:
    n = len(train.get("segments", []))
    how = ("in one segment" if n <= 1 else
           f"in {n} segments, each continuing from the checkpoint the one before it wrote "
           f"when it stopped (docs/continuing.md)")
    return (f"Trained {how}: {train['wall_time_s']:,.0f} s of wall time in all, torch "
            f"{train.get('torch')}:")


def _artifact(out: Path, dvc_yaml: Path = Path("dvc.yaml")) -> str:
    """Where dvc.yaml declares ``out``'s model.pt as an artifact, the sentence that says so."""
    import yaml

    if not dvc_yaml.is_file():
        return ""
    arts = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("artifacts") or {}
    target = (out / "model.pt").resolve()
    names = [n for n, a in arts.items() if (dvc_yaml.parent / a.get("path", "")).resolve() == target]
    return f" Declared as the DVC artifact `{names[0]}` in `dvc.yaml`." if names else ""


def model_card(name: str, out: Path, results: Path, ckpt: dict, rec: dict) -> str:
    """The card: ``rec`` holds the records (train, eval, metrics, variant) and the
    published file's sha256 and size."""
    train, ev, metrics = rec["train"], rec["eval"], rec["metrics"]
    p, e, t = ckpt["params"], metrics["eval"], metrics.get("train", {})
    tr = p["train"]
    flip = (f" With the mirror image averaged in (test-time flips): {_pct(e['precision_at_1_flip'])}"
            f" averaged, {_pct(e['precision_at_1_raw_flip'])} raw." if "precision_at_1_flip" in e
            else "")
    return "\n".join([
        f"# Published weights: `{name}`", "",
        f"<!-- written by `python -m cifar10_tutorial.report.publish {name}` from the files beside it "
        f"and {results}; do not edit by hand -->", "",
        f"The tutorial's CNN trained by this project's `{name}` exercise variant for "
        f"**{int(ckpt['step']):,} steps** (batch {tr['batch_size']}, {t.get('epochs', 0):.1f} "
        f"epochs), with both its raw weights and their moving averages (decay "
        f"{tr['moving_average_decay']}).{_artifact(out)}", "",
        "| held-out precision @ 1 | averaged weights | raw weights |", "|---|---|---|",
        f"| {int(e['num_examples']):,} dev held-out images | **{_pct(e['precision_at_1'])}** | "
        f"{_pct(e['precision_at_1_raw'])} |", "",
        f"Measured on the dev split's held-out images (data hash `{ev['data_hash']}`): it "
        f"trained on {int(rec['variant']['num_train']):,} other images of the "
        f"official training set, and the official test set was never used here, so this is "
        f"not the tutorial's test-set figure (docs/data.md says how the dev split is made).{flip}",
        "", *_curve(results),
        _made(train), "", *_segments(train), "",
        "## Files", "",
        f"- `model.pt`: {rec['size']:,} bytes, sha256 `{rec['sha256']}`: raw weights (`model`), moving "
        f"averages (`ema`), params, classes and step; read with `torch.load(..., "
        f"weights_only=True)`.",
        "- `params.yaml`: the params it trained under (as stored in `model.pt`).",
        "- `provenance.json`: the training's record (commit, machine, data hash, segments).",
        "- `metrics.json`: its training and held-out metrics.", "",
        "## Use it", "", "```bash",
        f"python -m cifar10_tutorial.evaluation.predict cat.jpg --model {out}/model.pt --top 3",
        f"python stages/eval.py --model {out}/model.pt --out {out.name}-eval",
        "```", "",
        "`predict` needs nothing else; `eval` the prepared data (`dvc repro preprocess`). Both "
        "use the averaged weights, and report the raw ones too (`predict --raw`).", ""])


def publish(name: str, model: Path, results: Path, out: Path,
            check_data: Optional[Path] = None) -> Path:
    model, results, out = Path(model), Path(results), Path(out)
    refuse_foreign(out, set(FILES), "publish")
    ckpt, train, ev, metrics = check_together(model, results)
    variant = _json(results / "variant.json")
    if check_data is not None:
        check_precision(model, Path(check_data), ev, metrics)
    ensure_writable(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "model.pt.tmp"
    shutil.copyfile(model, tmp)
    tmp.replace(out / "model.pt")
    import yaml

    write_text_atomic(out / "params.yaml", yaml.safe_dump(ckpt["params"], sort_keys=False))
    write_text_atomic(out / "provenance.json", json.dumps(train, indent=2) + "\n")
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    rec = {"train": train, "eval": ev, "metrics": metrics, "variant": variant,
           "sha256": sha256(out / "model.pt"), "size": (out / "model.pt").stat().st_size}
    card = model_card(name, out, results, ckpt, rec)
    write_text_atomic(out / CARD, card)
    return out / CARD


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the variant (params.yaml `ablations:`), e.g. tutorial_100k")
    ap.add_argument("--model", type=Path, required=True, help="its model.pt")
    ap.add_argument("--results", type=Path, required=True,
                    help="its results folder (the ablation stage's --out)")
    ap.add_argument("--out", type=Path, required=True, help="the folder to publish into")
    ap.add_argument("--check-data", type=Path, default=None,
                    help="prepared data to evaluate the model on again before publishing")
    args = ap.parse_args(argv)
    card = publish(args.name, args.model, args.results, args.out, args.check_data)
    print(f"published {args.model} in {args.out} ({card} states its precision)")


if __name__ == "__main__":
    run_stage(main)
