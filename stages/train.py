"""DVC stage `train`: train the tutorial's CNN on data/prepared/ (resumes from data/train/checkpoints/).

With train.num_devices > 1 it runs itself under torchrun, one process per device.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import sys

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import load_prepared
from cifar10_tutorial.train import relaunch_on_devices, train


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    params = load_params(args.params)
    relaunch_on_devices(params.train, __file__, sys.argv[1:])
    train(params, load_prepared("data/prepared"))


if __name__ == "__main__":
    run_stage(main)
