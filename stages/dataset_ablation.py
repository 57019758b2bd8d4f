"""DVC stage `dataset_ablation@NAME`: variant NAME of reports/params.yaml `dataset_ablations:`
(exercise 6: the network on another data set). It fetches its data set into --work/raw (a
partial download waiting in --partial), prepares it into --work/prepared, then trains and
evaluates as stages/ablation.py does: results into --out (reports/ablations/NAME), model and
checkpoints into --work. --stop-at and --mirror as there (docs/continuing.md).
reports/dvc.yaml gives every path, `{variant}` in each standing for NAME, the stage's own
name (dataset_ablation@NAME), as in stages/ablation.py. By hand, give NAME and the paths.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)

from cifar10_tutorial.cli import (EXERCISE_PARAMS, add_continuation, given_path, run_stage,
                                  stage_parser)
from cifar10_tutorial.exercises.ablation import run_variant_stage
from cifar10_tutorial.exercises.dataset import prepare_variant_data, variant_data_size


def main() -> None:
    ap = stage_parser(__doc__, EXERCISE_PARAMS)
    ap.add_argument("name", nargs="?", help="the variant, a key of `dataset_ablations:` "
                    "(default: NAME of the DVC stage dataset_ablation@NAME running this)")
    ap.add_argument("--work", type=given_path, required=True, help="its data, model, checkpoints")
    ap.add_argument("--trial-work", type=given_path, help="a trial's model and checkpoints "
                    "(ablation.trial_steps set), apart from a full run's in --work")
    ap.add_argument("--out", type=given_path, required=True, help="the variant's results")
    ap.add_argument("--partial", type=given_path, required=True, help="partial downloads")
    add_continuation(ap)
    args = ap.parse_args()
    run_variant_stage(args, __file__, lambda params: prepare_variant_data(
        params, args.name, args.work, args.partial, args.params), "dataset_ablations",
        lambda params: variant_data_size(params, args.name))


if __name__ == "__main__":
    run_stage(main)
