"""docs/results.md, generated from the committed reports: every figure on that page comes
from a file in reports/ (a test checks that the committed page is what this makes).

    python devtools/results_page.py           # rewrite docs/results.md
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # its roofline tables

import argparse
import csv
import json

from cifar10_tutorial.cli import stage_command
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import write_text_atomic
from speed.roofline_table import machine, pipeline_names, roofline_markdown, stage_gaps

PAGE = Path("docs/results.md")


def _csv_table(path: Path, machines: dict | None = None) -> str:
    """A CSV table as markdown; with machines (variant -> machine), a "machine" column,
    so that every time and speed in it names the machine that measured it."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if machines is not None:
        rows = [rows[0] + ["machine"]] + [r + [machines.get(r[0], "")] for r in rows[1:]]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _throughput(path: Path, root: Path) -> str:
    r = json.loads((root / path).read_text())
    med, ra = r["median_examples_per_sec"], r["ratios"]
    names = pipeline_names(r)
    tf = f", TensorFlow {r['tensorflow_version']}" if r.get("tensorflow_version") else ""
    made = (f", commit {r['commit'][:10]}{' + changes' if r.get('dirty') else ''}, data "
            f"{r['data_hash'][:12]}" if r.get("commit") and r.get("data_hash") else "")
    lines = [f"From `{path}` ({machine(r)}{tf}{made}, batch "
             f"{r['batch_size']}, medians of {r['windows']} windows of {r['steps_per_window']} "
             f"steps):", "", "| pipeline | examples/sec |", "|---|---|"]
    lines += [f"| {names[k]} | {v:,.0f} |" for k, v in med.items()]
    vs = [f"project / typical {ra['project_vs_typical']:.2f}x"]
    for key, label in (("project_bf16_vs_fp32", "bf16 / fp32"),
                       ("project_bf16_vs_typical", "bf16 / typical"),
                       ("project_vs_tensorflow", "project / TensorFlow"),
                       ("project_bf16_vs_tensorflow", "bf16 / TensorFlow")):
        if key in ra:
            vs.append(f"{label} {ra[key]:.2f}x")
    lines += ["", "Ratios: " + ", ".join(vs) + ". The train step with its real input "
              f"pipeline: {100 * ra['input_pipeline_overhead']:.1f}% slower than on a fixed batch "
              f"(paired windows). The input pipeline alone: "
              f"{ra['input_ms_per_batch']:.2f} ms per batch, "
              f"{100 * ra['input_share_of_fixed_step']:.1f}% of a fixed-batch step; evaluation "
              f"of 10,000 images: {ra['eval_seconds_per_10000']:.1f} s."]
    if "train_stage" in r:
        t = r["train_stage"]
        each = f" ({gaps})" if (gaps := stage_gaps(t)) else ""
        lines[-1] += (f" The train stage itself, with its log line every {t['log_every']} "
                      f"steps and TensorBoard summaries every {t['summary_every']} "
                      f"({t['timed_steps']} timed steps): {t['examples_per_sec']:,.0f} "
                      f"examples/sec, {100 * t['gap']:.1f}% slower than the fixed batch timed "
                      f"just before and after{each}.")
    return "\n".join(lines)


