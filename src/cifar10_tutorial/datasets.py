"""What each supported data set's raw archive looks like."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import PipelineError


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    archive_name: str  # the file name the download stage stores under data/raw/
    folder: str  # the folder inside the archive that holds the files below
    splits: dict  # split name -> tuple of record files, in order
    meta_file: str  # class names, one a line
    num_classes: int
    label_bytes: int = 1  # label bytes before the pixels of each record
    image_shape: tuple = (3, 32, 32)  # channels, rows, columns; stored channel-planar

    @property
    def record_bytes(self) -> int:
        c, h, w = self.image_shape
        return self.label_bytes + c * h * w


CIFAR10 = DatasetSpec(
    name="cifar10",
    archive_name="cifar-10-binary.tar.gz",
    folder="cifar-10-batches-bin",
    splits={"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
            "test": ("test_batch.bin",)},
    meta_file="batches.meta.txt",
    num_classes=10,
)

DATASETS = {spec.name: spec for spec in (CIFAR10,)}


def get_dataset(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise PipelineError(f"data.dataset: unknown data set {name!r}; "
                            f"known: {', '.join(DATASETS)}") from None
