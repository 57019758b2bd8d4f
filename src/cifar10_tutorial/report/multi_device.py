"""Exercise 5 of the report (:mod:`.report`): 2 devices x batch 64 against 1 x 128, what
each learns and how fast, the speed taken from both set-ups timed alone on one machine
(reports/devices_timing.json) when there is that timing."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd

from ..errors import PipelineError
from ..eval_files import loads_once
from ..files import write_text_atomic

from .reference import ref
from .results import Results, device_text, machine_of, markdown_table, pct, plot, speed_ratio


TIMING_KEYS = ("machine", "cores", "repeats", "steps", "speed_2x64_vs_1x128", "setups")
SETUP_KEYS = ("examples_per_sec_median", "world_size", "sec_per_batch_median")
COUNT_LIMIT = 10 ** 9  # of cores, repeats or steps: a record past it is not a timing's
# The timing trains this network in fp32 on a CPU (benchmarks/devices_timing.py): an example
# costs about 3 x 18.5 million multiply-adds (forward and backward), 1.1e8 FLOPs, and a
# core peaks below 3.2e11 FLOP/s (two 16-lane FMA units at 5 GHz): under 3,000 examples a
# second a core. A record past this bound, a few times that, states a speed no CPU gives.
EXAMPLES_PER_SEC_PER_CORE = 10_000
# what the report prints of each key: its kind (a count, a number, words)
KINDS = {"machine": (str,), "cores": (int,), "repeats": (int,), "steps": (int,),
         "speed_2x64_vs_1x128": (int, float)}


def read_timing(path: Path) -> dict:
    """The devices timing record (benchmarks/devices_timing.py's JSON), checked: both
    set-ups with their medians; anything else is one line naming the file."""
    from ..files import read_small_file

    try:
        timed = loads_once(read_small_file(path, 1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        found = f"{type(exc).__name__}: {str(exc)[:80]}"
        timed = None
    else:
        found = f"a JSON {type(timed).__name__}"
    setups = timed.get("setups") if isinstance(timed, dict) else None
    wrong = [k for k, kind in KINDS.items() if isinstance(timed, dict) and k in timed
             and (not isinstance(timed[k], kind) or isinstance(timed[k], bool))]
    if wrong:
        kind = {(str,): "words", (int,): "a whole number"}.get(KINDS[wrong[0]], "a number")
        raise PipelineError(f"{path}: expected a devices timing record, found {wrong[0]} "
                            f"{timed[wrong[0]]!r}, where it holds {kind}; remake it "
                            f"(`python benchmarks/devices_timing.py`) or restore it from git")
    if not (isinstance(timed, dict) and all(k in timed for k in TIMING_KEYS)
            and isinstance(setups, dict) and {"1 x 128", "2 x 64"} <= set(setups)
            and all(isinstance(st, dict) and all(isinstance(st.get(k), (int, float))
                                                 and not isinstance(st.get(k), bool)
                                                 for k in SETUP_KEYS)
                    for st in setups.values())):
        if isinstance(timed, dict):
            missing = [k for k in TIMING_KEYS if k not in timed]
            found = (f"no {missing[0]}" if missing else
                     "setups without both set-ups' medians")
        raise PipelineError(f"{path}: expected a devices timing record ({', '.join(TIMING_KEYS)}; "
                            f"both set-ups' medians), found {found}; remake it (`python "
                            f"benchmarks/devices_timing.py`) or restore it from git")
    wrong = _inconsistent(timed)
    if wrong:
        raise PipelineError(f"{path}: expected a devices timing record, found {wrong}; remake "
                            f"it (`python benchmarks/devices_timing.py`) or restore it from git")
    return {**timed, "path": str(path)}


def _inconsistent(timed: dict) -> Optional[str]:
    """What in a timing record of the right shape the report cannot state as measured: a
    count or a speed that no run gives (0, negative, not finite), or a median, spread or
    ratio that its own runs do not give (an edit of one figure); None when it holds."""
    import math
    import statistics

    def speed(value) -> bool:  # (a billion examples a second, or a batch, is no timing's)
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and 0 < value < COUNT_LIMIT)

    def same(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

    for key in ("cores", "repeats", "steps"):
        if timed[key] < 1:
            return f"{key} {timed[key]!r}, where at least 1 is expected"
        if timed[key] >= COUNT_LIMIT:  # no timing runs a billion of anything
            return (f"{key} a number of {len(str(timed[key]))} digits, where less than "
                    f"{COUNT_LIMIT:,} is expected")
    texts = [("machine", timed["machine"])] + [
        (f"set-up {name!r}'s device", st.get("device")) for name, st in timed["setups"].items()
        if isinstance(st, dict) and isinstance(st.get("device"), str)]
    for what, text in texts:  # the report quotes them in its lines and table rows
        if not text.strip():
            return f"{what} {text!r}, where the name of what was timed is expected"
        if not text.isprintable() or "|" in text:  # control, line and paragraph characters
            return (f"{what} {text[:60]!r}, holding a newline, another control character or "
                    f"a '|', where a machine's name is one line, and one cell of the "
                    f"report's tables")
    extra = sorted(set(timed["setups"]) - {"1 x 128", "2 x 64"})
    if extra:  # the report states two set-ups' figures: a third would go unsaid
        return (f"set-up {extra[0]!r}, where the record holds the set-ups '1 x 128' and "
                f"'2 x 64' only")
    seen = {}  # each run is its own timing: two never agree to the last digit, in one
    for name in ("1 x 128", "2 x 64"):  # set-up or across the two
        for i, run in enumerate(timed["setups"][name].get("runs") or []):
            eps = run.get("examples_per_sec") if isinstance(run, dict) else None
            if isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps in seen:
                return (f"set-up {name!r}'s run {i + 1} with the examples_per_sec of "
                        f"{seen[eps]} ({eps!r}): a copy of one run, where each is its own timing")
            seen[eps] = f"set-up {name!r}'s run {i + 1}"
    if not speed(timed["speed_2x64_vs_1x128"]):
        return f"speed_2x64_vs_1x128 {timed['speed_2x64_vs_1x128']!r}, where a speed ratio above 0 is expected"
    for name in ("1 x 128", "2 x 64"):
        st = timed["setups"][name]
        # the set-up's name fixes its shape: processes x batch per process
        world, per_process = (int(n) for n in name.split(" x "))
        runs = st.get("runs")
        if not (isinstance(runs, list) and runs and all(isinstance(run, dict) for run in runs)):
            return f"set-up {name!r} without its runs (a list of records, one a run)"
        if len(runs) != timed["repeats"]:
            return f"set-up {name!r} with {len(runs)} runs, where repeats is {timed['repeats']}"
        for i, run in enumerate(runs):
            # each run is one measurement: its examples/sec and its seconds a batch are one
            # timing, on the set-up's machine and shape (benchmarks/devices_timing.py)
            said = f"set-up {name!r}'s run {i + 1}"
            eps = run.get("examples_per_sec")
            if isinstance(eps, (int, float)) and not isinstance(eps, bool) \
                    and math.isfinite(eps) and eps > EXAMPLES_PER_SEC_PER_CORE * timed["cores"]:
                return (f"{said} with examples_per_sec {eps:.4g}, beyond what "
                        f"{timed['cores']} CPU cores train (at most "
                        f"{EXAMPLES_PER_SEC_PER_CORE:,} examples/sec a core)")
            if not (speed(run.get("examples_per_sec")) and speed(run.get("sec_per_batch"))):
                return f"{said} without its examples_per_sec and sec_per_batch (above 0)"
            shape = {"world_size": world, "global_batch_size": world * per_process,
                     "device": st.get("device")}
            off = next((k for k, v in shape.items() if run.get(k) != v
                        or isinstance(run.get(k), bool)), None)
            if off is not None:
                return (f"{said} with {off} {run.get(off)!r}, where the set-up "
                        f"{'records' if off == 'device' else 'is'} {shape[off]!r}")
            if not same(run["sec_per_batch"], per_process / run["examples_per_sec"]):
                return (f"{said} with sec_per_batch {run['sec_per_batch']!r}, where its "
                        f"examples_per_sec gives {per_process / run['examples_per_sec']!r}")
        if st.get("world_size") != world or isinstance(st.get("world_size"), bool):
            return f"set-up {name!r} with world_size {st.get('world_size')!r}, where {world} is expected"
        if not isinstance(st.get("device"), str) or machine_of(st["device"]) != timed["machine"]:
            return (f"set-up {name!r} with device {st.get('device')!r}, where the record's "
                    f"machine is {timed['machine']!r}")
        eps = [run["examples_per_sec"] for run in runs]
        per_batch = [run["sec_per_batch"] for run in runs]
        for key, values in (("examples_per_sec_median", eps), ("sec_per_batch_median", per_batch)):
            if not speed(st[key]):
                return f"set-up {name!r} with {key} {st[key]!r}, where above 0 is expected"
            if not same(st[key], statistics.median(values)):
                return (f"set-up {name!r} with {key} {st[key]!r}, where its runs' median is "
                        f"{statistics.median(values)!r}")
        spread = st.get("examples_per_sec_spread")
        if not (isinstance(spread, (int, float)) and not isinstance(spread, bool)
                and same(spread, max(eps) - min(eps))):
            return (f"set-up {name!r} with examples_per_sec_spread {spread!r}, where its runs "
                    f"spread over {max(eps) - min(eps)!r}")
    one, two = (timed["setups"][n]["examples_per_sec_median"] for n in ("1 x 128", "2 x 64"))
    if not same(timed["speed_2x64_vs_1x128"], two / one):
        return (f"speed_2x64_vs_1x128 {timed['speed_2x64_vs_1x128']!r}, where the set-ups' "
                f"medians give {two / one!r}")
    return None


def exercise5_devices(r: Results, timing: Optional[Path] = None) -> list[str]:
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
                      # as cifar10_multi_gpu_train.py prints it: step time / devices
                      "sec/batch": [f"{v.global_batch_size / v.examples_per_sec / v.world_size:.3f}"
                                    for v in runs],
                      "precision @ 1": [pct(v.precision_at_1) for v in runs]})
    timed = read_timing(timing) if timing is not None and timing.is_file() else None
    for name, st in (timed or {}).get("setups", {}).items():
        eps = st["examples_per_sec_median"]
        t.loc[len(t)] = [f"{name}, timed alone ({timed['machine']}, {timed['cores']} cores)",
                         f"{eps:,.0f}", f"{eps / st['world_size']:,.0f}",
                         f"{st['sec_per_batch_median']:.3f}", ""]
    for row in ref("devices_rows"):
        t.loc[len(t)] = row
    write_text_atomic(r.tables / "exercise5_devices.csv", t.to_csv(index=False))
    cpu = m.get("device_type") == "cpu"
    _devices_plot(r, base, m, timed)
    learns = (f"2 x 64 reaches {pct(m.precision_at_1)} against {pct(base.precision_at_1)} "
              f"{r.noise(100 * (m.precision_at_1 - base.precision_at_1), 'precision_at_1')} "
              f"(same global batch, same schedule; each process runs its own shuffle queue "
              f"over half the records). ")
    return md + [markdown_table(t), "", "![devices](plots/devices_throughput.png)", "",
                 r.answer(_devices_speed(r, base, m, timed) + learns)
                 + ("On this CPU machine the two processes share the same cores: there is no "
                    "extra arithmetic to gain, only a gradient all-reduce per step to pay, so "
                    "the difference in speed comes from how well each setup keeps the cores "
                    "busy; on two GPUs each process has a device of its own."
                    if cpu and not r.withheld else ""),
                 ""]


def _devices_speed(r: Results, base, m, timed: Optional[dict]) -> str:
    """The speed half of exercise 5's answer: from the timing file (both set-ups on the same
    cores, the machine idle) when there is one, else from the two variants' own runs."""
    if timed is None:
        speed = m.examples_per_sec / base.examples_per_sec
        return (f"in the variants' own runs, the speed of 2 x 64 against 1 x 128: "
                f"{speed_ratio(r, speed, m)}; ")
    one, two = (timed["setups"][n] for n in ("1 x 128", "2 x 64"))
    gap = two["examples_per_sec_median"] - one["examples_per_sec_median"]
    band = max(one["examples_per_sec_spread"], two["examples_per_sec_spread"])
    n = timed["repeats"]
    weigh = (f"**not distinguishable from timing noise** (the runs of one set-up spread over "
             f"{band:,.0f} examples/sec)" if abs(gap) <= band else
             f"beyond the {band:,.0f} examples/sec spread of the runs of one set-up")
    return (f"timed alone on {timed['machine']} ({timed['cores']} cores, medians of {n} runs of "
            f"{timed['steps']:,} steps each, `{timed['path']}`), 2 x 64 trains at "
            f"{timed['speed_2x64_vs_1x128']:.2f}x the speed of 1 x 128, {weigh}; ")


