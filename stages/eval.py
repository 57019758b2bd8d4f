"""DVC stage `evaluate`: precision @ 1 of data/train/model.pt on the test split, with the
averaged and the raw weights, into reports/eval/.

With --watch (outside DVC): re-evaluate the newest checkpoint every eval.interval_secs while
training runs, logging to TensorBoard (data/train/tensorboard/eval), like cifar10_eval.py.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.evaluate import evaluate, watch
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import load_prepared
from cifar10_tutorial.train import TrainPaths


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--watch", action="store_true", help="keep evaluating new checkpoints")
    ap.add_argument("--max-evals", type=int, default=None, help="with --watch: stop after N")
    args = ap.parse_args()
    params = load_params(args.params)
    data = load_prepared("data/prepared")
    paths = TrainPaths()
    if args.watch:
        watch(data, paths.checkpoints, paths.tensorboard, params.eval.interval_secs,
              params.eval.batch_size, params.train.device, args.max_evals)
    else:
        evaluate(data, paths.model, Path("reports/eval"), params.eval.batch_size, params.train.device,
                 params.eval.flip_tta)


if __name__ == "__main__":
    run_stage(main)
