"""Publish a finished variant's trained model as the project's weights: its model.pt
beside its params, provenance and metrics, and a model card (README.md) that states its
held-out precision, every figure read from those files.

    cifar10 publish baseline            # after `dvc repro reports/dvc.yaml`: models/baseline
    cifar10 publish tutorial_100k --replace --check-data data/prepared

--results defaults to the variant's results folder (reports/dvc.yaml's ablation stage),
--model to the model file its eval record names, --out to models/NAME.

Before anything is written, everything is read and checked (publish_records.py): the
results are of the variant named (variant.json), the model was trained under its
settings, its step is the step the train and eval records name, the eval record names
this model file, both records name the same data, and every field the card states is
there. With --check-data the model is evaluated again on that prepared data and must give
the precision its metrics state, to the last digit.

The folder is then built aside, in a temporary folder next to --out, and swapped into
place whole: an interrupted or failed publish leaves --out holding the old weights or the
new, and the next publish restores or removes what an interrupted one left beside it. Replacing a folder
that holds published weights takes --replace; a folder holding files publish did not
write (its manifest, published.json, lists those it did) is refused, and nothing else in
it is ever removed.

A fresh clone then uses the weights before training anything:
``python -m cifar10_tutorial.evaluation.predict cat.jpg --model models/tutorial_100k/model.pt``.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import json
import math
import os
import re
import shlex
import shutil
from typing import Optional

from cifar10_tutorial.cli import given_path, pipeline_stages, run_stage
from cifar10_tutorial.curves import held_out_curve
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import (ending_signals_unwind, listed_as_written,
                                    recover_swapped_folder, sha256_of, staging_folder,
                                    swap_in_folder, write_listing, writing)
from cifar10_tutorial.ownership import (PUBLISHED_FILES, PUBLISHED_MANIFEST, ensure_writable,
                                        folders_apart,
                                        listed, refuse_foreign_place, repository_at)
from cifar10_tutorial.model_files import load_model_file
from cifar10_tutorial.params import defined_variants
from publish_records import RERUN, Records, read_json, read_records, recorded_model
from cifar10_tutorial.report.results import device_text, refuse_stale_results

CARD = "README.md"
MANIFEST = PUBLISHED_MANIFEST
FILES = PUBLISHED_FILES  # model.pt, params.yaml, provenance.json, metrics.json, the card
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")  # a variant's name, as reports/params.yaml's
BUILDING = ".publish-building"  # the mark of a folder publish is building, its first file
REPORT_DVC_YAML = Path("reports/dvc.yaml")


def check_precision(model: Path, data_dir: Path, ev: dict, metrics: dict) -> None:
    """Evaluate ``model`` again on ``data_dir``: it must give the stated precision."""
    import torch

    from cifar10_tutorial.data.prepared import load_prepared
    from cifar10_tutorial.evaluation.evaluate import evaluate_checkpoint

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


def _curve(results: Path, step: int) -> list[str]:
    """The held-out precision at each evaluation while training, from the DVCLive TSVs
    (read before anything is written: a damaged one is one line, not a half-made card);
    a point past the model's ``step`` is another run's (curves left from a longer one),
    never stated as this model's."""
    try:
        c = held_out_curve(results / "train")
        if c is None:
            return []
        if len(c) and int(c["step"].max()) > step:
            raise PipelineError(f"{results / 'train' / 'plots' / 'metrics' / 'held_out'}: "
                                f"curves to step {int(c['step'].max()):,}, past the model's "
                                f"step {step:,}: another run's; {RERUN}")
        if "precision_at_1_raw" not in c:
            c["precision_at_1_raw"] = math.nan
        rows = ["| step | averaged | raw |", "|---|---|---|"]
        rows += [f"| {int(r.step):,} | {_pct(r.precision_at_1)} | "
                 f"{'' if math.isnan(r.precision_at_1_raw) else _pct(r.precision_at_1_raw)} |"
                 for r in c.sort_values("step").itertuples()]
    except (KeyError, ValueError, TypeError) as exc:  # pandas' ParserError is a ValueError
        raise PipelineError(f"{results / 'train' / 'plots' / 'metrics' / 'held_out'}: its "
                            f"held-out curves cannot be read ({type(exc).__name__}: {exc}); "
                            f"{RERUN}") from None
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
    from cifar10_tutorial.param_types import load_yaml12

    if not dvc_yaml.is_file():
        return ""
    arts = (load_yaml12(dvc_yaml.read_text()) or {}).get("artifacts") or {}
    target = (out / "model.pt").resolve()
    names = [n for n, a in arts.items() if (dvc_yaml.parent / a.get("path", "")).resolve() == target]
    return f" Declared as the DVC artifact `{names[0]}` in `dvc.yaml`." if names else ""