def _devices_plot(r: Results, base, m, timed: Optional[dict]) -> None:
    """The speeds that may be compared: both set-ups timed alone on one machine (each bar
    with the range of its runs); without that timing, the variants' own speeds, each bar
    naming its machine (they may not share one)."""
    def draw(ax):
        if timed:
            setups = timed["setups"]
            names = [f"{name}\n{device_text(st['device'], st['world_size'])}"
                     for name, st in setups.items()]
            values = [st["examples_per_sec_median"] for st in setups.values()]
            runs = [[run["examples_per_sec"] for run in st["runs"]] for st in setups.values()]
            spans = [[v - min(e) for v, e in zip(values, runs)],
                     [max(e) - v for v, e in zip(values, runs)]]
            ax.bar(names, values, yerr=spans, capsize=6, color=["C0", "C1"][:len(values)])
        else:
            ax.bar([f"1 x 128\n{base.device}", f"2 x 64\n{m.device}"],
                   [base.examples_per_sec, m.examples_per_sec], color=["C0", "C1"])
        ax.tick_params(axis="x", labelsize=8)
    title = (f"Training throughput, timed alone on {timed['machine']} ({timed['cores']} cores; "
             f"median and range of {timed['repeats']} runs)" if timed else "Training throughput")
    plot(r.plots / "devices_throughput.png", (7, 4), draw, title, None,
         "training examples/sec", grid_axis="y")
