"""DVC stage `dataset_ablation@NAME`: variant NAME of params.yaml `dataset_ablations:`
(exercise 6: the network on another data set). It fetches its data set into --work/raw (a
partial download waiting in --partial), prepares it into --work/prepared, then trains and
evaluates as stages/ablation.py does: results into --out (reports/ablations/NAME), model and
checkpoints into --work. --stop-at and --mirror as there (docs/continuing.md).
reports/dvc.yaml gives every path; by hand, give them too.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import sys
from pathlib import Path

from cifar10_tutorial.exercises.ablation import VariantPaths, run_variant
from cifar10_tutorial.exercises.dataset import prepare_variant_data
from cifar10_tutorial.cli import add_continuation, run_stage, stage_parser
from cifar10_tutorial.training.continuation import from_stage
from cifar10_tutorial.files import hold_run_lock
from cifar10_tutorial.training.distributed import launched_by_torchrun, relaunch_on_devices
from cifar10_tutorial.params import load_params, variant_params


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("name", help="the variant, a key of `dataset_ablations:`")
    ap.add_argument("--work", type=Path, required=True, help="its data, model, checkpoints")
    ap.add_argument("--out", type=Path, required=True, help="the variant's results")
    ap.add_argument("--partial", type=Path, required=True, help="partial downloads")
    add_continuation(ap)
    args = ap.parse_args()
    params = load_params(args.params)
    cont = from_stage(args.stop_at, args.mirror, args.name)
    variant = variant_params(params, args.name)
    if not launched_by_torchrun():  # the launching process holds it for its ranks
        hold_run_lock(args.work, " ".join(["stages/dataset_ablation.py", *sys.argv[1:]]))
    relaunch_on_devices(variant.train, variant.run, __file__, sys.argv[1:])
    data = prepare_variant_data(params, args.name, args.work, args.partial)
    run_variant(params, args.name, data, VariantPaths(args.work, args.out), continuation=cont)


if __name__ == "__main__":
    run_stage(main)
