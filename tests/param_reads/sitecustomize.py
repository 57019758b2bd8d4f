"""Which params keys does a process read? The record that keeps dvc.yaml's `params:` true
(tests/test_cache.py).

The tests put this folder on PYTHONPATH with CIFAR10_TUTORIAL_PARAM_READS=FILE: Python
imports this module in every process they start (the stages that `dvc repro` runs, and
the torchrun workers of a stage), and it patches ``cifar10_tutorial.params`` as it is
imported, so that every read of a params field after loading (validation does not count)
is recorded as the params.yaml key it came from. Each process appends one JSON line to
FILE when it ends. The package itself records nothing.
"""
import atexit
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import json
import os
import sys

READS_ENV = "CIFAR10_TUTORIAL_PARAM_READS"
# The section of the keys that change how a run is carried out, never what it computes:
# their reads are not recorded (docs/training.md#what-each-stages-hash-covers).
OPERATIONAL_SECTION = "run"

_reads: set = set()
_paused = [0]
# id(section) -> (section, {field: the key its value came from, or None: a default});
# the section is kept so that its id is not reused
_origins: dict = {}


def record(key) -> None:
    if key and not _paused[0] and key.split(".", 1)[0] != OPERATIONAL_SECTION:
        _reads.add(key)


@contextlib.contextmanager
def paused():
    """Reads inside this block (validation, conversion, building a variant) are no use."""
    _paused[0] += 1
    try:
        yield
    finally:
        _paused[0] -= 1


def _sections(params_mod) -> dict:
    """Section name -> its dataclass, from the fields of ``Params``."""
    return {f.name: f.default_factory for f in dataclasses.fields(params_mod.Params)
            if dataclasses.is_dataclass(f.default_factory)}


def _recording_getattribute(section_name: str, section_types: tuple):
    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        if (not name.startswith("_") and name in type(self).__dataclass_fields__
                and not isinstance(value, section_types)):
            origin = _origins.get(id(self), (None, {}))[1]
            record(origin.get(name, f"{section_name}.{name}" if section_name else name))
        return value
    return __getattribute__


def _variant_origins(params, name: str, merged, sections: dict) -> None:
    """Where each field of variant ``name``'s params came from: its own overrides
    (``ablations.NAME.train.batch_size``), the shared budget (``ablation.max_steps``) or a
    trial's (``ablation.trial_steps``), a data-set variant's defaults (no key), else the
    baseline's own key."""
    group = "ablations" if name in params.ablations else "dataset_ablations"
    overrides = {**params.ablations, **params.dataset_ablations}[name]
    trial = params.ablation.trial_steps
    for section in sections:
        value = getattr(merged, section)
        origin = {}
        for f in dataclasses.fields(value):
            length = section == "train" and f.name in ("max_steps", "max_epochs")
            if trial is not None and length:
                origin[f.name] = "ablation.trial_steps"
            elif f.name in overrides.get(section, {}):
                origin[f.name] = f"{group}.{name}.{section}.{f.name}"
            elif length:
                origin[f.name] = "ablation.max_steps"
            elif section == "data" and group == "dataset_ablations":
                origin[f.name] = None
        _origins[id(value)] = (value, origin)
    return group


def patch(params_mod) -> None:
    sections = _sections(params_mod)
    types = tuple(sections.values())
    for section, cls in sections.items():
        cls.__getattribute__ = _recording_getattribute(section, types)
    params_mod.Params.__getattribute__ = _recording_getattribute("", types)

    building = params_mod.params_from_dict

    def params_from_dict(raw):
        with paused():
            return building(raw)

    variant = params_mod.variant_params

    def variant_params(params, name):
        record("ablation.trial_steps")  # a variant's budget depends on it, set or not
        with paused():
            merged = variant(params, name)
            group = _variant_origins(params, name, merged, sections)
        record(f"{group}.{name}")  # the variant's entry is read, even when it is empty
        return merged

    twin_check = params_mod.refuse_twin_on_data

    def refuse_twin_on_data(params, name, *data):
        with paused():  # a check of the variants against each other, as the loader's
            return twin_check(params, name, *data)

    params_mod.params_from_dict = params_from_dict
    params_mod.variant_params = variant_params
    params_mod.refuse_twin_on_data = refuse_twin_on_data


def flush() -> None:
    path = os.environ.get(READS_ENV)
    if path and _reads:
        with open(path, "a") as f:
            # the DVC stage too: the variant stages share one command (their name comes
            # from DVC_STAGE), so the command alone does not tell them apart
            f.write(json.dumps({"argv": sys.argv, "stage": os.environ.get("DVC_STAGE"),
                                "reads": sorted(_reads)}) + "\n")


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``cifar10_tutorial.params`` as Python would, and patches it once executed,
    before any other module imports a name from it."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "cifar10_tutorial.params":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                patch(module)
            spec.loader.exec_module = exec_module
        return spec


if os.environ.get(READS_ENV):
    sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(flush)
