"""DVC stage `train`: train the tutorial's CNN on data/prepared/ (resumes from data/train/checkpoints/)."""
from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import load_prepared
from cifar10_tutorial.train import train


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    params = load_params(args.params)
    train(params, load_prepared("data/prepared"))


if __name__ == "__main__":
    run_stage(main)
