"""What every stage entry point shares: its arguments, logging set-up and clear,
traceback-free errors.

Paths have one home, dvc.yaml: each stage's command there passes the stage its inputs
and outputs (``--data data/prepared --out ...``), and the library takes them as
arguments. A stage script run by hand takes every path it is not given from its
command in dvc.yaml, and the tools outside the pipeline (benchmark, predict, the GPU
run) find the pipeline's files from the stages' outputs there.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

from .errors import PipelineError
from .files import WRITE_HINTS

DVC_YAML = Path("dvc.yaml")
# the exercise pipeline's own params (reports/dvc.yaml): its baseline and the variants
EXERCISE_PARAMS = "reports/params.yaml"


def stage_parser(description: str, params: str = "params.yaml") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=params, type=given_path,
                    help=f"the params file to read (default: {params})")
    return ap


def add_continuation(ap: argparse.ArgumentParser) -> None:
    """``--stop-at`` and ``--mirror``: a run that pauses at a deadline and continues elsewhere
    (:mod:`.training.deadline`; not params: they cannot change the results)."""
    ap.add_argument("--stop-at", metavar="WHEN",
                    help="pause at this deadline: a duration (2h30m, 90m, 45s) or a moment "
                         "(18:20, 2026-12-01T18:20, UTC): checkpoint, then exit with status 75; "
                         "the same command continues (default: $CIFAR10_STOP_AT)")
    ap.add_argument("--mirror", metavar="URL",
                    help="keep the newest checkpoint and curves in a folder of this run's below "
                         "this fsspec URL (a folder, s3://, gs://...), and resume from it when "
                         "there is no checkpoint here (default: $CIFAR10_CHECKPOINT_MIRROR)")


def add_nodes(ap: argparse.ArgumentParser) -> None:
    """``--nnodes``, ``--rdzv-endpoint``, ``--rdzv-id``: one job across several machines
    (docs/devices.md; not params: they cannot change the results)."""
    ap.add_argument("--nnodes", type=int, default=None,
                    help="machines in the job, each running this same command with "
                         "train.num_devices / nnodes processes (default: $CIFAR10_NNODES, or 1)")
    ap.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                    help="where the nodes meet, the same on every node, usually node 0 "
                         "(default: $CIFAR10_RDZV_ENDPOINT)")
    ap.add_argument("--rdzv-id", metavar="ID",
                    help="the job's id at the endpoint, e.g. a scheduler's job id "
                         "(default: $CIFAR10_RDZV_ID, or cifar10)")


def given_path(text: str) -> Path:
    """A path option's value (argparse ``type``): an empty one is refused, as ``Path("")``
    would silently be the working folder (a quoted variable that was never set), and so is
    ``-``, which commands read as the standard input or output: these read and write
    files, and a file or folder named ``-`` in the working folder is not what was meant
    (``./-`` still names one)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (`''`), which would be read as the "
                                         "working folder; give the path")
    if text == "-":
        raise argparse.ArgumentTypeError("'-', which commands read as the standard input or "
                                         "output; this one reads and writes files: give the "
                                         "path (./- for one named so)")
    return Path(text)


def add_paths(ap: argparse.ArgumentParser, **paths: str) -> None:
    """Path options ``--NAME`` (underscores as dashes), each with its help text; those not
    given are taken from the stage's command in dvc.yaml (:func:`parse_stage_args`)."""
    for name, help_text in paths.items():
        ap.add_argument(f"--{name.replace('_', '-')}", dest=name, type=given_path, default=None,
                        help=f"{help_text} (default: as in dvc.yaml)")
    ap.set_defaults(_path_options=list(paths))


def parse_stage_args(ap: argparse.ArgumentParser, script: str,
                     argv: Optional[list[str]] = None,
                     dvc_yaml: Path = DVC_YAML) -> argparse.Namespace:
    """``argv``, with each path option left out filled from the command that dvc.yaml gives
    ``script`` (``dvc repro`` always passes them all)."""
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [n for n in getattr(args, "_path_options", []) if getattr(args, n) is None]
    if missing:
        defaults = ap.parse_args(stage_command(script, dvc_yaml))
        for name in missing:
            setattr(args, name, getattr(defaults, name))
            if getattr(args, name) is None:
                raise PipelineError(f"--{name.replace('_', '-')} is not given, and the command "
                                    f"of {Path(script).name} in {dvc_yaml} does not set it")
    return args


