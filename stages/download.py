"""DVC stage `download`: fetch every file of data.dataset from data.url into --out (data/raw),
verified against data.md5; a partial file waits in --partial (data/.downloads) to resume."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)

from cifar10_tutorial.cli import add_paths, parse_stage_args, run_stage, stage_parser
from cifar10_tutorial.data.download import DownloadOptions, fetch_dataset
from cifar10_tutorial.ownership import refuse_foreign_place
from cifar10_tutorial.params import MAIN, load_params


def main() -> None:
    ap = stage_parser(__doc__)
    add_paths(ap, out="the folder of the raw files (a DVC output)",
              partial="partial downloads, outside the DVC output, to resume")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds without data per attempt")
    ap.add_argument("--retries", type=int, default=5, help="attempts for transient errors")
    args = parse_stage_args(ap, __file__)
    for option, folder in (("--out", args.out), ("--partial", args.partial)):
        refuse_foreign_place(folder, option, "as dvc.yaml gives them", ("download",))
    opts = DownloadOptions(timeout=args.timeout, retries=args.retries)
    fetch_dataset(load_params(args.params, MAIN).data, args.out, args.partial, opts)


if __name__ == "__main__":
    run_stage(main)
