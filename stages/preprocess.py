"""DVC stage `preprocess`: binary records in data/raw/ -> cached uint8 tensors in data/prepared/."""
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.datasets import get_dataset
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import prepare

RAW_DIR = Path("data/raw")
OUT_DIR = Path("data/prepared")


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    data = load_params(args.params).data
    spec = get_dataset(data.dataset)
    prepare(RAW_DIR / spec.archive_name, OUT_DIR, spec)


if __name__ == "__main__":
    run_stage(main)
