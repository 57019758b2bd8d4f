"""The roofline table of a benchmark result (reports/benchmark.json), in words:
how docs/results.md and the benchmark's printout name the pipelines and their share of
the machine's peak. The measurements themselves are made by :mod:`.roofline`."""
from __future__ import annotations


def fraction(roof: dict, pipe: dict) -> str:
    """A pipeline's share of its precision's peak; n/a for bf16 where the CPU has no bf16
    arithmetic (its bf16 matmul then runs below the fp32 one: no roofline to speak of)."""
    peak = roof["peak_gflops"]
    if pipe["precision"] == "bf16" and peak["bf16"] < peak["fp32"]:
        return "n/a"
    return f"{100 * pipe['fraction_of_peak']:.1f}%"


def peak_words(roof: dict) -> str:
    """Each precision's peak and the two kernels it is the faster of: ``463.1 GFLOP/s
    fp32 (torch.mm 180.2, convolution 463.1), ...``."""
    peak, kernels = roof["peak_gflops"], roof["peak_kernels"]
    return ", ".join(f"{peak[p]:.1f}{' GFLOP/s' if p == 'fp32' else ''} {p} (torch.mm "
                     f"{kernels[p]['mm']:.1f}, convolution {kernels[p]['conv']:.1f})"
                     for p in ("fp32", "bf16"))


def peak_kernels(roof: dict) -> str:
    """What the peak's two kernels were, from the result itself: ``each the faster of
    `torch.mm` of two 2048 x 2048 matrices and a 3 x 3 convolution of 256 channels``."""
    n, (_, channels, _, k) = roof["peak_matrix_size"], roof["conv_shape"]
    return (f"each the faster of `torch.mm` of two {n} x {n} matrices and a {k} x {k} "
            f"convolution of {channels} channels")


def stage_gaps(stage: dict) -> str:
    """The train stage's runs, each run's gap to the fixed batch beside it: ``the median of
    5 runs: 9.9%, 4.1%, ...``."""
    runs = stage["runs"]
    return (f"the median of {len(runs)} runs: "
            + ", ".join(f"{100 * run['gap']:.1f}%" for run in runs))


def machine(r: dict) -> str:
    """The machine a benchmark result was measured on: CPU model (or GPU) and threads, and
    the CPU's vector capability as torch reports it."""
    return f"{r['machine']}, {r['cpu_capability']}, torch {r['torch']}"


def pipeline_names(r: dict) -> dict:
    """The pipelines of a benchmark result, as the Markdown tables name them."""
    return {"project": f"project, real input pipeline ({r['precision']})",
            "fixed_batch": "project, fixed batch", "project_bf16": "project, bf16 autocast",
            "typical": "typical PIL + DataLoader", "tensorflow": "TensorFlow (Keras + tf.data)",
            "eval": "evaluation (images/sec)"}


def roofline_markdown(r: dict, source: str) -> str:
    """The roofline table of a benchmark result, as docs/results.md shows it (generated from
    ``source``, the committed JSON)."""
    roof, med = r["roofline"], r["median_examples_per_sec"]
    names = pipeline_names(r)
    peak, split = roof["peak_gflops"], roof["time_breakdown"]
    lines = [f"From `{source}` ({machine(r)}, medians of "
             f"{r['windows']} windows of {r['steps_per_window']} steps): peak "
             f"{peak_words(roof)}" + (f", {how}" if (how := peak_kernels(roof)) else "")
             + (f" ({peak['bf16'] / peak['fp32']:.1f}x: the most bf16 autocast can gain over "
                f"fp32 on this machine, where the step is bound by its matrix products)."
                if peak["bf16"] > peak["fp32"] else "."), "",
             "| pipeline | examples/sec | GFLOP/s | of the peak |", "|---|---|---|---|"]
    for k, v in med.items():
        pipe = roof["pipelines"][k]
        lines.append(f"| {names[k]} | {v:,.0f} | {pipe['gflops']:.1f} | {fraction(roof, pipe)} |")
    lines += ["", f"Time of a fixed-batch step in convolutions and matrix products: "
              f"{100 * split['gemm_share']:.0f}%; the largest other ops: "
              + ", ".join(f"`{o['op']}` {100 * o['share']:.0f}%" for o in split["top_other_ops"][:4])
              + "."]
    return "\n".join(lines)
