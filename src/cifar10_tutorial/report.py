"""The report stage: every ablation variant's metrics and logs -> reports/report.md,
CSV tables and PNG plots, one section per exercise of the tutorial.

Every sentence with a number is written from the measured metrics; where a
variant the section needs was not run, the section says so instead.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import pandas as pd

from .files import write_text_atomic
from .errors import PipelineError

# The reference's published figures (SPEC.md "Published results")
REF_PRECISION = "~86% at 100K steps (K40), 83.0% in cifar10_eval.py's docstring"
REF_AVERAGING = "about +3 points"
REF_K40 = "390-600 examples/sec (1 Tesla K40c, batch 128)"
REF_DEVICES = "1 K20m: 0.35-0.60 s/batch; 2 K20m: 0.13-0.20 s/batch (128 per GPU)"


def load_variants(root: Path) -> pd.DataFrame:
    rows = []
    for path in sorted(Path(root).glob("*/metrics.json")):
        rows.append(json.loads(path.read_text()))
    if not rows:
        raise PipelineError(f"{root}: no ablation results (*/metrics.json); run the ablation "
                            f"stages first (`dvc repro reports/dvc.yaml:report`).")
    return pd.DataFrame(rows).set_index("variant")


def load_curve(root: Path, name: str, metric: str = "loss_avg",
               group: str = "train") -> Optional[pd.DataFrame]:
    path = Path(root) / name / "train" / "plots" / "metrics" / group / f"{metric}.tsv"
    return pd.read_csv(path, sep="\t") if path.is_file() else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> None:
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    _plt().close(fig)
    os.replace(tmp, path)


def make_report(ablations_root: Path = Path("reports/ablations"), out: Path = Path("reports"),
                variants: Optional[list[str]] = None,
                dataset_root: Optional[Path] = None,
                dataset_variants: Optional[list[str]] = None) -> Path:
    """Write ``out/report.md``, ``out/tables/*.csv`` and ``out/plots/*.png``."""
    df = load_variants(ablations_root)
    if variants is not None:
        missing = [v for v in variants if v not in df.index]
        if missing:
            raise PipelineError(f"{ablations_root}: no results for {', '.join(missing)}; run "
                                f"`dvc repro reports/dvc.yaml:report` first.")
        df = df.loc[variants]
    tables, plots = out / "tables", out / "plots"
    tables.mkdir(parents=True, exist_ok=True)
    plots.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    has = lambda name: name in df.index  # noqa: E731
    base = df.loc["baseline"] if has("baseline") else None
    timed = df[df["time_to_target"].notna()] if "time_to_target" in df else df.iloc[:0]
    exercises = df.drop(index=timed.index) if len(timed) < len(df) else df
    budget = exercises["steps"].max()
    ntrain = int(df["num_train"].iloc[0])
    device = df["device"].iloc[0]
    md = ["# The tutorial's exercises, measured",
          "",
          f"Every variant of the exercises is trained for **{budget:,} steps** "
          f"({exercises['epochs'].max():.1f} epochs of {ntrain:,} training images, global batch "
          f"{int(exercises['global_batch_size'].max())}) on "
          f"`{device}`, from the same seed, and evaluated on {int(df['num_examples'].iloc[0]):,} "
          f"held-out images with the moving-average weights and with the raw weights. The "
          f"reference's figures come from 60K-100K-step runs on the official test set: "
          f"compare directions and sizes of effects, not absolute levels.",
          ""]

    # ---- summary table and all loss curves
    summary = pd.DataFrame({
        "variant": df.index,
        "precision @ 1 (averaged)": df["precision_at_1"].map(_pct),
        "precision @ 1 (raw)": df["precision_at_1_raw"].map(_pct),
        "final loss (avg)": df["final_loss_avg"].map(lambda v: f"{v:.3f}"),
        "train examples/sec": df["examples_per_sec"].map(lambda v: f"{v:,.0f}"),
        "time to first batch (s)": df["time_to_first_batch_s"].map(lambda v: f"{v:.2f}"),
        "parameters": df["num_params"].map(lambda v: f"{int(v):,}"),
    })
    summary.loc[len(summary)] = ["reference (1 K40, 100K steps, official test set)", "~86%", "",
                                 "", "390-600", "minutes", "1,068,298"]
    summary.to_csv(tables / "summary.csv", index=False)
    md += ["## All variants", "", _table(summary), "",
           f"The reference: {REF_PRECISION}.", "", "![loss curves](plots/loss_curves.png)", ""]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in df.index:
        curve = load_curve(ablations_root, name)
        if curve is not None:
            ax.plot(curve["step"], curve["loss_avg"], label=name, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("total loss (moving average, decay 0.9)")
    ax.set_title("Training loss of every variant")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, plots / "loss_curves.png")

    # ---- exercise 1: softmax output
    md += ["## Exercise 1: return normalized predictions (softmax)", "",
           "*Question:* what changes when the model returns probabilities instead of logits?", ""]
    if base is not None and has("softmax"):
        s = df.loc["softmax"]
        t = pd.DataFrame({"variant": ["baseline (logits)", "softmax"],
                          "precision @ 1": [_pct(base.precision_at_1), _pct(s.precision_at_1)],
                          "precision @ 1 (raw)": [_pct(base.precision_at_1_raw), _pct(s.precision_at_1_raw)],
                          "final loss": [f"{base.final_loss_avg:.4f}", f"{s.final_loss_avg:.4f}"]})
        t.to_csv(tables / "exercise1_softmax.csv", index=False)
        d = 100 * (s.precision_at_1 - base.precision_at_1)
        same = abs(d) < 1e-9 and abs(s.final_loss_avg - base.final_loss_avg) < 1e-9
        md += [_table(t), "",
               f"*Answer:* precision @ 1 moves by {d:+.2f} points. "
               + ("Training is identical (the loss is computed from the logits in both, so the "
                  "runs match step for step) and the argmax of the probabilities is the argmax "
                  "of the logits: normalizing the output changes what the model returns, not "
                  "what it learns or predicts." if same else
                  "The loss is computed from the logits in both variants, and the argmax of the "
                  "probabilities is the argmax of the logits; the difference comes from float "
                  "rounding in the averaged weights."), ""]
    else:
        md += ["*Not run:* the `softmax` variant (or the baseline) has no results.", ""]

    # ---- exercise 2: locally connected top
    md += ["## Exercise 2: locally connected layers on top (cuda-convnet layers-conv-local-11pct)", "",
           "*Question:* does replacing the fully connected local3/local4 with locally connected "
           "layers help, and at what cost?", ""]
    if base is not None and has("local_head"):
        l = df.loc["local_head"]
        t = pd.DataFrame({"variant": ["baseline (fully connected)", "local_head"],
                          "parameters": [f"{int(base.num_params):,}", f"{int(l.num_params):,}"],
                          "multiply-adds/image": [f"{int(base.macs_per_image):,}", f"{int(l.macs_per_image):,}"],
                          "precision @ 1": [_pct(base.precision_at_1), _pct(l.precision_at_1)],
                          "train examples/sec": [f"{base.examples_per_sec:,.0f}", f"{l.examples_per_sec:,.0f}"]})
        t.to_csv(tables / "exercise2_local_head.csv", index=False)
        d = 100 * (l.precision_at_1 - base.precision_at_1)
        md += [_table(t), "",
               f"*Answer:* under this budget the locally connected top is {abs(d):.1f} points "
               f"{'better' if d > 0 else 'worse'} than the fully connected one, with "
               f"{l.num_params / base.num_params:.2f}x the parameters and "
               f"{l.examples_per_sec / base.examples_per_sec:.2f}x the training speed. "
               f"cuda-convnet's 11% error needed 10-view test-time augmentation and a much "
               f"longer schedule.", ""]
    else:
        md += ["*Not run:* the `local_head` variant has no results.", ""]

    # ---- exercise 3: queue fill
    md += ["## Exercise 3: lower the initial queue fill", "",
           "*Question:* how much sooner does the first step come with a smaller "
           "`min_fraction_of_examples_in_queue`, and does it cost accuracy?", ""]
    ex = exercises
    q = ex[(ex["shuffle"] == "queue") & (ex["head"] == "fc") & (ex["output"] == "logits")
           & ex["lrn"] & (ex["world_size"] == 1)]
    q = q.sort_values("min_fraction_of_examples_in_queue", ascending=False)
    if len(q) >= 2:
        t = pd.DataFrame({"variant": q.index,
                          "min fraction": q["min_fraction_of_examples_in_queue"],
                          "examples queued before step 1": (q["min_fraction_of_examples_in_queue"]
                                                            * q["num_train"]).astype(int) + 3 * q["batch_size"],
                          "time to first batch (s)": q["time_to_first_batch_s"].map(lambda v: f"{v:.2f}"),
                          "final loss": q["final_loss_avg"].map(lambda v: f"{v:.3f}"),
                          "precision @ 1": q["precision_at_1"].map(_pct)})
        t.to_csv(tables / "exercise3_queue_fill.csv", index=False)
        hi, lo = q.iloc[0], q.iloc[-1]
        md += [_table(t), "", "![time to first step](plots/queue_fill_first_step.png)", "",
               f"*Answer:* filling {_pct(hi.min_fraction_of_examples_in_queue)} of the training set "
               f"takes {hi.time_to_first_batch_s:.2f} s before the first step, "
               f"{_pct(lo.min_fraction_of_examples_in_queue)} takes {lo.time_to_first_batch_s:.2f} s "
               f"(the reference's 20,000 images took minutes with 16 Python threads; here the "
               f"distortions are vectorised). Precision @ 1 moves by "
               f"{100 * (lo.precision_at_1 - hi.precision_at_1):+.1f} points from the fullest to "
               f"the emptiest queue (one seed each). With no minimum the queue holds only "
               f"3 batches of records in file order; CIFAR-10's record files are themselves in "
               f"random order, which is why a small buffer can still train.", ""]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(q["min_fraction_of_examples_in_queue"], q["time_to_first_batch_s"], "o-")
        for name, row in q.iterrows():
            ax.annotate(name, (row.min_fraction_of_examples_in_queue, row.time_to_first_batch_s),
                        fontsize=7, textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("min_fraction_of_examples_in_queue")
        ax.set_ylabel("time to the first batch (s)")
        ax.set_title("Queue fill against time to the first step")
        ax.grid(alpha=0.3)
        _save(fig, plots / "queue_fill_first_step.png")
    else:
        md += ["*Not run:* fewer than two queue-fill variants have results.", ""]

    # ---- exercise 4: averaged vs raw weights
    gain = 100 * (ex["precision_at_1"] - ex["precision_at_1_raw"])
    t = pd.DataFrame({"variant": ex.index, "averaged": ex["precision_at_1"].map(_pct),
                      "raw": ex["precision_at_1_raw"].map(_pct),
                      "gain (points)": gain.map(lambda v: f"{v:+.1f}")})
    t.loc[len(t)] = ["reference (100K steps)", "~86%", "", "about +3"]
    t.to_csv(tables / "exercise4_averaging.csv", index=False)
    md += ["## Exercise 4: evaluate without the averaged weights", "",
           "*Question:* how much do the moving averages of the weights (decay 0.9999) add? "
           f"The reference says {REF_AVERAGING}.", "", _table(t), "",
           "![averaged vs raw](plots/averaged_vs_raw.png)", "",
           f"*Answer:* the averaged weights gain {gain.mean():+.1f} points on average over the "
           f"variants (from {gain.min():+.1f} to {gain.max():+.1f}). With TF's num_updates "
           f"rule the decay at step n is min(0.9999, (1 + n) / (10 + n)), an averaging window "
           f"of about n / 9 steps ({budget / 9:,.0f} steps at step {budget:,}); the full "
           f"10,000-step window of decay 0.9999 is reached only after 90,000 steps, near the "
           f"reference's 100K-step runs.", ""]
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(ex))
    ax.bar([i - 0.2 for i in x], 100 * ex["precision_at_1"], 0.4, label="averaged weights")
    ax.bar([i + 0.2 for i in x], 100 * ex["precision_at_1_raw"], 0.4, label="raw weights")
    ax.set_xticks(list(x), ex.index, rotation=30, ha="right")
    ax.set_ylabel("precision @ 1 (%)")
    ax.set_title("Averaged against raw weights")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    _save(fig, plots / "averaged_vs_raw.png")

    # ---- exercise 5: devices
    md += ["## Exercise 5: 2 devices x batch 64 against 1 device x batch 128", "",
           "*Question:* at the same global batch, is splitting it over two devices faster, and "
           f"does it learn the same? The reference (batch 128 per GPU): {REF_DEVICES}.", ""]
    if base is not None and has("devices_2x64"):
        m = df.loc["devices_2x64"]
        t = pd.DataFrame({"variant": ["1 x 128 (baseline)", "2 x 64"],
                          "train examples/sec": [f"{base.examples_per_sec:,.0f}", f"{m.examples_per_sec:,.0f}"],
                          "per device": [f"{base.examples_per_sec_per_device:,.0f}", f"{m.examples_per_sec_per_device:,.0f}"],
                          "sec/batch": [f"{128 / base.examples_per_sec:.3f}", f"{128 / m.examples_per_sec:.3f}"],
                          "precision @ 1": [_pct(base.precision_at_1), _pct(m.precision_at_1)]})
        t.loc[len(t)] = ["reference: 1 K20m x 128", "213-366", "213-366", "0.35-0.60", "~86% at 60K steps"]
        t.loc[len(t)] = ["reference: 2 K20m x 128", "1,280-1,969", "640-985", "0.13-0.20", "~84% at 30K steps"]
        t.to_csv(tables / "exercise5_devices.csv", index=False)
        speed = m.examples_per_sec / base.examples_per_sec
        cpu = "cpu" in str(m.device)
        md += [_table(t), "", "![devices](plots/devices_throughput.png)", "",
               f"*Answer:* 2 x 64 runs at {speed:.2f}x the speed of 1 x 128 and reaches "
               f"{_pct(m.precision_at_1)} against {_pct(base.precision_at_1)} (same global batch, "
               f"same schedule; each process runs its own shuffle queue over half the records). "
               + ("On this CPU machine the two processes share the same cores: there is no "
                  "extra arithmetic to gain, only a gradient all-reduce per step to pay, so the "
                  "difference in speed comes from how well each setup keeps the cores busy; on "
                  "two GPUs each process has a device of its own." if cpu else ""), ""]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.bar(["1 x 128", "2 x 64"], [base.examples_per_sec, m.examples_per_sec], color=["C0", "C1"])
        ax.set_ylabel("training examples/sec")
        ax.set_title(f"Throughput on {m.device}")
        ax.grid(axis="y", alpha=0.3)
        _save(fig, plots / "devices_throughput.png")
    else:
        md += ["*Not run:* the `devices_2x64` variant has no results.", ""]

    # ---- exercise 6: SVHN (variants that fetch another data set)
    md += ["## Exercise 6: SVHN instead of CIFAR-10", "",
           "*Question:* how does the same network do on SVHN's house-number digits? The "
           "network adapts through the data set alone: 10 classes again, no left-right flips "
           "(digits are not mirror-symmetric), otherwise the same layers and schedule.", ""]
    dataset_variants = dataset_variants or {}
    ran = []
    for name in dataset_variants:
        path = Path(dataset_root or "") / name / "metrics.json" if dataset_root else None
        if path is not None and path.is_file():
            ran.append(json.loads(path.read_text()))
    if ran:
        t = pd.DataFrame({"variant": [r["variant"] for r in ran],
                          "data set": [r.get("dataset", "") for r in ran],
                          "training images": [f"{r['num_train']:,}" for r in ran],
                          "steps": [f"{r['steps']:,}" for r in ran],
                          "precision @ 1 (averaged)": [_pct(r["precision_at_1"]) for r in ran],
                          "precision @ 1 (raw)": [_pct(r["precision_at_1_raw"]) for r in ran]})
        if base is not None:
            t.loc[len(t)] = ["baseline", "cifar10", f"{int(base.num_train):,}",
                             f"{int(base.steps):,}", _pct(base.precision_at_1),
                             _pct(base.precision_at_1_raw)]
        t.to_csv(tables / "exercise6_svhn.csv", index=False)
        r = ran[0]
        md += [_table(t), "",
               f"*Answer:* after {r['steps']:,} steps the network reaches "
               f"{_pct(r['precision_at_1'])} on {r.get('dataset', 'the other data set')}'s "
               f"{r['num_examples']:,} test images (averaged weights)"
               + (f", against {_pct(base.precision_at_1)} on CIFAR-10 under the same budget."
                  if base is not None else "."), ""]
    else:
        names = ", ".join(f"`{n}`" for n in dataset_variants) or "none is defined"
        md += [f"*Not run here:* no results for the data-set variants ({names}). They are "
               f"opt-in, since they fetch their own data (SVHN's files from "
               f"http://ufldl.stanford.edu/housenumbers/): add one to `dataset_ablations:` in "
               f"params.yaml (`svhn: {{data: {{dataset: svhn}}}}`, with `url:` pointing at a "
               f"local copy of the files where that host is out of reach), then "
               f"`dvc repro reports/dvc.yaml`: this section then shows its table.", ""]

    # ---- no LRN
    if base is not None and has("no_lrn"):
        n = df.loc["no_lrn"]
        t = pd.DataFrame({"variant": ["baseline (with LRN)", "no_lrn"],
                          "precision @ 1": [_pct(base.precision_at_1), _pct(n.precision_at_1)],
                          "train examples/sec": [f"{base.examples_per_sec:,.0f}", f"{n.examples_per_sec:,.0f}"]})
        t.to_csv(tables / "no_lrn.csv", index=False)
        d = 100 * (n.precision_at_1 - base.precision_at_1)
        md += ["## Without local response normalization", "", _table(t), "",
               f"*Answer:* dropping norm1 and norm2 moves precision @ 1 by {d:+.1f} points and "
               f"changes the training speed by {n.examples_per_sec / base.examples_per_sec:.2f}x.", ""]

    md += _time_to_accuracy(timed, ablations_root, tables, plots)

    report = out / "report.md"
    write_text_atomic(report, "\n".join(md))
    return report


def _time_to_accuracy(timed: pd.DataFrame, root: Path, tables: Path, plots: Path) -> list[str]:
    """The fast schedule against the tutorial's (issue 8): held-out precision while training."""
    md = ["## Time to accuracy: the `fast` schedule against the tutorial's", "",
          "*Question:* with the same network, parameters and data, how much sooner does a modern "
          "optimiser and schedule (`train.schedule: fast`: Nesterov momentum, warm-up then linear "
          "decay, label smoothing, weight decay on every weight) reach the tutorial's accuracy? "
          "The reference: about 86% after 100K steps of batch 128 (256 epochs).", ""]
    if timed.empty:
        return md + ["*Not run:* no variant evaluated the held-out split while training "
                     "(`eval.every_steps` > 0), e.g. `schedule_fast` and `schedule_tutorial`.", ""]
    targets = sorted({t for v in timed["time_to_target"] for t in (v or {})} |
                     {"0.8", "0.84", "0.85", "0.86"}, key=float)

    def when(row, t):
        hit = (row.time_to_target or {}).get(t)
        return f"epoch {hit['epoch']:.1f} ({hit['train_seconds']:,.0f} s)" if hit else "not reached"
    t = pd.DataFrame({"variant": timed.index, "schedule": timed["schedule"],
                      "epochs": timed["epochs"].map(lambda v: f"{v:.1f}"),
                      "steps": timed["steps"].map(lambda v: f"{int(v):,}"),
                      "precision @ 1 (averaged)": timed["precision_at_1"].map(_pct),
                      "precision @ 1 (raw)": timed["precision_at_1_raw"].map(_pct),
                      **({"with flip TTA (averaged)": timed["precision_at_1_flip"].map(
                          lambda v: _pct(v) if v == v else "")}
                         if "precision_at_1_flip" in timed else {}),
                      "train time (s)": timed["train_seconds"].map(lambda v: f"{v:,.0f}"),
                      **{f"reaches {100 * float(x):g}%": [when(r, x) for r in timed.itertuples()]
                         for x in targets}})
    t.to_csv(tables / "time_to_accuracy.csv", index=False)
    md += [_table(t), "", "![time to accuracy](plots/time_to_accuracy.png)", ""]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, name in enumerate(timed.index):
        avg = load_curve(root, name, "precision_at_1", "eval")
        raw = load_curve(root, name, "precision_at_1_raw", "eval")
        epochs = load_curve(root, name, "epoch", "eval")
        if avg is None or epochs is None:
            continue
        ax.plot(epochs["epoch"], 100 * avg["precision_at_1"], "-", color=f"C{i}",
                label=f"{name} (averaged)")
        if raw is not None:
            ax.plot(epochs["epoch"], 100 * raw["precision_at_1_raw"], "--", color=f"C{i}",
                    alpha=0.6, label=f"{name} (raw)")
    ax.axhline(86, color="gray", lw=0.8, ls=":", label="reference: ~86% (official test set)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("held-out precision @ 1 (%)")
    ax.set_title("Held-out precision while training")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, plots / "time_to_accuracy.png")
    fast = timed[timed["schedule"] == "fast"]
    tut = timed[timed["schedule"] == "tutorial"]
    if len(fast) and len(tut):
        f, u = fast.iloc[0], tut.iloc[0]
        sooner = ""
        curve, epochs = (load_curve(root, f.name, m, "eval") for m in ("precision_at_1", "epoch"))
        if curve is not None and epochs is not None:
            hit = epochs["epoch"][curve["precision_at_1"] >= u.precision_at_1 - 1e-9]
            if len(hit):
                sooner = (f" `fast` passes the tutorial schedule's final {_pct(u.precision_at_1)} "
                          f"at epoch {hit.iloc[0]:.1f} of the held-out curve.")
        flip = (f" Flip test-time augmentation, reported apart: {_pct(f.precision_at_1_flip)}."
                if "precision_at_1_flip" in f and f.precision_at_1_flip == f.precision_at_1_flip else "")
        md += [f"*Answer:* in {f.epochs:.1f} epochs the `fast` schedule reaches "
               f"{_pct(f.precision_at_1)} (averaged weights; {_pct(f.precision_at_1_raw)} raw), "
               f"the tutorial's schedule over the same {int(u.steps):,} steps "
               f"{_pct(u.precision_at_1)} ({_pct(u.precision_at_1_raw)} raw).{sooner} "
               f"85% is {'reached at ' + when(f, '0.85') if (f.time_to_target or {}).get('0.85') else 'not reached'} "
               f"by `fast`.{flip}", ""]
    search = Path(tables).parent / "fast_schedule_search.md"
    if search.is_file():
        md += [f"The search behind the `fast` defaults, and why it stops short of 85%: "
               f"[{search.name}]({search.name}).", ""]
    return md
