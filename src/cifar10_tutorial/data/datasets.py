"""The registry of data sets: their files, official sources and md5s, record
formats, class names, and preprocessing defaults.

``data.dataset`` selects one. The preprocess stage writes the same cached-tensor
format for each (uint8 N x 3 x 32 x 32 images, int64 labels, meta.json), so the
stages after it only see ``num_classes`` and the class names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import PipelineError


@dataclass(frozen=True)
class LabelSet:
    """One way to label the records: which label byte, how many classes, their names."""

    index: int  # label byte of each record
    num_classes: int
    names_file: Optional[str] = None  # one name a line, inside the archive folder
    names: tuple = ()  # fixed names (when the files carry none)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    format: str  # "binary" (CIFAR records in a .tar.gz) or "svhn_mat" (MATLAB files)
    url: str  # official: the archive (binary) or the folder of the files (svhn_mat)
    files: dict  # file name -> official md5, every file the download stage fetches
    splits: dict  # split -> tuple of record files (inside ``folder`` for binary sets)
    labels: dict = field(default_factory=dict)  # data.label value -> LabelSet
    folder: str = ""  # the folder inside the archive (binary)
    label_bytes: int = 1  # label bytes before the pixels of each record (binary)
    image_shape: tuple = (3, 32, 32)  # channels, rows, columns
    flip: bool = True  # random left-right flips by default
    optional_files: tuple = ()  # fetched only when asked for (SVHN's extra)

    # the most records one file may hold: the official files hold 10,000 (CIFAR-10) or
    # 50,000 (CIFAR-100's train.bin); a file of more is a bomb or not this set
    max_records_per_file: int = 60_000

    @property
    def record_bytes(self) -> int:
        c, h, w = self.image_shape
        return self.label_bytes + c * h * w

    @property
    def archive_name(self) -> str:
        """The single file of a binary set."""
        return next(iter(self.files))

    def label_set(self, label: str) -> LabelSet:
        if label in self.labels:
            return self.labels[label]
        if len(self.labels) == 1:  # a set with one labelling ignores data.label
            return next(iter(self.labels.values()))
        raise PipelineError(f"data.label: {self.name} has labels {', '.join(self.labels)}; "
                            f"found {label!r}")

    @property
    def num_classes(self) -> int:  # the default labelling's
        return next(iter(self.labels.values())).num_classes

    @property
    def meta_file(self) -> str:
        return next(iter(self.labels.values())).names_file


CIFAR10 = DatasetSpec(
    name="cifar10",
    format="binary",
    url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    files={"cifar-10-binary.tar.gz": "c32a1d4ab5d03f1284b67883e8d87530"},
    folder="cifar-10-batches-bin",
    splits={"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
            "test": ("test_batch.bin",)},
    labels={"fine": LabelSet(0, 10, "batches.meta.txt")},
)

CIFAR100 = DatasetSpec(
    name="cifar100",
    format="binary",
    url="https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
    files={"cifar-100-binary.tar.gz": "03b5dce01913d631647c71ecec9e9cb8"},
    folder="cifar-100-binary",
    splits={"train": ("train.bin",), "test": ("test.bin",)},
    labels={"fine": LabelSet(1, 100, "fine_label_names.txt"),
            "coarse": LabelSet(0, 20, "coarse_label_names.txt")},
    label_bytes=2,
)

# md5s as in torchvision's SVHN class
SVHN = DatasetSpec(
    name="svhn",
    format="svhn_mat",
    url="http://ufldl.stanford.edu/housenumbers/",
    files={"train_32x32.mat": "e26dedcc434d2e4c54c9b2d4a06d8373",
           "test_32x32.mat": "eb5a983be6a315427106f1b164d9cef3",
           "extra_32x32.mat": "a93ce644f1a588dc4d68dda5feec44a7"},
    splits={"train": ("train_32x32.mat",), "test": ("test_32x32.mat",)},
    labels={"digit": LabelSet(0, 10, names=tuple(str(d) for d in range(10)))},
    flip=False,  # digits are not mirror-symmetric
    optional_files=("extra_32x32.mat",),
)

DATASETS = {spec.name: spec for spec in (CIFAR10, CIFAR100, SVHN)}


def get_dataset(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise PipelineError(f"data.dataset: unknown data set {name!r}; "
                            f"known: {', '.join(DATASETS)}") from None


def files_to_fetch(spec: DatasetSpec, svhn_extra: bool = False) -> list[str]:
    return [f for f in spec.files if f not in spec.optional_files or svhn_extra]


def sources(data) -> list[tuple[str, Optional[str], str]]:
    """(url, expected md5 or None, file name) of every file to fetch for ``data`` (DataParams)."""
    spec = get_dataset(data.dataset)
    base = spec.url if data.url == "official" else data.url
    out = []
    for name in files_to_fetch(spec, data.svhn_extra):
        # one archive (CIFAR), or a folder of files (SVHN: a URL or a local path)
        url = base if spec.format == "binary" else str(base).rstrip("/") + "/" + name
        md5 = spec.files[name] if data.md5 == "official" else data.md5
        out.append((url, md5, name))
    return out