def pipeline_stages(dvc_yaml: Path) -> dict:
    """``dvc_yaml``'s stages (name -> mapping), read as DVC reads the file; anything DVC
    would refuse is one line naming the file and the fix."""
    import yaml

    if not dvc_yaml.is_file():
        raise PipelineError(f"{dvc_yaml} not found: run this from the repository root, or give "
                            f"the paths as options (see --help)")
    from .param_types import key_twice

    # read as DVC reads it: a key written twice is refused there too, so a command taken from
    # the copy PyYAML keeps (the last) would not be the one `dvc repro` runs
    try:
        text = dvc_yaml.read_text(encoding="utf-8")
        twice = key_twice(text)
        doc = yaml.safe_load(text) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PipelineError(f"{dvc_yaml}: not a readable pipeline file "
                            f"({' '.join(str(exc).split())[:200]}); restore it "
                            f"(`git checkout -- {dvc_yaml}`)") from None
    if twice is not None:
        raise PipelineError(f"{dvc_yaml}: the key {twice[0]!r} appears twice (line {twice[1]}); "
                            f"keep one (DVC refuses the file as it is)")
    stages = doc.get("stages", {}) if isinstance(doc, dict) else None
    if not isinstance(stages, dict):
        raise PipelineError(f"{dvc_yaml}: expected a mapping `stages:` of stage names to "
                            f"stages, found {type(stages).__name__}; restore it "
                            f"(`git checkout -- {dvc_yaml}`)")
    for name, stage in stages.items():
        if not isinstance(stage, dict):
            raise PipelineError(f"{dvc_yaml}: stage {name!r}: expected a mapping (cmd:, deps:, "
                                f"outs:), found {type(stage).__name__}; fix it or restore the "
                                f"file (`git checkout -- {dvc_yaml}`)")
    return stages


def stage_command(script: str, dvc_yaml: Path = DVC_YAML) -> list[str]:
    """The arguments dvc.yaml's command passes to ``script`` (``stages/NAME.py``)."""
    name = Path(script).name
    for stage in pipeline_stages(dvc_yaml).values():
        cmd = stage.get("cmd")  # one command, or a list DVC runs in turn
        for one in (cmd if isinstance(cmd, list) else [cmd]):
            words = shlex.split(one) if isinstance(one, str) else []
            if len(words) >= 2 and Path(words[1]).name == name:
                return words[2:]
    raise PipelineError(f"{dvc_yaml}: no stage runs {name}; give the paths as options (see --help)")


def stage_output(stage: str, suffix: str = "", dvc_yaml: Path = DVC_YAML) -> Path:
    """The first output (outs, metrics or plots) of ``stage`` in dvc.yaml ending in ``suffix``."""
    spec = pipeline_stages(dvc_yaml).get(stage)
    if spec is None:
        raise PipelineError(f"{dvc_yaml}: no stage {stage!r}")
    for kind in ("outs", "metrics", "plots"):
        for entry in spec.get(kind, []):
            path = entry if isinstance(entry, str) else next(iter(entry))
            if path.endswith(suffix):
                return Path(path)
    raise PipelineError(f"{dvc_yaml}: stage {stage!r} has no output ending in {suffix!r}")


def run_stage(main: Callable[[], None]) -> None:
    """Run ``main``; a :class:`PipelineError` becomes ``error: ...`` on stderr and exit 1."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        main()
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:
        hint = WRITE_HINTS.get(exc.errno)
        if hint is None:
            raise
        where = exc.filename or "an output file"
        print(f"error: {where}: {exc.strerror}; {hint}, then rerun", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as exc:  # Path.resolve() on a loop of links (Python < 3.13)
        if not str(exc).startswith("Symlink loop"):
            raise
        print(f"error: {str(exc)[:300]}: a loop of symbolic links, which leads nowhere; give "
              f"a path without it (or remove the loop), then rerun", file=sys.stderr)
        sys.exit(1)
    except UnicodeEncodeError as exc:  # a path of bytes that are no UTF-8, written as text
        if "surrogates" not in str(exc.reason):  # a bug of ours, not a name: its traceback
            raise
        print(f"error: a path or name that is not UTF-8 text ({exc.reason}: "
              f"{exc.object[exc.start:exc.end]!r}), which a file of text cannot hold; give "
              f"one of UTF-8 characters, then rerun", file=sys.stderr)
        sys.exit(1)


def dvc_executable() -> str:
    """The DVC of this package's environment (beside its Python: a venv not activated),
    else the one on PATH; neither is one line saying where to run from."""
    beside = Path(sys.executable).with_name("dvc")
    found = str(beside) if beside.is_file() else shutil.which("dvc")
    if found is None:
        raise PipelineError(f"dvc: not found beside this Python ({sys.executable}) nor on "
                            f"PATH; run this from the project's environment (the venv where "
                            f"`pip install -e \".[dev]\"` installed it), or install dvc there")
    return found
