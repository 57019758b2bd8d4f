"""The report stage: every ablation variant's metrics and logs -> report.md, CSV tables
and PNG plots, one section per exercise of the tutorial, each written by one function.

Every sentence with a number is written from the measured metrics; where a variant
the section needs was not run, the section says so instead. The reference's figures
come from one table, :data:`.reference.REFERENCE`, which the report prints at its end.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd

from .errors import PipelineError
from .files import write_text_atomic
from .reference import ref, reference_markdown
from .report_data import (Results, load_curve, load_variants, markdown_table, pct, plot,
                          provenance_section)

def make_report(ablations_root: Path, out: Path, variants: Optional[list[str]] = None,
                dataset_variants: Optional[list[str]] = None,
                search: Optional[Path] = None) -> Path:
    """Write ``out/report.md``, ``out/tables/*.csv`` and ``out/plots/*.png`` from the
    results under ``ablations_root`` (data-set variants' results are there too)."""
    df = load_variants(ablations_root)
    if variants is not None:
        missing = [v for v in variants if v not in df.index]
        if missing:
            raise PipelineError(f"{ablations_root}: no results for {', '.join(missing)}; run "
                                f"`dvc repro reports/dvc.yaml:report` first.")
        df = df.loc[variants]
    timed = df[df["time_to_target"].notna()] if "time_to_target" in df else df.iloc[:0]
    r = Results(df, df.drop(index=timed.index) if len(timed) < len(df) else df, timed,
                 ablations_root, out / "tables", out / "plots")
    r.tables.mkdir(parents=True, exist_ok=True)
    r.plots.mkdir(parents=True, exist_ok=True)
    md = (_intro(r) + provenance_section(r) + _summary(r) + _exercise1_softmax(r) + _exercise2_local_head(r)
          + _exercise3_queue_fill(r) + _exercise4_averaging(r) + _exercise5_devices(r)
          + _exercise6_dataset(r, dataset_variants or [])
          + _no_lrn(r) + _time_to_accuracy(r, search) + reference_markdown())
    report = out / "report.md"
    write_text_atomic(report, "\n".join(md))
    return report


def _intro(r: Results) -> list[str]:
    ex, df = r.exercises, r.df
    return ["# The tutorial's exercises, measured",
            "",
            f"Every variant of the exercises is trained for **{ex['steps'].max():,} steps** "
            f"({ex['epochs'].max():.1f} epochs of {int(df['num_train'].iloc[0]):,} training "
            f"images, global batch {int(ex['global_batch_size'].max())}) on "
            f"`{df['device'].iloc[0]}`, from the same seed, and evaluated on "
            f"{int(df['num_examples'].iloc[0]):,} held-out images with the moving-average "
            f"weights and with the raw weights. The reference's figures come from 60K-100K-step "
            f"runs on the official test set: compare directions and sizes of effects, not "
            f"absolute levels.",
            ""]


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
    summary.to_csv(r.tables / "summary.csv", index=False)

    def draw(ax):
        for name in df.index:
            curve = load_curve(r.root, name)
            if curve is not None:
                ax.plot(curve["step"], curve["loss_avg"], label=name, lw=1.2)
    plot(r.plots / "loss_curves.png", (8, 4.5), draw, "Training loss of every variant", "step",
          "total loss (moving average, decay 0.9)", legend=True)
    return ["## All variants", "", markdown_table(summary), "",
            f"The reference: {ref('precision')}.", "", "![loss curves](plots/loss_curves.png)", ""]


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
    t.to_csv(r.tables / "exercise1_softmax.csv", index=False)
    d = 100 * (s.precision_at_1 - base.precision_at_1)
    same = abs(d) < 1e-9 and abs(s.final_loss_avg - base.final_loss_avg) < 1e-9
    return md + [markdown_table(t), "",
                 f"*Answer:* precision @ 1 moves by {d:+.2f} points. "
                 + ("Training is identical (the loss is computed from the logits in both, so "
                    "the runs match step for step) and the argmax of the probabilities is the "
                    "argmax of the logits: normalizing the output changes what the model "
                    "returns, not what it learns or predicts." if same else
                    "The loss is computed from the logits in both variants, and the argmax of "
                    "the probabilities is the argmax of the logits; the difference comes from "
                    "float rounding in the averaged weights."), ""]


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
    t.to_csv(r.tables / "exercise2_local_head.csv", index=False)
    d = 100 * (h.precision_at_1 - base.precision_at_1)
    return md + [markdown_table(t), "",
                 f"*Answer:* under this budget the locally connected top is {abs(d):.1f} points "
                 f"{'better' if d > 0 else 'worse'} than the fully connected one, with "
                 f"{h.num_params / base.num_params:.2f}x the parameters and "
                 f"{h.examples_per_sec / base.examples_per_sec:.2f}x the training speed. "
                 f"{ref('local_head')}.", ""]


def _exercise3_queue_fill(r: Results) -> list[str]:
    md = ["## Exercise 3: lower the initial queue fill", "",
          "*Question:* how much sooner does the first step come with a smaller "
          "`min_fraction_of_examples_in_queue`, and does it cost accuracy?", ""]
    ex = r.exercises
    q = ex[(ex["shuffle"] == "queue") & (ex["head"] == "fc") & (ex["output"] == "logits")
           & ex["lrn"] & (ex["world_size"] == 1)]
    q = q.sort_values("min_fraction_of_examples_in_queue", ascending=False)
    if len(q) < 2:
        return md + ["*Not run:* fewer than two queue-fill variants have results.", ""]
    fill = q["min_fraction_of_examples_in_queue"]
    t = pd.DataFrame({"variant": q.index, "min fraction": fill,
                      "examples queued before step 1": (fill * q["num_train"]).astype(int)
                      + 3 * q["batch_size"],
                      "time to first batch (s)": q["time_to_first_batch_s"].map(lambda v: f"{v:.2f}"),
                      "final loss": q["final_loss_avg"].map(lambda v: f"{v:.3f}"),
                      "precision @ 1": q["precision_at_1"].map(pct)})
    t.to_csv(r.tables / "exercise3_queue_fill.csv", index=False)
    hi, lo = q.iloc[0], q.iloc[-1]

    def draw(ax):
        ax.plot(fill, q["time_to_first_batch_s"], "o-")
        for name, row in q.iterrows():
            ax.annotate(name, (row.min_fraction_of_examples_in_queue, row.time_to_first_batch_s),
                        fontsize=7, textcoords="offset points", xytext=(4, 4))
    plot(r.plots / "queue_fill_first_step.png", (6, 4), draw,
          "Queue fill against time to the first step", "min_fraction_of_examples_in_queue",
          "time to the first batch (s)")
    return md + [markdown_table(t), "", "![time to first step](plots/queue_fill_first_step.png)", "",
                 f"*Answer:* filling {pct(hi.min_fraction_of_examples_in_queue)} of the training "
                 f"set takes {hi.time_to_first_batch_s:.2f} s before the first step, "
                 f"{pct(lo.min_fraction_of_examples_in_queue)} takes "
                 f"{lo.time_to_first_batch_s:.2f} s ({ref('queue_fill')}; here the distortions "
                 f"are vectorised). Precision @ 1 moves by "
                 f"{100 * (lo.precision_at_1 - hi.precision_at_1):+.1f} points from the fullest "
                 f"to the emptiest queue (one seed each). With no minimum the queue holds only "
                 f"3 batches of records in file order; CIFAR-10's record files are themselves "
                 f"in random order, which is why a small buffer can still train.", ""]


def _exercise4_averaging(r: Results) -> list[str]:
    ex = r.exercises
    budget = ex["steps"].max()
    gain = 100 * (ex["precision_at_1"] - ex["precision_at_1_raw"])
    t = pd.DataFrame({"variant": ex.index, "averaged": ex["precision_at_1"].map(pct),
                      "raw": ex["precision_at_1_raw"].map(pct),
                      "gain (points)": gain.map(lambda v: f"{v:+.1f}")})
    t.loc[len(t)] = ref("averaging_row")
    t.to_csv(r.tables / "exercise4_averaging.csv", index=False)

    def draw(ax):
        x = range(len(ex))
        ax.bar([i - 0.2 for i in x], 100 * ex["precision_at_1"], 0.4, label="averaged weights")
        ax.bar([i + 0.2 for i in x], 100 * ex["precision_at_1_raw"], 0.4, label="raw weights")
        ax.set_xticks(list(x), ex.index, rotation=30, ha="right")
    plot(r.plots / "averaged_vs_raw.png", (8, 4), draw, "Averaged against raw weights", None,
          "precision @ 1 (%)", legend=True, grid_axis="y")
    return ["## Exercise 4: evaluate without the averaged weights", "",
            "*Question:* how much do the moving averages of the weights (decay 0.9999) add? "
            f"The reference says {ref('averaging')}.", "", markdown_table(t), "",
            "![averaged vs raw](plots/averaged_vs_raw.png)", "",
            f"*Answer:* the averaged weights gain {gain.mean():+.1f} points on average over the "
            f"variants (from {gain.min():+.1f} to {gain.max():+.1f}). With TF's num_updates "
            f"rule the decay at step n is min(0.9999, (1 + n) / (10 + n)), an averaging window "
            f"of about n / 9 steps ({budget / 9:,.0f} steps at step {budget:,}); the full "
            f"10,000-step window of decay 0.9999 is reached only after 90,000 steps, near the "
            f"reference's 100K-step runs.", ""]


def _exercise5_devices(r: Results) -> list[str]:
    md = ["## Exercise 5: 2 devices x batch 64 against 1 device x batch 128", "",
          "*Question:* at the same global batch, is splitting it over two devices faster, and "
          f"does it learn the same? The reference (batch 128 per GPU): {ref('devices')}.", ""]
    base = r.base
    if base is None or not r.has("devices_2x64"):
        return md + ["*Not run:* the `devices_2x64` variant has no results.", ""]
    m = r.df.loc["devices_2x64"]
    runs = (base, m)
    t = pd.DataFrame({"variant": ["1 x 128 (baseline)", "2 x 64"],
                      "train examples/sec": [f"{v.examples_per_sec:,.0f}" for v in runs],
                      "per device": [f"{v.examples_per_sec_per_device:,.0f}" for v in runs],
                      "sec/batch": [f"{v.global_batch_size / v.examples_per_sec:.3f}"
                                    for v in runs],
                      "precision @ 1": [pct(v.precision_at_1) for v in runs]})
    for row in ref("devices_rows"):
        t.loc[len(t)] = row
    t.to_csv(r.tables / "exercise5_devices.csv", index=False)
    speed = m.examples_per_sec / base.examples_per_sec
    cpu = "cpu" in str(m.device)

    def draw(ax):
        ax.bar(["1 x 128", "2 x 64"], [base.examples_per_sec, m.examples_per_sec],
               color=["C0", "C1"])
    plot(r.plots / "devices_throughput.png", (5, 4), draw, f"Throughput on {m.device}", None,
          "training examples/sec", grid_axis="y")
    return md + [markdown_table(t), "", "![devices](plots/devices_throughput.png)", "",
                 f"*Answer:* 2 x 64 runs at {speed:.2f}x the speed of 1 x 128 and reaches "
                 f"{pct(m.precision_at_1)} against {pct(base.precision_at_1)} (same global "
                 f"batch, same schedule; each process runs its own shuffle queue over half the "
                 f"records). "
                 + ("On this CPU machine the two processes share the same cores: there is no "
                    "extra arithmetic to gain, only a gradient all-reduce per step to pay, so "
                    "the difference in speed comes from how well each setup keeps the cores "
                    "busy; on two GPUs each process has a device of its own." if cpu else ""),
                 ""]


def _exercise6_dataset(r: Results, dataset_variants: list[str]) -> list[str]:
    md = ["## Exercise 6: SVHN instead of CIFAR-10", "",
          "*Question:* how does the same network do on SVHN's house-number digits? The "
          "network adapts through the data set alone: 10 classes again, no left-right flips "
          "(digits are not mirror-symmetric), otherwise the same layers and schedule.", ""]
    ran = [json.loads(p.read_text()) for p in (r.root / n / "metrics.json" for n in dataset_variants)
           if p.is_file()]
    if not ran:
        names = ", ".join(f"`{n}`" for n in dataset_variants) or "none is defined"
        return md + [f"*Not run here:* no results for the data-set variants ({names}). They are "
                     f"opt-in, since they fetch their own data (SVHN's files from "
                     f"http://ufldl.stanford.edu/housenumbers/): add one to `dataset_ablations:` "
                     f"in params.yaml (`svhn: {{data: {{dataset: svhn}}}}`, with `url:` pointing "
                     f"at a local copy of the files where that host is out of reach), then "
                     f"`dvc repro reports/dvc.yaml`: this section then shows its table.", ""]
    base = r.base
    t = pd.DataFrame({"variant": [v["variant"] for v in ran],
                      "data set": [v.get("dataset", "") for v in ran],
                      "training images": [f"{v['num_train']:,}" for v in ran],
                      "steps": [f"{v['steps']:,}" for v in ran],
                      "precision @ 1 (averaged)": [pct(v["precision_at_1"]) for v in ran],
                      "precision @ 1 (raw)": [pct(v["precision_at_1_raw"]) for v in ran]})
    if base is not None:
        t.loc[len(t)] = ["baseline", "cifar10", f"{int(base.num_train):,}",
                         f"{int(base.steps):,}", pct(base.precision_at_1),
                         pct(base.precision_at_1_raw)]
    t.to_csv(r.tables / "exercise6_svhn.csv", index=False)
    v = ran[0]
    return md + [markdown_table(t), "",
                 f"*Answer:* after {v['steps']:,} steps the network reaches "
                 f"{pct(v['precision_at_1'])} on {v.get('dataset', 'the other data set')}'s "
                 f"{v['num_examples']:,} test images (averaged weights)"
                 + (f", against {pct(base.precision_at_1)} on CIFAR-10 under the same budget."
                    if base is not None else "."), ""]


def _no_lrn(r: Results) -> list[str]:
    base = r.base
    if base is None or not r.has("no_lrn"):
        return []
    n = r.df.loc["no_lrn"]
    t = pd.DataFrame({"variant": ["baseline (with LRN)", "no_lrn"],
                      "precision @ 1": [pct(base.precision_at_1), pct(n.precision_at_1)],
                      "train examples/sec": [f"{base.examples_per_sec:,.0f}",
                                             f"{n.examples_per_sec:,.0f}"]})
    t.to_csv(r.tables / "no_lrn.csv", index=False)
    d = 100 * (n.precision_at_1 - base.precision_at_1)
    return ["## Without local response normalization", "", markdown_table(t), "",
            f"*Answer:* dropping norm1 and norm2 moves precision @ 1 by {d:+.1f} points and "
            f"changes the training speed by {n.examples_per_sec / base.examples_per_sec:.2f}x.", ""]


def _when(row, target: str) -> str:
    hit = (row.time_to_target or {}).get(target)
    return f"epoch {hit['epoch']:.1f} ({hit['train_seconds']:,.0f} s)" if hit else "not reached"


def _time_to_accuracy(r: Results, search: Optional[Path]) -> list[str]:
    """The fast schedule against the tutorial's: held-out precision while training."""
    md = ["## Time to accuracy: the `fast` schedule against the tutorial's", "",
          "*Question:* with the same network, parameters and data, how much sooner does a modern "
          "optimiser and schedule (`train.schedule: fast`: Nesterov momentum, warm-up then linear "
          "decay, label smoothing, weight decay on every weight) reach the tutorial's accuracy? "
          f"The reference: {ref('budget')}.", ""]
    timed = r.timed
    if timed.empty:
        return md + ["*Not run:* no variant evaluated the held-out split while training "
                     "(`eval.every_steps` > 0), e.g. `schedule_fast` and `schedule_tutorial`.", ""]
    md += [markdown_table(_time_to_accuracy_table(r)), "",
           "![time to accuracy](plots/time_to_accuracy.png)", ""]
    _held_outplot(r)
    fast, tut = timed[timed["schedule"] == "fast"], timed[timed["schedule"] == "tutorial"]
    if len(fast) and len(tut):
        md += _fast_answer(r, fast.iloc[0], tut.iloc[0])
    if search is not None and search.is_file():
        md += [f"The search behind the `fast` defaults, and why it stops short of 85%: "
               f"[{search.name}]({search.name}).", ""]
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
    t.to_csv(r.tables / "time_to_accuracy.csv", index=False)
    return t


def _held_outplot(r: Results) -> None:
    def draw(ax):
        for i, name in enumerate(r.timed.index):
            avg = load_curve(r.root, name, "precision_at_1", "held_out")
            raw = load_curve(r.root, name, "precision_at_1_raw", "held_out")
            epochs = load_curve(r.root, name, "epoch", "held_out")
            if avg is None or epochs is None:
                continue
            ax.plot(epochs["epoch"], 100 * avg["precision_at_1"], "-", color=f"C{i}",
                    label=f"{name} (averaged)")
            if raw is not None:
                ax.plot(epochs["epoch"], 100 * raw["precision_at_1_raw"], "--", color=f"C{i}",
                        alpha=0.6, label=f"{name} (raw)")
        ax.axhline(ref("precision_target"), color="gray", lw=0.8, ls=":",
                   label="reference: ~86% (official test set)")
    plot(r.plots / "time_to_accuracy.png", (8, 4.5), draw, "Held-out precision while training",
          "epoch", "held-out precision @ 1 (%)", legend=True)


def _fast_answer(r: Results, f, u) -> list[str]:
    sooner = ""
    curve, epochs = (load_curve(r.root, f.name, m, "held_out") for m in ("precision_at_1", "epoch"))
    if curve is not None and epochs is not None:
        hit = epochs["epoch"][curve["precision_at_1"] >= u.precision_at_1 - 1e-9]
        if len(hit):
            sooner = (f" `fast` passes the tutorial schedule's final {pct(u.precision_at_1)} "
                      f"at epoch {hit.iloc[0]:.1f} of the held-out curve.")
    flip = (f" Flip test-time augmentation, reported apart: {pct(f.precision_at_1_flip)}."
            if "precision_at_1_flip" in f and f.precision_at_1_flip == f.precision_at_1_flip
            else "")
    reached = ("reached at " + _when(f, "0.85") if (f.time_to_target or {}).get("0.85")
               else "not reached")
    return [f"*Answer:* in {f.epochs:.1f} epochs the `fast` schedule reaches "
            f"{pct(f.precision_at_1)} (averaged weights; {pct(f.precision_at_1_raw)} raw), "
            f"the tutorial's schedule over the same {int(u.steps):,} steps "
            f"{pct(u.precision_at_1)} ({pct(u.precision_at_1_raw)} raw).{sooner} "
            f"85% is {reached} by `fast`.{flip}", ""]
