"""The report's sections on budgets: the tutorial at its own budget (the 100K-step
reproduction's held-out curve beside the reference's figures, with its wall time) and time
to accuracy (the `fast` schedule against the tutorial's, and the shortest `fast` run that
reaches the reproduction's final precision)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import pandas as pd

from ..files import write_text_atomic

from .reference import ref
from .results import (MIN_STEPS, REPRODUCTION, Results, load_provenance, machine_of, marker,
                      markdown_table, pct, plot)
from ..curves import held_out_curve


def variant_curve(r: Results, name: str) -> Optional[pd.DataFrame]:
    """A variant's held-out evaluations while training (see :func:`held_out_curve`)."""
    return held_out_curve(r.root / name / "train")


def reproduction(r: Results) -> list[str]:
    md = ["## The tutorial at its own budget", "",
          f"*Question:* with the tutorial's schedule, batch and budget, does this "
          f"implementation reach the reference's accuracy? The reference: {ref('precision')}.",
          ""]
    rep = r.reproduction
    if rep is None:
        return md + [f"*Not run:* the `{REPRODUCTION}` variant has no results (reports/params.yaml "
                     f"`ablations:`; hours on a CPU).", ""]
    c = variant_curve(r, REPRODUCTION)
    if c is not None:
        t = pd.DataFrame({"step": c["step"].map(lambda v: f"{int(v):,}"),
                          "epoch": c["epoch"].map(lambda v: f"{v:.1f}") if "epoch" in c else "",
                          "held-out precision @ 1 (averaged)": c["precision_at_1"].map(pct),
                          "(raw)": c["precision_at_1_raw"].map(pct)
                          if "precision_at_1_raw" in c else ""})
        write_text_atomic(r.tables / "reproduction_curve.csv", t.to_csv(index=False))
        md += [markdown_table(t), ""]

        def draw(ax):
            ax.plot(c["step"], 100 * c["precision_at_1"], "-", marker=marker(len(c)), ms=4,
                    label="averaged weights")
            if "precision_at_1_raw" in c:
                ax.plot(c["step"], 100 * c["precision_at_1_raw"], "--", marker=marker(len(c)),
                        ms=4, alpha=0.7, label="raw weights")
            ax.axhline(ref("precision_target"), color="gray", lw=0.8, ls=":",
                       label="reference: ~86% at 100K steps")
            ax.axhline(ref("precision_eval_docstring"), color="gray", lw=0.8, ls="--",
                       label="reference: 83.0% (cifar10_eval.py)")
        if plot(r.plots / "reproduction.png", (8, 4.5), draw,
                f"{REPRODUCTION}: held-out precision while training", "step",
                "held-out precision @ 1 (%)", legend=True):
            md += ["![reproduction](plots/reproduction.png)", ""]
    short = (f" It ran {int(rep.steps):,} of the tutorial's 100,000 steps."
             if rep.steps < 100_000 else "")
    d = 100 * rep.precision_at_1 - ref("precision_target")
    versus = (f"{d:+.1f} points from the reference's ~86%, which was measured on the official "
              f"test set." if rep.steps >= MIN_STEPS else
              f"a trial of fewer than {MIN_STEPS:,} steps, too short to compare with the "
              f"reference's ~86%.")
    return md + [f"*Measured:* after {int(rep.steps):,} steps ({rep.epochs:.0f} epochs of "
                 f"{int(rep.num_train):,} images) the averaged weights reach "
                 f"**{pct(rep.precision_at_1)}** and the raw weights {pct(rep.precision_at_1_raw)} "
                 f"on {int(rep.num_examples):,} held-out images: {versus}{short} "
                 f"Wall time {_hours(rep.wall_time_s)} ({_hours(rep.train_seconds)} of training, "
                 f"the rest held-out evaluations) on `{rep.device}`, "
                 f"{rep.examples_per_sec:,.0f} examples/sec; "
                 f"{_shared(r)}", "", *_segments(r)]


