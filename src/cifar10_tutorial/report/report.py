"""The report stage: every ablation variant's metrics and logs -> report.md, CSV tables
and PNG plots, one section per exercise of the tutorial, each written by one function.

Every sentence with a number is written from the measured metrics; where a variant
the section needs was not run, the section says so instead. The reference's figures
come from one table, :data:`.reference.REFERENCE`, which the report prints at its end.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

import pandas as pd

from ..errors import PipelineError
from ..ownership import (listed, refuse_foreign_file, refuse_inside_published,
                         repository_at, run_lock)
from ..files import (ending_signals_unwind, listed_as_written, read_small_file,
                     recover_swapped_folder, signals_held, staging_folder, swap_in_folder,
                     write_listing, write_text_atomic)
from ..params import queue_sizes
from .reference import ref, reference_markdown
from .results import (Results, banner, load_curve, load_variants, make_results, marker,
                          markdown_table, pct, plot, provenance_section, refuse_other_network,
                          speed_ratio)
from .against_reference import against_reference, read_reference
from .multi_device import exercise5_devices, read_timing
from .schedules import reproduction, time_to_accuracy
from .yours import your_variants


def make_report(ablations_root: Path, out: Path, variants: Optional[dict] = None,
                dataset_variants: Optional[list[str]] = None,
                search: Optional[Path] = None, equivalence: Optional[Path] = None,
                devices_timing: Optional[Path] = None, tf_reference: Optional[Path] = None,
                trial_steps: Optional[int] = None, unchecked: Optional[str] = None,
                networks: Optional[dict] = None, baseline: Optional[dict] = None) -> Path:
    """Write ``out/report.md``, ``out/tables/*.csv`` and ``out/plots/*.png`` from the
    results under ``ablations_root`` (data-set variants' results are there too);
    ``variants``: reports/params.yaml's ``ablations`` (name -> overrides), which sorts them into
    exercises, seeds and runs of their own budget; ``equivalence``: the record of commits
    checked to train bit-identically (:mod:`.equivalence`); ``devices_timing``: exercise 5's
    timing of both set-ups on one idle machine (:mod:`.devices_timing`); ``tf_reference``:
    the folder of the reference implementation's runs (:mod:`.against_reference`);
    ``trial_steps``: reports/params.yaml ``ablation.trial_steps``, named in the banner when set;
    ``unchecked``: why the results could not be checked against their stages (a copy of
    them), said at the top; ``networks``: each variant's ``model`` section (name -> the
    section with its overrides), whose parameters and multiply-adds its results state;
    ``baseline``: the baseline's sections (``{"train": {...}, ...}``), against which "Your
    variants" tells an override that changes a value from one that repeats it."""
    every = df = load_variants(ablations_root)  # the data-set variants' results too
    if networks is not None:
        refuse_other_network(ablations_root, every, networks)
    not_run = []
    if variants is not None:
        # a variant without results is named at the top and its sections say so
        not_run = [v for v in variants if v not in df.index]
        if not variants:  # nothing to report on, whatever results lie there
            raise PipelineError("reports/params.yaml: `ablations:` is empty; define the "
                                "variants to report (`baseline: {}` at least)")
        if len(not_run) == len(variants):
            raise PipelineError(f"{ablations_root}: no results for any variant of reports/params.yaml "
                                f"`ablations:`; run `dvc repro reports/dvc.yaml:report`.")
        df = df.loc[[v for v in variants if v in df.index]]
    out = Path(out)
    # the records it reads, before anything is made at --out: a refusal leaves nothing
    read_reference(tf_reference)
    if devices_timing is not None and Path(devices_timing).is_file():
        read_timing(Path(devices_timing))
    refuse_inside_published(out, "--out")  # its card and manifest list what it holds
    _refuse_inside_own_outputs(out)
    _refuse_inside_a_run(out, ablations_root)
    for name in FOLDERS:  # the report's own folders: never a link it would write through
        if (out / name).is_symlink() or ((out / name).exists() and not (out / name).is_dir()):
            raise PipelineError(f"{out / name}: a {'link' if (out / name).is_symlink() else 'file'}"
                                f", where the report writes a folder of its own; move it "
                                f"away, then rerun. Nothing was changed.")
    # report.md is replaced only when it is a report (its title on the first line) as the
    # report wrote it (its seal: edits of yours in it would be lost)
    # (the whole file: the seal is its last line, past the head refuse_foreign_file reads)
    for name in ("report.md", SWAPPING):  # never a link written through, nor a folder
        at = out / name
        if at.is_symlink() or (at.exists() and not at.is_file()):
            raise PipelineError(f"{at}: {'a link' if at.is_symlink() else 'not a file'}, "
                                f"where the report writes its own {name}; move it away, then "
                                f"rerun. Nothing was changed.")
    refuse_foreign_file(out / "report.md", "--out", "a report as the report wrote it "
                        "(none edited since)", lambda _: _as_written(_whole(out / "report.md")),
                        ("report",))
    refuse_foreign_file(out / SWAPPING, "--out", "the report's mark",
                        lambda text: text.startswith("the report stage is swapping"), ("report",))
    for name in FOLDERS:  # what of the user's is in a folder the report replaces: refused
        foreign = _not_the_reports(out / name)
        if foreign:
            # git gives back the report's own only where git keeps the folder
            restore = (f", restore or delete the report's own (`git checkout -- {out / name}`)"
                       if repository_at(Path(os.path.abspath(out))) is not None else "")
            raise PipelineError(f"{out / name}: holds {listed(foreign)}, which the report did "
                                f"not write (or which changed since), and would set the folder "
                                f"aside; move files of yours elsewhere (or give --out another "
                                f"folder){restore}, then rerun. Nothing was changed.")
    out.mkdir(parents=True, exist_ok=True)
    swapping = out / SWAPPING
    # one report at a time in a folder: two would swap their sets into each other's
    with run_lock(out, "the report (cifar10 report or the report stage)"), \
            ending_signals_unwind():  # a stop from outside runs the clean-up below
        if swapping.is_file() and not swapping.is_symlink():
            print(f"note: {out}: the last report was killed while it swapped in its files "
                  f"(report.md, tables/ and plots/ may be of two runs): this one replaces "
                  f"them all", file=sys.stderr)
        for name in FOLDERS:  # what an interrupted report left beside its folders
            for line in recover_swapped_folder(out / name, _written(out / name), WRITTEN, _written):
                print(f"note: {line}", file=sys.stderr)
        staged = {name: staging_folder(out / name) for name in FOLDERS}
        try:
            for folder in staged.values():  # first: the mark of a folder the report builds
                (folder / BUILDING).write_text("a folder the report stage is building\n")
            r = make_results(df, variants or {}, ablations_root, out, not_run, trial_steps,
                             unchecked)
            r.tables, r.plots = staged["tables"], staged["plots"]
            r.baseline_values = baseline
            md = (_intro(r) + provenance_section(r, equivalence) + reproduction(r) + _summary(r)
                  + _exercise1_softmax(r) + _exercise2_local_head(r) + _exercise3_queue_fill(r)
                  + _exercise4_averaging(r) + exercise5_devices(r, devices_timing)
                  + _exercise6_dataset(r, every, list(dataset_variants or []))
                  + _no_lrn(r) + _bf16(r) + time_to_accuracy(r, search, out)
                  # a data-set variant of yours with its overrides: what it changes
                  + your_variants(r, every, {n: o for n, o in _as_mapping(dataset_variants)
                                             .items() if n not in TUTORIAL_DATASET_VARIANTS})
                  + against_reference(r, tf_reference) + reference_markdown())
            for folder in staged.values():
                _list_written(folder)
            report = out / "report.md"
            # the set goes in whole: a stop asked for during the swaps acts after them
            with signals_held():
                # the set is mixed until the last swap: said so, should a kill -9 come
                write_text_atomic(swapping, "the report stage is swapping in report.md, "
                                            "tables/ and plots/\n")
                for name, folder in staged.items():
                    kept = swap_in_folder(folder, out / name, _replaced_own(out / name))
                    if kept is not None:  # never silently: it held what the report did not write
                        print(f"note: the folder {out / name} held before is kept as {kept}: "
                              f"it holds files the report did not write; look through it, "
                              f"then delete it", file=sys.stderr)
                write_text_atomic(report, _sealed("\n".join(md)))
                swapping.unlink()
        finally:
            for name, folder in staged.items():
                if folder.is_dir():  # not swapped in (or the old one, kept): only the report's
                    recover_swapped_folder(out / name, _written(out / name), WRITTEN, _written)
    return report


TITLE = "# The tutorial's exercises, measured"  # report.md's first line
FOLDERS = ("tables", "plots")  # the report's folders in --out, beside report.md
SWAPPING = ".report-swapping"  # in --out while the set is swapped in: a kill -9 leaves it
BUILDING = ".report-building"  # the first file in a folder the report builds
WRITTEN = ".report-files"  # the last: each file the report wrote there, with its sha256
# the names the report gives its files (tables, plots) and their temporary files
_REPORT_FILE = re.compile(r"[A-Za-z0-9_.-]+\.(csv|png)|\.[^/]+\.tmp(\.png)?")
# report.md's last line: the sha256 of the text above it, so that a later report tells a
# report edited by hand (whose edits it would lose) from its own
SEAL = re.compile(r"<!-- written by the report stage; sha256 ([0-9a-f]{64}) of the text "
                  r"above: edit a copy, not this file -->\n\Z")


def _sealed(text: str) -> str:
    above = text.rstrip("\n") + "\n"
    return (f"{above}<!-- written by the report stage; sha256 "
            f"{hashlib.sha256(above.encode('utf-8')).hexdigest()} of the text above: edit a "
            f"copy, not this file -->\n")


def _whole(path: Path) -> str:
    """The text of report.md, whole (a regular file, at most 256 MiB)."""
    return read_small_file(path, 256 << 20).decode("utf-8")


def _refuse_inside_own_outputs(out: Path) -> None:
    """--out inside one of the report stage's own outputs (reports/plots, reports/tables):
    the guard lets the stage write its outputs, but a report there is no output of it, and
    DVC would find that output changed. One line naming it."""
    import os

    from ..ownership import PIPELINES, repository_at, repository_root, stage_paths

    root = repository_root(out)
    where = out.resolve()
    if repository_at(where) is not None and repository_at(where).resolve() == where:
        # its tables/, plots/ and report.md among the project's own files, its lock outside
        raise PipelineError(f"--out {out}: the root of the checkout itself, where the report's "
                            f"report.md, tables/ and plots/ would sit among the project's "
                            f"files; give --out a folder of its own (reports, as "
                            f"reports/dvc.yaml gives it). Nothing was changed.")
    for stage, output in stage_paths(tuple(root / p for p in PIPELINES))[0]:
        at = Path(os.path.normpath(root / output)).resolve()
        if stage == "report" and at in (where, *where.parents) \
                and (root / output).name in FOLDERS:
            raise PipelineError(f"--out {out}: inside {at}, the report stage's own "
                                f"{at.name}/ (an output of it), where a report is none of "
                                f"its files; give --out the folder that holds it, or one of "
                                f"your own. Nothing was changed.")


def _refuse_inside_a_run(out: Path, ablations_root: Path) -> None:
    """--out being the folder of the variants' results, or in (or being) one variant's
    folder there: the report's files would lie among the variants' folders, or join one
    run's record, which the report and publishing read as one run's (a copy of the
    results outside DVC too, whose stages would not refuse it)."""
    where = Path(os.path.realpath(out))
    root = Path(os.path.realpath(ablations_root))
    if where == root:  # beside the variants' folders, its own read as results
        raise PipelineError(f"--out {out}: the folder of the variants' results (--ablations), "
                            f"where the report's folders would lie among the variants'; give "
                            f"--out a folder of its own (reports, as reports/dvc.yaml gives "
                            f"it). Nothing was changed.")
    for folder in sorted(Path(ablations_root).iterdir()):
        if (folder / "variant.json").is_file():
            run = Path(os.path.realpath(folder))
            if where == run or run in where.parents:
                raise PipelineError(f"--out {out}: inside {folder}, one variant's results "
                                    f"(its run's record, which the report reads); give --out "
                                    f"a folder of its own (reports, as reports/dvc.yaml "
                                    f"gives it). Nothing was changed.")


def _as_written(text: str) -> bool:
    """Whether ``text`` is a report as the report wrote it: its title first, and its seal
    the digest of what is above it. One without a seal (its seal line deleted, notes added)
    is the user's: replaced, the notes would be lost."""
    if text.split("\n", 1)[0] != TITLE:
        return False
    seal = SEAL.search(text)
    return seal is not None and \
        seal.group(1) == hashlib.sha256(text[:seal.start()].encode("utf-8")).hexdigest()


def _list_written(folder: Path) -> None:
    """``folder`` complete: its list of what the report wrote there (:data:`WRITTEN`),
    then the building mark removed."""
    write_listing(folder, WRITTEN, [p.name for p in sorted(folder.iterdir())
                                    if p.name != BUILDING and p.is_file() and not p.is_symlink()],
                  indent=1)
    (folder / BUILDING).unlink()


def _written(folder: Path) -> set[str]:
    """The files in ``folder`` the report may remove: in one it was building when it was
    stopped (its hidden staging name and mark), its mark and the files it names so; else
    those its list names, each still as the report wrote it, and the list. Nothing in a
    folder without either: a user's, or a report's from before the list."""
    mark = folder / BUILDING
    if (re.search(r"\.staging-[0-9]+-[^.]*$", folder.name) and mark.is_file()
            and not mark.is_symlink()):
        return {BUILDING} | {p.name for p in folder.iterdir() if _REPORT_FILE.fullmatch(p.name)
                             and p.is_file() and not p.is_symlink()}
    return listed_as_written(folder, WRITTEN, _REPORT_FILE.fullmatch)


def _not_the_reports(folder: Path) -> list[str]:
    """What in the report's ``folder`` (tables/, plots/) it would not replace: the files
    its list does not name as written; in a folder without its list (a user's, whatever
    its files are named), every file. A list that cannot be read is one line naming it."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    listing = folder / WRITTEN
    if listing.is_file() and not listing.is_symlink():
        files = _listed(folder)
        if files is None:  # (git gives the folder back only where git keeps it)
            restore = (f"restore the folder (`git checkout -- {folder}`), or move it away"
                       if repository_at(Path(os.path.abspath(folder))) is not None
                       else "move the folder away")
            raise PipelineError(f"{listing}: expected the report's list of the files it wrote "
                                f"there, found one that cannot be read; {restore}, then rerun. "
                                f"Nothing was changed.")
        ours = _written(folder) | {WRITTEN}
        ours |= _as_committed(folder, [p.name for p in folder.iterdir() if p.name not in ours],
                              files)
    else:
        ours = set()
    return sorted(p.name for p in folder.iterdir() if p.name not in ours)


def _listed(folder: Path) -> Optional[dict]:
    """The report's list of what it wrote in ``folder`` (name -> sha256); None where it
    cannot be read."""
    try:
        files = json.loads((folder / WRITTEN).read_text(encoding="utf-8")).get("files")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return None
    return files if isinstance(files, dict) else None


def _as_committed(folder: Path, names: list[str], listed: Optional[dict]) -> set[str]:
    """Of ``names`` in the report's ``folder``, the files its list (``listed``) names (the
    report's own names) that changed since, and whose bytes are those of the last commit (HEAD):
    the report's own from another branch, merged (this branch's list does not have their
    hash); replacing them loses nothing git cannot give back. A file the list does not
    name, or bytes only the index or the working copy hold, is not (a user's, an edit).
    None where git is not there. Git runs with no hook or filter of the folder's config."""
    import subprocess

    names = sorted(n for n in names if isinstance(listed, dict) and n in listed
                   and _REPORT_FILE.fullmatch(n) and not n.startswith(".")
                   and (folder / n).is_file() and not (folder / n).is_symlink())
    if not names:
        return set()
    git = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
    try:
        committed = subprocess.run(git + ["ls-tree", "HEAD", "--", *names], cwd=folder,
                                   capture_output=True, text=True, timeout=60)
        made = subprocess.run(git + ["hash-object", "--no-filters", "--", *names], cwd=folder,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if committed.returncode or made.returncode:
        return set()
    held = {}
    for line in committed.stdout.splitlines():  # "<mode> blob <object>\t<path>"
        info, _, path = line.partition("\t")
        parts = info.split()
        if len(parts) == 3 and parts[1] == "blob":
            held[path] = parts[2]
    return {n for n, blob in zip(names, made.stdout.split()) if held.get(n) == blob}


def _replaced_own(dest: Path) -> set[str]:
    """What of the folder at ``dest`` the new one replaces: the files its list names (as
    written); nothing of a folder without the list (a file of a name the report gives its
    own may be a user's). Anything else keeps the old folder (refused before, up front:
    :func:`_not_the_reports`; kept should it appear meanwhile)."""
    if (dest / WRITTEN).is_file() and not (dest / WRITTEN).is_symlink():
        own = _written(dest)
        return own | _as_committed(dest, [p.name for p in dest.iterdir() if p.name not in own],
                                   _listed(dest))
    return set()


BF16 = "precision_bf16"  # reports/params.yaml `ablations:`: the baseline under bf16 autocast
# exercise 3's variants: the baseline's queue (0.4 of the training set) and three lower fills
QUEUE_FILL = ("baseline", "queue_fill_10pct", "queue_fill_1pct", "queue_fill_0pct")
TUTORIAL_DATASET_VARIANTS = ("svhn",)  # exercise 6's


def epochs_in_words(ex) -> str:
    """The epochs and global batch of variants trained for one budget in steps (``ex``:
    their table, with epochs and global_batch_size): one budget is as many epochs only at
    one global batch; at several, each's range."""
    batches = sorted({int(b) for b in ex["global_batch_size"]})
    if len(batches) == 1:
        return f"{ex['epochs'].max():.1f} epochs, global batch {batches[0]}"
    return (f"{ex['epochs'].min():.1f} to {ex['epochs'].max():.1f} epochs: global batches of "
            f"{', '.join(map(str, batches))}, as the next table gives each")


def _intro(r: Results) -> list[str]:
    ex, df = r.exercises, r.df
    more = len(r.seeds) - 1 if r.seeds is not None else 0
    seeds = (f"the baseline also under {more} more seed{'s' if more > 1 else ''}, whose "
             f"spread is the noise each answer is weighed against" if more
             else "one seed each (no seed runs: effects cannot be told from noise)")
    lo, hi = (int(ex["steps"].min()), int(ex["steps"].max())) if len(ex) else (0, 0)
    budget = ("" if not len(ex) else
              f"Every variant of the exercises is trained for **{hi:,} steps** "
              f"({epochs_in_words(ex)}); " if lo == hi else
              f"The variants of the exercises are trained for **{lo:,} to {hi:,} steps** "
              f"(budgets that differ: the next table gives each); ")
    return [TITLE, "", *banner(r),
            f"{budget}{seeds}. Training set: {int(df['num_train'].iloc[0]):,} images; "
            f"evaluation: {int(df['num_examples'].iloc[0]):,} held-out images, with the "
            f"moving-average weights and with the raw weights, "
            f"{_machines(df)}. "
            f"The reference's figures come from 60K-100K-step runs on the official test set: "
            f"compare directions and sizes of effects, not absolute levels.",
            ""]


def _machines(df) -> str:
    devices = list(dict.fromkeys(df["device"]))
    return (f"on `{devices[0]}`" if len(devices) == 1
            else "on the machines (and threads) the next table names for each variant")


def _summary(r: Results) -> list[str]:
    df = r.df
    summary = pd.DataFrame({
        "variant": df.index,
        "precision @ 1 (averaged)": df["precision_at_1"].map(pct),
        "precision @ 1 (raw)": df["precision_at_1_raw"].map(pct),
        "final loss (avg)": df["final_loss_avg"].map(lambda v: f"{v:.3f}"),
        "train examples/sec": df["examples_per_sec"].map(lambda v: f"{v:,.0f}"),
        "time to first batch (s)": df["time_to_first_batch_s"].map(lambda v: f"{v:.2f}"),
        "parameters": df["num_params"].map(lambda v: f"{int(v):,}"),
    })
    summary.loc[len(summary)] = ref("summary_row")
    write_text_atomic(r.tables / "summary.csv", summary.to_csv(index=False))

    def draw(ax):
        for name in r.exercises.index:
            curve = load_curve(r.root, name)
            if curve is not None:
                ax.plot(curve["step"], curve["loss_avg"], label=name, lw=1.2,
                        marker=marker(len(curve)), ms=3)
    drawn = plot(r.plots / "loss_curves.png", (8, 4.5), draw,
                 "Training loss of every exercise variant", "step",
                 "total loss (moving average, decay 0.9)", legend=True)
    return ["## All variants", "", markdown_table(summary), "",
            f"The reference: {ref('precision')}.", "",
            *(["![loss curves](plots/loss_curves.png)", ""] if drawn else [])]


def _exercise1_softmax(r: Results) -> list[str]:
    md = ["## Exercise 1: return normalized predictions (softmax)", "",
          "*Question:* what changes when the model returns probabilities instead of logits?", ""]
    base = r.base
    if base is None or not r.has("softmax"):
        return md + ["*Not run:* the `softmax` variant (or the baseline) has no results.", ""]
    s = r.df.loc["softmax"]
    t = pd.DataFrame({"variant": ["baseline (logits)", "softmax"],
                      "precision @ 1": [pct(base.precision_at_1), pct(s.precision_at_1)],
                      "precision @ 1 (raw)": [pct(base.precision_at_1_raw),
                                              pct(s.precision_at_1_raw)],
                      "final loss": [f"{base.final_loss_avg:.4f}", f"{s.final_loss_avg:.4f}"]})
    write_text_atomic(r.tables / "exercise1_softmax.csv", t.to_csv(index=False))
    d = 100 * (s.precision_at_1 - base.precision_at_1)
    same = abs(d) < 1e-9 and abs(s.final_loss_avg - base.final_loss_avg) < 1e-9
    why = ("Training is identical (the loss is computed from the logits in both, so the runs "
           "match step for step) and the argmax of the probabilities is the argmax of the "
           "logits: normalizing the output changes what the model returns, not what it learns "
           "or predicts." if same else
           "The loss is computed from the logits in both variants, and the argmax of the "
           "probabilities is the argmax of the logits; the difference comes from float "
           f"rounding in the averaged weights {r.noise(d, 'precision_at_1')}.")
    return md + [markdown_table(t), "", r.answer(f"precision @ 1 moves by {d:+.2f} points. {why}"),
                 ""]


def _exercise2_local_head(r: Results) -> list[str]:
    md = ["## Exercise 2: locally connected layers on top (cuda-convnet layers-conv-local-11pct)",
          "", "*Question:* does replacing the fully connected local3/local4 with locally "
          "connected layers help, and at what cost?", ""]
    base = r.base
    if base is None or not r.has("local_head"):
        return md + ["*Not run:* the `local_head` variant has no results.", ""]
    h = r.df.loc["local_head"]
    t = pd.DataFrame({"variant": ["baseline (fully connected)", "local_head"],
                      "parameters": [f"{int(base.num_params):,}", f"{int(h.num_params):,}"],
                      "multiply-adds/image": [f"{int(base.macs_per_image):,}",
                                              f"{int(h.macs_per_image):,}"],
                      "precision @ 1": [pct(base.precision_at_1), pct(h.precision_at_1)],
                      "train examples/sec": [f"{base.examples_per_sec:,.0f}",
                                             f"{h.examples_per_sec:,.0f}"]})
    write_text_atomic(r.tables / "exercise2_local_head.csv", t.to_csv(index=False))
    d = 100 * (h.precision_at_1 - base.precision_at_1)
    speed = h.examples_per_sec / base.examples_per_sec
    return md + [markdown_table(t), "", r.answer(
                 f"under this budget the locally connected top is {abs(d):.1f} points "
                 f"{'better' if d > 0 else 'worse'} than the fully connected one "
                 f"{r.noise(d, 'precision_at_1')}, with {h.num_params / base.num_params:.2f}x "
                 f"the parameters; its training speed against the fully connected top: "
                 f"{speed_ratio(r, speed, h)}. {ref('local_head')}."), ""]


def _exercise3_queue_fill(r: Results) -> list[str]:
    md = ["## Exercise 3: lower the initial queue fill", "",
          "*Question:* how much sooner does the first step come with a smaller "
          "`min_fraction_of_examples_in_queue`, and does it cost accuracy?", ""]
    ex = r.exercises
    q = ex.loc[[n for n in QUEUE_FILL if n in ex.index]]
    q = q.sort_values("min_fraction_of_examples_in_queue", ascending=False)
    if len(q) < 2:
        return md + ["*Not run:* fewer than two queue-fill variants have results.", ""]
    fill = q["min_fraction_of_examples_in_queue"]
    t = pd.DataFrame({"variant": q.index, "min fraction": fill,
                      "examples queued before step 1": [  # the queue's capacity
                          queue_sizes(f, int(n), int(b))[1]
                          for f, n, b in zip(fill, q["num_train"], q["batch_size"])],
                      "time to first batch (s)": q["time_to_first_batch_s"].map(lambda v: f"{v:.2f}"),
                      "final loss": q["final_loss_avg"].map(lambda v: f"{v:.3f}"),
                      "precision @ 1": q["precision_at_1"].map(pct)})
    write_text_atomic(r.tables / "exercise3_queue_fill.csv", t.to_csv(index=False))
    hi, lo = q.iloc[0], q.iloc[-1]
    moved = 100 * (lo.precision_at_1 - hi.precision_at_1)
    sooner = r.noise(lo.time_to_first_batch_s - hi.time_to_first_batch_s, "time_to_first_batch_s",
                     scale=1.0, unit="s", fmt=".2f", of=" in time to the first batch")

    def draw(ax):
        ax.plot(fill, q["time_to_first_batch_s"], "o-")  # a marker at each variant
        for name, row in q.iterrows():
            ax.annotate(name, (row.min_fraction_of_examples_in_queue, row.time_to_first_batch_s),
                        fontsize=7, textcoords="offset points", xytext=(4, 4))
    plot(r.plots / "queue_fill_first_step.png", (6, 4), draw,
          "Queue fill against time to the first step", "min_fraction_of_examples_in_queue",
          "time to the first batch (s)")
    return md + [markdown_table(t), "", "![time to first step](plots/queue_fill_first_step.png)", "",
                 r.answer(f"filling {pct(hi.min_fraction_of_examples_in_queue)} of the training "
                 f"set takes {hi.time_to_first_batch_s:.2f} s before the first step, "
                 f"{pct(lo.min_fraction_of_examples_in_queue)} takes "
                 f"{lo.time_to_first_batch_s:.2f} s {sooner} ({ref('queue_fill')}; here the "
                 f"distortions are vectorised). Precision @ 1 moves by {moved:+.1f} points from the fullest "
                 f"to the emptiest queue {r.noise(moved, 'precision_at_1')}. With no minimum "
                 f"the queue holds only 3 batches of records in file order; CIFAR-10's record "
                 f"files are themselves in random order, which is why a small buffer can still "
                 f"train."), ""]


def _exercise4_averaging(r: Results) -> list[str]:
    ex = r.exercises
    budget = ex["steps"].max()
    gain = 100 * (ex["precision_at_1"] - ex["precision_at_1_raw"])
    t = pd.DataFrame({"variant": ex.index, "averaged": ex["precision_at_1"].map(pct),
                      "raw": ex["precision_at_1_raw"].map(pct),
                      "gain (points)": gain.map(lambda v: f"{v:+.1f}")})
    t.loc[len(t)] = ref("averaging_row")
    write_text_atomic(r.tables / "exercise4_averaging.csv", t.to_csv(index=False))

    def draw(ax):
        x = range(len(ex))
        ax.bar([i - 0.2 for i in x], 100 * ex["precision_at_1"], 0.4, label="averaged weights")
        ax.bar([i + 0.2 for i in x], 100 * ex["precision_at_1_raw"], 0.4, label="raw weights")
        ax.set_xticks(list(x), ex.index, rotation=30, ha="right")
        ax.set_ylim(0, 112)  # room above 100%: the legend never covers a bar
        ax.set_yticks(range(0, 101, 20))
        ax.legend(fontsize=8, ncols=2, loc="upper center")
    plot(r.plots / "averaged_vs_raw.png", (8, 4.4), draw, "Averaged against raw weights", None,
         "precision @ 1 (%)", grid_axis="y")
    return ["## Exercise 4: evaluate without the averaged weights", "",
            "*Question:* how much do the moving averages of the weights (decay 0.9999) add? "
            f"The reference says {ref('averaging')}.", "", markdown_table(t), "",
            "![averaged vs raw](plots/averaged_vs_raw.png)", "",
            r.answer(f"the averaged weights gain {gain.mean():+.1f} points on average over the "
            f"variants (from {gain.min():+.1f} to {gain.max():+.1f}) "
            f"{r.noise(gain.mean(), 'precision_at_1_raw')}. With TF's num_updates "
            f"rule the decay at step n is min(0.9999, (1 + n) / (10 + n)), an averaging window "
            f"of about n / 9 steps ({budget / 9:,.0f} steps at step {budget:,}); the full "
            f"10,000-step window of decay 0.9999 is reached only after 90,000 steps, near the "
            f"reference's 100K-step runs."), ""]


def _as_mapping(variants) -> dict:
    """Data-set variants given as a mapping name -> overrides, or as names (no overrides)."""
    return dict(variants) if isinstance(variants, dict) else dict.fromkeys(variants or [], {})


def _exercise6_dataset(r: Results, every: pd.DataFrame, defined: list[str]) -> list[str]:
    """Exercise 6's section: the tutorial's data-set variants (:data:`TUTORIAL_DATASET_
    VARIANTS`) of ``defined`` (every data-set variant of reports/params.yaml); the others
    are your variants, said so where none of the tutorial's ran."""
    dataset_variants = [n for n in defined if n in TUTORIAL_DATASET_VARIANTS]
    md = ["## Exercise 6: SVHN instead of CIFAR-10", "",
          "*Question:* how does the same network do on SVHN's house-number digits? The "
          "network adapts through the data set alone: 10 classes again, no left-right flips "
          "(digits are not mirror-symmetric), otherwise the same layers and schedule.", ""]
    ran = [every.loc[n] for n in dataset_variants if n in every.index]
    if not ran:
        yours = [n for n in defined if n not in TUTORIAL_DATASET_VARIANTS]
        names = (", ".join(f"`{n}`" for n in dataset_variants) or
                 (f"none named {', '.join(f'`{n}`' for n in TUTORIAL_DATASET_VARIANTS)}; "
                  f"{', '.join(f'`{n}`' for n in yours)} {'is' if len(yours) == 1 else 'are'} "
                  f"yours, under Your variants" if yours else "none is defined"))
        return md + [f"*Not run here:* no results for the data-set variants ({names}). They are "
                     f"opt-in, since they fetch their own data (SVHN's files from "
                     f"http://ufldl.stanford.edu/housenumbers/): add one to `dataset_ablations:` "
                     f"in reports/params.yaml (`svhn: {{data: {{dataset: svhn}}}}`, with `url:` pointing "
                     f"at a local copy of the files where that host is out of reach), then "
                     f"`dvc repro reports/dvc.yaml`: this section then shows its table.", ""]
    base = r.base
    t = pd.DataFrame({"variant": [v.name for v in ran],
                      "data set": [v.get("dataset", "") for v in ran],
                      "training images": [f"{int(v['num_train']):,}" for v in ran],
                      "steps": [f"{int(v['steps']):,}" for v in ran],
                      "precision @ 1 (averaged)": [pct(v["precision_at_1"]) for v in ran],
                      "precision @ 1 (raw)": [pct(v["precision_at_1_raw"]) for v in ran]})
    if base is not None:
        t.loc[len(t)] = ["baseline", "cifar10", f"{int(base.num_train):,}",
                         f"{int(base.steps):,}", pct(base.precision_at_1),
                         pct(base.precision_at_1_raw)]
    write_text_atomic(r.tables / "exercise6_svhn.csv", t.to_csv(index=False))
    v = ran[0]
    return md + [markdown_table(t), "",
                 r.answer(f"after {int(v['steps']):,} steps the network reaches "
                 f"{pct(v['precision_at_1'])} on {v.get('dataset', 'the other data set')}'s "
                 f"{int(v['num_examples']):,} test images (averaged weights)"
                 + (f", against {pct(base.precision_at_1)} on CIFAR-10 under the same budget."
                    if base is not None else ".")), ""]


def _no_lrn(r: Results) -> list[str]:
    base = r.base
    if base is None or not r.has("no_lrn"):
        return []
    n = r.df.loc["no_lrn"]
    t = pd.DataFrame({"variant": ["baseline (with LRN)", "no_lrn"],
                      "precision @ 1": [pct(base.precision_at_1), pct(n.precision_at_1)],
                      "train examples/sec": [f"{base.examples_per_sec:,.0f}",
                                             f"{n.examples_per_sec:,.0f}"]})
    write_text_atomic(r.tables / "no_lrn.csv", t.to_csv(index=False))
    d = 100 * (n.precision_at_1 - base.precision_at_1)
    speed = n.examples_per_sec / base.examples_per_sec
    return ["## Without local response normalization", "", markdown_table(t), "",
            r.answer(f"dropping norm1 and norm2 moves precision @ 1 by {d:+.1f} points "
                     f"{r.noise(d, 'precision_at_1')}; its training speed against the baseline: "
                     f"{speed_ratio(r, speed, n)}."), ""]


def _bf16(r: Results) -> list[str]:
    """precision_bf16 against the band of the fp32 baseline's seeds (min to max)."""
    if r.base is None or not r.has(BF16):
        return []
    b, seeds = r.df.loc[BF16], r.seeds
    rows = [(name, "fp32", seeds.loc[name]) for name in seeds.index] + [(BF16, "bf16", b)]
    t = pd.DataFrame({"variant": [n for n, _, _ in rows], "precision": [p for _, p, _ in rows],
                      "precision @ 1 (averaged)": [pct(v.precision_at_1) for _, _, v in rows],
                      "precision @ 1 (raw)": [pct(v.precision_at_1_raw) for _, _, v in rows],
                      "train examples/sec": [f"{v.examples_per_sec:,.0f}" for _, _, v in rows],
                      "machine": [v.device for _, _, v in rows]})
    write_text_atomic(r.tables / "bf16.csv", t.to_csv(index=False))

    def place(column: str) -> str:
        lo, hi, v = seeds[column].min(), seeds[column].max(), b[column]
        where = "**inside**" if lo <= v <= hi else ("above" if v > hi else "**below**")
        return f"{pct(v)}, {where} the fp32 band {pct(lo)} to {pct(hi)}"
    speed = b.examples_per_sec / r.base.examples_per_sec
    return ["## bf16 autocast (`train.precision: bf16`)", "",
            f"The baseline with its forward pass under bf16 autocast, against the fp32 "
            f"baseline's {len(seeds)} seeds:", "", markdown_table(t), "",
            r.answer(f"with the averaged weights {place('precision_at_1')}; with the raw "
                     f"weights {place('precision_at_1_raw')}. Training speed against the "
                     f"fp32 baseline: {speed_ratio(r, speed, b)}; the benchmark "
                     f"times both precisions on one machine (docs/results.md)."), ""]
