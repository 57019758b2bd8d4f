"""DVC stage `regression`: this run's metrics (--train-metrics, --eval-metrics) against the
baseline file named by regression.baseline, with the tolerances of regression.tolerances.
Prints a Markdown table (also written to --out, reports/regression.md); exits 1 when a
metric regressed, is missing, or there are no metrics.

    python stages/regression.py            # the gate
    python stages/regression.py --update   # write this run's gated metrics as the new baseline
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import os

from cifar10_tutorial.cli import add_paths, parse_stage_args, run_stage, stage_parser
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import write_text_atomic
from cifar10_tutorial.params import MAIN, load_params
from cifar10_tutorial.ownership import refuse_foreign_file
from cifar10_tutorial.regression import (RegressionError, gate, is_gate_text, metrics_diff_md,
                                         refuse_untracked_baseline, update_baseline)


def main() -> None:
    ap = stage_parser(__doc__)
    add_paths(ap, train_metrics="the train stage's metrics.json",
              eval_metrics="the eval stage's metrics.json", out="the Markdown table")
    ap.add_argument("--update", action="store_true",
                    help="write this run's gated metrics to regression.baseline")
    args = parse_stage_args(ap, __file__)
    reg = load_params(args.params, MAIN).regression
    files = {"train": args.train_metrics, "eval": args.eval_metrics}
    if args.update:
        if reg.baseline is None:
            raise PipelineError("regression.baseline is null: name the baseline file to write "
                                "in params.yaml (or with -S regression.baseline=PATH)")
        values = update_baseline(reg.baseline, reg.tolerances, files)
        print(f"wrote {reg.baseline}: " + ", ".join(f"{k} = {v:.4f}" for k, v in values.items()))
        return
    refuse_foreign_file(args.out, "--out", "the gate's table", is_gate_text, ("regression",))
    if reg.baseline is not None and os.environ.get("DVC_STAGE"):  # run by DVC, which records
        refuse_untracked_baseline(reg.baseline)                 # the verdict as up to date
    failed = None
    try:
        text = gate(reg.baseline, reg.tolerances, files)
    except RegressionError as exc:
        text = failed = str(exc)
    if reg.baseline:
        text += "\n\n" + metrics_diff_md(reg.baseline, files)
    print(text)
    write_text_atomic(args.out, text + "\n")  # e.g. for a pull-request comment
    if failed:
        raise PipelineError("the regression gate failed (table above)")


if __name__ == "__main__":
    run_stage(main)
