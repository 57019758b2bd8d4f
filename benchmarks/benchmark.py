"""Throughput benchmark (not a stage of the pipeline): the project's train step with its real
input pipeline (as params.yaml sets it, and under bf16 autocast), the same step on a fixed
batch, a typical torchvision DataLoader + PIL pipeline, TensorFlow (Keras + tf.data, with
--tf-python), evaluation, and torch.compile against eager, one after another; prints a table,
writes reports/benchmark.json.

    python benchmarks/benchmark.py [--windows 7 --steps 40 --warmup 10] [--tf-python PYTHON]

TensorFlow is not a dependency of this project: give --tf-python a Python that has it, e.g.
    python3 -m venv ../tfvenv && ../tfvenv/bin/pip install tensorflow-cpu==2.21.0
    python benchmarks/benchmark.py --tf-python ../tfvenv/bin/python
"""
import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from speed.benchmark import format_table, run_benchmark
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.ownership import json_with, refuse_foreign_file
from cifar10_tutorial.cli import given_path, run_stage, stage_output, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.data.prepared import load_prepared


def main() -> None:
    ap = stage_parser(__doc__)
    ap.prog = "cifar10 benchmark"
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before each pipeline")
    ap.add_argument("--windows", type=int, default=7, help="timed windows (the median is reported)")
    ap.add_argument("--steps", type=int, default=40, help="steps per window")
    ap.add_argument("--data", type=Path, help="prepared data (default: the preprocess stage's "
                    "output in dvc.yaml)")
    ap.add_argument("--out", type=given_path, default=Path("reports/benchmark.json"))
    ap.add_argument("--tf-python", help="a Python with TensorFlow, for the TensorFlow baseline")
    ap.add_argument("--no-compiled", action="store_true",
                    help="skip torch.compile against eager (about 3 minutes on 2 CPU cores)")
    ap.add_argument("--train-stage-runs", type=int, default=5,
                    help="short runs of the train stage's own loop, each of --warmup + "
                         "run.summary_every steps (110 by default), timed against the fixed "
                         "batch beside it; 0 skips them")
    args = ap.parse_args()
    for option, least in (("warmup", 0), ("windows", 1), ("steps", 1), ("train_stage_runs", 0)):
        if getattr(args, option) < least:  # a median of nothing, a rate over no step
            raise PipelineError(f"--{option.replace('_', '-')}: expected a whole number >= "
                                f"{least}, found {getattr(args, option)}")
    # before minutes of timing: never over a file that is not a benchmark's record
    refuse_foreign_file(args.out, "--out", "a benchmark record (JSON)",
                        json_with("median_examples_per_sec", "steps_per_window"))
    data = args.data or stage_output("preprocess")
    result = run_benchmark(load_params(args.params), load_prepared(data), args.warmup,
                           args.windows, args.steps, out=args.out, tf_python=args.tf_python,
                           data_dir=data, compiled=not args.no_compiled,
                           train_stage=args.train_stage_runs)
    print(format_table(result))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_stage(main)
