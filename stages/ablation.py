"""DVC stage `ablation@NAME`: train ablation variant NAME (params.yaml `ablations:`) for
`ablation.max_steps`, evaluate it with averaged and raw weights, into reports/ablations/NAME/.

With --dataset (stage `dataset_ablation@NAME`, params.yaml `dataset_ablations:`) the variant
first fetches and prepares its own data set under data/dataset_ablations/NAME/.
A variant with train.num_devices > 1 runs itself under torchrun, one process per device.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import sys

from cifar10_tutorial.ablation import dataset_variant_paths, prepare_variant_data, run_variant
from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params, variant_params
from cifar10_tutorial.prepare import load_prepared
from cifar10_tutorial.train import relaunch_on_devices


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("name", help="the variant, a key of `ablations:` (or `dataset_ablations:`)")
    ap.add_argument("--dataset", action="store_true", help="a variant of `dataset_ablations:`")
    args = ap.parse_args()
    params = load_params(args.params)
    relaunch_on_devices(variant_params(params, args.name).train, __file__, sys.argv[1:])
    if args.dataset:
        paths = dataset_variant_paths(args.name)
        run_variant(params, args.name, prepare_variant_data(params, args.name, paths), paths)
    else:
        run_variant(params, args.name, load_prepared("data/prepared"))


if __name__ == "__main__":
    run_stage(main)
