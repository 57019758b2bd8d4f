"""DVC stage `download`: fetch every file of data.dataset from data.url to data/raw/,
verified against data.md5."""
from pathlib import Path

from cifar10_tutorial.cli import run_stage, stage_parser
from cifar10_tutorial.datasets import get_dataset, sources
from cifar10_tutorial.download import (DownloadOptions, check_gzip_tar, check_mat,
                                       clean_partial_dir, fetch)
from cifar10_tutorial.params import load_params

RAW_DIR = Path("data/raw")
PARTIAL_DIR = Path("data/.downloads")  # partial files live outside the DVC output, to resume


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds without data per attempt")
    ap.add_argument("--retries", type=int, default=5, help="attempts for transient errors")
    args = ap.parse_args()
    data = load_params(args.params).data
    check = check_mat if get_dataset(data.dataset).format == "svhn_mat" else check_gzip_tar
    opts = DownloadOptions(timeout=args.timeout, retries=args.retries)
    for url, md5, name in sources(data):
        fetch(url, md5, RAW_DIR / name, PARTIAL_DIR, opts, check)
    clean_partial_dir(PARTIAL_DIR)


if __name__ == "__main__":
    run_stage(main)
