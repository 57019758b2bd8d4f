"""DVC stage `ablation@NAME`: train ablation variant NAME (reports/params.yaml `ablations:`) for
`ablation.max_steps` on the prepared data (--data), evaluate it with averaged and raw
weights; results into --out (reports/ablations/NAME), model and checkpoints into --work
(data/ablations/NAME, outside DVC).

Variants on another data set (reports/params.yaml `dataset_ablations:`) run through
stages/dataset_ablation.py, which fetches and prepares their data first.
A variant with train.num_devices > 1 runs itself under torchrun, one process per device.
--stop-at pauses it at a deadline (exit status 75; the same command continues), and
--mirror keeps its newest checkpoint where another machine can continue it (in
<mirror>/NAME); both also from the environment (docs/continuing.md).
reports/dvc.yaml gives every path, `{variant}` in each standing for NAME, which DVC
passes as the stage's own name (ablation@NAME), never on the command line: no shell
reads a variant's name. By hand, give NAME and the paths.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)

from cifar10_tutorial.cli import (EXERCISE_PARAMS, add_continuation, given_path, run_stage,
                                  stage_parser)
from cifar10_tutorial.data.prepared import load_prepared, prepared_size
from cifar10_tutorial.exercises.ablation import run_variant_stage


def main() -> None:
    ap = stage_parser(__doc__, EXERCISE_PARAMS)
    ap.add_argument("name", nargs="?", help="the variant, a key of `ablations:` (default: "
                    "NAME of the DVC stage ablation@NAME running this)")
    ap.add_argument("--data", type=given_path, required=True, help="the prepared data")
    ap.add_argument("--work", type=given_path, required=True, help="model, checkpoints (and data)")
    ap.add_argument("--trial-work", type=given_path, help="a trial's model and checkpoints "
                    "(ablation.trial_steps set), apart from a full run's in --work")
    ap.add_argument("--out", type=given_path, required=True, help="the variant's results")
    add_continuation(ap)
    args = ap.parse_args()
    run_variant_stage(args, __file__, lambda params: load_prepared(args.data), "ablations",
                      lambda params: prepared_size(args.data))


if __name__ == "__main__":
    run_stage(main)
