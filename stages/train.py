"""DVC stage `train`: train the tutorial's CNN on data/prepared/ (resumes from data/train/checkpoints/).

With train.num_devices > 1 it runs itself under torchrun, one process per device.
"""
import os
import sys

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import load_prepared
from cifar10_tutorial.train import launched_by_torchrun, torchrun_command, train


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    params = load_params(args.params)
    tr = params.train
    if tr.num_devices > 1 and not launched_by_torchrun():
        cmd = torchrun_command(tr.num_devices, tr.max_restarts, __file__, sys.argv[1:])
        print("launching:", " ".join(cmd), file=sys.stderr, flush=True)
        os.execv(cmd[0], cmd)
    train(params, load_prepared("data/prepared"))


if __name__ == "__main__":
    run_stage(main)
