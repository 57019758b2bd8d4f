"""DVC stage `download`: fetch every file of data.dataset from data.url to data/raw/,
verified against data.md5."""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.download import DownloadOptions, fetch_dataset
from cifar10_tutorial.params import load_params

RAW_DIR = Path("data/raw")
PARTIAL_DIR = Path("data/.downloads")  # partial files live outside the DVC output, to resume


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds without data per attempt")
    ap.add_argument("--retries", type=int, default=5, help="attempts for transient errors")
    args = ap.parse_args()
    opts = DownloadOptions(timeout=args.timeout, retries=args.retries)
    fetch_dataset(load_params(args.params).data, RAW_DIR, PARTIAL_DIR, opts)


if __name__ == "__main__":
    run_stage(main)
