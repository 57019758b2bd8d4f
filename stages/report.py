"""DVC stage `report`: the ablation variants' metrics and logs -> reports/report.md,
reports/tables/*.csv and reports/plots/*.png."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.params import load_params
from cifar10_tutorial.report import make_report


def main() -> None:
    args = stage_parser(__doc__).parse_args()
    params = load_params(args.params)
    path = make_report(Path("reports/ablations"), Path("reports"), list(params.ablations),
                       Path("reports/ablations"), list(params.dataset_ablations))
    print(f"wrote {path}")


if __name__ == "__main__":
    run_stage(main)
