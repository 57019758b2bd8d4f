"""DVC stage `report`: the ablation variants' results (--ablations, reports/ablations) ->
--out (reports): report.md, tables/*.csv and plots/*.png; it links --search (the fast
schedule's search notes) and reads --equivalence (which commits train alike) and
--tf-reference (the tutorial's own code on the same data)."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import dataclasses
import sys
from pathlib import Path

from cifar10_tutorial.cli import EXERCISE_PARAMS, given_path, run_stage, stage_parser
from cifar10_tutorial.params import EXERCISES, load_params, to_dict
from cifar10_tutorial.report.report import make_report
from cifar10_tutorial.report.results import (refuse_not_a_file, refuse_stale_definitions,
                                             refuse_stale_results, refuse_twins_across_groups,
                                             refuse_untimed_targets)


def main() -> None:
    ap = stage_parser(__doc__, EXERCISE_PARAMS)
    ap.add_argument("--ablations", type=given_path, required=True, help="every variant's results")
    ap.add_argument("--search", type=given_path, required=True, help="the fast schedule's search notes")
    ap.add_argument("--equivalence", type=given_path, required=True,
                    help="the record of commits checked to train bit-identically")
    ap.add_argument("--devices-timing", type=given_path, default=None,
                    help="exercise 5's timing of both set-ups on one idle machine "
                         "(python benchmarks/devices_timing.py)")
    ap.add_argument("--tf-reference", type=given_path, default=None,
                    help="the reference implementation's runs on the same data (one JSON each)")
    ap.add_argument("--out", type=given_path, required=True, help="the report's folder")
    args = ap.parse_args()
    # a record named is read: one missing or not a file (a FIFO) would silently turn the
    # report's conclusions ("not checked to train alike", exercise 5 not comparable)
    for option, path in (("--search", args.search), ("--equivalence", args.equivalence),
                         ("--devices-timing", args.devices_timing)):
        refuse_not_a_file(path, option)
    # DVC says which results are stale; of a copy of them, nothing: said in the report
    unchecked = refuse_stale_results(args.ablations, params=args.params)
    if unchecked:
        print(f"note: {unchecked}", file=sys.stderr)
    params = load_params(args.params, EXERCISES)
    refuse_stale_definitions(args.ablations, {**params.ablations, **params.dataset_ablations})
    refuse_twins_across_groups(args.ablations, params)  # the groups' data, as run
    refuse_untimed_targets(args.ablations, params)  # each variant's own targets
    # each variant's network: the model section with its overrides (as the run builds it)
    base = to_dict(params.model)
    networks = {name: {**base, **((overrides or {}).get("model") or {})} for name, overrides
                in {**params.ablations, **params.dataset_ablations}.items()}
    # the baseline's values a variant's run reads (reports/dvc.yaml's ablation stage
    # declares the same keys): an override that repeats one is said to, not listed as a
    # change. Its budget (train.max_steps, max_epochs) is ablation.max_steps, said apart
    baseline = {"model": to_dict(params.model), "input": to_dict(params.input),
                "fast": to_dict(params.fast),
                "train": {f.name: getattr(params.train, f.name)
                          for f in dataclasses.fields(params.train)
                          if f.name not in ("max_steps", "max_epochs")},
                "eval": {key: getattr(params.eval, key)
                         for key in ("batch_size", "every_steps", "targets", "flip_tta")}}
    path = make_report(args.ablations, args.out, dict(params.ablations),
                       dict(params.dataset_ablations), args.search, args.equivalence,
                       args.devices_timing, args.tf_reference, params.ablation.trial_steps,
                       unchecked, networks, baseline)
    print(f"wrote {path}")


if __name__ == "__main__":
    run_stage(main)