def _segments(r: Results) -> list[str]:
    """How the run was made when it paused and continued: one row per segment."""
    segs = (load_provenance(r.root, REPRODUCTION) or {}).get("segments") or []
    if len(segs) < 2:
        return []
    t = pd.DataFrame({
        "steps": [f"{s['from_step']:,}-{s['to_step']:,}" for s in segs],
        "wall time": [f"{s['wall_time_s']:,.0f} s" if s.get("wall_time_s") is not None
                      else "unknown" for s in segs],
        "machine": [s.get("device") or "unknown" for s in segs],
        "commit": [(s.get("commit") or "unknown")[:10] for s in segs],
        "ended (UTC)": [s.get("ended_utc") or "" for s in segs]})
    write_text_atomic(r.tables / "reproduction_segments.csv", t.to_csv(index=False))
    return [f"It ran in {len(segs)} segments, each continuing from the checkpoint the one "
            f"before it wrote when it stopped (docs/continuing.md):", "",
            markdown_table(t), ""]


def _shared(r: Results) -> str:
    made = load_provenance(r.root, REPRODUCTION) or {}
    load = made.get("cpu_load")
    if not load:
        return "the machine's load was not recorded."
    return (f"the machine's load average as it finished was {load[2]:.1f} over 15 minutes "
            f"(other runs shared its cores when that exceeds the thread count).")


def _when(row, target: str) -> str:
    hit = (row.time_to_target or {}).get(target)
    return f"epoch {hit['epoch']:.1f} ({hit['train_seconds']:,.0f} s)" if hit else "not reached"


def time_to_accuracy(r: Results, search: Optional[Path], out: Path = Path(".")) -> list[str]:
    """The fast schedule against the tutorial's: held-out precision while training; the
    search record linked from ``out`` (report.md's folder) where it lies."""
    md = ["## Time to accuracy: the `fast` schedule against the tutorial's", "",
          "*Question:* with the same network, parameters and data, how much sooner does a modern "
          "optimiser and schedule (`train.schedule: fast`: Nesterov momentum, warm-up then linear "
          "decay, label smoothing, weight decay on every weight) reach the tutorial's accuracy? "
          f"The reference: {ref('budget')}.", ""]
    timed = r.timed
    if timed.empty:
        return md + ["*Not run:* no variant of its own budget (`train.max_steps` or "
                     "`max_epochs` in its overrides) has results with a held-out curve "
                     "(`eval.every_steps` > 0), e.g. `schedule_fast` and `schedule_tutorial`.", ""]
    md += [markdown_table(_time_to_accuracy_table(r)), ""]
    if _held_outplot(r):
        md += ["![time to accuracy](plots/time_to_accuracy.png)", ""]
    fast = timed[timed["schedule"] == "fast"].sort_values("epochs")
    tut = timed[(timed["schedule"] == "tutorial") & (timed.index != REPRODUCTION)]
    if len(fast) and len(tut):
        md += _fast_answer(r, fast.iloc[0], tut.iloc[0])
    if len(fast) and r.reproduction is not None:
        md += _speedup(r, fast, r.reproduction)
    if search is not None and search.is_file():
        link = Path(os.path.relpath(os.path.abspath(search), os.path.abspath(out))).as_posix()
        md += [f"The search behind the `fast` defaults, and why it stops short of 85%: "
               f"[{search.name}]({link}).", ""]
    return md


def _time_to_accuracy_table(r: Results) -> pd.DataFrame:
    timed = r.timed
    targets = sorted({t for v in timed["time_to_target"] for t in (v or {})} |
                     {"0.8", "0.84", "0.85", "0.86"}, key=float)
    flip = ({"with flip TTA (averaged)": timed["precision_at_1_flip"].map(
        lambda v: pct(v) if v == v else "")} if "precision_at_1_flip" in timed else {})
    t = pd.DataFrame({"variant": timed.index, "schedule": timed["schedule"],
                      "epochs": timed["epochs"].map(lambda v: f"{v:.1f}"),
                      "steps": timed["steps"].map(lambda v: f"{int(v):,}"),
                      "precision @ 1 (averaged)": timed["precision_at_1"].map(pct),
                      "precision @ 1 (raw)": timed["precision_at_1_raw"].map(pct),
                      **flip,
                      "train time (s)": timed["train_seconds"].map(lambda v: f"{v:,.0f}"),
                      **{f"reaches {100 * float(x):g}%": [_when(row, x) for row in timed.itertuples()]
                         for x in targets}})
    write_text_atomic(r.tables / "time_to_accuracy.csv", t.to_csv(index=False))
    return t


