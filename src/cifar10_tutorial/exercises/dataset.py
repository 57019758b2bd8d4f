"""The data of a data-set variant (exercise 6, reports/params.yaml ``dataset_ablations:``): fetched
and prepared under the variant's own folder. A module of its own, imported by that stage
only: the other variants' hashes do not cover the download and parsing code."""
from __future__ import annotations

import time
from pathlib import Path

from ..data.datasets import get_dataset
from ..data.download import fetch_dataset
from ..data.transfer import MIRROR_HINT, DownloadError
from ..data.prepared import Prepared, load_prepared
from ..data.preprocess import prepare_dataset
from ..params import Params, variant_params
from ..training.distributed import this_process


def variant_data_size(params: Params, name: str) -> tuple[None, bool]:
    """What is known of a data-set variant's data before they are fetched: not their
    size, but whether its data set flips by default (:func:`.run_variant_stage`)."""
    return None, get_dataset(variant_params(params, name).data.dataset).flip


def prepare_variant_data(params: Params, name: str, work: Path, partial: Path,
                         params_file: Path | str = "reports/params.yaml") -> Prepared:
    """Download and preprocess the data set of a data-set variant into ``work``/raw and
    ``work``/prepared (rank 0; the other ranks of a torchrun job wait for its files);
    ``params_file``: the file that defines it (its download errors name it)."""
    data = variant_params(params, name).data
    if this_process().main:
        try:
            fetch_dataset(data, work / "raw", partial)
        except DownloadError as exc:  # the variant's own url, in reports/params.yaml
            key = f"dataset_ablations.{name}.data.url"
            hint = (f"Set {key} in {params_file} to a mirror or to a local copy "
                    f"(file:///path/to/archive or a plain path), e.g. `dvc exp run -S "
                    f"'{params_file}:{key}=/path/to/archive'`.")
            said = [part.replace("data.url", key) for part in str(exc).split(MIRROR_HINT)]
            raise DownloadError(hint.join(said)) from None
        prepare_dataset(work / "raw", work / "prepared", data)
    else:
        while not (work / "prepared" / "meta.json").is_file():
            time.sleep(1)
    return load_prepared(work / "prepared")