def _compiled(path: Path, root: Path) -> list[str]:
    """torch.compile against eager, from the benchmark's ``compiled`` part."""
    r = json.loads((root / path).read_text())
    if "compiled" not in r:
        return []
    c = r["compiled"]
    names = {"eager": "eager", "forward_compiled": "forward compiled (the removed `train.compile`)",
             "step_compiled": "whole step compiled"}
    lines = ["## torch.compile against eager", "",
             f"From `{path}` ({machine(r)}, one fixed batch of {r['batch_size']}, medians of "
             f"{r['windows']} interleaved windows of {r['steps_per_window']} steps; why the "
             f"train stage runs eager: [departures](departures.md#no-torchcompile)):", "",
             "| step | " + " | ".join(f"{p} examples/sec" for p in c) + " |",
             "|---|" + "---|" * len(c)]
    for key, label in names.items():
        cells = []
        for p in c.values():
            v = p["median_examples_per_sec"][key]
            cells.append(f"{v:,.0f}" + (f" ({p['vs_eager'][key]:.2f}x)" if key != "eager" else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Milliseconds per step outside convolutions and matrix products (profiler "
              "self time): " + "; ".join(
                  f"{p}: {v['other_ms_per_step']['eager']:.1f} eager, "
                  f"{v['other_ms_per_step']['forward_compiled']:.1f} forward compiled"
                  for p, v in c.items())
              + ". Compiling the forward pass took " + ", ".join(
                  f"{v['compile_s']['forward_compiled']:.0f} s ({p})" for p, v in c.items())
              + ", warm-up steps included (from Inductor's on-disk cache where it already held "
              "these graphs: a machine's first compilation takes longer).", ""]
    return lines


def _baselines(root: Path) -> str:
    lines = ["| configuration | metric | baseline |", "|---|---|---|"]
    for path in sorted((root / "reports/baseline").glob("ci-*.json")):
        for metric, value in json.loads(path.read_text()).items():
            lines.append(f"| `{path.stem[3:]}` (`{path.relative_to(root)}`) | {metric} | {value:.4f} |")
    return "\n".join(lines)


def _machines(root: Path) -> dict[str, str]:
    """Each exercise variant's machine, from its train/provenance.json (every segment's,
    for a run continued elsewhere)."""
    from cifar10_tutorial.report.results import load_provenance

    out, ablations = {}, root / "reports" / "ablations"
    for folder in sorted(ablations.iterdir() if ablations.is_dir() else []):
        p = load_provenance(folder.parent, folder.name) if folder.is_dir() else None
        if p:
            seen = [s["device"] for s in p.get("segments") or [] if isinstance(s.get("device"), str)]
            out[folder.name] = "; ".join(dict.fromkeys(seen or [p["device"]]))
    return out


def _made(report: str) -> str:
    """What the report says of how its results were made, in one sentence."""
    if "## How these results were made" not in report:
        return ("This report predates provenance records: which commit made its variants is "
                "not recorded and they ran at different budgets: read them as directions, "
                "not final figures.")
    if "**Not made in one piece.**" in report:
        return ("The report says its results were not made in one piece (see its header): "
                "read them as directions, not final figures.")
    return "Every variant was made by one commit on the same data (the report's header)."


def _reproduction(root: Path, rep: Path) -> list[str]:
    curve = rep / "tables" / "reproduction_curve.csv"
    if not (root / curve).is_file():
        return []
    return ["## The tutorial at its own budget", "",
            f"From `{curve}`: held-out precision @ 1 while training `tutorial_100k`.", "",
            _csv_table(root / curve), "",
            f"![reproduction](../{rep / 'plots' / 'reproduction.png'})", ""]


def _opcheck(root: Path, path: str = "reports/tf_reference/opcheck.json") -> list[str]:
    """The operation-level check against the reference (devtools/tf_opcheck.py)."""
    if not (root / path).is_file():
        return []
    r = json.loads((root / path).read_text())
    p = r["provenance"]
    rows = "\n".join(f"| {c['what']} | {c['max_abs_diff']:.1e} | {c['max_rel_diff']:.1e} | "
                     f"{'yes' if c['ok'] else '**no**'} |" for c in r["checks"])
    return ["## The reference's operations against this network", "",
            f"The tutorial's own TensorFlow code (TensorFlow {r['tensorflow']}) and this "
            f"project's network, given the weights of the reference run's checkpoint at step "
            f"{r['checkpoint_step']:,} and the same {r['images']['train']} training images "
            f"with the same distortion draws (and {r['images']['held_out']} held-out images), "
            f"from `{path}` (`devtools/tf_opcheck.py`, commit "
            f"{(p.get('commit') or 'outside git')[:10]}, torch {p['torch']}, {p['cpu']}). "
            f"The differences are the largest over each tensor, relative to its largest "
            f"value; within tolerance means at most {r['checks'][0]['tolerance']:.0e}. With the "
            f"moving averages, both predict the same class for "
            f"{r['same_predictions_held_out']:.0%} of the {r['images']['held_out']} held-out "
            f"images.", "",
            "| computed | max abs. difference | relative | within tolerance |",
            "|---|---|---|---|", rows, ""]


def _time_to_accuracy(root: Path, rep: Path) -> list[str]:
    timed = rep / "tables" / "time_to_accuracy.csv"
    md = ["## Time to accuracy: `fast` against the tutorial's schedule", ""]
    if not (root / timed).is_file():
        return md + ["No results yet: the schedule variants have not run (the report's "
                     "section names them).", ""]
    md += [f"From `{timed}` (how the `fast` defaults were chosen: "
           "[reports/fast_schedule_search.md](../reports/fast_schedule_search.md)):", "",
           _csv_table(root / timed, _machines(root)), ""]
    if (root / rep / "plots" / "time_to_accuracy.png").is_file():
        md += [f"![time to accuracy](../{rep / 'plots' / 'time_to_accuracy.png'})", ""]
    return md


def _bf16(root: Path, rep: Path) -> list[str]:
    table = rep / "tables" / "bf16.csv"
    if not (root / table).is_file():
        return []
    return ["## bf16 autocast against fp32", "",
            f"From `{table}`: the baseline trained under `train.precision: bf16` beside the "
            "fp32 baseline's seeds (the report's answer: "
            f"[bf16 autocast](../{rep / 'report.md'}#bf16-autocast-trainprecision-bf16)).", "",
            _csv_table(root / table), ""]


def _published(root: Path) -> list[str]:
    """The published weights (dvc.yaml's artifacts that are committed files), from the
    metrics and provenance beside each."""
    import yaml

    arts = (yaml.safe_load((root / "dvc.yaml").read_text()) or {}).get("artifacts") or {}
    rows = []
    for name, art in arts.items():
        folder = Path(art["path"]).parent
        if not (root / folder / "metrics.json").is_file():
            continue
        e = json.loads((root / folder / "metrics.json").read_text())["eval"]
        p = json.loads((root / folder / "provenance.json").read_text())
        rows.append(f"| `{name}` ([card](../{folder}/README.md)) | {p['steps']:,} | "
                    f"{100 * e['precision_at_1']:.2f}% | {100 * e['precision_at_1_raw']:.2f}% | "
                    f"{len(p.get('segments', []))} |")
    if not rows:
        return []
    return ["## Published weights", "",
            "Held-out precision @ 1 of the committed models (dvc.yaml `artifacts:`), from the "
            "`metrics.json` and `provenance.json` beside each:", "",
            "| artifact | steps | averaged | raw | segments |", "|---|---|---|---|---|",
            *rows, ""]


def _trial(root: Path, path: str = "reports/trial_benchmark.json") -> list[str]:
    """The exercise trial's wall time (`cifar10 trial --out`), each stage's beside it."""
    if not (root / path).is_file():
        return []
    t = json.loads((root / path).read_text())
    p = t["provenance"]
    rows = "\n".join(f"| `{name.split(':')[-1]}` | {sec:.1f} |" for name, sec in t["stages"].items())
    return ["## The exercise trial", "",
            f"`{t['command']}` (`cifar10 trial --steps {t['steps']}`, in a clone of commit "
            f"{(p['code'].get('commit') or 'outside git')[:10]}, {p['date'][:10]}, {p['cpu']}, "
            f"{p['cpus']} CPUs, data {str(p['data'])[:12]}): **{t['wall_s']:.0f} s** in all, "
            f"{t['before_first_stage_s']:.1f} s of it before DVC ran the first stage. Each "
            f"stage's seconds, from its start to the next one's (DVC's own work included), "
            f"from `{path}`. These are that machine's times: a slower CPU, or one busy with "
            f"other work, takes longer.", "", "| stage | seconds |", "|---|---|",
            rows, ""]


def report_folder(root: Path) -> Path:
    """The report stage's output folder, from its command in reports/dvc.yaml."""
    args = stage_command("report.py", root / "reports" / "dvc.yaml")
    return Path(args[args.index("--out") + 1])


def _part(what: str, make):
    """``make()``, one part of the page; a file it reads that is not what it expects (not
    JSON, another shape, a value of another type) is one line naming ``what``."""
    try:
        return make()
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError) as exc:
        raise PipelineError(f"{what}: not what the results page reads ({type(exc).__name__}: "
                            f"{str(exc)[:100]}); restore it (`git checkout -- {what}`) or "
                            f"rerun what writes it, then rerun this") from None


def render(root: Path = Path(".")) -> str:
    bench = "reports/benchmark.json"
    rep = _part("reports/dvc.yaml", lambda: report_folder(root))
    summary = rep / "tables" / "summary.csv"
    ablations = "reports/ablations (a variant's train/provenance.json)"
    return "\n".join([
        "# Results",
        "",
        "<!-- generated by `python devtools/results_page.py` from the files in reports/; "
        "do not edit by hand -->",
        "",
        "Dev figures: trained on the dev archive's 40,000 training images (CIFAR-10 training "
        "images, JPEG re-encoded, see [data](data.md)) and evaluated on its 10,000 held-out "
        "ones, not on the official test set. The reference's figures are in "
        "[reference](reference.md). Every time and speed names the machine that measured it "
        "(the exercise variants': each one's `train/provenance.json`); they compare only "
        "between runs on the same machine.",
        "",
        "## The exercises",
        "",
        f"From `{summary}` (the report's headline table; the full report with questions, "
        f"answers and plots: [{rep / 'report.md'}](../{rep / 'report.md'})). "
        + _part(str(rep / "report.md"), lambda: _made((root / rep / "report.md").read_text())),
        "",
        _part(str(summary), lambda: _csv_table(root / summary,
                                               _part(ablations, lambda: _machines(root)))),
        "",
        *_part(str(rep / "tables" / "reproduction_curve.csv"), lambda: _reproduction(root, rep)),
        *_part("reports/tf_reference/opcheck.json", lambda: _opcheck(root)),
        *_part(str(rep / "tables" / "bf16.csv"), lambda: _bf16(root, rep)),
        *_part("the published weights' metrics.json and provenance.json (dvc.yaml artifacts:)",
               lambda: _published(root)),
        *_part(str(rep / "tables" / "time_to_accuracy.csv"), lambda: _time_to_accuracy(root, rep)),
        *_part("reports/trial_benchmark.json", lambda: _trial(root)),
        "## Throughput",
        "",
        _part(bench, lambda: _throughput(Path(bench), root)),
        "",
        "## The roofline",
        "",
        _part(bench, lambda: roofline_markdown(json.loads((root / bench).read_text()), bench)),
        "",
        *_part(bench, lambda: _compiled(Path(bench), root)),
        "## CI baselines",
        "",
        "What the CI regression runs must stay near (see [CI and the gate](ci.md)):",
        "",
        _part("reports/baseline/ci-*.json", lambda: _baselines(root)),
        "",
    ])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 results-page", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=PAGE)
    args = ap.parse_args(argv)
    write_text_atomic(args.out, render())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from cifar10_tutorial.cli import run_stage

    run_stage(main)
