"""DVC stage `preprocess`: the raw files in data/raw/ -> cached uint8 tensors in data/prepared/."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.prepare import prepare_dataset

RAW_DIR = Path("data/raw")
OUT_DIR = Path("data/prepared")


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    prepare_dataset(RAW_DIR, OUT_DIR, load_params(args.params).data)


if __name__ == "__main__":
    run_stage(main)