def model_card(r: Records, out: Path, curve: list[str], unchecked: Optional[str] = None) -> str:
    """The card, from records whose every field :func:`read_records` checked; ``unchecked``:
    why DVC could not say the results are of the variant's definition (a copy), said
    under the figures."""
    name, results, ckpt = r.name, r.results, r.ckpt
    train, ev, metrics = r.train, r.eval, r.metrics
    p, e, t = ckpt["params"], metrics["eval"], metrics["train"]
    tr = p["train"]
    flip = (f" With the mirror image averaged in (test-time flips): {_pct(e['precision_at_1_flip'])}"
            f" averaged, {_pct(e['precision_at_1_raw_flip'])} raw." if "precision_at_1_flip" in e
            else "")
    return "\n".join([
        f"# Published weights: `{name}`", "",
        f"<!-- written by `cifar10 publish {name}` from the files beside it "
        f"and {results}; do not edit by hand -->", "",
        f"The tutorial's CNN trained by this project's `{name}` exercise variant for "
        f"**{int(ckpt['step']):,} steps** (batch {tr['batch_size']}, {t['epochs']:.1f} "
        f"epochs), with both its raw weights and their moving averages (decay "
        f"{tr['moving_average_decay']}).{_artifact(out)}", "",
        "| held-out precision @ 1 | averaged weights | raw weights |", "|---|---|---|",
        f"| {int(e['num_examples']):,} dev held-out images | **{_pct(e['precision_at_1'])}** | "
        f"{_pct(e['precision_at_1_raw'])} |", "",
        *([f"> **Unchecked.** {unchecked[0].upper()}{unchecked[1:]}: the figures are what "
           f"those files say.", ""] if unchecked else []),
        f"Measured on the dev split's held-out images (data hash `{ev['data_hash']}`): it "
        f"trained on {int(r.variant['num_train']):,} other images of the "
        f"official training set, and the official test set was never used here, so this is "
        f"not the tutorial's test-set figure (docs/data.md says how the dev split is made).{flip}",
        "", *curve,
        _made(train), "", *_segments(train), "",
        "## Files", "",
        f"- `model.pt`: {r.size:,} bytes, sha256 `{r.sha256}`: raw weights (`model`), moving "
        f"averages (`ema`), params, classes and step; read with `torch.load(..., "
        f"weights_only=True)`.",
        "- `params.yaml`: the params it trained under (as stored in `model.pt`).",
        "- `provenance.json`: the training's record (commit, machine, data hash, segments).",
        "- `metrics.json`: its training and held-out metrics.",
        f"- `{MANIFEST}`: what publish wrote here, each file's sha256: all that a later "
        f"`cifar10 publish {name} --replace` replaces.", "",
        "## Use it", "", "```bash",
        # the paths quoted: a card's command, copied into a shell, runs only what it says
        f"python -m cifar10_tutorial.evaluation.predict cat.jpg --model "
        f"{_argument(f'{out}/model.pt')} --top 3",
        f"python stages/eval.py --model {_argument(f'{out}/model.pt')} "
        f"--out {_argument(f'{out.name}-eval')}",
        "```", "",
        "`predict` needs nothing else; `eval` the prepared data (`dvc repro preprocess`). Both "
        "use the averaged weights, and report the raw ones too (`predict --raw`).", ""])




