"""DVC stage `ablation@NAME`: train ablation variant NAME (params.yaml `ablations:`) for
`ablation.max_steps` on the prepared data (--data), evaluate it with averaged and raw
weights; results into --out (reports/ablations/NAME), model and checkpoints into --work
(data/ablations/NAME, outside DVC).

Variants on another data set (params.yaml `dataset_ablations:`) run through
stages/dataset_ablation.py, which fetches and prepares their data first.
A variant with train.num_devices > 1 runs itself under torchrun, one process per device.
--stop-at pauses it at a deadline (exit status 75; the same command continues), and
--mirror keeps its newest checkpoint where another machine can continue it (in
<mirror>/NAME); both also from the environment (docs/continuing.md).
reports/dvc.yaml gives every path; by hand, give them too.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import sys
from pathlib import Path

from cifar10_tutorial.exercises.ablation import VariantPaths, run_variant
from cifar10_tutorial.cli import add_continuation, run_stage, stage_parser
from cifar10_tutorial.training.continuation import from_stage
from cifar10_tutorial.files import hold_run_lock
from cifar10_tutorial.training.distributed import launched_by_torchrun, relaunch_on_devices
from cifar10_tutorial.params import load_params, variant_params
from cifar10_tutorial.data.prepared import load_prepared


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("name", help="the variant, a key of `ablations:`")
    ap.add_argument("--data", type=Path, required=True, help="the prepared data")
    ap.add_argument("--work", type=Path, required=True, help="model, checkpoints (and data)")
    ap.add_argument("--out", type=Path, required=True, help="the variant's results")
    add_continuation(ap)
    args = ap.parse_args()
    params = load_params(args.params)
    cont = from_stage(args.stop_at, args.mirror, args.name)
    variant = variant_params(params, args.name)
    if not launched_by_torchrun():  # the launching process holds it for its ranks
        hold_run_lock(args.work, " ".join(["stages/ablation.py", *sys.argv[1:]]))
    relaunch_on_devices(variant.train, variant.run, __file__, sys.argv[1:])
    data = load_prepared(args.data)
    run_variant(params, args.name, data, VariantPaths(args.work, args.out), continuation=cont)


if __name__ == "__main__":
    run_stage(main)
