"""The prepared GPU run's figures (its JSON, see :mod:`gpu_run`) as the Markdown table it
prints: only the parts the run has, so a run cut short by its budget still reads."""
from __future__ import annotations

from gpu_plan import TARGETS


PARTS = ("correctness", "throughput", "train_stage", "fast", "tutorial", "multi_device",
         "side_by_side")


def _failed(v) -> bool:
    """A measurement that raised: ``{"error": ...}`` in its place (:func:`gpu_parts.attempt`)."""
    return isinstance(v, dict) and "error" in v


def _error(v: dict) -> str:
    return "FAILED: " + " ".join(v["error"].split())[:200]


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_table(r: dict) -> str:
    """The run's figures as Markdown; the parts it has (a run cut short has fewer), a part
    that failed as its error."""
    failed = {name: r[name] for name in PARTS if _failed(r.get(name))}
    r = {k: v for k, v in r.items() if k not in failed}
    lines = [f"# {r['device']} (torch {r['torch']}{', dry run' if r['dry'] else ''}"
             + (f", budget {r['budget_s']:.0f} s" if r.get("budget_s") else "") + ")", ""]
    built = r["data"].get("built")
    if built:
        lines += [f"data: {built['train']:,} + {built['test']:,} images of {built['zip']} "
                  f"(archive md5 {built['archive_md5']}, content {r['data']['content_hash']}) "
                  f"built in {built['build_seconds']:.0f} s", ""]
    if "correctness" in r:
        lines += _correctness_lines(r["correctness"])
    if "throughput" in r:
        other = "fp32" if "eager_fixed_batch_fp32" in r["throughput"][0] else "bf16"
        lines += [f"| batch | eager, input pipeline | eager, fixed batch | {other}, fixed batch | "
                  "cudnn.benchmark | compiled (CUDA graphs) | typical DataLoader |",
                  "|---|---|---|---|---|---|---|"]
        for row in r["throughput"]:
            cells = []  # "-": not measured at this batch size (or on this device)
            for key in ("eager_input_pipeline", "eager_fixed_batch", f"eager_fixed_batch_{other}",
                        "eager_fixed_batch_cudnn_benchmark", "compiled_fixed_batch",
                        "typical_dataloader"):
                v = row.get(key)
                cells.append("-" if v is None else v.get("error", "")[:40] if "error" in v
                             else f"{v['examples_per_sec']:,.0f}/s ({v['ms_per_step']:.2f} ms)")
            lines.append(f"| {row['batch_size']} | " + " | ".join(cells) + " |")
        lines.append("")
    if "train_stage" in r:
        lines += ["| batch | train stage, eager | train stage, captured step |", "|---|---|---|"]
        for row in r["train_stage"]:
            cells = [("-" if v is None else _error(v)[:60] if _failed(v)
                      else f"{v['examples_per_sec']:,.0f}/s")
                     for v in (row.get("eager"), row.get("captured"))]
            lines.append(f"| {row['batch_size']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _schedule_lines(r)
    if "multi_device" in r:
        lines += _multi_lines(r["multi_device"])
    if "side_by_side" in r:
        s = r["side_by_side"]
        lines.append(f"side by side: {s['together']['processes']} train stages at once "
                     f"{s['together']['examples_per_sec_total']:,.0f} examples/sec in all, one "
                     f"alone {s['alone']['examples_per_sec_total']:,.0f} ({s['speedup']:.2f}x)")
    lines += [f"{name}: {_error(v)}" for name, v in failed.items()]
    if r.get("skipped"):
        lines.append(f"skipped (out of budget): {', '.join(r['skipped'])}")
    lines.append(f"total {r['total_seconds']:.0f} s"
                 + ("" if r.get("finished") else " (unfinished)") + f"; wrote {r['written']}")
    return "\n".join(lines)


def _correctness_lines(c: dict) -> list[str]:
    lo, sr, syncs = c["losses"], c["short_run"], c["host_syncs_per_step"]
    rows = {"losses": lambda: f"| step 1 vs CPU; first {lo['steps']} losses vs CPU | step 1: "
            f"loss {lo['step1']['loss_rel_diff']:.1e}, gradients {lo['step1']['gradient_rel_diff']:.1e} "
            f"(worst {lo['step1']['worst_gradient']}; tolerance {lo['step1']['tolerance']:g}); "
            f"losses: max relative difference {lo['max_rel_diff']:.2e}, the CPU's own drift "
            f"{lo['cpu_drift']:.2e} (bound {lo['drift_factor']:g}x: {lo['bound']:.2e}): "
            f"{'ok' if lo['ok'] else 'FAILED'} |",
            "host_syncs_per_step": lambda: f"| host syncs per step (GPU path) | "
            f"{'n/a (CPU)' if syncs is None else f'{syncs:.2f}'} |",
            "short_run": lambda: f"| held-out precision @ 1 after {sr['steps']:,} steps | "
            f"{_pct(sr['precision_at_1'])} averaged, {_pct(sr['precision_at_1_raw'])} raw |"}
    return ["| check | result |", "|---|---|",
            *(f"| {name} | {_error(c[name])} |" if _failed(c[name]) else row()
              for name, row in rows.items()), ""]


def _schedule_lines(r: dict) -> list[str]:
    if "fast" not in r and "tutorial" not in r:
        return []

    def reached(d, target):
        hit = d["reached"].get(f"{target:g}")
        return "not reached" if not hit else f"step {hit['step']:,} ({hit['train_seconds']:.0f} s)"
    lines = ["| schedule | steps | seconds | " + " | ".join(f"{x:.0%}" for x in TARGETS)
             + " | final (averaged) |", "|---|---|---|" + "---|" * len(TARGETS) + "---|"]
    if "fast" in r:
        f = r["fast"]
        lines.append(f"| fast, {f['epochs']:g} epoch{'' if f['epochs'] == 1 else 's'} | {f['steps']:,} | {f['train_seconds']:.0f} | "
                     + " | ".join(reached(f, x) for x in TARGETS)
                     + f" | {_pct(f['final_precision_at_1'])} |")
    if "tutorial" in r:
        t = r["tutorial"]
        lines.append(f"| tutorial, {t['steps']:,} of {t['of_steps']:,} steps | {t['steps']:,} | "
                     f"{t['train_seconds']:.0f} | " + " | ".join(reached(t, x) for x in TARGETS)
                     + f" | {_pct(t['curve'][-1]['precision_at_1'] if t['curve'] else None)} |")
    return lines + [""]


def _multi_lines(m: dict) -> list[str]:
    if "skipped" in m:
        return [f"every device: {m['skipped']}", ""]
    t, e, w = m["throughput"], m["exercise5"], m["same_weights"]
    one, many, half = t["one"], t["all"], e["2x64"]
    return ["| devices | examples/sec | sec/batch |", "|---|---|---|",
            f"| 1 x 128 | {one['examples_per_sec']:,.0f} | {one['sec_per_batch']:.3f} |",
            f"| {m['devices']} x 128 | {many['examples_per_sec']:,.0f} | "
            f"{many['sec_per_batch']:.3f} |",
            f"| 2 x 64 (exercise 5) | {half['examples_per_sec']:,.0f} | "
            f"{half['sec_per_batch']:.3f} |", "",
            f"scaling to {m['devices']} devices: {t['scaling_efficiency']:.0%} efficient; "
            f"2 x 64 against 1 x 128 after {w['steps']} steps: weights within "
            f"{w['max_abs_diff']:.1e} (tolerance {w['atol']:g}): "
            f"{'ok' if w['ok'] else 'FAILED'}", ""]