def _held_outplot(r: Results) -> bool:
    def draw(ax):
        for i, name in enumerate(r.timed.index):
            c = variant_curve(r, name)
            if c is None or "epoch" not in c:
                continue
            ax.plot(c["epoch"], 100 * c["precision_at_1"], "-", color=f"C{i}",
                    marker=marker(len(c)), ms=3, label=f"{name} (averaged)")
            if "precision_at_1_raw" in c:
                ax.plot(c["epoch"], 100 * c["precision_at_1_raw"], "--", color=f"C{i}",
                        alpha=0.6, marker=marker(len(c)), ms=3, label=f"{name} (raw)")
        if ax.has_data():
            ax.axhline(ref("precision_target"), color="gray", lw=0.8, ls=":",
                       label="reference: ~86% (official test set)")
            ax.set_xscale("log")  # 25-epoch runs beside the 256-epoch tutorial budget
    return plot(r.plots / "time_to_accuracy.png", (8, 4.5), draw,
                "Held-out precision while training", "epoch (log scale)",
                "held-out precision @ 1 (%)", legend=True)


def _fast_answer(r: Results, f, u) -> list[str]:
    sooner = ""
    c = variant_curve(r, f.name)
    if c is not None and "epoch" in c:
        hit = c["epoch"][c["precision_at_1"] >= u.precision_at_1 - 1e-9]
        if len(hit):
            sooner = (f" `fast` passes the tutorial schedule's final {pct(u.precision_at_1)} "
                      f"at epoch {hit.iloc[0]:.1f} of the held-out curve.")
    flip = (f" Flip test-time augmentation, reported apart: {pct(f.precision_at_1_flip)}."
            if "precision_at_1_flip" in f and f.precision_at_1_flip == f.precision_at_1_flip
            else "")
    reached = ("reached at " + _when(f, "0.85") if (f.time_to_target or {}).get("0.85")
               else "not reached")
    d = 100 * (f.precision_at_1 - u.precision_at_1)
    return [r.answer(f"in {f.epochs:.1f} epochs the `fast` schedule reaches "
                     f"{pct(f.precision_at_1)} (averaged weights; {pct(f.precision_at_1_raw)} "
                     f"raw), the tutorial's schedule over the same {int(u.steps):,} steps "
                     f"{pct(u.precision_at_1)} ({pct(u.precision_at_1_raw)} raw): {d:+.1f} "
                     f"points {r.noise(d, 'precision_at_1')}.{sooner} 85% is {reached} by "
                     f"`fast`.{flip}"), ""]


def _speedup(r: Results, fast: pd.DataFrame, rep) -> list[str]:
    """The shortest `fast` run whose final precision reaches the reproduction's."""
    bar = rep.precision_at_1
    md = [f"**Time to the tutorial's accuracy.** The bar: `{rep.name}`'s final "
          f"{pct(bar)} (averaged weights) after {rep.epochs:.0f} epochs and "
          f"{_hours(rep.train_seconds)} of training."]
    ok = fast[fast["precision_at_1"] >= bar - 1e-9]
    if ok.empty:
        best = fast.loc[fast["precision_at_1"].idxmax()]
        return md + [r.answer(f"no `fast` run reaches it: the best, `{best.name}`, ends at "
                              f"{pct(best.precision_at_1)} after {best.epochs:.0f} epochs. "
                              f"Try a longer `fast` run (`train.max_epochs`)."), ""]
    f = ok.iloc[0]  # sorted by epochs: the shortest that reaches the bar
    margin = 100 * (f.precision_at_1 - bar)
    machines = {machine_of(v.device) for v in (f, rep)}
    timing = (f"{rep.train_seconds / f.train_seconds:.1f}x less training time "
              f"({_hours(f.train_seconds)}) than the tutorial's schedule, one run each, on the "
              f"same machine" if len(machines) == 1 else
              f"{_hours(f.train_seconds)} of training (against {_hours(rep.train_seconds)}; "
              f"**not comparable**: timed on {', '.join(sorted(machines))})")
    text = (f"`{f.name}` reaches {pct(f.precision_at_1)} in {f.epochs:.0f} epochs, "
            f"{margin:+.1f} points from the bar {r.noise(margin, 'precision_at_1')}: "
            f"**{rep.epochs / f.epochs:.1f}x fewer epochs** and {timing}.")
    shorter = fast[fast["epochs"] < f.epochs]
    if len(shorter):
        s = shorter.iloc[-1]
        d = 100 * (s.precision_at_1 - bar)
        text += (f" The next shorter, `{s.name}` ({s.epochs:.0f} epochs), ends {d:+.1f} points "
                 f"from the bar {r.noise(d, 'precision_at_1')}.")
    return md + [r.answer(text), ""]


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