# ----------------------------------------------------------------- the published folder


def _argument(path: str) -> str:
    """``path`` as a card's command gives it: quoted for the shell, and after ``./`` where it
    starts with '-', so that argparse takes it for the option's value, never an option."""
    return shlex.quote(("./" if path.startswith("-") else "") + path)


def _described(name, step, precision) -> str:
    """Published weights in words, from what their records say (where they say it)."""
    words = [f"{name}" if isinstance(name, str) else "",
             f"step {step:,}" if isinstance(step, int) else "",
             f"{_pct(precision)} held-out" if isinstance(precision, float) else ""]
    return ", ".join(w for w in words if w) or "unnamed"


def _held(out: Path) -> tuple[set[str], str, Optional[str]]:
    """What in ``out`` publish wrote (its manifest's files; a folder published before
    there was a manifest: the files publish wrote then), those weights in words, and the
    variant its manifest names.
    Anything else in it is refused, in one line naming it: publish never removes it."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise PipelineError(f"{out}: a {'link' if out.is_symlink() else 'file'}, where publish "
                            f"writes a folder; give --out a folder of its own. Nothing was "
                            f"changed.")
    if not out.exists():
        return set(), "", None
    entries = {p.name for p in out.iterdir()}
    linked = sorted(n for n in entries & {*FILES, MANIFEST} if (out / n).is_symlink())
    if linked:  # publish writes files, never links: one there is not publish's to replace
        raise PipelineError(f"{out / linked[0]}: a link, where publish writes a file of its "
                            f"own; give --out a folder of its own, or move it elsewhere "
                            f"first. Nothing was changed.")
    if MANIFEST in entries:
        # --out's own manifest: the fix is at --out, not in the variant's results
        manifest = read_json(out / MANIFEST, f"move {out} away or give another --out. "
                                             f"Nothing was changed.")
        own = manifest.get("files")
        # publish writes those five files and no others: a manifest naming anything else
        # (another file, '..') is not one it wrote, and must not decide what is removed
        if not isinstance(own, dict) or not set(own) <= set(FILES):
            raise PipelineError(f"{out / MANIFEST}: not a manifest publish wrote (expected "
                                f"files naming some of {', '.join(FILES)}); move {out} away "
                                f"or give another --out. Nothing was changed.")
        for name, digest in own.items():  # a file edited since is the user's now
            if name in entries and not _same_file(out / name, digest):
                raise PipelineError(f"{out / name}: changed since publish wrote it (its sha256 "
                                    f"is not the one {MANIFEST} records), and publish would "
                                    f"delete it; move it elsewhere first. Nothing was changed.")
        own = {*own, MANIFEST}
        whose = manifest.get("name") if isinstance(manifest.get("name"), str) else None
        what = _described(manifest.get("name"), manifest.get("step"),
                          manifest.get("precision_at_1"))
    elif entries & set(FILES):  # no manifest: publish cannot tell these files are its own
        raise PipelineError(f"{out}: holds {listed(sorted(entries))} and no {MANIFEST}, the "
                            f"manifest publish writes with its files; without it publish cannot "
                            f"tell them from your own, and would delete them: give --out a "
                            f"folder of its own, or move those elsewhere first. Nothing was "
                            f"changed.")
    else:
        own, what, whose = set(), "", None
    foreign = sorted(entries - own)
    if foreign:
        raise PipelineError(f"{out}: holds {listed(foreign)}, which publish did not make; give --out a "
                            f"folder of its own, or move those elsewhere first. Nothing was "
                            f"changed.")
    return entries & own, what, whose


def _as_written(folder: Path) -> set[str]:
    """The files in ``folder`` (one an interrupted publish left) that publish may remove:
    those its manifest names, each still with the sha256 recorded there, and the manifest;
    in a folder publish was still building (``.NAME.staging-*``, no manifest yet: it is
    written last) the files publish writes. Nothing in a set-aside published folder
    without its manifest."""
    # a folder publish was building holds its mark, written before any file and removed
    # after the manifest: a folder of that name without it is not publish's, whatever its
    # files are called; with it, the mark is publish's too (killed before removing it)
    building = re.search(r"\.(staging|publishing)-[0-9]+-[^.]*$", folder.name)
    mark = folder / BUILDING
    marked = {BUILDING} if building and mark.is_file() and not mark.is_symlink() else set()
    manifest = folder / MANIFEST
    if marked and (manifest.is_symlink() or not manifest.is_file()):
        return {*FILES, *marked}
    own = listed_as_written(folder, MANIFEST, FILES.__contains__)
    return own | marked if own else set()


def _same_file(path: Path, digest) -> bool:
    return path.is_file() and not path.is_symlink() and sha256_of(path) == digest


def _write_folder(folder: Path, r: Records, out: Path, curve: list[str],
                  unchecked: Optional[str] = None) -> None:
    """The published files, into ``folder`` (the temporary one beside ``out``)."""
    import yaml

    with writing(folder, out):  # a full disk is --out's, not the model's it copies from
        shutil.copyfile(r.model, folder / "model.pt")
    if sha256_of(folder / "model.pt") != r.sha256:
        raise PipelineError(f"{r.model}: changed while it was published (another run writing "
                            f"it?); publish it again once it is finished. Nothing was changed.")
    texts = {"params.yaml": yaml.safe_dump(r.ckpt["params"], sort_keys=False),
             "provenance.json": json.dumps(r.train, indent=2) + "\n",
             "metrics.json": json.dumps(r.metrics, indent=2) + "\n",
             CARD: model_card(r, out, curve, unchecked)}
    for name, text in texts.items():
        with writing(folder, out):
            (folder / name).write_text(text)
    write_listing(folder, MANIFEST, list(FILES), name=r.name, step=int(r.ckpt["step"]),
                  precision_at_1=r.metrics["eval"]["precision_at_1"], model=str(r.model),
                  results=str(r.results))


def _refuse_another_variants(out: Path, name: str, own: set, held: str,
                             whose: Optional[str]) -> None:
    """A published folder is its variant's: --replace replaces that variant's weights with
    newer ones, never another variant's (those may be the ones others use: the folder named
    after that variant, or a DVC artifact, would serve weights it does not describe). Nor
    does a variant go into a folder named after another variant."""
    if own and whose != name:
        owner = whose or f"a variant its {MANIFEST} does not name"
        raise PipelineError(f"{out}: holds the published weights of {owner} ({held}), not "
                            f"{name}'s, and publish "
                            f"replaces only a variant's own; give another --out (the default is "
                            f"models/{name}), or move {out} away first. Nothing was changed.")
    folder = out.resolve().name
    if folder != name and folder in set().union(
            *(defined_variants(Path("reports/params.yaml")) or {}).values()):
        raise PipelineError(f"--out {out}: named after the variant {folder}, not {name}: a "
                            f"published folder takes its variant's name (models/NAME), so "
                            f"this one would be taken for {folder}'s; publish {name} into "
                            f"models/{name} (the default) or a folder not named after another "
                            f"variant. Nothing was changed.")


def publish(name: str, model: Path, results: Path, out: Path,
            check_data: Optional[Path] = None, replace: bool = False,
            unchecked: Optional[str] = None) -> Path:
    """Publish variant ``name`` (its ``model`` and ``results``) in ``out``; returns the card
    (``unchecked``: why its results could not be checked against DVC, said on it)."""
    model, results, out = Path(model), Path(results), Path(out)
    if any(ord(c) < 32 or ord(c) == 127 for c in str(out)):  # the card prints the path
        raise PipelineError(f"--out {str(out)!r}: holds a newline or another control "
                            f"character, which the model card's commands cannot show; give "
                            f"another path. Nothing was changed.")
    # no stage's output (DVC would replace or remove the published folder), nor git's,
    # DVC's or the project's code folders, nor inside another published folder (every
    # folder above is looked at: another published folder holds only its own files)
    refuse_foreign_place(out, "--out", "models/NAME by default", publishing=True)
    _held(out)  # a link or a file at --out: refused before anything is changed beside it
    # a folder --out cannot be made in (a file above it, /proc): one line, before the
    # records are read
    ensure_writable(out.parent)
    for line in recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written):
        print(f"note: {line}", file=sys.stderr)
    own, held, whose = _held(out)
    _refuse_another_variants(out, name, own, held, whose)
    r = read_records(name, model, results)
    curve = _curve(results, int(r.ckpt["step"]))
    if own and not replace:
        raise PipelineError(
            f"{out}: already holds published weights ({held}); give --replace to replace them "
            f"with {name} at step {int(r.ckpt['step']):,} "
            f"({_pct(r.metrics['eval']['precision_at_1'])} held-out), or another --out. "
            f"Nothing was changed.")
    if check_data is not None:
        check_precision(model, Path(check_data), r.eval, r.metrics)
    ensure_writable(out.parent)  # again: the records took a while
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipelineError(f"{out.parent}: cannot be made ({exc.strerror or exc}), and "
                            f"publish writes {out} in it; give --out another path. Nothing "
                            f"was changed.") from None
    with ending_signals_unwind():  # a stop from outside (kill, Ctrl-C) runs the clean-up
        _stage_and_swap(staging_folder(out), r, out, curve, unchecked, replace)
    return out / CARD


def _stage_and_swap(staged: Path, r: Records, out: Path, curve: list[str],
                    unchecked: Optional[str], replace: bool) -> None:
    """Build the folder in ``staged``, then swap it in at ``out``; a staged folder not
    swapped in is removed whatever ends this."""
    try:
        with writing(staged, out):  # a full disk: --out named, not "an output file"
            (staged / BUILDING).write_text("a folder cifar10 publish is building\n")  # first
        _write_folder(staged, r, out, curve, unchecked)
        (staged / BUILDING).unlink()  # complete: its manifest says what is publish's now
        own, held, whose = _held(out)  # again: what a user put there meanwhile is not replaced either
        _refuse_another_variants(out, r.name, own, held, whose)
        if own and not replace:  # published meanwhile (another publish): a question again
            raise PipelineError(f"{out}: weights were published there meanwhile ({held}); "
                                f"give --replace to replace them. Nothing was changed.")
        kept = swap_in_folder(staged, out, own)
        if own:  # never silently: the weights there before may be the ones others use
            print(f"note: {out}: the weights published there before ({held}) are "
                  f"replaced by {r.name} at step {int(r.ckpt['step']):,} "
                  f"({_pct(r.metrics['eval']['precision_at_1'])} held-out)", file=sys.stderr)
        if kept is not None:  # never silently: the old folder held what publish did not write
            print(f"note: the folder {out} held before is kept as {kept}: it holds more than "
                  f"the files publish wrote; look through it, then delete it", file=sys.stderr)
    finally:
        if staged.is_dir():  # not swapped in: only what _write_folder put there
            recover_swapped_folder(out, {*FILES, MANIFEST}, MANIFEST, _as_written)


def variant_results(name: str, dvc_yaml: Path = REPORT_DVC_YAML) -> Path:
    """The results folder reports/dvc.yaml's ablation stage gives variant ``name``."""
    import yaml

    try:
        cmd = yaml.safe_load(dvc_yaml.read_text())["stages"]["ablation"]["do"]["cmd"]
        # the stage puts the variant's name for {variant} (older pipelines: DVC for ${key})
        words = shlex.split(cmd.replace("${key}", name).replace("{variant}", name))
        return Path(words[words.index("--out") + 1])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, IndexError):
        raise PipelineError(f"{dvc_yaml}: no ablation stage's --out to take the results of "
                            f"{name} from; run this from the repository root, or give "
                            f"--results") from None


