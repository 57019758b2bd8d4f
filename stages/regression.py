"""DVC stage `regression`: this run's metrics (reports/train, reports/eval) against the
baseline file named by regression.baseline, with the tolerances of regression.tolerances.
Prints a Markdown table (also written to reports/regression.md); exits 1 when a metric regressed, is missing, or there are no metrics.

    python stages/regression.py            # the gate
    python stages/regression.py --update   # write this run's gated metrics as the new baseline
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.params import load_params
from cifar10_tutorial.regression import (RegressionError, gate, metrics_diff_md, update_baseline,
                                         write_report)


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--update", action="store_true",
                    help="write this run's gated metrics to regression.baseline")
    args = ap.parse_args()
    reg = load_params(args.params).regression
    if args.update:
        if reg.baseline is None:
            raise PipelineError("regression.baseline is null: name the baseline file to write "
                                "in params.yaml (or with -S regression.baseline=PATH)")
        values = update_baseline(reg.baseline, reg.tolerances)
        print(f"wrote {reg.baseline}: " + ", ".join(f"{k} = {v:.4f}" for k, v in values.items()))
        return
    failed = None
    try:
        text = gate(reg.baseline, reg.tolerances)
    except RegressionError as exc:
        text = failed = str(exc)
    if reg.baseline:
        text += "\n\n" + metrics_diff_md(reg.baseline)
    print(text)
    write_report(text)  # reports/regression.md, e.g. for a pull-request comment
    if failed:
        raise PipelineError("the regression gate failed (table above)")


if __name__ == "__main__":
    run_stage(main)
