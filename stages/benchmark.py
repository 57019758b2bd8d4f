"""Throughput benchmark (not a stage of the pipeline): the project's train step with its real
input pipeline, the same step on a fixed batch, a typical torchvision DataLoader + PIL pipeline,
and evaluation, one after another; prints a table and writes reports/benchmark.json.

    python stages/benchmark.py [--windows 5 --steps 20 --warmup 10]
"""
from pathlib import Path

from cifar10_tutorial.benchmark import format_table, run_benchmark
from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import load_prepared


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before each pipeline")
    ap.add_argument("--windows", type=int, default=5, help="timed windows (the median is reported)")
    ap.add_argument("--steps", type=int, default=20, help="steps per window")
    ap.add_argument("--data", type=Path, default=Path("data/prepared"))
    ap.add_argument("--out", type=Path, default=Path("reports/benchmark.json"))
    args = ap.parse_args()
    result = run_benchmark(load_params(args.params), load_prepared(args.data), args.warmup,
                           args.windows, args.steps, out=args.out)
    print(format_table(result))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_stage(main)