def _out_folder(text: str) -> Path:
    """--out's value: a path (:func:`given_path`), never ``-``, which commands read as the
    standard output; a folder of that name is still ``./-``."""
    if text == "-":
        raise argparse.ArgumentTypeError("'-', which commands read as the standard output; "
                                         "publish writes a folder: give its path (./- for a "
                                         "folder named so)")
    return given_path(text)


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 publish", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the variant (reports/params.yaml `ablations:`), e.g. tutorial_100k")
    ap.add_argument("--results", type=given_path, default=None,
                    help="its results folder (default: the ablation stage's --out in "
                         "reports/dvc.yaml)")
    ap.add_argument("--model", type=given_path, default=None,
                    help="its model.pt (default: the file its eval record names)")
    ap.add_argument("--out", type=_out_folder, default=None,
                    help="the folder to publish into (default: models/NAME)")
    ap.add_argument("--replace", action="store_true",
                    help="replace the weights published there before (only the files "
                         "publish wrote)")
    ap.add_argument("--check-data", type=given_path, default=None,
                    help="prepared data to evaluate the model on again before publishing")
    args = ap.parse_args(argv)
    if not NAME.fullmatch(args.name):  # it names a folder and the card: never a path
        raise PipelineError(f"{args.name[:80]!r}: expected a variant name (a letter, then "
                            f"letters, digits, '_' or '-', at most 64)")
    if args.results is not None and not args.results.is_dir():  # never a path inside it
        what = ("not found" if not os.path.lexists(args.results) else
                "a link to nothing" if args.results.is_symlink() and not args.results.exists()
                else "a file" if args.results.is_file()
                else "not a folder (a FIFO, socket or device)")
        raise PipelineError(f"--results {args.results}: {what}, where publish reads the "
                            f"variant's results folder (by default the ablation stage's "
                            f"folder of {args.name}); give that folder. Nothing was changed.")
    results = args.results or variant_results(args.name)
    # the stage's own folder (by any path: a link to it is it), here or in the checkout
    # the results lie in, is what DVC can vouch for; a copy (of the same name or not) is
    # no folder DVC knows
    try:
        own = variant_results(args.name).resolve()
    except PipelineError:  # no pipeline here to name it
        own = None
    theirs = repository_at(results.resolve())
    if theirs is not None and results.resolve() != own:
        try:
            own = (theirs / variant_results(args.name, theirs / REPORT_DVC_YAML)).resolve()
        except PipelineError:
            pass
    if results.resolve() == own:
        unchecked = refuse_stale_results(own.parent, only=args.name)
    else:
        unchecked = (f"{results} is not the ablation stage's folder of {args.name} "
                     f"({own if own is not None else 'no reports/dvc.yaml here names it'}), so "
                     f"whether it holds the results of {args.name}'s definition as it is now "
                     f"cannot be checked")
    if unchecked:  # said on the card too, under its figures
        print(f"note: {unchecked}; the card states what its records say", file=sys.stderr)
    if args.model is not None:
        model = args.model
    else:
        record = results / "eval" / "provenance.json"
        model = recorded_model(results, read_json(record))
        if not str(model) or str(model) == ".":
            raise PipelineError(f"{record}: names no model file; {RERUN}, or give --model")
    out = args.out or Path("models") / args.name
    # published inside the results (or they inside it), one would be written into the other:
    # the results folder is a DVC stage's output, the published folder publish's own
    folders_apart([("--results", results), ("--out", out)],
                  "the variant's results; the weights published from them")
    card = publish(args.name, model, results, out, args.check_data, args.replace, unchecked)
    print(f"published {model} in {out} ({card} states its precision)")


if __name__ == "__main__":
    run_stage(main)
