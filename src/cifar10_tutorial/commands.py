"""The ``cifar10`` command (a console script of the package): one name for what users type.

    cifar10 repro --stop-at 3h50m      # dvc repro; exit 75 when a stage paused (run it again)
    cifar10 train                      # the train stage as dvc.yaml runs it (paths from there)
    cifar10 eval --model other/model.pt --out other/eval   # another model: its own --out
    cifar10 predict cat.jpg truck.png --top 3
    cifar10 report                     # the exercise report (reports/dvc.yaml's command)
    cifar10 benchmark
    cifar10 trial                      # the exercise trial's wall time, in a throwaway clone
    cifar10 publish baseline           # a finished variant's weights and card, in models/baseline
    cifar10 ci synthetic

Every command but ``repro`` runs in a repository root (the folder of dvc.yaml, params.yaml
and stages/), and runs that checkout's code, whichever clone the package was installed
from: the stage commands run its stage scripts (``stages/NAME.py``) with the arguments
dvc.yaml (or reports/dvc.yaml) gives them, then the user's own; the tools around the
pipeline run its scripts (``benchmarks/``, ``tools/``, ``.ci/``, ``devtools/``); the rest
run a module of its package (``src/``). Each loads only what it uses. ``cifar10 NAME
--help`` shows a command's own options, from any folder.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from .cli import run_stage, stage_command
from .errors import PipelineError

# name -> (what it does, an example, what it runs: "stage" (stages/NAME.py with its
# pipeline's arguments), a script of the checkout beside the package (the tools that
# measure, check or publish the project: not the pipeline), or a module of the package)
COMMANDS = {
    "train": ("train the network (the train stage)", "cifar10 train --stop-at 2h", "stage"),
    "eval": ("evaluate a model (the eval stage)",
             "cifar10 eval --model other/model.pt --out other/eval", "stage"),
    "report": ("write the exercise report (reports/dvc.yaml's report stage)", "cifar10 report",
               "stage"),
    "repro": ("dvc repro; a stage paused at --stop-at exits 75: run it again to continue",
              "cifar10 repro --stop-at 3h50m --mirror s3://my-bucket/runs", "repro"),
    "benchmark": ("time the train step against typical pipelines", "cifar10 benchmark",
                  "benchmarks/benchmark.py"),
    "dev-split": ("build the dev split (this project's data) from a copy of the public "
                  "CIFAR-10-images repository", "cifar10 dev-split CIFAR-10-images-master.zip",
                  "tools/dev_split.py"),
    "check-code": ("check that the workspace's code trains bit-identically to the commit "
                   "of the exercise results; if so, record their lock as up to date",
                   "cifar10 check-code", "tools/check_code.py"),
    "trial": ("time the exercise trial (every variant a few steps) in a throwaway clone",
              "cifar10 trial --steps 5", "benchmarks/trial.py"),
    "predict": ("classify image files", "cifar10 predict cat.jpg --top 3",
                "evaluation.predict"),
    "publish": ("publish a finished variant's weights with their card (in models/NAME)",
                "cifar10 publish baseline", "tools/publish.py"),
    "results-page": ("regenerate docs/results.md from the committed reports",
                     "cifar10 results-page", "devtools/results_page.py"),
    "ci": ("the CI regression runs", "cifar10 ci synthetic", ".ci/ci.py"),
}
REPORT_DVC_YAML = Path("reports/dvc.yaml")


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = [f"  {n:<{width}}  {what}   e.g. `{ex}`" for n, (what, ex, _) in COMMANDS.items()]
    return "usage: cifar10 COMMAND [ARGS...]   (cifar10 COMMAND --help)\n\n" + "\n".join(rows)


def stage_argv(name: str) -> list[str]:
    """The stage script and the arguments its pipeline's command gives it."""
    script = f"{name}.py"
    dvc_yaml = REPORT_DVC_YAML if name == "report" else Path("dvc.yaml")
    args = stage_command(script, dvc_yaml) if dvc_yaml.is_file() else []
    return [str(Path("stages") / script), *args]  # this checkout's, not the installed one's


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise PipelineError(f"cifar10 {name}: no such command; the commands are "
                            f"{', '.join(COMMANDS)} (cifar10 --help)")
    what, example, target = COMMANDS[name]
    asks_help = rest[:1] in (["-h"], ["--help"])
    if name != "repro" and not asks_help:
        _at_a_repository_root(name)
        _run_this_checkouts_package(argv)
    if asks_help:  # above the command's own options
        print(f"cifar10 {name}: {what}; e.g. `{example}`\n", flush=True)
        _scripts_for_help(target)
    if target != "stage" and not target.endswith(".py"):
        importlib.import_module(f"{__package__}.{target}").main(rest)
        return
    # a stage script or a script beside the package: this checkout's
    script = stage_argv(name) if target == "stage" else [target]
    if not Path(script[0]).is_file():
        raise PipelineError(f"cifar10 {name}: {script[0]} is not in {Path.cwd()}; run it from "
                            f"the repository root of a checkout of this project")
    become([sys.executable, *script, *rest])


def become(command: list[str]) -> None:
    """Replace this process with ``command``: a signal or kill sent to `cifar10 NAME` reaches
    the script itself, which never runs on without the process the user started."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def _at_a_repository_root(name: str) -> None:
    """The commands take their paths from dvc.yaml and run stages/: elsewhere (reports/, a
    subfolder) they would read another pipeline's file for the project's."""
    here = Path.cwd()
    missing = [n for n in ("dvc.yaml", "params.yaml", "stages") if not (here / n).exists()]
    if missing:
        raise PipelineError(f"cifar10 {name}: {here} is not a repository root of this project "
                            f"(no {', '.join(missing)}); run it from the folder that holds "
                            f"dvc.yaml, params.yaml and stages/")


def _scripts_for_help(target: str) -> None:
    """``--help`` works from any folder: where the current one does not hold the command's
    script, the checkout this package runs from does (an editable install)."""
    script = "stages" if target == "stage" else target
    checkout = Path(__file__).resolve().parents[2]
    if not Path(script).exists() and (checkout / script).exists():
        os.chdir(checkout)


def _run_this_checkouts_package(argv: list[str]) -> None:
    """Where the checkout in the current folder has its own package (``src/``) and the one
    running is another clone's (``pip install -e`` there), run this one's instead: the
    code that runs is the code whose commit the results' provenance names."""
    here = (Path.cwd() / "src" / "cifar10_tutorial").resolve()
    running = Path(__file__).resolve().parent
    if here.is_dir() and here != running:
        src = str(here.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [src, os.environ.get("PYTHONPATH")]))}
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", f"{__package__}.commands", *argv], env)


def entry() -> None:
    run_stage(main)


if __name__ == "__main__":
    entry()
