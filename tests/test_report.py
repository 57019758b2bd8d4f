"""The report's judgements on results the test writes itself, in the layout the ablation
stage writes (tests/test_ablation.py runs the real stages end to end): the minimum-budget
banner, effects weighed against the seeds' spread, the 100K-step reproduction, the time to
its accuracy, and no blank plot."""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from cifar10_tutorial.report.report import make_report
from cifar10_tutorial.report.results import MIN_STEPS, marker

OVERRIDES = {"baseline": {}, "baseline_seed1": {"train": {"seed": 1}},
             "baseline_seed2": {"train": {"seed": 2}}, "softmax": {"model": {"output": "softmax"}},
             "devices_2x64": {"train": {"num_devices": 2, "batch_size": 64}},
             "local_head": {"model": {"head": "local"}}, "no_lrn": {"model": {"lrn": False}}}


def _tsv(path: Path, column: str, rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([f"step\t{column}"] + [f"{s}\t{v}" for s, v in rows]) + "\n")


def write_variant(root: Path, name: str, precision: float, steps: int, seed: int = 0,
                  schedule: str = "tutorial", speed: float = 400.0, curve_every: int = 0,
                  commit: str = "a" * 40, first_batch: float = 1.0, **variant) -> None:
    out = root / name
    epochs = steps * 128 / 40000
    train = {"step": steps, "epochs": epochs, "loss": 1.0, "loss_avg": 1.0 + precision,
             "examples_per_sec": speed,
             "examples_per_sec_per_device": speed / variant.get("world_size", 1),
             "wall_time_s": steps * 128 / speed + 60, "time_to_first_batch_s": first_batch,
             "num_params": 1_068_298, "macs_per_image": 18_470_784,
             "held_out_eval_seconds": 60.0, "train_seconds": steps * 128 / speed,
             "time_to_target": {}, "held_out": {"precision_at_1": precision,
                                                "precision_at_1_raw": precision - 0.02}}
    ev = {"precision_at_1": precision, "precision_at_1_raw": precision - 0.02, "loss": 0.9,
          "loss_raw": 1.0, "num_examples": 10000, "examples_per_sec": 1000.0}
    (out / "train").mkdir(parents=True)
    (out / "metrics.json").write_text(json.dumps({"train": train, "eval": ev}))
    (out / "variant.json").write_text(json.dumps({
        "variant": name, "dataset": "cifar10", "device": "a CPU, 2 threads", "device_type": "cpu",
        "world_size": 1, "global_batch_size": 128, "schedule": schedule, "batch_size": 128,
        "seed": seed, "num_train": 40000, "shuffle": "queue",
        "min_fraction_of_examples_in_queue": 0.4, "head": "fc", "output": "logits", "lrn": True,
        **variant}))
    record = {"commit": commit, "dirty": False, "device": "a CPU, 2 threads",
              "data_hash": "d" * 32, "params_hash": f"{hash(name) & 0xffffffff:016x}",
              "cpu_load": [2.0, 2.0, 2.0], "steps": steps, "epochs": epochs,
              "wall_time_s": train["wall_time_s"]}
    (out / "train" / "provenance.json").write_text(json.dumps(record))
    # the run's own files, written with metrics.json (exercises/ablation.py): the train
    # stage's metrics, the evaluation's set and its record of the model it evaluated
    (out / "train" / "metrics.json").write_text(json.dumps(train))
    (out / "eval").mkdir()
    (out / "eval" / "metrics.json").write_text(json.dumps(ev))
    _eval_set(out / "eval", precision, precision - 0.02)
    (out / "eval" / "provenance.json").write_text(json.dumps(
        {**record, "model": f"data/ablations/{name}/model.pt"}))
    plots = out / "train" / "plots" / "metrics"
    # the run's final loss_avg is its curve's last point (one run logs both)
    _tsv(plots / "train" / "loss_avg.tsv", "loss_avg",
         [(s, 2.0 + precision - s / steps) for s in (steps // 2, steps)])
    # its speed at each log step: the intervals around the session's average
    _tsv(plots / "train" / "examples_per_sec.tsv", "examples_per_sec",
         [(steps // 2, speed * 1.2), (steps, speed * 0.9)])
    if curve_every:
        points = range(curve_every, steps + 1, curve_every)
        _tsv(plots / "held_out" / "precision_at_1.tsv", "precision_at_1",
             [(s, precision * s / steps) for s in points])
        _tsv(plots / "held_out" / "precision_at_1_raw.tsv", "precision_at_1_raw",
             [(s, precision * s / steps - 0.02) for s in points])
        _tsv(plots / "held_out" / "epoch.tsv", "epoch", [(s, s * 128 / 40000) for s in points])


def exercises(root: Path, steps: int, effects: dict) -> None:
    write_variant(root, "baseline", 0.70, steps)
    write_variant(root, "baseline_seed1", 0.72, steps, seed=1, speed=420.0)
    write_variant(root, "baseline_seed2", 0.71, steps, seed=2, speed=380.0)
    write_variant(root, "softmax", 0.70, steps, output="softmax")
    write_variant(root, "local_head", 0.70 + effects["local_head"], steps, head="local",
                  speed=200.0)
    write_variant(root, "no_lrn", 0.70 + effects["no_lrn"], steps, lrn=False, speed=410.0)
    write_variant(root, "devices_2x64", 0.70, steps, speed=300.0, world_size=2, batch_size=64)


def _eval_set(folder: Path, precision: float, raw: float) -> None:
    """predictions.csv and per_class.csv of 10,000 images of two classes as the eval stage
    writes them, giving ``precision`` (averaged weights) and ``raw`` (raw weights)."""
    right, right_raw = round(precision * 10_000), round(raw * 10_000)
    cat, dog = right // 2, right - right // 2
    rows = (["cat,cat"] * cat + ["cat,dog"] * (5000 - cat) + ["dog,dog"] * dog
            + ["dog,cat"] * (5000 - dog))
    (folder / "predictions.csv").write_text("\n".join(["actual,predicted"] + rows) + "\n")
    cat_raw, dog_raw = right_raw // 2, right_raw - right_raw // 2
    (folder / "per_class.csv").write_text("class,count,precision_at_1,precision_at_1_raw\n"
                                          f"cat,5000,{cat / 5000:.4f},{cat_raw / 5000:.4f}\n"
                                          f"dog,5000,{dog / 5000:.4f},{dog_raw / 5000:.4f}\n")


def _eval_files(folder: Path, right: int = 7000) -> None:
    """The evaluation's predictions.csv and per_class.csv of 10,000 images of two classes,
    ``right`` of them right (raw weights: 200 fewer), as the eval stage writes them."""
    half = right // 2
    rows = (["cat,cat"] * half + ["cat,dog"] * (5000 - half) + ["dog,dog"] * half
            + ["dog,cat"] * (5000 - half))
    (folder / "predictions.csv").write_text("\n".join(["actual,predicted"] + rows) + "\n")
    p, raw = half / 5000, (half - 100) / 5000
    (folder / "per_class.csv").write_text("class,count,precision_at_1,precision_at_1_raw\n"
                                          f"cat,5000,{p:.4f},{raw:.4f}\n"
                                          f"dog,5000,{p:.4f},{raw:.4f}\nbird,0,nan,nan\n")


def section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_effects_are_weighed_against_the_seed_spread(tmp_path):
    exercises(tmp_path / "a", 10_000, {"local_head": 0.10, "no_lrn": 0.005})
    text = make_report(tmp_path / "a", tmp_path / "out", OVERRIDES).read_text()
    assert "Too short to answer" not in text and "*Answer withheld:*" not in text
    # seeds 70%, 72%, 71%: a 2-point spread; no_lrn moves 0.5 points, local_head 10
    no_lrn = section(text, "## Without local response normalization")
    assert "+0.5 points (**not distinguishable from seed noise**: 3 seeds of the baseline " \
           "spread over 2.0 points)" in no_lrn
    local = section(text, "## Exercise 2")
    assert "10.0 points better than the fully connected one (beyond the 2.0-points spread " \
           "of 3 seeds of the baseline)" in local
    # speed: seeds run at 380-420 examples/sec, 10% of the baseline's 400: 0.50x is beyond,
    # 1.02x (no_lrn) inside
    assert ("training speed against the fully connected top: 0.50x (beyond the 10% spread in "
            "examples/sec of 3 seeds") in local
    assert "1.02x (**not distinguishable from seed noise**" in no_lrn
    assert "the baseline also under 2 more seeds" in text
    devices = section(text, "## Exercise 5")
    assert "in the variants' own runs, the speed of 2 x 64 against 1 x 128: 0.75x (beyond" \
        in devices
    assert "On this CPU machine the two processes share the same cores" in devices
    # sec/batch as cifar10_multi_gpu_train.py prints it: step time / devices (128 / 300 / 2);
    # the reference's 2 x K20m at 0.13-0.20 s/batch is 128 / (sec/batch) examples/sec
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in devices.splitlines() if line.startswith("| ")}
    assert rows["2 x 64"][2] == "0.213" and rows["1 x 128 (baseline)"][2] == "0.320"
    assert rows["reference: 2 K20m x 128"][:3] == ["640-985", "320-492", "0.13-0.20"]
    assert "All variants were made by one commit, on the same data; the exercises at one " \
           "budget." in text


def test_a_short_budget_gets_a_banner_and_no_answers(tmp_path):
    exercises(tmp_path / "a", MIN_STEPS - 1, {"local_head": 0.10, "no_lrn": 0.005})
    text = make_report(tmp_path / "a", tmp_path / "out", OVERRIDES).read_text()
    top = text.split("## ", 1)[0]
    assert f"**Too short to answer.** The exercise variants ran {MIN_STEPS - 1:,} steps" in top
    assert "*Answer:*" not in text and text.count("*Answer withheld:*") >= 4
    assert "better than" not in text and "not distinguishable" not in text
    # the tables still show what was measured
    assert "| local_head | 80.0% |" in text
    # a trial of the 100K-step run: measured, not compared with the reference, its seconds
    # in seconds (not "0 min"); a run that reached no target has no time_to_target at all
    write_variant(tmp_path / "a", "tutorial_100k", 0.30, 20, curve_every=10)
    m = json.loads((tmp_path / "a/tutorial_100k/metrics.json").read_text())
    del m["train"]["time_to_target"]
    (tmp_path / "a/tutorial_100k/metrics.json").write_text(json.dumps(m))
    (tmp_path / "a/tutorial_100k/train/metrics.json").write_text(json.dumps(m["train"]))
    overrides = {**OVERRIDES, "tutorial_100k": {"train": {"max_steps": 100000}}}
    text = make_report(tmp_path / "a", tmp_path / "out", overrides).read_text()
    rep = section(text, "## The tutorial at its own budget")
    assert "after 20 steps" in rep and "too short to compare with the reference" in rep, rep
    assert "points from the reference" not in rep and " 0 min" not in text
    assert "Wall time 66 s (6 s of training" in rep


def test_a_trials_banner_names_the_knob_that_capped_it(tmp_path):
    exercises(tmp_path / "a", 5, {"local_head": 0.10, "no_lrn": 0.005})
    text = make_report(tmp_path / "a", tmp_path / "out", OVERRIDES, trial_steps=5).read_text()
    top = text.split("## ", 1)[0]
    images = json.loads((tmp_path / "a/baseline/metrics.json").read_text())["eval"]["num_examples"]
    assert ("> **A trial.** `ablation.trial_steps: 5` capped every variant at 5 steps, those "
            f"with a budget of their own included, and each was evaluated on {images:,} "
            "held-out images (`ablation.trial_eval_images`); its steps are fewer than the "
            "2,000 steps below which") in top
    assert "`dvc exp run -S reports/params.yaml:ablation.trial_steps=null reports/dvc.yaml:report`" in top
    assert "ablation.max_steps" not in top and "*Answer:*" not in text
    # a trial long enough to answer still says what capped it
    exercises(tmp_path / "b", MIN_STEPS, {"local_head": 0.10, "no_lrn": 0.005})
    top = make_report(tmp_path / "b", tmp_path / "out2", OVERRIDES,
                      trial_steps=MIN_STEPS).read_text().split("## ", 1)[0]
    assert f"`ablation.trial_steps: {MIN_STEPS}` capped every variant" in top
    assert "withheld" not in top


def test_without_seed_runs_no_effect_is_called_real(tmp_path):
    root = tmp_path / "a"
    write_variant(root, "baseline", 0.70, 10_000)
    write_variant(root, "no_lrn", 0.75, 10_000, lrn=False)
    text = make_report(root, tmp_path / "out", {"baseline": {}, "no_lrn": {}}).read_text()
    assert "one seed each (no seed runs: effects cannot be told from noise)" in text
    assert "no seed runs to compare it with: whether it exceeds seed noise is unknown" in text
    write_variant(root, "baseline_seed1", 0.71, 10_000, seed=1)
    text = make_report(root, tmp_path / "out", {"baseline": {}, "no_lrn": {},
                                                "baseline_seed1": {"train": {"seed": 1}}}
                       ).read_text()
    assert "the baseline also under 1 more seed, whose spread" in text


def test_reproduction_and_time_to_its_accuracy(tmp_path):
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "tutorial_100k", 0.85, 100_000, curve_every=5000, speed=350.0)
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    write_variant(root, "schedule_tutorial", 0.78, 7_813, curve_every=782)
    overrides = {**OVERRIDES, "tutorial_100k": {"train": {"max_steps": 100000}},
                 "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}},
                 "schedule_tutorial": {"train": {"max_epochs": 25}}}
    out = tmp_path / "out"
    text = make_report(root, out, overrides).read_text()
    rep = section(text, "## The tutorial at its own budget")
    assert "after 100,000 steps (320 epochs of 40,000 images) the averaged weights reach " \
           "**85.0%** and the raw weights 83.0%" in rep
    assert "-1.0 points from the reference's ~86%" in rep
    assert "| 100,000 | 320.0 | 85.0% | 83.0% |" in rep and "| 5,000 | 16.0 | 4.2% |" in rep
    assert "![reproduction](plots/reproduction.png)" in rep
    assert (out / "plots" / "reproduction.png").read_bytes()[:4] == b"\x89PNG"
    assert "load average as it finished was 2.0" in rep
    assert "segments" not in rep  # one uninterrupted run: no segment table
    # paused and continued: a row per segment, from its provenance
    made = root / "tutorial_100k" / "train" / "provenance.json"
    p = json.loads(made.read_text())
    p["segments"] = [{"from_step": 0, "to_step": 24_140, "wall_time_s": 6673.6,
                      "device": "AMD EPYC, 1 thread", "commit": "f" * 40,
                      "ended_utc": "2026-12-01T16:22:00Z"},
                     {"from_step": 24_140, "to_step": 100_000, "wall_time_s": None,
                      "device": None, "commit": None}]
    made.write_text(json.dumps(p))
    rep = section(make_report(root, out, overrides).read_text(), "## The tutorial at its own budget")
    assert "It ran in 2 segments" in rep
    assert "| 0-24,140 | 6,674 s | AMD EPYC, 1 thread | ffffffffff | 2026-12-01T16:22:00Z |" in rep
    assert "| 24,140-100,000 | unknown | unknown | unknown |  |" in rep
    # the exercises' budget and tables leave out the runs of their own budget
    assert "trained for **10,000 steps**" in text
    assert "tutorial_100k" not in section(text, "## Exercise 4")
    tta = section(text, "## Time to accuracy")
    assert "The bar: `tutorial_100k`'s final 85.0% (averaged weights) after 320 epochs" in tta
    assert "`schedule_fast` reaches 86.0% in 25 epochs, +1.0 points from the bar " \
           "(**not distinguishable from seed noise**: 3 seeds of the baseline spread over " \
           "2.0 points): **12.8x fewer epochs** and" in tta
    assert "on the same machine" in tta
    assert "+8.0 points (beyond the 2.0-points spread" in tta  # fast against tutorial, 25 epochs
    # a shorter `fast` run that ends just below the bar is named, weighed against the seeds
    write_variant(root, "schedule_fast_10", 0.84, 3_125, schedule="fast", curve_every=782)
    overrides["schedule_fast_10"] = {"train": {"schedule": "fast", "max_epochs": 10}}
    tta = section(make_report(root, out, overrides).read_text(), "## Time to accuracy")
    assert "The next shorter, `schedule_fast_10` (10 epochs), ends -1.0 points from the bar " \
           "(**not distinguishable from seed noise**" in tta
    # the search's record linked from report.md's folder: beside it, or elsewhere
    search = tmp_path / "search.md"
    search.write_text("# the search\n")
    for folder, link in ((tmp_path, "search.md"), (out, "../search.md")):
        tta = section(make_report(root, folder, overrides, search=search).read_text(),
                      "## Time to accuracy")
        assert f"why it stops short of 85%: [search.md]({link})." in tta


def test_no_blank_plots(tmp_path):
    """Without held-out curves there is nothing to draw of them: no PNG, and the report
    links none (the loss curves, which every run logs, are drawn)."""
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    for tsv in root.rglob("held_out/*.tsv"):
        tsv.unlink()
    out = tmp_path / "out"
    text = make_report(root, out, OVERRIDES).read_text()
    for name in ("time_to_accuracy", "reproduction"):
        assert not (out / "plots" / f"{name}.png").exists() and f"plots/{name}.png" not in text
    assert (out / "plots" / "loss_curves.png").is_file() and "plots/loss_curves.png" in text
    assert "*Not run:* the `tutorial_100k` variant has no results" in text


@pytest.mark.parametrize("points,expected", [(1, "o"), (20, "o"), (25, "o"), (500, None)])
def test_few_points_get_markers(points, expected):
    assert marker(points) == expected


def test_variants_without_results_are_named_at_the_top(tmp_path):
    """A partial run (some variants of params.yaml not run yet) still makes a report, which
    says at the top that it is not in one piece and names what is missing; each section
    that needs a missing variant says so instead of answering."""
    root = tmp_path / "a"
    for name, precision, seed in (("baseline", 0.70, 0), ("baseline_seed1", 0.72, 1),
                                  ("baseline_seed2", 0.71, 2)):
        write_variant(root, name, precision, 10_000, seed=seed)
    write_variant(root, "no_lrn", 0.75, 10_000, lrn=False)
    overrides = {**OVERRIDES, "tutorial_100k": {"train": {"max_steps": 100000}},
                 "queue_fill_0pct": {"input": {"min_fraction_of_examples_in_queue": 0.0}},
                 "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    text = make_report(root, tmp_path / "out", overrides).read_text()
    top = text.split("## The tutorial at its own budget", 1)[0]
    assert "**Not made in one piece.** 6 of the 10 variants of reports/params.yaml `ablations:` " \
           "have no results (not run): `softmax`, `devices_2x64`, `local_head`, " \
           "`tutorial_100k`, `queue_fill_0pct`, `schedule_fast`." in top
    assert "All variants were made by one commit" not in text
    assert "*Not run:* the `tutorial_100k` variant has no results" in text
    assert "*Not run:* no variant of its own budget" in section(text, "## Time to accuracy")
    assert "the baseline also under 2 more seeds, whose spread" in top
    assert "beyond the 2.0-points spread of 3 seeds" in section(
        text, "## Without local response normalization")
    # nothing at all to report is an error that says what to run
    with pytest.raises(Exception, match="no results for any variant"):
        make_report(root, tmp_path / "out2", {"softmax": {}})


def test_queue_fill_time_to_first_batch_is_weighed_against_the_seeds(tmp_path):
    root = tmp_path / "a"
    for name, seed, first in (("baseline", 0, 1.30), ("baseline_seed1", 1, 1.20),
                              ("baseline_seed2", 2, 1.40)):
        write_variant(root, name, 0.70, 10_000, seed=seed, first_batch=first)
    write_variant(root, "queue_fill_10pct", 0.70, 10_000, first_batch=1.25,
                  min_fraction_of_examples_in_queue=0.1)
    write_variant(root, "queue_fill_0pct", 0.70, 10_000, first_batch=0.30,
                  min_fraction_of_examples_in_queue=0.0)
    overrides = {**OVERRIDES,
                 "queue_fill_10pct": {"input": {"min_fraction_of_examples_in_queue": 0.1}},
                 "queue_fill_0pct": {"input": {"min_fraction_of_examples_in_queue": 0.0}}}
    text = section(make_report(root, tmp_path / "out", overrides).read_text(), "## Exercise 3")
    # 1.30 s (baseline, 0.4) against 0.30 s: 1.00 s sooner, beyond the seeds' 0.20 s
    assert "takes 0.30 s (beyond the 0.20-s spread in time to the first batch of 3 seeds" in text
    write_variant(root / ".." / "b", "baseline", 0.70, 10_000, first_batch=1.30)
    for name, seed, first in (("baseline_seed1", 1, 1.20), ("baseline_seed2", 2, 1.40)):
        write_variant(root / ".." / "b", name, 0.70, 10_000, seed=seed, first_batch=first)
    write_variant(root / ".." / "b", "queue_fill_10pct", 0.70, 10_000, first_batch=1.25,
                  min_fraction_of_examples_in_queue=0.1)
    text = section(make_report(tmp_path / "b", tmp_path / "out-b", overrides).read_text(),
                   "## Exercise 3")
    assert "takes 1.25 s (**not distinguishable from seed noise**: 3 seeds of the baseline " \
           "spread over 0.20 s in time to the first batch)" in text


def test_speeds_timed_on_other_machines_are_not_compared(tmp_path):
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.10, "no_lrn": 0.005})
    variant = json.loads((root / "local_head" / "variant.json").read_text())
    variant["device"] = "Another CPU, 1 threads"
    (root / "local_head" / "variant.json").write_text(json.dumps(variant))
    made = json.loads((root / "local_head" / "train" / "provenance.json").read_text())
    made["device"] = variant["device"]
    (root / "local_head" / "train" / "provenance.json").write_text(json.dumps(made))
    text = make_report(root, tmp_path / "out", OVERRIDES).read_text()
    exercise2 = section(text, "## Exercise 2")
    assert ("training speed against the fully connected top: **not comparable**, the runs "
            "were timed on 2 different machines (Another CPU, a CPU) and speeds compare only "
            "within one.") in exercise2
    assert "0.50x" not in exercise2  # no ratio of speeds from two machines
    assert "1.02x (**not distinguishable from seed noise**" in section(
        text, "## Without local response normalization")
    # results written before the singular existed
    assert "| Another CPU, 1 thread |" in text and "1 threads" not in text


def test_exercise5_takes_its_speed_from_the_timing_of_both_setups_alone(tmp_path):
    exercises(tmp_path / "a", 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    timing = tmp_path / "devices_timing.json"

    def setup(eps, spread, world):  # as devices_timing writes it
        runs = [{"examples_per_sec": e, "sec_per_batch": 128 / e / world, "world_size": world,
                 "global_batch_size": 128, "device": f"AMD EPYC, {2 // world} threads"}
                for e in (eps - spread / 2, eps, eps + spread / 2)]
        return {"examples_per_sec_median": eps, "examples_per_sec_spread": spread,
                "sec_per_batch_median": 128 / eps / world, "world_size": world,
                "device": f"AMD EPYC, {2 // world} threads", "runs": runs}

    timing.write_text(json.dumps({
        "steps": 400, "repeats": 3, "machine": "AMD EPYC", "cores": 2,
        "setups": {"1 x 128": setup(1000.0, 30.0, 1), "2 x 64": setup(900.0, 40.0, 2)},
        "speed_2x64_vs_1x128": 0.9}))
    out = tmp_path / "out"
    text = section(make_report(tmp_path / "a", out, OVERRIDES, devices_timing=timing).read_text(),
                   "## Exercise 5")
    assert ("timed alone on AMD EPYC (2 cores, medians of 3 runs of 400 steps each, "
            f"`{timing}`), 2 x 64 trains at 0.90x the speed of 1 x 128, beyond the 40 "
            "examples/sec spread of the runs of one set-up") in text
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ")}
    assert rows["2 x 64, timed alone (AMD EPYC, 2 cores)"][:3] == ["900", "450", "0.071"]
    assert rows["1 x 128, timed alone (AMD EPYC, 2 cores)"][:3] == ["1,000", "1,000", "0.128"]
    # a gap inside the spread of one set-up's runs is noise
    timing.write_text(json.dumps({**json.loads(timing.read_text()), "setups": {
        "1 x 128": setup(1000.0, 30.0, 1), "2 x 64": setup(980.0, 36.0, 2)},
        "speed_2x64_vs_1x128": 0.98}))
    text = section(make_report(tmp_path / "a", out, OVERRIDES, devices_timing=timing).read_text(),
                   "## Exercise 5")
    assert "0.98x the speed of 1 x 128, **not distinguishable from timing noise**" in text


@pytest.mark.parametrize("precision, where", [(0.715, "**inside** the fp32 band 70.0% to 72.0%"),
                                              (0.65, "**below** the fp32 band 70.0% to 72.0%")])
def test_bf16_is_placed_against_the_band_of_the_fp32_seeds(tmp_path, precision, where):
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "precision_bf16", precision, 10_000, speed=800.0)
    overrides = {**OVERRIDES, "precision_bf16": {"train": {"precision": "bf16"}}}
    text = make_report(root, tmp_path / "out", overrides).read_text()
    bf16 = section(text, "## bf16 autocast")
    assert f"with the averaged weights {100 * precision:.1f}%, {where}" in bf16
    assert "fp32 baseline: 2.00x (beyond the 10% spread in examples/sec" in bf16
    # a check of the arithmetic, not an exercise: not in the exercises' tables
    assert "precision_bf16" not in (tmp_path / "out" / "tables" / "exercise4_averaging.csv").read_text()
    assert "precision_bf16" in (tmp_path / "out" / "tables" / "summary.csv").read_text()
    rows = (tmp_path / "out" / "tables" / "bf16.csv").read_text().splitlines()
    assert rows[1].startswith("baseline,fp32,70.0%") and rows[-1].startswith("precision_bf16,bf16,")
    # without the variant, no section
    assert "## bf16 autocast" not in make_report(root, tmp_path / "o2", OVERRIDES).read_text()


def test_a_variant_of_ones_own_gets_its_own_section_and_no_exercise_table(tmp_path):
    """A user's `dropout` variant (the queue settings of the baseline, one more option) gets
    a section of its own and no row in exercises 1 to 4: the exercises pick their variants
    by name, not by attributes a user's variant may share."""
    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    write_variant(tmp_path / "a", "queue_fill_0pct", 0.69, 10_000,
                  min_fraction_of_examples_in_queue=0.0)
    write_variant(tmp_path / "a", "dropout", 0.75, 10_000)
    overrides = {**OVERRIDES, "queue_fill_0pct": {"input": {"min_fraction_of_examples_in_queue": 0.0}},
                 "dropout": {"model": {"dropout": 0.5}}}
    text = make_report(tmp_path / "a", tmp_path / "out", overrides).read_text()
    for heading in ("## Exercise 3", "## Exercise 4", "## Exercise 1", "## Exercise 2"):
        assert "dropout" not in section(text, heading), heading
    assert "| baseline |" in section(text, "## Exercise 3")  # the 0.4 fill, once
    mine = section(text, "## Your variants")
    assert "### `dropout`" in mine and "It changes `model.dropout: 0.5`." in mine
    assert "| dropout | 10,000 | 75.0% |" in mine and "| baseline | 10,000 | 70.0% |" in mine
    # +5 points against a 2-point seed spread
    assert "moves by +5.00 points against the baseline (beyond the 2.0-points spread" in mine
    assert "![dropout](plots/variant_dropout.png)" in mine
    # an override that repeats the baseline's own value changes nothing, and is said so
    overrides["dropout"] = {"model": {"dropout": 0.5, "lrn": True}, "input": {"flip": None},
                            "train": {"max_steps": 10_000}}
    baseline = {"model": {"dropout": 0.0, "lrn": True}, "input": {"flip": None},
                "train": {"max_steps": 1_000_000, "seed": 0}}
    mine = section(make_report(tmp_path / "a", tmp_path / "out", overrides,
                               baseline=baseline).read_text(), "## Your variants")
    assert ("It changes `model.dropout: 0.5`, `train.max_steps: 10000`; `model.lrn: true`, "
            "`input.flip: null` are the baseline's own values, so they change nothing.") in mine
    overrides["dropout"] = {"model": {"dropout": 0.0}}
    mine = section(make_report(tmp_path / "a", tmp_path / "out", overrides,
                               baseline=baseline).read_text(), "## Your variants")
    assert "It changes nothing: `model.dropout: 0.0` is the baseline's own value." in mine
    assert (tmp_path / "out" / "plots" / "variant_dropout.png").is_file()
    assert "| dropout |" in section(text, "## All variants")
    # a project without variants of its own has no such section
    (tmp_path / "b").mkdir()
    exercises(tmp_path / "b", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    assert "## Your variants" not in make_report(tmp_path / "b", tmp_path / "out2",
                                                 OVERRIDES).read_text()


def test_the_intro_states_the_budgets_the_variants_ran(tmp_path):
    """The intro states the range of budgets the variants ran: with one variant (softmax)
    at 6 steps beside 10,000-step ones it says "6 to 10,000 steps", never "Every variant
    ... is trained for 10,000 steps"."""
    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    import shutil

    shutil.rmtree(tmp_path / "a" / "softmax")
    write_variant(tmp_path / "a", "softmax", 0.70, 6, output="softmax")
    text = make_report(tmp_path / "a", tmp_path / "out", OVERRIDES).read_text()
    intro = text.split("\n## ", 1)[0]
    assert "trained for **6 to 10,000 steps**" in intro and "Every variant" not in intro


def test_a_copied_results_folder_is_one_line_naming_both_folders(tmp_path):
    """Two results folders whose variant.json names the same variant: the one not named
    after it is the copy, named in one line with the variant's own folder, whichever sorts
    first."""
    import shutil

    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    for copy in ("copy", "a_copy"):
        shutil.copytree(tmp_path / "a" / "baseline", tmp_path / "a" / copy)
        with pytest.raises(PipelineError) as err:
            make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)
        assert str(err.value) == (f"{tmp_path / 'a' / copy}: its variant.json names baseline, "
                                  f"whose folder is {tmp_path / 'a' / 'baseline'}; expected one "
                                  f"results folder a variant; remove the copy")
        shutil.rmtree(tmp_path / "a" / copy)


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_variant_whose_precision_is_not_finite_is_refused_in_one_line(tmp_path, value):
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    write_variant(tmp_path / "a", "drop_half", 0.6, 10_000)
    path = tmp_path / "a" / "drop_half" / "metrics.json"
    path.write_text(path.read_text().replace('"precision_at_1": 0.6', f'"precision_at_1": {value}'))
    with pytest.raises(PipelineError, match=r"^" + re.escape(str(path)) + r": eval\.precision_at_1 "
                       r"is (nan|inf), expected a fraction of the test images from 0 to 1; "
                       r"rerun it \(`dvc repro -f "
                       r"reports/dvc\.yaml:ablation@drop_half`; dataset_ablation@drop_half "
                       r"for a data-set variant\)\.$"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)


@pytest.mark.parametrize("text", ['{"name": "no_lrn", ', '[1, 2]', '{"name": "x"}'])
def test_a_damaged_variant_record_is_one_line_naming_it(tmp_path, text):
    """A variant.json that is not the record its stage writes (cut short, another shape,
    without `variant`): one line naming the file and the stage that writes it again."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.results import load_variants

    folder = tmp_path / "no_lrn"
    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({
        "train": {"step": 4, "loss": 1.0, "loss_avg": 1.0},
        "eval": {"precision_at_1": 0.5, "precision_at_1_raw": 0.4}}))
    (folder / "variant.json").write_text(text)
    with pytest.raises(PipelineError, match=r"no_lrn/variant.json: .*rerun .*ablation@no_lrn"):
        load_variants(tmp_path)


def _no_lrn_with(tmp_path, name: str, keys: tuple, value: str, message: str):
    """Two variants' results in tmp_path/a, no_lrn's ``name`` (a JSON file) with the value
    at ``keys`` replaced by the JSON text ``value``: the report is the one line naming
    the file, ``message``, and the variant's rerun. The file's path."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    path = tmp_path / "a" / "no_lrn" / name
    record = json.loads(path.read_text())
    inner = record
    for key in keys[:-1]:
        inner = inner[key]
    inner[keys[-1]] = "VALUE"
    path.write_text(json.dumps(record).replace('"VALUE"', value))
    with pytest.raises(PipelineError, match=r"^" + re.escape(
            f"{path}: {message}; rerun the variant (`dvc repro -f reports/"
            f"dvc.yaml:ablation@no_lrn`)") + "$"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)
    return path


@pytest.mark.parametrize("key, value, found", [
    ("precision_at_1", '"0.5"', '"0.5"'), ("num_examples", "true", "true"),
    ("examples_per_sec", "null", "null"), ("loss", "[1.0]", "a list")])
def test_a_figure_that_is_not_a_number_is_one_line_naming_the_key(tmp_path, key, value, found):
    """Every figure of a variant's metrics.json is a number, as the stage writes them: a
    string, a bool, a null or a list is one line naming the file and the key, not a
    traceback from a number format."""
    from cifar10_tutorial.errors import PipelineError

    path = _no_lrn_with(tmp_path, "metrics.json", ("eval", key), value,
                        f"eval.{key} is {found}, expected a number")
    m = json.loads(path.read_text())
    # a nested figure too, and a section that is not a record
    m["eval"][key] = 0.5
    m["train"]["held_out"]["precision_at_1"] = "0.5"
    path.write_text(json.dumps(m))
    with pytest.raises(PipelineError, match=r"train\.held_out\.precision_at_1 is \"0\.5\", "
                                            r"expected a number"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)
    path.write_text(json.dumps({**m, "train": [1]}))
    with pytest.raises(PipelineError, match=r"metrics\.json: train is a list, expected a "
                                            r"record of numbers"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)


@pytest.mark.parametrize("key, value, found, expected", [
    ("global_batch_size", '"128"', '"128"', "a whole number"),
    ("world_size", "true", "true", "a whole number"),
    ("lrn", '"yes"', '"yes"', "true or false"), ("schedule", "[1]", "a list", "a string"),
    ("min_fraction_of_examples_in_queue", "null", "null", "a number")])
def test_a_variant_record_of_another_kind_is_one_line_naming_the_key(tmp_path, key, value,
                                                                      found, expected):
    """Each key of a variant.json the report reads is of the kind the stage writes: a
    string where a whole number goes (or a bool, or a null) is one line naming the file
    and the key, before any table is made."""
    _no_lrn_with(tmp_path, "variant.json", (key,), value, f"{key} is {found}, expected {expected}")


@pytest.mark.parametrize("text", ['{"commit": "aaaa', '[1, 2]'], ids=["truncated", "a-list"])
def test_a_damaged_provenance_record_is_one_line_naming_it(tmp_path, text):
    """A variant's train/provenance.json cut short (or of another shape): one line naming
    the file and the stage that writes it again, not a JSONDecodeError traceback."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    path = tmp_path / "a" / "no_lrn" / "train" / "provenance.json"
    path.write_text(text)
    with pytest.raises(PipelineError, match=r"^" + re.escape(str(path)) + r": expected the "
                       r"training run's record (\(a JSON object\), found no JSON "
                       r"\(JSONDecodeError: .+\)|with steps, data_hash, params_hash, found a "
                       r"list); rerun it \(`dvc repro -f reports/dvc\.yaml:ablation@no_lrn`"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)


def test_a_table_that_is_a_link_is_never_written_through(tmp_path):
    """The report writes its tables as files of its own: a link in the old tables folder
    (to a foreign file) is refused in one line naming it, before anything is written;
    neither it nor the file it points to changes."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("mine\n")
    (tmp_path / "out" / "tables").mkdir(parents=True)
    (tmp_path / "out" / "tables" / "summary.csv").symlink_to(foreign)
    with pytest.raises(PipelineError, match=r"out/tables: holds summary\.csv, which the report "
                                            r"did not write .*Nothing was changed\.$"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)
    assert foreign.read_text() == "mine\n"
    assert (tmp_path / "out" / "tables" / "summary.csv").is_symlink()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tables"]


@pytest.mark.parametrize("where", ["tables", "plots"])
def test_a_link_or_file_at_the_reports_folders_is_refused(tmp_path, where):
    """tables/ or plots/ a link (to a foreign folder) or a file: refused in one line
    before anything is written; the foreign folder keeps its files."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "summary.csv").write_text("mine\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / where).symlink_to(foreign)
    with pytest.raises(PipelineError, match=rf"{where}: a link, where the report writes a folder"):
        make_report(tmp_path / "a", tmp_path / "out", OVERRIDES)
    assert sorted(p.name for p in foreign.iterdir()) == ["summary.csv"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [where]


# -- the report's set goes in whole: an interruption leaves the old one or the new one --

def _snapshot(out: Path) -> dict:
    """Every entry under ``out``, hidden ones included: name -> bytes (None for folders)."""
    return {str(p.relative_to(out)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(out.rglob("*"))}


def _old_set(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A report made from one set of results, then the results changed (baseline 70% ->
    60%) so that the next report differs in every part of the set."""
    root, out = tmp_path / "a", tmp_path / "out"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    make_report(root, out, OVERRIDES)
    shutil.rmtree(root / "baseline")
    write_variant(root, "baseline", 0.60, 10_000)
    return root, out, _snapshot(out)


def _run_report(root: Path, out: Path, patch: str) -> subprocess.CompletedProcess:
    """The report in a process of its own, with ``patch`` (Python) run first."""
    code = (f"import os, signal\nimport cifar10_tutorial.report.report as R\n{patch}\n"
            f"R.make_report({str(root)!r}, {str(out)!r}, {OVERRIDES!r})\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)


def test_sigterm_while_the_report_is_drawn_leaves_the_old_set_and_nothing_else(tmp_path):
    """SIGTERM (timeout, Slurm, docker stop) halfway through the sections: the old
    report.md, tables and plots stay exactly as they were, and nothing the run began is
    left beside them."""
    root, out, before = _old_set(tmp_path)
    done = _run_report(root, out, "old = R._no_lrn\n"
                                  "def stop(r):\n    os.kill(os.getpid(), signal.SIGTERM)\n"
                                  "    return old(r)\nR._no_lrn = stop")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert _snapshot(out) == before


def test_a_stop_during_the_swaps_waits_for_the_whole_new_set(tmp_path):
    """A stop asked for between the tables' swap and the plots' acts once the whole new
    set is in: report.md, tables and plots all from the new results."""
    root, out, before = _old_set(tmp_path)
    done = _run_report(root, out, "old = R.swap_in_folder\n"
                                  "def swap(*a):\n    kept = old(*a)\n"
                                  "    os.kill(os.getpid(), signal.SIGTERM)\n    return kept\n"
                                  "R.swap_in_folder = swap")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    text = (out / "report.md").read_text()
    assert "60.0%" in text and text.encode() != before["report.md"]
    assert "baseline,60.0%" in (out / "tables" / "summary.csv").read_text().replace(" ", "")
    assert (out / "plots" / ".report-files").read_bytes() != before["plots/.report-files"]
    assert sorted(p.name for p in out.iterdir()) == ["plots", "report.md", "tables"]


def test_a_kill_between_the_swaps_is_marked_and_said_by_the_next_report(tmp_path, capsys):
    """kill -9 between the tables' swap and the plots' (no handler runs) leaves a mixed set:
    new tables, old plots and report.md; the mark written before the swaps stays, and the
    next report says the set was mixed, replaces it all and removes the mark."""
    root, out, before = _old_set(tmp_path)
    done = _run_report(root, out, "old = R.swap_in_folder\n"
                                  "def swap(*a):\n    old(*a)\n    os._exit(9)\n"
                                  "R.swap_in_folder = swap")
    assert done.returncode == 9, done.stderr
    assert (out / ".report-swapping").is_file()
    assert (out / "report.md").read_bytes() == before["report.md"]
    make_report(root, out, OVERRIDES)
    assert (f"note: {out}: the last report was killed while it swapped in its files "
            f"(report.md, tables/ and plots/ may be of two runs)") in capsys.readouterr().err
    assert not (out / ".report-swapping").exists()
    assert "60.0%" in (out / "report.md").read_text()


def test_what_a_killed_report_left_is_removed_by_the_next_and_only_that(tmp_path, capsys):
    """A kill -9 while building leaves a marked staging folder of a process that is gone:
    the next report removes it; a folder of that name holding a user's file stays, named."""
    root, out, _ = _old_set(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = out / f".tables.staging-{dead}-abc123"
    left.mkdir()
    (left / ".report-building").write_text("x")
    (left / "summary.csv").write_text("half")
    (left / ".summary.csv.xyz.tmp").write_text("half")
    users = out / f".plots.staging-{dead}-def456"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    make_report(root, out, OVERRIDES)
    assert not left.exists()
    assert (users / "notes.txt").read_text() == "mine"
    err = capsys.readouterr().err
    assert f"{left}: removed" in err and f"{users}: left by an interrupted swap" in err


def test_a_second_report_replaces_exactly_what_the_first_wrote(tmp_path):
    """The folders' list names what the report wrote: the next report replaces them whole
    (a plot no longer drawn goes with them); a file a user added, or one of the report's
    changed since, is refused in one line naming it, before anything changes."""
    from cifar10_tutorial.errors import PipelineError

    root, out, _ = _old_set(tmp_path)
    (out / "plots" / "stale.png").write_bytes(b"no longer drawn, but the report's")
    listed = json.loads((out / "plots" / ".report-files").read_text())
    listed["files"]["stale.png"] = __import__("hashlib").sha256(
        b"no longer drawn, but the report's").hexdigest()
    (out / "plots" / ".report-files").write_text(json.dumps(listed))
    (out / "tables" / "my_notes.csv").write_text("mine\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(PipelineError, match=r"tables: holds my_notes\.csv, which the report "
                                            r"did not write") as refused:
        make_report(root, out, OVERRIDES)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert "git checkout" not in str(refused.value)  # outside any checkout: git gives nothing back
    (out / "tables" / "my_notes.csv").unlink()
    make_report(root, out, OVERRIDES)
    assert not (out / "plots" / "stale.png").exists()
    assert not [p for p in out.iterdir() if p.name.startswith((".plots.", ".tables."))]
    table = next(p for p in (out / "tables").iterdir() if p.suffix == ".csv")
    table.write_text("edited\n")
    with pytest.raises(PipelineError, match=rf"tables: holds {table.name}, which the report "
                                            r"did not write \(or which changed since\)"):
        make_report(root, out, OVERRIDES)
    assert table.read_text() == "edited\n"


@pytest.mark.parametrize("what", ["users-file", "folder", "link"])
def test_a_report_md_that_is_no_report_is_refused_before_anything_changes(tmp_path, what):
    """--out of a folder whose report.md is a user's file, a folder, or a link (to another
    report, as the report wrote it): refused before the tables and plots are swapped in;
    nothing under --out changes, nor what the link leads to."""
    from cifar10_tutorial.errors import PipelineError

    root, out = tmp_path / "a", tmp_path / "out"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out.mkdir()
    if what == "users-file":
        (out / "report.md").write_text("# My notes\n")
    elif what == "folder":
        (out / "report.md").mkdir()
    else:
        other = make_report(root, tmp_path / "other", OVERRIDES)
        (out / "report.md").symlink_to(other)
        theirs = other.read_text()
    before = _snapshot(out)
    said = {"users-file": r"--out .*report.md: holds a file that is not a report",
            "folder": r"out/report.md: not a file, where the report writes its own report.md; "
                      r"move it away, then rerun. Nothing was changed.$",
            "link": r"out/report.md: a link, where the report writes its own report.md; "
                    r"move it away, then rerun. Nothing was changed.$"}[what]
    with pytest.raises(PipelineError, match=said):
        make_report(root, out, OVERRIDES)
    assert _snapshot(out) == before
    assert what != "link" or other.read_text() == theirs


def test_an_empty_variant_list_is_named_as_such(tmp_path):
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    with pytest.raises(PipelineError, match=r"`ablations:` is empty; define the variants"):
        make_report(root, tmp_path / "out", {})
    assert not (tmp_path / "out").exists()


def test_an_out_that_cannot_be_made_or_a_folder_at_the_mark_is_one_line(tmp_path):
    from cifar10_tutorial.errors import PipelineError

    root, out = tmp_path / "a", tmp_path / "out"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(PipelineError, match=r"afile: a file, where the run needs a folder"):
        make_report(root, tmp_path / "afile" / "out", OVERRIDES)
    (out / ".report-swapping").mkdir(parents=True)
    with pytest.raises(PipelineError, match=r"\.report-swapping: not a file, where the report "
                                            r"writes its own \.report-swapping"):
        make_report(root, out, OVERRIDES)
    assert sorted(p.name for p in out.iterdir()) == [".report-swapping"]


def test_a_variant_whose_definition_changed_since_its_results_is_refused(tmp_path):
    """reports/params.yaml's softmax edited (lrn: false) while its results are the old
    definition's: one line naming the variant and what changed; the committed definitions
    match their results."""
    import shutil

    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import EXERCISES, load_params
    from cifar10_tutorial.report.results import refuse_stale_definitions
    from conftest import ROOT

    root = tmp_path / "ablations"
    shutil.copytree(ROOT / "reports/ablations/softmax", root / "softmax")
    params = load_params(ROOT / "reports/params.yaml", EXERCISES)
    refuse_stale_definitions(root, params.ablations)
    text = (ROOT / "reports/params.yaml").read_text().replace(
        "  softmax:", "  softmax:\n    model: {output: softmax, lrn: false}\n  softmax_old:", 1)
    (tmp_path / "params.yaml").write_text(text)
    edited = load_params(tmp_path / "params.yaml", EXERCISES)
    assert edited.ablations["softmax"]["model"]["lrn"] is False
    with pytest.raises(PipelineError, match=r"softmax/variant.json: softmax was made with lrn "
                                            r"true, but reports/params.yaml now gives it false"):
        refuse_stale_definitions(root, edited.ablations)


def test_a_second_report_on_the_same_folder_waits_for_none_and_changes_nothing(tmp_path):
    """Two reports at once on one folder would swap their sets into each other's: the
    second stops at once in one line naming the first, and the first ends whole."""
    import time

    from cifar10_tutorial.errors import PipelineError

    root, out, before = _old_set(tmp_path)
    flag = tmp_path / "drawing"
    code = (f"import pathlib, time\nimport cifar10_tutorial.report.report as R\n"
            f"old = R._no_lrn\n"
            f"def slow(r):\n    pathlib.Path({str(flag)!r}).write_text('x')\n"
            f"    time.sleep(4)\n    return old(r)\n"
            f"R._no_lrn = slow\nR.make_report({str(root)!r}, {str(out)!r}, {OVERRIDES!r})\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    first = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not flag.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert flag.exists(), first.stderr.read()
        with pytest.raises(PipelineError, match=rf"{re.escape(str(out))}: another run is writing "
                                                rf"there \(pid {first.pid}, since .+: the report"):
            make_report(root, out, OVERRIDES)
        # the second touched nothing (the first's staging folders aside)
        assert {k: v for k, v in _snapshot(out).items()
                if f".staging-{first.pid}-" not in k} == before
    finally:
        rc = first.wait(timeout=300)
    assert rc == 0, first.stderr.read()
    assert "60.0%" in (out / "report.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["plots", "report.md", "tables"]


@pytest.mark.parametrize("where", ["the-folder", "inside-it"])
def test_a_report_into_a_folder_of_published_weights_is_refused(tmp_path, monkeypatch, where):
    """--out at a published folder (or a folder in one): refused before anything is
    written; the published files stay as they were."""
    from cifar10_tutorial.errors import PipelineError

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    published = tmp_path / "models" / "baseline"
    published.mkdir(parents=True)
    (published / "published.json").write_text('{"files": {"model.pt": "0"}}')
    (published / "README.md").write_text("# card\n")
    before = _snapshot(published)
    out = published if where == "the-folder" else published / "sub"
    with pytest.raises(PipelineError, match=rf"--out {re.escape(str(out))}: inside "
                                            rf"{re.escape(str(published))}, a folder of "
                                            rf"published weights"):
        make_report(root, out, OVERRIDES)
    assert _snapshot(published) == before
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["baseline"]


@pytest.mark.parametrize("edit, said", [
    ("range", r"softmax/metrics.json: eval.precision_at_1 is 1.7, expected a fraction of the "
              r"test images from 0 to 1; rerun it"),
    ("eval-differs", r"softmax/eval/metrics.json: precision_at_1 not what .*softmax/metrics.json "
                     r"gives \(precision_at_1: 0.125 here, 0.\d+ there\); the two are "
                     r"written by one run of the variant"),
    ("train-differs", r"softmax/train/metrics.json: step not what .* gives \(step: 10001 here, "
                      r"10000 there\)"),
    ("eval-unreadable", r"softmax/eval/metrics.json: cannot be read as JSON \(JSONDecodeError: "
                        r".*\), where the variant's run writes its eval figures; rerun it"),
    # a copy's figures edited alike in every record: its own last held-out evaluation (the
    # same weights, the same images) says otherwise; then its curve, edited all but that
    ("edited-alike", r"softmax/metrics.json: eval.precision_at_1 is 0.9000, where "
                     r"train.held_out.precision_at_1 is 0.7000: the same weights"),
    ("edited-but-the-curve", r"softmax/metrics.json: eval.precision_at_1_raw is 0.8800, where "
                             r"its held-out curve at step 10,000 \(precision_at_1_raw\) is "
                             r"0.6800"),
    # ... or with the run's last held-out figures deleted, or its step moved off its curve
    ("held-out-deleted", r"softmax/metrics.json: train.held_out_eval_seconds without "
                         r"train.held_out"),
    # (its epochs then contradict variant.json's training set, checked first)
    ("step-moved", r"softmax/(metrics.json: train.step is 10001, where .*softmax/train/"
                   r"provenance.json records 10000 steps|variant.json: num_train is 40,000 "
                   r"and global_batch_size 128, where .* gives 10,001 steps as 32.0 epochs)"),
    # the final loss edited in both records alike: the loss curve the run logged says
    ("loss-edited-alike", r"softmax/metrics.json: train.loss_avg is 0.1230, where .*softmax/"
                          r"train/plots/metrics/train/loss_avg.tsv gives 1.7000 at the run's "
                          r"last step \(10,000\)"),
])
def test_a_results_folder_of_two_runs_or_an_impossible_figure_is_refused(tmp_path, edit, said):
    """A variant's metrics.json and its eval/ and train/ metrics are one run's: a folder a
    stopped run half rewrote (new eval/, old metrics.json), an evaluation of another model
    written into it, or a precision above 1, is one line naming it; never reported."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    folder = root / "softmax"
    m = json.loads((folder / "metrics.json").read_text())
    (folder / "eval").mkdir(exist_ok=True)
    (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
    _eval_files(folder / "eval")
    (folder / "train").mkdir(exist_ok=True)
    (folder / "train/metrics.json").write_text(json.dumps({"step": m["train"]["step"]}))
    make_report(root, tmp_path / "out", OVERRIDES)  # one run's: reported
    if edit == "range":
        m["eval"]["precision_at_1"] = 1.7
        (folder / "metrics.json").write_text(json.dumps(m))
    elif edit == "eval-differs":
        (folder / "eval/metrics.json").write_text(json.dumps({**m["eval"], "precision_at_1": 0.125}))
    elif edit == "train-differs":
        (folder / "train/metrics.json").write_text(json.dumps({"step": m["train"]["step"] + 1}))
    elif edit == "eval-unreadable":
        (folder / "eval/metrics.json").write_text("{")
    elif edit == "loss-edited-alike":
        m["train"]["loss_avg"] = 0.123
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps({"step": m["train"]["step"],
                                                               "loss_avg": 0.123}))
    elif edit in ("held-out-deleted", "step-moved"):
        m["eval"].update(precision_at_1=0.9, precision_at_1_raw=0.88)
        if edit == "held-out-deleted":
            del m["train"]["held_out"]
        else:
            m["train"]["step"] += 1
            (folder / "train/metrics.json").write_text(json.dumps({"step": m["train"]["step"]}))
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
    else:
        m["eval"].update(precision_at_1=0.9, precision_at_1_raw=0.88)
        if edit == "edited-but-the-curve":
            m["train"]["held_out"] = {"precision_at_1": 0.9, "precision_at_1_raw": 0.88}
            curves = folder / "train/plots/metrics/held_out"  # its averaged curve edited too
            _tsv(curves / "precision_at_1.tsv", "precision_at_1", [(5000, 0.6), (10000, 0.9)])
            _tsv(curves / "precision_at_1_raw.tsv", "precision_at_1_raw",
                 [(5000, 0.58), (10000, 0.68)])
            _tsv(curves / "epoch.tsv", "epoch", [(5000, 16.0), (10000, 32.0)])  # all three
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
    before = _snapshot(tmp_path / "out")
    with pytest.raises(PipelineError, match=said):
        make_report(root, tmp_path / "out", OVERRIDES)
    assert _snapshot(tmp_path / "out") == before


@pytest.mark.parametrize("edit, said", [
    ("edited", r"softmax/metrics.json: eval.precision_at_1 is 0.9000, where its .*softmax/eval/"
               r"predictions.csv gives 0.7000: one evaluation writes both"),
    # (each class's precision against predictions.csv first: per_class.csv's were not edited)
    ("edited-predictions-too", r"softmax/eval/per_class.csv: 'cat' has precision_at_1 0.7000, "
                               r"where .*softmax/eval/predictions.csv gives 0.9000"),
    ("raw-edited", r"softmax/metrics.json: eval.precision_at_1_raw is 0.8800, where its "
                   r".*softmax/eval/per_class.csv gives 0.6800"),
    ("fewer-images", r"softmax/eval/predictions.csv: 9,000 test images, where .*softmax/"
                     r"metrics.json gives eval.num_examples 10,000"),
    ("other-header", r"softmax/eval/per_class.csv: expected the evaluation's rows under the "
                     r"header class,count,precision_at_1,precision_at_1_raw, found the header "
                     r"class,n,p,p_raw"),
    ("precision-text", r"softmax/eval/per_class.csv: expected whole counts and precisions from "
                       r"0 to 1, found could not convert string to float: 'high'"),
    # the figures edited, the files that contradict them deleted, or a folder in their place
    ("edited-csvs-deleted", r"softmax/eval/predictions.csv: missing beside .*softmax/eval/"
                            r"metrics.json, which the evaluation writes with it as one set"),
    ("edited-csvs-folders", r"softmax/eval/predictions.csv: expected the evaluation's "
                            r"actual,predicted rows, found a folder"),
    ("byte-order-mark", r"softmax/eval/per_class.csv: expected the evaluation's rows under the "
                        r"header class,count,precision_at_1,precision_at_1_raw, found a "
                        r"byte-order mark before the header"),
    # the number right and of images kept: a class no evaluation wrote, or one image's class
    ("unknown-class", r"softmax/eval/predictions.csv: the class 'zebra', which .*softmax/eval/"
                      r"per_class.csv does not list: the files are not one evaluation's"),
    ("class-moved", r"softmax/eval/predictions.csv: 5,001 test images of 'cat', where .*softmax/"
                    r"eval/per_class.csv counts 5,000"),
])
def test_figures_the_evaluations_own_predictions_contradict_are_refused(tmp_path, edit, said):
    """A variant's eval/predictions.csv (one row an image) and eval/per_class.csv are
    written with its precision, by one evaluation: a copy whose figures were edited
    everywhere else (metrics.json, eval/metrics.json, the run's last held-out figures)
    states a precision its own predictions contradict; one line naming both."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    folder = root / "softmax"
    m = json.loads((folder / "metrics.json").read_text())
    _eval_files(folder / "eval")  # a class without test images too
    make_report(root, tmp_path / "out", OVERRIDES)  # one evaluation's files: reported
    if edit in ("edited", "edited-predictions-too", "raw-edited", "edited-csvs-deleted",
                "edited-csvs-folders"):
        if edit == "raw-edited":
            m["eval"]["precision_at_1_raw"] = m["train"]["held_out"]["precision_at_1_raw"] = 0.88
        else:
            m["eval"]["precision_at_1"] = m["train"]["held_out"]["precision_at_1"] = 0.9
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
        if edit == "edited-predictions-too":  # per_class.csv left as it was
            per_class = (folder / "eval/per_class.csv").read_text()
            _eval_files(folder / "eval", right=9000)
            (folder / "eval/per_class.csv").write_text(per_class)
        if edit.startswith("edited-csvs"):
            for name in ("predictions.csv", "per_class.csv"):
                (folder / "eval" / name).unlink()
                if edit == "edited-csvs-folders":
                    (folder / "eval" / name).mkdir()
    elif edit == "fewer-images":
        text = (folder / "eval/predictions.csv").read_text().splitlines()
        (folder / "eval/predictions.csv").write_text("\n".join(text[:9001]) + "\n")
    elif edit in ("unknown-class", "class-moved"):
        text = (folder / "eval/predictions.csv").read_text()
        if edit == "unknown-class":
            text = text.replace("\ncat,cat\n", "\nzebra,zebra\n", 1)
        else:
            text = text.replace("\ndog,dog\n", "\ncat,cat\n", 1)
        (folder / "eval/predictions.csv").write_text(text)
    elif edit == "byte-order-mark":
        text = (folder / "eval/per_class.csv").read_text()
        (folder / "eval/per_class.csv").write_text("\ufeff" + text)
    elif edit == "other-header":
        (folder / "eval/per_class.csv").write_text("class,n,p,p_raw\ncat,10000,0.7,0.68\n")
    else:
        (folder / "eval/per_class.csv").write_text(
            "class,count,precision_at_1,precision_at_1_raw\ncat,10000,high,0.68\n")
    before = _snapshot(tmp_path / "out")
    with pytest.raises(PipelineError, match=said):
        make_report(root, tmp_path / "out", OVERRIDES)
    assert _snapshot(tmp_path / "out") == before


@pytest.mark.parametrize("edit, said", [
    ({"commit": 5}, "commit is 5, not of the kind"),
    ({"data_hash": None}, "data_hash is null, not of the kind"),
    ({"device": ["a CPU"]}, 'device is \\["a CPU"\\], not of the kind'),
    ({"world_size": "2"}, 'world_size is "2", not of the kind'),
    ({"cpu_load": [1.0]}, r"cpu_load is \[1.0\], not of the kind"),
    ({"segments": 5}, "segments is 5, not of the kind"),
    ({"segments": [{"from_step": 0}]}, r"segments\[0\] is .*, not of the kind"),
    ({"segments": [{"from_step": 0, "to_step": "end"}]}, r'segments\[0\].to_step is "end"'),
    ({"dirty": "no"}, 'dirty is "no", not of the kind'),
])
def test_a_provenance_record_of_other_kinds_is_one_line(tmp_path, edit, said):
    """A training run's provenance.json whose commit, data hash, machine or segments are of
    another kind than the run writes: one line naming the file and the key, never a
    traceback from the report's table; a run outside git is said so in full."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    path = root / "softmax/train/provenance.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "commit": None}))
    text = make_report(root, tmp_path / "out", OVERRIDES).read_text()
    assert "| softmax | outside git | dddddddddddd |" in text
    path.write_text(json.dumps({**record, **edit}))
    with pytest.raises(PipelineError, match=rf"softmax/train/provenance.json: {said}"):
        make_report(root, tmp_path / "out", OVERRIDES)


@pytest.mark.parametrize("record", ["metrics.json", "eval/metrics.json",
                                    "train/provenance.json", "variant.json"])
def test_a_record_nested_past_any_parser_is_one_line(tmp_path, record):
    """A record nested 100,000 deep (a JSON parser's recursion limit): one line naming it,
    as any record that cannot be read, never a traceback."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    path = root / "softmax" / record
    path.parent.mkdir(exist_ok=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(path))}: "):
        make_report(root, tmp_path / "out", OVERRIDES)


def test_the_report_names_its_records_from_the_repository_root(tmp_path, monkeypatch):
    """Run from reports/ (paths relative to there), the report names its records as from
    the repository root, so the report reads the same wherever it was made; a record
    outside any repository keeps the path it was given."""
    from cifar10_tutorial.report.results import in_repository

    project = tmp_path / "p"
    (project / ".dvc").mkdir(parents=True)
    (project / "dvc.yaml").write_text("stages: {}\n")
    (project / "reports/tf_reference").mkdir(parents=True)
    monkeypatch.chdir(project / "reports")
    assert in_repository(Path("tf_reference/opcheck.json")) == "reports/tf_reference/opcheck.json"
    assert in_repository(Path("code_equivalence.json")) == "reports/code_equivalence.json"
    monkeypatch.chdir(project)
    assert in_repository(Path("reports/code_equivalence.json")) == "reports/code_equivalence.json"
    (tmp_path / "free").mkdir()
    monkeypatch.chdir(tmp_path / "free")
    assert in_repository(Path("x/opcheck.json")) == "x/opcheck.json"


def test_a_folder_without_the_reports_list_is_a_users(tmp_path):
    """--out a folder of the user's whose tables/ and plots/ hold files of the very names
    the report gives its own (summary.csv, a PNG): without the report's list they are the
    user's, refused in one line naming them, and none is replaced."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out = tmp_path / "out"
    (out / "tables").mkdir(parents=True)
    (out / "plots").mkdir()
    (out / "tables" / "summary.csv").write_text("my precious table\n")
    (out / "plots" / "reproduction.png").write_bytes(b"mine")
    with pytest.raises(PipelineError, match=r"out/tables: holds summary\.csv, which the report "
                                            r"did not write"):
        make_report(tmp_path / "a", out, OVERRIDES)
    shutil.rmtree(out / "tables")
    with pytest.raises(PipelineError, match=r"out/plots: holds reproduction\.png, which the "
                                            r"report did not write"):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert (out / "plots" / "reproduction.png").read_bytes() == b"mine"
    assert sorted(p.name for p in out.iterdir()) == ["plots"]


def test_a_damaged_list_of_the_reports_files_is_named(tmp_path, monkeypatch):
    """The report's list made unreadable (a merge conflict's markers): the line names the
    list and how to restore it, not the report's own tables as someone else's."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out = tmp_path / "out"
    make_report(tmp_path / "a", out, OVERRIDES)
    listing = out / "tables" / ".report-files"
    listing.write_text("<<<<<<< HEAD\n" + listing.read_text())
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    said = (r"tables/\.report-files: expected the report's list of the files it wrote there, "
            r"found one that cannot be read; ")
    # outside git: no checkout gives the folder back
    with pytest.raises(PipelineError, match=said + r"move the folder away, then rerun"):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # inside a checkout
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    monkeypatch.chdir(tmp_path)  # its own checkout
    with pytest.raises(PipelineError, match=said + r"restore the folder \(`git checkout -- "):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_report_md_edited_since_the_report_wrote_it_is_refused(tmp_path):
    """report.md ends in a seal (the sha256 of the text above it): notes added to it, or a
    text of one's own under the report's title, are refused in one line, not replaced; the
    report as written is replaced."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out = tmp_path / "out"
    make_report(tmp_path / "a", out, OVERRIDES)
    report = out / "report.md"
    assert report.read_text().splitlines()[-1].startswith("<!-- written by the report stage; "
                                                          "sha256 ")
    make_report(tmp_path / "a", out, OVERRIDES)  # its own: replaced
    for edited in (report.read_text() + "MY NOTES: important\n",
                   report.read_text().replace("## All variants", "## All variants (mine)"),
                   report.read_text().splitlines()[0] + "\n\nmy own text\n<!-- written by the "
                   "report stage; sha256 " + "0" * 64 + " of the text above: edit a copy, "
                   "not this file -->\n",
                   # the seal line deleted (its comment trimmed), notes added: the user's
                   "\n".join(report.read_text().splitlines()[:-1]) + "\nMY NOTES: keep\n"):
        report.write_text(edited)
        with pytest.raises(PipelineError, match=r"report\.md: holds a file that is not a report "
                                                r"as the report wrote it \(none edited since\)"):
            make_report(tmp_path / "a", out, OVERRIDES)
        assert report.read_text() == edited


def test_one_variants_folder_given_for_all_is_named_so(tmp_path):
    """--ablations naming one variant's folder: its eval/ and train/ are no variants, and
    the line says which folder is expected, not to rerun a variant called eval."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    with pytest.raises(PipelineError, match=r"a/no_lrn: one variant's results, where the folder "
                                            r"of every variant's is expected"):
        make_report(tmp_path / "a" / "no_lrn", tmp_path / "out", OVERRIDES)


def test_a_table_git_holds_from_another_branch_is_the_reports_own(tmp_path):
    """Two branches each reran the report; after the merge a table of the other branch's
    run is not in this list, but git holds its bytes: the next report replaces it (nothing
    is lost). The same table edited and not committed is still refused."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out = tmp_path / "out"
    make_report(tmp_path / "a", out, OVERRIDES)
    table = next(p for p in sorted((out / "tables").iterdir()) if p.suffix == ".csv")
    table.write_text("variant,from the other branch\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "merged"]):
        subprocess.run(git + cmd, cwd=out, check=True, capture_output=True)
    make_report(tmp_path / "a", out, OVERRIDES)
    assert table.read_text() != "variant,from the other branch\n"
    table.write_text("edited, not committed\n")
    with pytest.raises(PipelineError, match=rf"tables: holds {table.name}, which the report"):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert table.read_text() == "edited, not committed\n"
    # an edit staged, not committed (only the index holds it), and a file of the user's
    # committed under a report's kind of name (the list does not name it): refused
    subprocess.run(git + ["add", "-A"], cwd=out, check=True, capture_output=True)
    with pytest.raises(PipelineError, match=rf"tables: holds {table.name}, which the report"):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert table.read_text() == "edited, not committed\n"
    subprocess.run(git + ["commit", "-q", "-m", "mine"], cwd=out, check=True,
                   capture_output=True)
    mine = out / "tables" / "mine.csv"
    mine.write_text("my,own,analysis\n")
    subprocess.run(git + ["add", "-A"], cwd=out, check=True, capture_output=True)
    subprocess.run(git + ["commit", "-q", "-m", "mine"], cwd=out, check=True,
                   capture_output=True)
    with pytest.raises(PipelineError, match=r"tables: holds mine\.csv, which the report"):
        make_report(tmp_path / "a", out, OVERRIDES)
    assert mine.read_text() == "my,own,analysis\n"


def test_a_report_over_a_mebibyte_edited_is_refused(tmp_path, monkeypatch):
    """The seal is the report's last line: a report larger than the head a foreign-file
    check reads, edited, is still told from the report as written."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report import report as rep

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    out = tmp_path / "out"
    out.mkdir()
    big = rep._sealed(rep.TITLE + "\n\n" + "| row | figure |\n" * 120_000)
    (out / "report.md").write_text(big.replace("| row | figure |", "| row | MY EDIT |", 1))
    with pytest.raises(PipelineError, match=r"report\.md: holds a file that is not a report"):
        make_report(tmp_path / "a", out, OVERRIDES)
    (out / "report.md").write_text(big)  # as written: replaced
    make_report(tmp_path / "a", out, OVERRIDES)
    assert (out / "report.md").stat().st_size < len(big)


def test_results_no_stage_vouches_for_are_said_to_be_unchecked_at_the_top(tmp_path):
    """A copy of the results (no DVC stage's folder): the report says so above its figures,
    naming why, so that no reader takes them for the pipeline's."""
    root, out = tmp_path / "copy", tmp_path / "out"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    make_report(root, out, OVERRIDES, unchecked="the results in copy were not checked against "
                "the variants' definitions as they are now: they are not the ablation "
                "stages' folder (reports/ablations)")
    text = (out / "report.md").read_text()
    assert "> **Unchecked.** The results in copy were not checked" in text.split("## ")[0]
    make_report(root, out, OVERRIDES)
    assert "Unchecked" not in (out / "report.md").read_text()


def _report_stage(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}
    return subprocess.run([sys.executable, "stages/report.py", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("what", ["missing", "fifo", "folder", "empty"])
@pytest.mark.parametrize("option", ["--equivalence", "--devices-timing", "--search"])
def test_a_record_named_that_is_no_file_is_one_line_not_absent(tmp_path, option, what):
    """--equivalence, --devices-timing or --search naming nothing, a FIFO, a folder or an
    empty file: one line naming it, never read as absent (the report would then say the
    variants were not checked to train alike, or exercise 5 not comparable) nor linked
    (the search's notes)."""
    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    given = tmp_path / "given"
    if what == "fifo":
        os.mkfifo(given)
    elif what == "folder":
        given.mkdir()
    elif what == "empty":
        given.write_text("")
    proc = _report_stage(project, "--ablations", "reports/ablations", "--search",
                         "reports/fast_schedule_search.md", "--equivalence",
                         "reports/code_equivalence.json", option, str(given), "--out",
                         str(tmp_path / "out"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {option} {given}: ") and "Nothing was written" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_variant_in_both_groups_is_one_line_naming_it(tmp_path):
    """A name in both ablations: and dataset_ablations: would be two stages writing one
    results folder: the report says which (where no DVC status is asked first)."""
    import yaml
    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    params = yaml.safe_load((project / "reports/params.yaml").read_text())
    params["dataset_ablations"] = {**(params.get("dataset_ablations") or {}),
                                   "softmax": {"data": {"dataset": "svhn"}}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(params))
    proc = _report_stage(project, "--ablations", "reports/ablations", "--search",
                         "reports/fast_schedule_search.md", "--equivalence",
                         "reports/code_equivalence.json", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == (
        "error: reports/params.yaml: ablations and dataset_ablations share the names "
        "['softmax']"), proc.stderr


def test_a_special_file_or_a_name_no_utf8_among_the_results_is_named(tmp_path):
    """Before DVC hashes a variant's results: a FIFO, or a name that is no UTF-8 text (DVC's
    own error names no file), is one line naming it."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.results import refuse_special_files

    (tmp_path / "v/eval").mkdir(parents=True)
    (tmp_path / "v/eval/metrics.json").write_text("{}")
    refuse_special_files([tmp_path / "v"], "a result file")
    bad = os.fsencode(tmp_path / "v/eval") + b"/x\xff"
    open(bad, "wb").close()
    with pytest.raises(PipelineError, match=r"v/eval/x\\udcff: a name that is no UTF-8 text"):
        refuse_special_files([tmp_path / "v"], "a result file")
    os.unlink(bad)
    os.mkfifo(tmp_path / "v/eval/pipe")
    with pytest.raises(PipelineError, match=r"v/eval/pipe: expected a result file, found a FIFO"):
        refuse_special_files([tmp_path / "v"], "a result file")


@pytest.mark.parametrize("text", ["", "{bad", "[1, 2]", "{}", '{"setups": {}}',
                                  "cores=null", "speed=fast", "machine=7", "repeats=true"])
def test_a_damaged_devices_timing_is_one_line_naming_it(tmp_path, text):
    """The devices timing record empty, not JSON, of another shape or without both set-ups:
    one line naming the file and how to remake it, never a traceback."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.multi_device import read_timing

    from conftest import ROOT

    assert read_timing(ROOT / "reports/devices_timing.json")["setups"]
    path = tmp_path / "timing.json"
    if "=" in text:  # the committed record with one value of another kind
        key, value = text.split("=")
        key = {"speed": "speed_2x64_vs_1x128"}.get(key, key)
        record = json.loads((ROOT / "reports/devices_timing.json").read_text())
        record[key] = json.loads(value) if value != "fast" else value
        text = json.dumps(record)
    path.write_text(text)
    with pytest.raises(PipelineError, match=r"timing.json: expected a devices timing record"):
        read_timing(path)


@pytest.mark.parametrize("edit, said", [
    ("ratio", "speed_2x64_vs_1x128 2.5, where the set-ups' medians give 1.00"),
    ("median", "set-up '2 x 64' with examples_per_sec_median 5000.0, where its runs' median "
               "is 10"),
    ("infinite", "set-up '1 x 128' with examples_per_sec_median inf, where above 0 is expected"),
    ("spread", "set-up '1 x 128' with examples_per_sec_spread 1.0, where its runs spread over"),
    ("no-spread", "set-up '1 x 128' with examples_per_sec_spread None"),
    ("no-runs", "set-up '2 x 64' without its runs (a list of records, one a run)"),
    ("fewer-runs", "set-up '2 x 64' with 2 runs, where repeats is 3"),
    ("no-device", "set-up '2 x 64''s run 1 with device 'AMD EPYC, 1 thread', where the set-up "
                  "records None"),
    ("zero-cores", "cores 0, where at least 1 is expected"),
    ("per-batch", "set-up '1 x 128' with sec_per_batch_median 9.0, where its runs' median"),
    # every run's speed scaled, the medians, spread and ratio recomputed to match: each
    # run's seconds a batch still give its true speed
    ("scaled", "set-up '2 x 64''s run 1 with sec_per_batch 0.066"),
    ("no-per-batch", "set-up '2 x 64''s run 1 without its examples_per_sec and sec_per_batch"),
    ("per-batch-bool", "set-up '1 x 128''s run 1 without its examples_per_sec and sec_per_batch"),
    ("eight-processes", "set-up '2 x 64''s run 1 with world_size 8, where the set-up is 2"),
    ("other-machine", "set-up '1 x 128' with device 'AMD EPYC, 2 threads', where the "
                      "record's machine is 'NVIDIA H100'"),
    # a run copied over another (the medians and spread recomputed): one timing twice
    ("copied-run", "set-up '2 x 64''s run 3 with the examples_per_sec of set-up '2 x 64''s "
                   "run 1"),
    # one set-up's run given the other's measurement (its seconds a batch and the
    # medians recomputed): one timing in both
    ("copied-across", "set-up '2 x 64''s run 1 with the examples_per_sec of set-up "
                      "'1 x 128''s run 1"),
    ("third-setup", "set-up '4 x 32', where the record holds the set-ups '1 x 128' and "
                    "'2 x 64' only"),
    ("absurd-steps", "steps a number of 31 digits, where less than 1,000,000,000 is expected"),
    ("absurd-speeds", "set-up '2 x 64''s run 1 with examples_per_sec 9.695e+292, beyond what "
                      "2 CPU cores train (at most 10,000 examples/sec a core)"),
    # every run 500,000 times faster, medians and ratio recomputed: a speed no CPU gives
    ("cpu-bound", "set-up '1 x 128''s run 1 with examples_per_sec 4.475e+08, beyond what "),
    # a machine (and so every device) naming a markdown row: the report quotes them
    ("newline-machine", "machine 'AMD EPYC\\n| injected | 99,999 | row |', holding a newline, "
                        "another control character or a '|', where a machine's name is one "
                        "line, and one cell of the report's tables"),
    ("pipe-machine", "machine 'AMD | EPYC', holding a newline, another control character or "
                     "a '|'"),
    # a line break of Unicode's (NEL, U+0085), and no name at all
    ("nel-machine", "machine 'AMD\\x85EPYC', holding a newline, another control character"),
    ("empty-machine", "machine '', where the name of what was timed is expected"),
])
def test_a_devices_timing_its_own_runs_contradict_is_one_line(tmp_path, edit, said):
    """The timing record's medians, spreads and ratio are its runs' (what
    benchmarks/devices_timing.py computes from them): one edited, not finite or left out
    would be stated as measured, or reach the plot as a traceback; one line naming the
    file and the figure."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.multi_device import read_timing

    from conftest import ROOT

    record = json.loads((ROOT / "reports/devices_timing.json").read_text())
    one, two = record["setups"]["1 x 128"], record["setups"]["2 x 64"]

    def recomputed(*setups):  # from the runs, as benchmarks/devices_timing.py does
        for setup in setups:
            speeds = [run["examples_per_sec"] for run in setup["runs"]]
            setup.update(examples_per_sec_median=statistics.median(speeds),
                         examples_per_sec_spread=max(speeds) - min(speeds),
                         sec_per_batch_median=statistics.median(
                             run["sec_per_batch"] for run in setup["runs"]))
        record["speed_2x64_vs_1x128"] = (two["examples_per_sec_median"]
                                         / one["examples_per_sec_median"])

    if edit == "ratio":
        record["speed_2x64_vs_1x128"] = 2.5
    elif edit == "median":
        two["examples_per_sec_median"] = 5000.0
    elif edit == "infinite":
        one["examples_per_sec_median"] = float("inf")
    elif edit == "spread":
        one["examples_per_sec_spread"] = 1.0
    elif edit == "no-spread":
        del one["examples_per_sec_spread"]
    elif edit == "no-runs":
        two["runs"] = []
    elif edit == "fewer-runs":
        two["runs"] = two["runs"][:2]
    elif edit == "no-device":
        del two["device"]
    elif edit == "zero-cores":
        record["cores"] = 0
    elif edit == "scaled":
        for run in two["runs"]:
            run["examples_per_sec"] *= 1.5
        recomputed(two)
    elif edit == "no-per-batch":
        for run in two["runs"]:
            del run["sec_per_batch"]
    elif edit == "per-batch-bool":
        one["runs"][0]["sec_per_batch"] = True
    elif edit == "eight-processes":
        two["world_size"] = 8
        for run in two["runs"]:
            run["world_size"] = 8
    elif edit == "other-machine":
        record.update(machine="NVIDIA H100", cores=4096)
    elif edit == "copied-run":
        two["runs"][2] = dict(two["runs"][0])
        recomputed(two)
    elif edit == "copied-across":
        one["runs"][0].update(examples_per_sec=two["runs"][0]["examples_per_sec"],
                              sec_per_batch=128 / two["runs"][0]["examples_per_sec"])
        recomputed(one)
    elif edit == "third-setup":
        record["setups"]["4 x 32"] = json.loads(json.dumps(two))
    elif edit == "absurd-steps":
        record["steps"] = 10 ** 30
    elif edit == "cpu-bound":
        for run in one["runs"] + two["runs"]:
            run["examples_per_sec"] *= 5e5
            run["sec_per_batch"] /= 5e5
        recomputed(one, two)
    elif edit == "absurd-speeds":
        for run in two["runs"]:
            run["examples_per_sec"] *= 1e290
    elif edit in ("newline-machine", "pipe-machine", "nel-machine", "empty-machine"):
        was = record["machine"]
        machine = {"newline-machine": was + "\n| injected | 99,999 | row |",
                   "pipe-machine": "AMD | EPYC", "nel-machine": "AMD\x85EPYC",
                   "empty-machine": ""}[edit]
        record["machine"] = machine
        for setup in (one, two):
            setup["device"] = setup["device"].replace(was, machine)
            for run in setup["runs"]:
                run["device"] = setup["device"]
    else:
        one["sec_per_batch_median"] = 9.0
    path = tmp_path / "timing.json"
    path.write_text(json.dumps(record))
    with pytest.raises(PipelineError, match=rf"timing.json: expected a devices timing record, "
                                            rf"found {re.escape(said)}"):
        read_timing(path)


@pytest.mark.parametrize("out", ["reports/plots", "reports/tables", "reports/plots/x"])
def test_a_report_inside_the_report_stages_own_folders_is_refused(tmp_path, monkeypatch, out):
    """--out reports/plots (the report stage's own output): the guard lets the stage write
    its outputs, but a report there is none of them; refused before anything is written."""
    from cifar10_tutorial.errors import PipelineError

    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    (project / ".dvc").mkdir()
    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    monkeypatch.chdir(project)
    before = sorted(p.name for p in (project / "reports").rglob("*"))
    with pytest.raises(PipelineError, match=r"the report stage's own (plots|tables)/"):
        make_report(tmp_path / "a", Path(out), OVERRIDES)
    assert sorted(p.name for p in (project / "reports").rglob("*")) == before


@pytest.mark.parametrize("out", [".", "src/.."])
def test_a_report_into_the_checkouts_root_is_refused(tmp_path, monkeypatch, out):
    """--out . in a checkout: report.md, tables/ and plots/ would sit among the project's
    files (and the report's lock beside the checkout, outside it); refused before anything
    is written. A folder of its own inside it is not."""
    from cifar10_tutorial.errors import PipelineError

    from conftest import copy_project

    project = copy_project(tmp_path / "p")
    (project / ".dvc").mkdir()
    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    monkeypatch.chdir(project)
    before = sorted(p.name for p in project.iterdir())
    with pytest.raises(PipelineError, match=r"^--out .*: the root of the checkout itself"):
        make_report(tmp_path / "a", Path(out), OVERRIDES)
    assert sorted(p.name for p in project.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "p"]
    make_report(tmp_path / "a", Path("mine"), OVERRIDES)


@pytest.mark.parametrize("bad", ["tf-reference", "devices-timing"])
def test_a_record_refused_leaves_no_out_folder_behind(tmp_path, bad):
    """A mistyped --tf-reference or a damaged --devices-timing is refused before --out,
    its folders above or its run lock are made: "Nothing was written" holds."""
    from cifar10_tutorial.errors import PipelineError

    exercises(tmp_path / "a", 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    (tmp_path / "timing.json").write_text("{}")
    given = ({"tf_reference": tmp_path / "nxdir"} if bad == "tf-reference"
             else {"devices_timing": tmp_path / "timing.json"})
    with pytest.raises(PipelineError, match=r"nxdir: not found|timing.json: expected a devices"):
        make_report(tmp_path / "a", tmp_path / "new" / "out", OVERRIDES, **given)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("edit, said", [
    # another variant's evaluation copied in: its record names another model (params)
    ("other-model", r"softmax/eval/provenance.json: params_hash is '0000000000000000', where "
                    r".*softmax/train/provenance.json records '[0-9a-f]{16}': the model \(its "
                    r"params\) evaluated is not the run's"),
    ("record-deleted", r"softmax/eval/provenance.json: missing, where the evaluation's record "
                       r"of the model"),
    ("record-garbage", r"softmax/eval/provenance.json: expected the evaluation's record \(a "
                       r"JSON object\), found no JSON"),
    ("record-without-step", r"softmax/eval/provenance.json: expected the evaluation's record "
                            r"with steps, data_hash, params_hash, found no steps"),
    # every part of the evaluation removed and one figure edited: nothing left to check
    ("eval-deleted", r"softmax/eval/metrics.json: missing beside .*softmax/metrics.json, whose "
                     r"eval figures the variant's run writes there too"),
    ("train-metrics-deleted", r"softmax/train/metrics.json: missing beside"),
    # damaged, not a second run's: said so, the path said once
    ("eval-metrics-folder", r"softmax/eval/metrics.json: expected the variant's run's eval "
                            r"figures \(a JSON object\), found a folder; rerun it"),
    ("eval-metrics-list", r"softmax/eval/metrics.json: expected the variant's run's eval "
                          r"figures \(a JSON object\), found a list; rerun it"),
    # the run's length in epochs edited alike in both metrics files (its record says 32)
    ("epochs-edited", r"softmax/(metrics.json: train.epochs is 33.0, where .*softmax/train/"
                      r"provenance.json records 32.0 epochs|variant.json: num_train is 40,000 "
                      r"and global_batch_size 128, where .* gives 10,000 steps as 33.0 epochs)"),
    # the training set's size edited in variant.json alone
    ("num-train-edited", r"softmax/variant.json: num_train is 50,000 and global_batch_size "
                         r"128, where .*softmax/metrics.json gives 10,000 steps as 32.0 epochs "
                         r"\(40,000 training images\)"),
    # a speed edited alike in both metrics files and its speed curve: beyond its steps over
    # its time to the first batch (1 s here: at most 10,000 x 128 a second); a device's
    # share edited alone
    ("speed-edited", r"softmax/metrics.json: train.examples_per_sec is 5e\+06, beyond what "
                     r"the run's 10,000 steps of 128 images allow in the 1 s it took to its "
                     r"first batch \(at most 1.28e\+06 a second\): not a speed this run "
                     r"measured; rerun it"),
    # a speed below the first-batch bound, beyond the run's own speed curve (400/s, its
    # fastest interval 480/s; 500,000 as a hostile pass wrote it)
    ("speed-beyond-curve", r"softmax/metrics.json: train.examples_per_sec is 500,000, where "
                           r".*softmax/train/plots/metrics/train/examples_per_sec.tsv, the "
                           r"speeds the same run logged, allows at most 611.25 \(its fastest "
                           r"logged interval ran 480 a second\): not a speed this run "
                           r"measured; rerun it"),
    ("speed-curve-deleted", r"softmax/train/plots/metrics/train/examples_per_sec.tsv: missing "
                            r"beside .*softmax/metrics.json"),
    ("speed-curve-empty", r"softmax/train/plots/metrics/train/examples_per_sec.tsv: holds no "
                          r"examples_per_sec \(only a header\), where the run logs one at "
                          r"each of its log steps"),
    ("per-device-edited", r"softmax/metrics.json: train.examples_per_sec_per_device is 800, "
                          r"where examples_per_sec 400 over the 1 device\(s\) .*softmax/"
                          r"variant.json records is 400: one run writes both"),
    ("speed-infinite", r"softmax/metrics.json: train.examples_per_sec is inf, expected what "
                       r"a run measures and writes: a finite number from 0 up; rerun it"),
    ("first-batch-negative", r"softmax/metrics.json: train.time_to_first_batch_s is -1.0, "
                             r"expected what a run measures"),
    # a precision that is no count of right images over the test images
    ("count-not-whole", r"softmax/metrics.json: eval.num_examples is 10000.0, expected the "
                        r"count of test images the run evaluated \(a whole number from 1\)"),
    ("flip-not-whole", r"softmax/metrics.json: eval.precision_at_1_flip is 0.951234, "
                       r"9,512.34 of its 10,000 test images, where a precision counts whole "
                       r"images right"),
    # removed from both files: the queue exercise's verdict would read a NaN
    ("first-batch-missing", r"softmax/metrics.json: train.time_to_first_batch_s is missing, "
                            r"expected what a run measures and writes"),
    # a speed within the curve's room, but not the run's steps over its training time
    # (10,000 x 128 in 3,200 s: 400 a second), as a hostile pass wrote 1,000 for 529
    ("speed-not-its-time", r"softmax/metrics.json: train.examples_per_sec is 500, where the "
                           r"run's 10,000 steps of 128 images in its 3,200 s of training "
                           r"\(its train_seconds\) give 400 a second, as the run computes it"),
    # the evaluations' time inflated, which the curve's room would count
    ("eval-seconds-inflated", r"softmax/metrics.json: train.train_seconds 3200.0 and "
                              r"held_out_eval_seconds 10000000.0 do not add up to its "
                              r"wall_time_s 3,260"),
    ("speed-zero", r"softmax/metrics.json: train.examples_per_sec is 0, where its "
                   r"time_to_first_batch_s 1 says its last session trained"),
    # what variant.json copies from the run's record, edited in one of them
    ("world-size-edited", r"softmax/variant.json: world_size is 1, where .*softmax/train/"
                          r"provenance.json records 2: the stage writes one from the other"),
    ("wall-time-edited", r"softmax/metrics.json: train.wall_time_s is 3,260, where .*softmax/"
                         r"train/provenance.json records 9999"),
    # a resumed run: its last session trained 5,000 steps in 1,000 s (its set-up, its
    # evaluations and its final save included): at least 640 a second, less 1%, not 400
    ("resumed-speed", r"softmax/metrics.json: train.examples_per_sec is 400, where the last "
                      r"session .*provenance.json records \(5,000 steps of 128 images in "
                      r"1,000 s, its set-up, evaluations and final save included\) gives at "
                      r"least 633.6 a second"),
    # the held-out curve: a point past the run's last step, or its rows out of order
    ("held-out-past-its-end", r"softmax/train/plots/metrics/held_out/precision_at_1.tsv: a "
                              r"point at step 20000 \(row \d+\), past the run's last step "
                              r"10,000 \(its train.step\)"),
    ("held-out-reversed", r"softmax/train/plots/metrics/held_out/precision_at_1.tsv: "
                          r"expected the run's held-out precision_at_1 at rising steps, as the "
                          r"run evaluates, found step 5000 after 10000 in row 3"),
    # the keys a check reads, deleted: a run with held-out evaluations writes its training
    # time apart from theirs, and every run records its wall time
    ("train-seconds-deleted", r"softmax/metrics.json: train.held_out without "
                              r"train.train_seconds and held_out_eval_seconds"),
    ("record-wall-time-deleted", r"softmax/train/provenance.json: no wall_time_s, which every "
                                 r"training run records"),
    # a loss below 0, edited alike in every record and the curve
    ("negative-loss", r"softmax/metrics.json: train.loss_avg is -0.5, expected a loss: a "
                      r"number from 0 to 3.403e\+38"),
])
def test_a_results_folder_whose_records_name_no_one_run_is_refused(tmp_path, edit, said):
    """The report states a variant's figures only where its folder holds one run's whole
    set: its eval/ and train/ metrics beside metrics.json, and the evaluation's record
    naming the model the run trained (step, data, params). One missing, damaged, naming
    another model, or a loss no run computes: one line naming it, nothing written."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    make_report(root, tmp_path / "out", OVERRIDES)  # one run's each: reported
    folder = root / "softmax"
    record = folder / "eval/provenance.json"
    if edit == "other-model":
        record.write_text(json.dumps({**json.loads(record.read_text()), "params_hash": "0" * 16,
                                      "model": "data/ablations/baseline/model.pt"}))
    elif edit == "record-deleted":
        record.unlink()
    elif edit == "record-garbage":
        record.write_text("{garbage")
    elif edit == "record-without-step":
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items()
                                      if k != "steps"}))
    elif edit == "eval-deleted":
        shutil.rmtree(folder / "eval")
        m = json.loads((folder / "metrics.json").read_text())
        m["eval"]["precision_at_1"] = 0.99
        del m["train"]["held_out"], m["train"]["held_out_eval_seconds"]
        (folder / "metrics.json").write_text(json.dumps(m))
    elif edit == "train-metrics-deleted":
        (folder / "train/metrics.json").unlink()
    elif edit == "eval-metrics-folder":
        (folder / "eval/metrics.json").unlink()
        (folder / "eval/metrics.json").mkdir()
    elif edit == "eval-metrics-list":
        (folder / "eval/metrics.json").write_text("[]")
    elif edit == "epochs-edited":
        m = json.loads((folder / "metrics.json").read_text())
        m["train"]["epochs"] = 33.0
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    elif edit == "num-train-edited":
        v = json.loads((folder / "variant.json").read_text())
        (folder / "variant.json").write_text(json.dumps({**v, "num_train": 50_000}))
    elif edit == "count-not-whole":
        m = json.loads((folder / "metrics.json").read_text())
        m["eval"]["num_examples"] = 10000.0
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
    elif edit == "flip-not-whole":
        m = json.loads((folder / "metrics.json").read_text())
        m["eval"]["precision_at_1_flip"] = 0.951234
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "eval/metrics.json").write_text(json.dumps(m["eval"]))
    elif edit == "first-batch-missing":
        m = json.loads((folder / "metrics.json").read_text())
        del m["train"]["time_to_first_batch_s"]
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    elif edit == "speed-curve-deleted":
        (folder / "train/plots/metrics/train/examples_per_sec.tsv").unlink()
    elif edit == "speed-curve-empty":
        (folder / "train/plots/metrics/train/examples_per_sec.tsv").write_text(
            "step\texamples_per_sec\n")
    elif edit in ("speed-not-its-time", "eval-seconds-inflated", "speed-zero"):
        m = json.loads((folder / "metrics.json").read_text())
        m["train"].update({
            "speed-not-its-time": {"examples_per_sec": 500.0,
                                   "examples_per_sec_per_device": 500.0},
            "eval-seconds-inflated": {"held_out_eval_seconds": 1e7},
            "speed-zero": {"examples_per_sec": 0.0, "examples_per_sec_per_device": 0.0}}[edit])
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    elif edit in ("held-out-past-its-end", "held-out-reversed"):
        p = json.loads((folder / "metrics.json").read_text())["eval"]
        steps = ([5000, 10_000, 20_000] if edit == "held-out-past-its-end" else [10_000, 5000])
        for key, at in (("precision_at_1", {5000: p["precision_at_1"] / 2,
                                            10_000: p["precision_at_1"], 20_000: 0.95}),
                        ("precision_at_1_raw", {5000: p["precision_at_1_raw"] / 2,
                                                10_000: p["precision_at_1_raw"], 20_000: 0.9}),
                        ("epoch", {5000: 16.0, 10_000: 32.0, 20_000: 64.0})):
            _tsv(folder / f"train/plots/metrics/held_out/{key}.tsv", key,
                 [(s, at[s]) for s in steps])  # one evaluation logs all three
    elif edit == "train-seconds-deleted":
        m = json.loads((folder / "metrics.json").read_text())
        del m["train"]["train_seconds"], m["train"]["held_out_eval_seconds"]
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    elif edit == "record-wall-time-deleted":
        record = folder / "train/provenance.json"
        made = json.loads(record.read_text())
        del made["wall_time_s"]
        record.write_text(json.dumps(made))
    elif edit in ("world-size-edited", "wall-time-edited", "resumed-speed"):
        record = folder / "train/provenance.json"
        made = json.loads(record.read_text())
        made.update({"world-size-edited": {"world_size": 2},
                     "wall-time-edited": {"wall_time_s": 9999},
                     "resumed-speed": {"segments": [
                         {"from_step": 0, "to_step": 5000, "wall_time_s": 2260.0},
                         {"from_step": 5000, "to_step": 10_000, "wall_time_s": 1000.0}]}}[edit])
        record.write_text(json.dumps(made))
    elif edit in ("speed-edited", "per-device-edited", "speed-infinite",
                  "first-batch-negative", "speed-beyond-curve"):
        m = json.loads((folder / "metrics.json").read_text())
        m["train"].update({
            "speed-edited": {"examples_per_sec": 5e6, "examples_per_sec_per_device": 5e6},
            "speed-beyond-curve": {"examples_per_sec": 5e5, "examples_per_sec_per_device": 5e5},
            "per-device-edited": {"examples_per_sec_per_device": 800.0},
            "speed-infinite": {"examples_per_sec": float("inf"),
                               "examples_per_sec_per_device": float("inf")},
            "first-batch-negative": {"examples_per_sec": 5e6, "examples_per_sec_per_device": 5e6,
                                     "time_to_first_batch_s": -1.0}}[edit])
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
        if edit == "speed-edited":
            _tsv(folder / "train/plots/metrics/train/examples_per_sec.tsv", "examples_per_sec",
                 [(5000, 6e6), (10_000, 5e6)])
    else:
        m = json.loads((folder / "metrics.json").read_text())
        m["train"]["loss_avg"] = -0.5
        (folder / "metrics.json").write_text(json.dumps(m))
        (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
        _tsv(folder / "train/plots/metrics/train/loss_avg.tsv", "loss_avg",
             [(5000, 1.0), (10_000, -0.5)])
    before = _snapshot(tmp_path / "out")
    with pytest.raises(PipelineError, match=said):
        make_report(root, tmp_path / "out", OVERRIDES)
    assert _snapshot(tmp_path / "out") == before


def test_a_record_with_a_key_twice_or_a_count_of_another_kind_is_one_line(tmp_path):
    """A key written twice in the devices timing or in a variant's metrics.json (a reader
    of the file sees the first value, the report would state the last), and a count of
    cores that is no whole number: one line naming the file and what it holds."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.multi_device import read_timing

    from conftest import ROOT

    text = (ROOT / "reports/devices_timing.json").read_text()
    record = json.loads(text)
    path = tmp_path / "timing.json"
    path.write_text(json.dumps(record).replace('"cores": ', '"cores": 64, "cores": ', 1))
    with pytest.raises(PipelineError, match=r"timing.json: expected a devices timing record "
                                            r".*found ValueError: the key 'cores' twice"):
        read_timing(path)
    path.write_text(json.dumps({**record, "cores": 2.5}))
    with pytest.raises(PipelineError, match=r"found cores 2.5, where it holds a whole number"):
        read_timing(path)
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    metrics = root / "softmax" / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"precision_at_1": ',
                                                   '"precision_at_1": 0.99, "precision_at_1": ',
                                                   1))
    with pytest.raises(PipelineError, match=r"softmax/metrics.json: cannot be read as JSON "
                                            r"\(ValueError: the key 'precision_at_1' twice\)"):
        make_report(root, tmp_path / "out", OVERRIDES)


@pytest.mark.parametrize("name", ["baseline_seed1", "x\ny"])
def test_a_variant_folder_that_is_a_link_or_of_an_odd_name_is_one_line(tmp_path, name):
    """A variant's folder that is a link to another's (its results would be reported as
    this variant's), or a copy under a name holding a newline: refused in one line naming
    the folder (quoted where a newline would split the line)."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    if name == "baseline_seed1":
        shutil.rmtree(root / name)
        (root / name).symlink_to("baseline")
        said = r"a/baseline_seed1: a link \(to baseline\), where the variant's stage writes a " \
               r"folder of its own"
    else:
        shutil.copytree(root / "softmax", root / name)
        said = r"^'.*a/x\\ny': its variant.json names softmax, whose folder is "
    with pytest.raises(PipelineError, match=said) as err:
        make_report(root, tmp_path / "out", OVERRIDES)
    assert "\n" not in str(err.value)


def _schedule_fast_at_0_7(tmp_path):
    """The exercises with a schedule_fast run whose held-out curve (0.86 x step / 7,813 at
    every 782 steps) first reaches 0.7 at step 7,038 (0.775), and its metrics timing that
    target there, after 1,800 s: (root, overrides, its folder, its metrics, unwritten)."""
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    overrides = {**OVERRIDES, "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    folder = root / "schedule_fast"
    m = json.loads((folder / "metrics.json").read_text())
    m["train"]["time_to_target"] = {"0.7": {"step": 7038, "epoch": 7038 * 128 / 40000,
                                            "train_seconds": 1800.0}}
    return root, overrides, folder, m


@pytest.mark.parametrize("target, at, said", [
    (None, None, None),  # as the run records it: the curve's first point at or above
    ("0.7", 782, r"train.time_to_target has 0.7 reached at step 782, where the run's "
                 r"held-out curve first reaches it at step 7,038"),
    ("0.9", 7038, r"train.time_to_target has 0.9 reached at step 7038, where the run's "
                  r"held-out curve never reaches it"),
    ("epoch", None, r"train.time_to_target has 0.7 reached at epoch 10.0, where the run's "
                    r"held-out epoch.tsv gives 22.5216 at its step 7,038"),
    ("seconds", None, r"train.time_to_target has 0.7 reached after 99999.0 s of training, "
                      r"where the run trained 2500.\d+ s in all \(its train.train_seconds\)"),
    ("no-seconds", None, r"train.time_to_target.0.7 is \{\"step\": 7038, \"epoch\": "
                         r"22.5216\}, expected the step, epoch and train_seconds"),
    ("no-epoch", None, r"train.time_to_target.0.7 is \{\"step\": 7038, \"train_seconds\": "
                       r"1800.0\}, expected the step, epoch and train_seconds"),
    # one training clock: two targets of one evaluation, one time; a later one, later
    ("0.71", 7038, r"train.time_to_target has 0.71 reached at step 7,038 after 100 s and "
                   r"0.7 at step 7,038 after 1800 s: one run's training clock gives one time "
                   r"at one step"),
    ("0.6", 5474, r"train.time_to_target has 0.6 reached at step 5,474 after 1900 s and 0.7 "
                  r"at step 7,038 after 1800 s: one run's training clock gives a later step a "
                  r"later time"),
    ("0.5", 4692, r"train.time_to_target has 0.5 reached at step 4,692 after 1800 s and 0.7 "
                  r"at step 7,038 after 1800 s: one run's training clock gives a later step a "
                  r"later time"),  # the same time at a later step: its steps took none
    ("step-float", None, r"train.time_to_target.0.7 is \{\"step\": 7038.0, .*expected a "
                         r"precision reached at a step"),
    # a lone time moved early: the speed curve logs 1,042 s of steps before step 7,038
    ("early", None, r"train.time_to_target has 0.7 reached at step 7,038 after 100 s of "
                    r"training, where the run's speed curve .* logs 1,042 s of steps up to it, "
                    r"of which its held-out evaluations took at most 60 s"),
])
def test_a_time_to_target_the_held_out_curve_contradicts_is_refused(tmp_path, target, at,
                                                                    said):
    """train.time_to_target times the held-out evaluations the curve records: a target's
    step moved, or a target added that the curve never reaches (the row would say the run
    reached a precision above its own final one), is one line naming both."""
    from cifar10_tutorial.errors import PipelineError

    root, overrides, folder, m = _schedule_fast_at_0_7(tmp_path)
    if target == "epoch":  # the step as the curve's, its epoch moved
        m["train"]["time_to_target"]["0.7"]["epoch"] = 10.0
    elif target == "seconds":  # longer than the run trained
        m["train"]["time_to_target"]["0.7"]["train_seconds"] = 99999.0
    elif target == "early":
        m["train"]["time_to_target"]["0.7"]["train_seconds"] = 100.0
    elif target == "step-float":  # the run counts whole steps
        m["train"]["time_to_target"]["0.7"]["step"] = 7038.0
    elif target in ("no-seconds", "no-epoch"):  # a key the report states, deleted
        del m["train"]["time_to_target"]["0.7"][target[3:].replace("seconds", "train_seconds")]
    elif target is not None:
        m["train"]["time_to_target"][target] = {
            "step": at, "epoch": at * 128 / 40000,
            "train_seconds": {5474: 1900.0, 4692: 1800.0}.get(at, 100.0)}
    (folder / "metrics.json").write_text(json.dumps(m))
    (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    if said is None:
        make_report(root, tmp_path / "out", overrides)
        return
    with pytest.raises(PipelineError, match=r"schedule_fast/metrics.json: " + said):
        make_report(root, tmp_path / "out", overrides)


@pytest.mark.parametrize("key, edit, said", [
    ("epoch", lambda lines: lines[:3] + lines[4:], r"step 2346 is in one of them only"),
    ("precision_at_1_raw", lambda lines: lines[:3] + [lines[3].replace("2346", "2347", 1)]
     + lines[4:], r"step 2346 is in one of them only"),
])
def test_held_out_files_of_other_steps_are_refused(tmp_path, key, edit, said):
    """One held-out evaluation writes a point to each of precision_at_1.tsv,
    precision_at_1_raw.tsv and epoch.tsv: a point dropped from one file, or moved to
    another step, is one line naming the file and the step."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    overrides = {**OVERRIDES, "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    path = root / "schedule_fast/train/plots/metrics/held_out" / f"{key}.tsv"
    lines = path.read_text().splitlines()
    assert lines[3].startswith("2346\t"), lines[:4]
    path.write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(PipelineError, match=rf"held_out/{key}.tsv: expected its points at the "
                                            rf"steps of .*precision_at_1.tsv \(one held-out "
                                            rf"evaluation writes a point to each\), found other "
                                            rf"steps \({said}\)"):
        make_report(root, tmp_path / "out", overrides)


@pytest.mark.parametrize("damage, said", [
    (("precision_at_1", lambda lines: lines[:-1] + [lines[-1].split("\t")[0] + "\tnan"]),
     r"held_out/precision_at_1.tsv: expected the run's held-out precision_at_1 at each step "
     r"it evaluated \(precision_at_1: a fraction from 0 to 1\), found nan in row 10"),
    (("precision_at_1_raw", lambda lines: [lines[0], "782\t1.5"] + lines[2:]),
     r"held_out/precision_at_1_raw.tsv: .* found 1.5 in row 2"),
    (("precision_at_1", lambda lines: ["step\tsomething_else"] + lines[1:]),
     r"held_out/precision_at_1.tsv: expected the header step<TAB>precision_at_1 \(as the "
     r"run writes it\), found step<TAB>something_else"),
    # a line without its tab, an epoch that is no number, bytes that are not text
    (("precision_at_1", lambda lines: lines[:3] + ["1564 0.1"] + lines[4:]),
     r"held_out/precision_at_1.tsv: .* \(step: a whole step from 0\), found 1564 0.1 in "
     r"row 4"),
    (("epoch", lambda lines: lines[:2] + ["1564\tsome"] + lines[3:]),
     r"held_out/epoch.tsv: .* \(epoch: the epochs trained, from 0\), found some in row 3"),
    (("epoch", None), r"held_out/epoch.tsv: expected the run's held-out epoch \(step<TAB>epoch "
                      r"per line, as the run writes them\), found bytes that are not UTF-8"),
], ids=["last-point-nan", "raw-above-one", "other-header", "no-tab", "epoch-not-number",
        "not-text"])
def test_a_damaged_held_out_curve_is_refused_not_skipped(tmp_path, damage, said):
    """The held-out curve is checked against the evaluation and the times to targets: a
    point that is no precision (nan, 1.5), or a curve that cannot be read, is one line
    naming its file, not a point skipped as if it were absent (the report would then
    compare nothing and state the edited figures)."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    overrides = {**OVERRIDES, "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    make_report(root, tmp_path / "out", overrides)  # undamaged: read
    metric, edit = damage
    path = root / "schedule_fast/train/plots/metrics/held_out" / f"{metric}.tsv"
    if edit is None:
        path.write_bytes(b"\xff\xfe")
    else:
        path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    with pytest.raises(PipelineError, match=said) as err:
        make_report(root, tmp_path / "out2", overrides)
    assert "\n" not in str(err.value)


def test_the_reports_out_as_the_variants_folder_is_refused(tmp_path):
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(PipelineError, match=r"^--out .*a: the folder of the variants' results "
                                            r"\(--ablations\)"):
        make_report(root, root, OVERRIDES)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.parametrize("inside", ["baseline", "baseline/eval", "softmax/train/plots"])
def test_the_reports_out_inside_a_variants_results_is_refused(tmp_path, inside):
    """A copy of the results outside DVC: --out in one variant's folder would add the
    report's files to that run's record; one line naming it, and nothing written."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(PipelineError, match=rf"^--out .*{inside}: inside .*a/{inside.split('/')[0]}"
                                            rf", one variant's results"):
        make_report(root, root / inside, OVERRIDES)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    make_report(root, tmp_path / "out", OVERRIDES)  # beside them: written


@pytest.mark.parametrize("edit, said", [
    (None, None),  # each variant's figures as its network gives them
    (("baseline", "num_params", 999), r"baseline/metrics.json: train.num_params is 999, "
                                      r"where baseline's network .* has 1,066,754"),
    (("local_head", "macs_per_image", 18_469_248),
     r"local_head/metrics.json: train.macs_per_image is 18469248, where local_head's network "
     r"\(reports/params.yaml's model section with its overrides, .*\"head\": \"local\".*, for "
     r"the 2 classes of eval/per_class.csv\) has 19,503,360"),
    # the model section's own setting reaches every variant: batch norm's 256 more
    (("model", "batch_norm", True), r"baseline/metrics.json: train.num_params is 1066754, "
                                    r"where baseline's network .* has 1,067,010"),
    # a row added to per_class.csv (a class of no test images): the figures are the
    # network's for the two classes the run trained on, so the rows are named
    (("per_class", "extra", None), r"baseline/eval/per_class.csv: lists 3 classes, where the "
                                   r"run's train.num_params 1,066,754 is its network's for 2 "
                                   r"classes: the rows are not its evaluation's"),
], ids=["as-run", "params-edited", "macs-edited", "other-model-section", "extra-class-row"])
def test_a_variants_size_its_network_does_not_give_is_refused(tmp_path, edit, said):
    """train.num_params and train.macs_per_image follow from the network alone (the model
    section, the variant's overrides, the classes it scored): a figure its network does
    not give is one line naming the file, not stated in the tables (these two-class runs:
    1,066,754 parameters and 18,469,248 multiply-adds an image with the tutorial's head,
    2,103,746 and 19,503,360 with the locally connected one)."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import ModelParams, to_dict

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    sizes = {"fc": (1_066_754, 18_469_248), "local": (2_103_746, 19_503_360)}
    model = to_dict(ModelParams())
    for name, overrides in OVERRIDES.items():  # the fixture's runs, sized as two-class ones
        params, macs = sizes[overrides.get("model", {}).get("head", "fc")]
        for path in (root / name / "metrics.json", root / name / "train" / "metrics.json"):
            m = json.loads(path.read_text())
            (m["train"] if "train" in m else m).update(num_params=params, macs_per_image=macs)
            path.write_text(json.dumps(m))
    if edit is not None and edit[0] == "model":
        model[edit[1]] = edit[2]
    elif edit is not None and edit[0] == "per_class":
        per_class = root / "baseline" / "eval" / "per_class.csv"
        per_class.write_text(per_class.read_text() + "extra,0,nan,nan\n")
    elif edit is not None:
        name, key, value = edit
        for path in (root / name / "metrics.json", root / name / "train" / "metrics.json"):
            m = json.loads(path.read_text())
            (m["train"] if "train" in m else m)[key] = value
            path.write_text(json.dumps(m))
    networks = {name: {**model, **o.get("model", {})} for name, o in OVERRIDES.items()}
    if said is None:
        make_report(root, tmp_path / "out", OVERRIDES, networks=networks)
        return
    with pytest.raises(PipelineError, match=said) as err:
        make_report(root, tmp_path / "out", OVERRIDES, networks=networks)
    assert "\n" not in str(err.value)


def test_a_resumed_runs_speed_is_its_last_sessions(tmp_path):
    """A resumed run's speed is its last session's (training/train.py): that session's
    steps over its training time, which its segment's wall time holds with the resume's
    set-up and final save; not all steps over all training time. 5,000 steps of 128 in a
    1,600-s segment are at least 400 a second, the fixture's speed; so are 2,000 steps in
    640 s (a first session slower); and a short last session whose set-up and save took
    most of its segment (8 steps in 6 s: at least 171 a second) is no bound from above
    (a resumed run of a few steps was refused so)."""
    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    record = root / "softmax/train/provenance.json"
    made = json.loads(record.read_text())
    for segments in ([{"from_step": 0, "to_step": 5000, "wall_time_s": 1660.0},
                      {"from_step": 5000, "to_step": 10_000, "wall_time_s": 1600.0}],
                     [{"from_step": 0, "to_step": 8000, "wall_time_s": 2620.0},
                      {"from_step": 8000, "to_step": 10_000, "wall_time_s": 640.0}],
                     [{"from_step": 0, "to_step": 9992, "wall_time_s": 3240.0},
                      {"from_step": 9992, "to_step": 10_000, "wall_time_s": 6.0}]):
        record.write_text(json.dumps({**made, "segments": segments}))
        make_report(root, tmp_path / "out", OVERRIDES)


def test_a_data_set_variant_trained_on_an_ablations_data_is_named_as_its_twin(tmp_path):
    """The loader compares each group within itself; the report knows the data each run
    trained on (train/provenance.json's data_hash). A data-set variant with the baseline's
    settings whose run recorded the baseline's data trained bit-identically to it: one
    line naming both. Another seed, or other data, is a result of its own."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import params_from_dict
    from cifar10_tutorial.report.results import refuse_twins_across_groups

    def run(name, data_hash):
        (tmp_path / name / "train").mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "train" / "provenance.json").write_text(json.dumps(
            {"device": "cpu", "data_hash": data_hash, "steps": 100}))

    raw = {"ablations": {"baseline": {}, "seed1": {"train": {"seed": 1}}},
           "dataset_ablations": {"same": {"data": {"dataset": "cifar10", "url": "/x.tar.gz",
                                                   "md5": None}}}}
    params = params_from_dict(raw)
    run("baseline", "a" * 32)
    run("seed1", "a" * 32)
    run("same", "b" * 32)
    refuse_twins_across_groups(tmp_path, params)  # other data: a data set of its own
    run("same", "a" * 32)
    with pytest.raises(PipelineError, match=(
            r"same/train/provenance.json: trained on the data of ablations.baseline "
            r"\(data_hash aaaaaaaaaaaa\): dataset_ablations.same trains and scores exactly as "
            r"ablations.baseline \(it differs only in data\..*: the same training data, by "
            r"the data hash their runs recorded\)")):
        refuse_twins_across_groups(tmp_path, params)
    raw["dataset_ablations"]["same"]["train"] = {"seed": 7}  # another seed: its own result
    refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    raw["dataset_ablations"]["same"]["train"] = {"seed": 1}  # seed1's twin
    with pytest.raises(PipelineError, match=r"exactly as ablations.seed1 "):
        refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    (tmp_path / "seed1" / "train" / "provenance.json").unlink()  # not run: nothing to compare
    refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    # as the stages compare on the data: flips written as CIFAR's default, a budget in
    # epochs that comes to the baseline's steps (its run recorded 3,200 training images)
    raw = {"ablation": {"max_steps": 50}, "train": {"batch_size": 128},
           "ablations": {"baseline": {}},
           "dataset_ablations": {"same": {"data": {"dataset": "cifar10", "url": "/x.tar.gz",
                                                   "md5": None}}}}
    (tmp_path / "same" / "variant.json").write_text(json.dumps({"num_train": 3200}))
    for setting in ({"input": {"flip": True}}, {"train": {"max_epochs": 2}}):
        raw["dataset_ablations"]["same"] = {**raw["dataset_ablations"]["same"], **setting}
        with pytest.raises(PipelineError, match=r"exactly as ablations.baseline "):
            refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    raw["dataset_ablations"]["same"]["input"] = {"flip": False}  # another computation
    refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    # two data-set variants of one setting, on archives at two paths of the same bytes
    raw = {"dataset_ablations": {
        "same": {"data": {"url": "/x.tar.gz", "md5": None}, "train": {"seed": 5}},
        "copy": {"data": {"url": "/y.tar.gz", "md5": None}, "train": {"seed": 5}}}}
    run("copy", "a" * 32)
    with pytest.raises(PipelineError, match=r"copy/train/provenance.json: trained on the data "
                                            r"of dataset_ablations.same .*dataset_ablations."
                                            r"copy trains and scores exactly as "
                                            r"dataset_ablations.same"):
        refuse_twins_across_groups(tmp_path, params_from_dict(raw))
    run("copy", "c" * 32)  # other bytes: a data set of its own
    refuse_twins_across_groups(tmp_path, params_from_dict(raw))


@pytest.mark.parametrize("damage", ["metrics-string", "variant-kind", "record-unreadable"])
def test_the_rerun_advice_names_the_variant_its_folder_records(tmp_path, damage):
    """A variant's results under a folder of another name (moved, copied): a damaged
    record's line advises rerunning the variant its variant.json names, not the folder
    (`ablation@renamed` names no stage)."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    folder = root / "renamed"
    (root / "softmax").rename(folder)
    if damage == "metrics-string":
        m = json.loads((folder / "metrics.json").read_text())
        m["train"]["loss"] = "low"
        (folder / "metrics.json").write_text(json.dumps(m))
    elif damage == "variant-kind":
        v = json.loads((folder / "variant.json").read_text())
        v["seed"] = "zero"
        (folder / "variant.json").write_text(json.dumps(v))
    else:
        (folder / "metrics.json").write_text("{")
    with pytest.raises(PipelineError, match=r"ablation@softmax`") as err:
        make_report(root, tmp_path / "out", OVERRIDES)
    assert "ablation@renamed" not in str(err.value)


def test_one_budget_at_several_global_batches_is_not_one_number_of_epochs():
    """Variants trained for one budget in steps at several global batches (a user's
    train.batch_size: 16 beside devices_2x64's 2 x 64) ran several numbers of epochs: the
    intro names each range, never the largest epochs with the largest batch as every
    variant's."""
    import pandas as pd

    from cifar10_tutorial.report.report import epochs_in_words

    one = pd.DataFrame({"epochs": [3.84, 3.84], "global_batch_size": [128, 128]})
    assert epochs_in_words(one) == "3.8 epochs, global batch 128"
    two = pd.DataFrame({"epochs": [0.48, 3.84, 0.48], "global_batch_size": [16, 128, 16]})
    assert epochs_in_words(two) == ("0.5 to 3.8 epochs: global batches of 16, 128, as the "
                                    "next table gives each")


def test_a_time_to_a_target_the_variant_does_not_list_is_refused(tmp_path):
    """train.time_to_target times the variant's own eval.targets: a precision it does not
    list (added by hand) would get a column of its own, "not reached" for every other
    variant; one line naming the file and the targets. Its own targets pass."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import params_from_dict
    from cifar10_tutorial.report.results import refuse_untimed_targets

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    params = params_from_dict({"ablations": {"baseline": {}, "softmax": {
        "model": {"output": "softmax"}}}})
    path = root / "softmax" / "metrics.json"
    m = json.loads(path.read_text())
    m["train"]["time_to_target"] = {"0.8": {"step": 10, "epoch": 0.1, "train_seconds": 1.0}}
    path.write_text(json.dumps(m))
    refuse_untimed_targets(root, params)
    m["train"]["time_to_target"]["0.3"] = {"step": 5, "epoch": 0.1, "train_seconds": 1.0}
    path.write_text(json.dumps(m))
    with pytest.raises(PipelineError, match=r"softmax/metrics.json: train.time_to_target times "
                                            r"0.3, which softmax's eval.targets \(0.8, 0.84, "
                                            r"0.85, 0.86 in reports/params.yaml\) does not list"):
        refuse_untimed_targets(root, params)


def test_a_target_the_held_out_curve_reaches_without_its_time_is_refused(tmp_path):
    """A target of the variant's eval.targets that its held-out curve reaches has its time
    (the run records the first evaluation at or above it): without it, the report would say
    "not reached" beside a curve that reaches it; one line naming the file and the target.
    A target the curve never reaches, and a run without any time, pass."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import params_from_dict
    from cifar10_tutorial.report.results import refuse_untimed_targets

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    path = root / "schedule_fast" / "metrics.json"
    m = json.loads(path.read_text())
    # the curve: 0.86 x step / 7,813 at every 782 steps; 0.7 first at step 7,038 (0.775)
    m["train"]["time_to_target"] = {"0.7": {"step": 7038, "epoch": 7038 * 128 / 40000,
                                            "train_seconds": 1800.0}}
    path.write_text(json.dumps(m))

    def targets(*listed):
        return params_from_dict({"ablations": {"baseline": {}, "schedule_fast": {
            "train": {"schedule": "fast", "max_epochs": 25},
            "eval": {"every_steps": 782, "targets": list(listed)}}}})

    refuse_untimed_targets(root, targets(0.7, 0.9))  # 0.9: never reached
    with pytest.raises(PipelineError, match=r"schedule_fast/metrics.json: train.time_to_target "
                                            r"has no time for 0.5, which schedule_fast's "
                                            r"eval.targets lists and its held-out curve "
                                            r"\(train/plots/metrics/held_out/\) reaches"):
        refuse_untimed_targets(root, targets(0.5, 0.7))
    del m["train"]["time_to_target"]  # as a run that reached none records it
    path.write_text(json.dumps(m))
    with pytest.raises(PipelineError, match=r"has no time for 0.7, which"):
        refuse_untimed_targets(root, targets(0.7, 0.9))
    refuse_untimed_targets(root, targets(0.9))
    for odd in (0, [], None):  # no mapping of targets: named as such, whatever it is
        m["train"]["time_to_target"] = odd
        path.write_text(json.dumps(m))
        with pytest.raises(PipelineError, match=r"train.time_to_target is .*, expected a mapping "
                                                r"of the targets reached"):
            refuse_untimed_targets(root, targets(0.9))


@pytest.mark.parametrize("damage", ["precision-gone", "epoch-a-folder", "raw-a-fifo"])
def test_a_held_out_curve_file_gone_or_not_a_file_is_refused(tmp_path, damage):
    """One held-out evaluation logs precision_at_1.tsv, precision_at_1_raw.tsv and
    epoch.tsv together: one of them deleted (the curve would vanish from the report
    without a word), or a folder or FIFO in its place (read as absent), is one line."""
    import os

    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    overrides = {**OVERRIDES, "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    where = root / "schedule_fast/train/plots/metrics/held_out"
    if damage == "precision-gone":
        (where / "precision_at_1.tsv").unlink()
        said = (r"held_out/precision_at_1.tsv: missing beside precision_at_1_raw.tsv, "
                r"epoch.tsv \(one held-out evaluation logs all three\)")
    elif damage == "epoch-a-folder":
        (where / "epoch.tsv").unlink()
        (where / "epoch.tsv").mkdir()
        said = r"held_out/epoch.tsv: not a regular file"
    else:
        (where / "precision_at_1_raw.tsv").unlink()
        os.mkfifo(where / "precision_at_1_raw.tsv")
        said = r"held_out/precision_at_1_raw.tsv: not a regular file"
    with pytest.raises(PipelineError, match=said):
        make_report(root, tmp_path / "out", overrides)


def test_two_classes_precisions_swapped_in_per_class_csv_are_refused(tmp_path):
    """per_class.csv's precisions are each class's right answers over its images, as
    predictions.csv gives them: two classes' swapped (the total as it was) is one line
    naming the class, not a table of per-class figures the evaluation never made."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.01, "no_lrn": 0.0})
    folder = root / "softmax" / "eval"
    lines = (folder / "predictions.csv").read_text().splitlines()
    # one cat answer wrong more, one dog answer right more: the total stays
    lines[lines.index("cat,cat")] = "cat,dog"
    lines[lines.index("dog,cat")] = "dog,dog"
    (folder / "predictions.csv").write_text("\n".join(lines) + "\n")
    rows = [r.split(",") for r in lines[1:]]
    right = {c: sum(a == c and p == c for a, p in rows) / 5000 for c in ("cat", "dog")}
    per_class = (folder / "per_class.csv").read_text().splitlines()
    raw = {r.split(",")[0]: r.split(",")[3] for r in per_class[1:]}
    header = per_class[0]
    (folder / "per_class.csv").write_text(
        f"{header}\ncat,5000,{right['cat']:.4f},{raw['cat']}\n"
        f"dog,5000,{right['dog']:.4f},{raw['dog']}\n")
    make_report(root, tmp_path / "out", OVERRIDES)  # as the evaluation made them
    (folder / "per_class.csv").write_text(  # swapped
        f"{header}\ncat,5000,{right['dog']:.4f},{raw['cat']}\n"
        f"dog,5000,{right['cat']:.4f},{raw['dog']}\n")
    with pytest.raises(PipelineError, match=r"softmax/eval/per_class.csv: 'cat' has "
                                            r"precision_at_1 0.\d+, where .*predictions.csv "
                                            r"gives 0.\d+ \([\d,]+ of its 5,000 images right\)"):
        make_report(root, tmp_path / "out2", OVERRIDES)


def test_data_set_variants_of_yours_are_said_with_their_settings(tmp_path):
    """Data-set variants not named as exercise 6's (`svhn`): exercise 6 says that none of
    its own ran and names them as yours (never "none is defined"), and each one's section
    under Your variants says what it changes."""
    import shutil

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    shutil.copytree(root / "baseline_seed1", root / "mine")
    v = json.loads((root / "mine" / "variant.json").read_text())
    v["variant"] = "mine"
    (root / "mine" / "variant.json").write_text(json.dumps(v))
    record = json.loads((root / "mine" / "eval" / "provenance.json").read_text())
    record["model"] = "data/ablations/mine/model.pt"
    (root / "mine" / "eval" / "provenance.json").write_text(json.dumps(record))
    text = make_report(root, tmp_path / "out", OVERRIDES,
                       dataset_variants={"mine": {"data": {"url": "/x.tar.gz", "md5": None},
                                                  "train": {"seed": 5}}}).read_text()
    six = section(text, "## Exercise 6")
    assert "none is defined" not in six and "`mine` is yours, under Your variants" in six, six
    # its run recorded the baseline's data: said, and what differs named alone
    data = json.loads((root / "baseline" / "train" / "provenance.json").read_text())["data_hash"]
    assert (f"It changes `train.seed: 5`, and nothing else: its data section (`data.url: "
            f"/x.tar.gz`, `data.md5: null`) names the baseline's own data: both runs recorded "
            f"the data hash {data[:12]}.") in text, text
    # on other data: its settings, as the params file writes them
    for run in ("train", "eval"):
        record = json.loads((root / "mine" / run / "provenance.json").read_text())
        record["data_hash"] = "f" * 32
        (root / "mine" / run / "provenance.json").write_text(json.dumps(record))
    text = make_report(root, tmp_path / "out2", OVERRIDES,
                       dataset_variants={"mine": {"data": {"url": "/x.tar.gz", "md5": None},
                                                  "train": {"seed": 5}}}).read_text()
    assert "It changes `data.url: /x.tar.gz`, `data.md5: null`, `train.seed: 5`." in text


def test_a_held_out_epoch_its_step_does_not_give_is_refused(tmp_path):
    """Each held-out point's epoch is its step at the run's global batch over its training
    images (variant.json): one edited (7.0 at a step that gives 0.48) is one line."""
    from cifar10_tutorial.errors import PipelineError

    root = tmp_path / "a"
    exercises(root, 10_000, {"local_head": 0.0, "no_lrn": 0.0})
    write_variant(root, "schedule_fast", 0.86, 7_813, schedule="fast", curve_every=782)
    overrides = {**OVERRIDES, "schedule_fast": {"train": {"schedule": "fast", "max_epochs": 25}}}
    make_report(root, tmp_path / "out", overrides)
    path = root / "schedule_fast/train/plots/metrics/held_out/epoch.tsv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].split("\t")[0] + "\t7.0"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PipelineError, match=r"held_out/epoch.tsv: epoch 7 at step 1,564, where "
                                            r".*variant.json's 40,000 training images at a "
                                            r"global batch of 128 give 5.0048: one run writes both"):
        make_report(root, tmp_path / "out2", overrides)


def test_a_variants_values_are_shown_as_the_params_file_writes_them():
    """"Your variants" shows each override as YAML (1.2, as DVC reads the file) writes it:
    a string quoted where it would read as another value (an md5 of digits, 'null', ''),
    infinity as .inf, a list in brackets; a plain string, a path, a number as they are."""
    from cifar10_tutorial.report.yours import _as_written

    shown = {"": '""', "null": '"null"', "1.5": '"1.5"', "0123": '"0123"', "a: b": '"a: b"',
             "/x.tar.gz": "/x.tar.gz", "svhn": "svhn", None: "null", True: "true",
             False: "false", 0.5: "0.5", 3: "3", float("inf"): ".inf", (0.8, 0.85): "[0.8, 0.85]"}
    assert {v: _as_written(v) for v in shown} == shown


@pytest.mark.parametrize("damage, said", [
    ("unsorted", r"train/plots/metrics/train/examples_per_sec.tsv: step 7813 before a step "
                 r"below it, where the run logs its examples/sec at rising whole steps"),
    ("a-speed-of-0", r"examples_per_sec.tsv: speed 0.0, where the run logs its examples/sec"),
    ("no-batch", r"schedule_fast/variant.json: global_batch_size is missing, where the run "
                 r"writes its global batch"),
    # (the report's reading of every curve names these first; _logged_windows too)
    ("a-folder", r"examples_per_sec.tsv: expected the training run's curve \(step, "
                 r"examples_per_sec\), found a folder"),
    ("header-only", r"examples_per_sec.tsv: holds no examples_per_sec \(only a header\)"),
])
def test_a_speed_curve_that_cannot_time_the_targets_is_named(tmp_path, damage, said):
    """The speed curve bounds each target's time from below (with variant.json's global
    batch): a curve out of step order, a speed that is no positive number, or no batch is
    one line naming the file, not a check silently skipped."""
    from cifar10_tutorial.errors import PipelineError

    root, overrides, folder, m = _schedule_fast_at_0_7(tmp_path)
    (folder / "metrics.json").write_text(json.dumps(m))
    (folder / "train/metrics.json").write_text(json.dumps(m["train"]))
    make_report(root, tmp_path / "out", overrides)  # as the run writes them
    curve = folder / "train/plots/metrics/train/examples_per_sec.tsv"
    if damage == "unsorted":
        _tsv(curve, "examples_per_sec", [(7_813, 360.0), (3_906, 480.0)])
    elif damage == "a-speed-of-0":
        _tsv(curve, "examples_per_sec", [(3_906, 0.0), (7_813, 360.0)])
    elif damage == "a-folder":
        curve.unlink()
        curve.mkdir()
    elif damage == "header-only":
        curve.write_text("step\texamples_per_sec\n")
    else:
        variant = json.loads((folder / "variant.json").read_text())
        del variant["global_batch_size"]
        (folder / "variant.json").write_text(json.dumps(variant))
    with pytest.raises(PipelineError, match=said):
        make_report(root, tmp_path / "out2", overrides)


@pytest.mark.parametrize("name", ["reports/params.yaml", "params.yaml", "reports/dvc.lock"])
def test_dvcs_status_is_not_asked_where_a_file_it_reads_is_a_fifo(tmp_path, name):
    """DVC reading a FIFO among the pipeline's files waits until the status timeout (ten
    minutes): the report, publish and the results page name it at once, in one line."""
    import os
    import time

    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.results import dvc_status

    (tmp_path / "reports").mkdir()
    os.mkfifo(tmp_path / name)
    start = time.monotonic()
    with pytest.raises(PipelineError, match=rf"{name}: not a regular file \(a folder, FIFO, "
                                            rf"device or broken link\), where DVC reads"):
        dvc_status(tmp_path, ["reports/dvc.yaml"], "dvc status reports/dvc.yaml", "x")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("damage, said", [
    ("a-folder", r"not a regular file \(a folder, FIFO, device or broken link\), where the "
                 r"run logs its speed curve"),
    ("header-only", r"a header and no speed"),
])
def test_the_targets_bound_names_a_curve_it_cannot_read(tmp_path, damage, said):
    """_logged_windows itself (not only the report's reading of every curve before it)
    names a speed curve that is no file, or holds no speed: never skipped as absent."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.results import _logged_windows

    write_variant(tmp_path, "v", 0.8, 1_000)
    curve = tmp_path / "v/train/plots/metrics/train/examples_per_sec.tsv"
    assert [s for s, _ in _logged_windows(tmp_path / "v", "rerun")] == [500, 1_000]
    if damage == "a-folder":
        curve.unlink()
        curve.mkdir()
    else:
        curve.write_text("step\texamples_per_sec\n")
    with pytest.raises(PipelineError, match=r"examples_per_sec.tsv: " + said):
        _logged_windows(tmp_path / "v", "rerun")


@pytest.mark.parametrize("name", ["on", "No", "yes"])
def test_a_variant_named_as_yaml_1_1_reads_a_boolean_is_defined(tmp_path, name):
    """DVC and the stages read reports/params.yaml as YAML 1.2: `on:`, `No:`, `yes:` are
    variant names (YAML 1.1 would read true or false). Its results are of a variant the
    file defines; taken out of the file, they are of none."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.report.results import _refuse_undefined

    params = tmp_path / "params.yaml"
    params.write_text(f"ablations:\n  baseline: {{}}\n  {name}: {{train: {{seed: 3}}}}\n")
    _refuse_undefined(params, name, tmp_path / "ablations")
    params.write_text("ablations:\n  baseline: {}\n")
    with pytest.raises(PipelineError, match=rf"{name} is no variant of .*params.yaml now"):
        _refuse_undefined(params, name, tmp_path / "ablations")


def test_dvc_status_ends_with_the_command_that_asked(tmp_path):
    """The report's `dvc status` (which waits up to its timeout on a mount that does not
    answer) ends with
    the command that started it, even one killed with -9: no DVC left holding the
    repository's lock after it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    fake = tmp_path / "dvc"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 300\n")
    fake.chmod(0o755)
    script = ("import cifar10_tutorial.cli as cli\n"
              f"cli.dvc_executable = lambda: {str(fake)!r}\n"
              "from cifar10_tutorial.report.results import dvc_status\n"
              f"dvc_status(__import__('pathlib').Path({str(tmp_path)!r}), [], 'dvc status', 'x')\n")
    proc = subprocess.Popen([sys.executable, "-c", script],
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        for _ in range(300):
            if (tmp_path / "pid").is_file() and (tmp_path / "pid").read_text().strip():
                break
            time.sleep(0.1)
        child = int((tmp_path / "pid").read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                break  # ended, not yet reaped
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("dvc status outlived the command that started it")
    finally:
        if proc.poll() is None:
            proc.kill()
