"""DVC stage `preprocess`: the raw files (--raw, data/raw) -> cached uint8 tensors in --out
(data/prepared)."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)

from cifar10_tutorial.cli import add_paths, parse_stage_args, run_stage, stage_parser
from cifar10_tutorial.ownership import refuse_foreign_place
from cifar10_tutorial.params import MAIN, load_params
from cifar10_tutorial.data.preprocess import prepare_dataset


def main() -> None:
    ap = stage_parser(__doc__)
    add_paths(ap, raw="the downloaded files", out="the prepared tensors")
    args = parse_stage_args(ap, __file__)
    refuse_foreign_place(args.out, "--out", "as dvc.yaml gives it", ("preprocess",))
    prepare_dataset(args.raw, args.out, load_params(args.params, MAIN).data)


if __name__ == "__main__":
    run_stage(main)
