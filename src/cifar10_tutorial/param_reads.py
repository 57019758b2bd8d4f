"""Which params keys did a stage read? The record that keeps dvc.yaml's `params:` true.

With CIFAR10_TUTORIAL_PARAM_READS=FILE in the environment, every read of a params field
after loading (validation does not count) is recorded as the params.yaml key it came
from, and appended to FILE as one JSON line when the process ends (or before it execs
torchrun). tests/test_cache.py uses it to check that each stage's `params:` covers what
it reads.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from typing import ClassVar, Optional

READS_ENV = "CIFAR10_TUTORIAL_PARAM_READS"
# The section of the keys that change how a run is carried out, never what it computes:
# their reads are not recorded (docs/training.md#what-each-stages-hash-covers).
OPERATIONAL_SECTION = "run"


def operational(key: str) -> bool:
    return key.split(".", 1)[0] == OPERATIONAL_SECTION
_reads: Optional[set] = set() if os.environ.get(READS_ENV) else None


@contextlib.contextmanager
def not_recording():
    """Reads inside this block (validation, conversion) are not recorded."""
    global _reads
    saved, _reads = _reads, None
    try:
        yield
    finally:
        _reads = saved


def record_read(key: str) -> None:
    """Record a read of params key ``key`` (for reads that bypass the sections' fields)."""
    if _reads is not None and not operational(key):
        _reads.add(key)


def flush_reads() -> None:
    """Append the keys read so far to $CIFAR10_TUTORIAL_PARAM_READS (at exit; before exec)."""
    path = os.environ.get(READS_ENV)
    if path and _reads:
        with open(path, "a") as f:
            f.write(json.dumps({"argv": sys.argv, "reads": sorted(_reads)}) + "\n")


if _reads is not None:
    atexit.register(flush_reads)


class Section:
    """Base of the params sections: a field read is recorded (while recording) as its key.

    The key is ``<section>.<field>``, or where a variant took the value from (its
    ``_origin``: ``ablations.NAME.train.batch_size``, ``ablation.max_steps``; None: a
    default that no params key set)."""

    _SECTION: ClassVar[str] = ""

    def __getattribute__(self, name: str):
        value = object.__getattribute__(self, name)
        if (_reads is not None and not name.startswith("_")
                and name in type(self).__dataclass_fields__ and not isinstance(value, Section)):
            origin = object.__getattribute__(self, "__dict__").get("_origin", {})
            key = origin.get(name, f"{self._SECTION}.{name}" if self._SECTION else name)
            if key is not None and not operational(key):
                _reads.add(key)
        return value
