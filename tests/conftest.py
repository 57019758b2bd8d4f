"""What the tests share: synthetic archives and data, a copy of the project (a tiny
project ready for `dvc repro`), the params setter, and the git/DVC helpers."""
import os

# On several workers (pytest-xdist) each gets its share of the cores, for its torch and for
# the stages it starts: threads beyond the cores only wait on each other.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(
        1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# The tiny projects the tests make run `dvc init` (analytics on by default, unlike the
# project's own .dvc/config): DVC would leave a report file in the temp folder per command.
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial.data.synthetic import make_cifar10_archive

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
# The tools around the pipeline are scripts beside the package, each folder run by path:
# the tests import their modules (speed, trial, publish, check_code, ci, results_page, ...).
SCRIPT_FOLDERS = ("benchmarks", "tools", ".ci", "devtools")
sys.path[:0] = [str(ROOT / folder) for folder in SCRIPT_FOLDERS]
# tests/param_reads/sitecustomize.py records the params keys each process reads
READS_ENV = "CIFAR10_TUTORIAL_PARAM_READS"


def recording_reads(log: Path) -> dict:
    """The environment in which every Python process started appends the params keys it
    read to ``log`` (tests/param_reads/sitecustomize.py)."""
    path = os.pathsep.join(filter(None, [str(ROOT / "tests" / "param_reads"),
                                         os.environ.get("PYTHONPATH")]))
    return {**os.environ, READS_ENV: str(log), "PYTHONPATH": path}
DVC = str(Path(sys.executable).with_name("dvc"))


# ----------------------------------------------------------------------------- workers

# `pytest` runs on several workers (pytest-xdist, `-n` in pyproject.toml). A worker is a
# process of its own, so a session fixture is made once per worker that uses it: the tests
# that share `exercise_run` (a `dvc repro` of both pipelines, the costliest fixture) go to
# one worker together, and first, as the longest piece of work; every other test goes to
# whichever worker is free.
SHARES_EXERCISE_RUN = ("tests/test_ablation.py", "tests/test_cache.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's `load`, but the files of SHARES_EXERCISE_RUN as one piece of work (xdist's own
    `loadgroup` marks do not group under pytest 9.2: pytest-xdist#1386). The scheduler
    sends the pieces with the most tests first: this one."""
    from xdist.scheduler import LoadScopeScheduling

    class ExerciseRunTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "exercise_run" if file in SHARES_EXERCISE_RUN else nodeid

    return ExerciseRunTogether(config, log)


# ----------------------------------------------------------------------------- projects


# the sections of the exercise pipeline's own params file, reports/params.yaml: the
# variants' baseline, and (only there) the variants themselves
EXERCISE_SECTIONS = ("model", "input", "train", "run", "fast", "eval")
EXERCISES_ONLY = ("ablation", "ablations", "dataset_ablations")


def set_params(project: Path, section: str, *, exercises: bool = False, **values) -> None:
    """Set ``section.key: value`` for each keyword in the params file that holds
    ``section``: params.yaml, or reports/params.yaml for the variants' sections (and for
    any section with ``exercises``: the exercises' own baseline)."""
    exercises = exercises or section in EXERCISES_ONLY
    path = project / ("reports/params.yaml" if exercises else "params.yaml")
    raw = yaml.safe_load(path.read_text())
    raw.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def dvc(project: Path, *args: str) -> subprocess.CompletedProcess:
    """``dvc ARGS`` in ``project``; it must succeed."""
    proc = subprocess.run([DVC, *args], cwd=project, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def run_queue(project: Path, jobs: int = 1, timeout: float = 600) -> str:
    """``dvc queue start -j JOBS`` in ``project``, then wait until nothing is queued or
    running; DVC's ``queue status`` table at the end."""
    import time

    dvc(project, "queue", "start", "-j", str(jobs))
    deadline = time.time() + timeout
    while True:
        status = dvc(project, "queue", "status").stdout
        if ("Queued" not in status and "Running" not in status) or time.time() > deadline:
            return status
        time.sleep(3)


def commit(project: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message],
                   cwd=project, check=True)


def init_repo(project: Path) -> None:
    """git and DVC in ``project``, with a first commit."""
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    dvc(project, "init", "-q")
    dvc(project, "config", "core.analytics", "false")
    shutil.copytree(ROOT / ".dvc" / "plots", project / ".dvc" / "plots")  # dvc.yaml's templates
    commit(project, "init")


def tiny_project(dest: Path, archive: dict | None = None, md5: bool = True, git: bool = True,
                 **sections: dict) -> Path:
    """A copy of the project on a synthetic archive (``archive``: arguments of
    make_cifar10_archive; None: no data params set), ``sections`` of params.yaml updated,
    and of reports/params.yaml too (the exercises' baseline: a tiny project's variants
    train as small as its main run), as a git + DVC repository with a first commit
    (``git``)."""
    project = copy_project(dest / "p")
    if archive is not None:
        path = dest / "cifar-10-binary.tar.gz"
        info = make_cifar10_archive(path, **archive)
        set_params(project, "data", url=str(path), md5=info["md5"] if md5 else None)
    for section, values in sections.items():
        set_params(project, section, **values)
        if section in EXERCISE_SECTIONS:  # the variants' budget is ablation.max_steps
            set_params(project, section, exercises=True, **{
                k: v for k, v in values.items()
                if not (section == "train" and k in ("max_steps", "max_epochs"))})
    if git:
        init_repo(project)
    return project


@pytest.fixture
def archive(tmp_path):
    """A small learnable archive in the official layout, with the arrays that went into it."""
    path = tmp_path / "cifar-10-binary.tar.gz"
    info = make_cifar10_archive(path, train_per_batch=12, test=15, seed=1)
    info["path"] = path
    return info


def copy_project(dest: Path) -> Path:
    """A copy of the project's pipeline files (no data, no venv) for stage-level tests."""
    for name in ("stages", "src", "tools", "benchmarks", "dvc.yaml", "reports/dvc.yaml",
                 "reports/baseline", "params.yaml",
                 "reports/params.yaml",
                 "reports/fast_schedule_search.md", "reports/code_equivalence.json",
                 "reports/devices_timing.json", "reports/tf_reference",
                 ".dvcignore", ".gitignore", "data/.gitignore", "data/train/.gitignore"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def run_stage(project: Path, stage: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"stages/{stage}.py", *args], cwd=project,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory):
    """Prepared tensors of a learnable synthetic set: 1000 train, 200 test images."""
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import prepare
    from cifar10_tutorial.data.prepared import load_prepared

    root = tmp_path_factory.mktemp("synth")
    make_cifar10_archive(root / "a.tar.gz", train_per_batch=200, test=200, seed=3)
    prepare(root / "a.tar.gz", root / "prepared", CIFAR10)
    return load_prepared(root / "prepared")


def tiny_params(**sections):
    """Params for quick runs: small batches and steps; ``train={...}`` etc. override."""
    from cifar10_tutorial.params import params_from_dict

    raw = {"train": {"batch_size": 32, "max_steps": 20, "log_every": 5, "device": "cpu"},
           "run": {"checkpoint_every": 10, "summary_every": 10},
           "input": {"min_fraction_of_examples_in_queue": 0.1}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return params_from_dict(raw)


def write_prepared(data, folder: Path) -> Path:
    """``data`` (a Prepared) as the preprocess stage writes it, in ``folder``."""
    import json

    import numpy as np

    folder.mkdir(parents=True)
    for split in ("train", "test"):
        np.save(folder / f"{split}_images.npy", getattr(data, f"{split}_images"))
        np.save(folder / f"{split}_labels.npy", getattr(data, f"{split}_labels"))
    (folder / "meta.json").write_text(json.dumps(data.meta))
    return folder


def write_train_project(proj: Path, data, params: dict) -> Path:
    """A folder where stages/train.py runs on ``data`` (a Prepared) with ``params``."""
    import yaml

    proj.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "stages", proj / "stages", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "dvc.yaml", proj / "dvc.yaml")  # the stages' paths
    prep = proj / "data" / "prepared"
    if not prep.exists():
        write_prepared(data, prep)
    (proj / "params.yaml").write_text(yaml.safe_dump(main_sections(params)))
    return proj


def main_sections(params: dict) -> dict:
    """``params`` (e.g. ``to_dict`` of every section) cut to the sections params.yaml holds."""
    from cifar10_tutorial.params import MAIN

    return {k: v for k, v in params.items() if k in MAIN.sections}


@pytest.fixture(scope="session")
def exercise_run(tmp_path_factory):
    """Both pipelines of a tiny project, run once by `dvc repro` (the exercise pipeline
    first, then the main one) with every stage's params reads recorded: shared by the
    exercise pipeline's test (tests/test_ablation.py, which then changes the project) and
    the coverage test (tests/test_cache.py). Every variant but two of the same shape as
    others runs, and SVHN as a data-set variant. A dict: tmp, project, log (the reads, one
    JSON line per process), out (the exercise pipeline's `dvc repro` output), names (its
    variants)."""
    from cifar10_tutorial.data.synthetic import make_svhn_files

    tmp = tmp_path_factory.mktemp("exercises")
    make_svhn_files(tmp / "svhn", train=130, test=30, seed=9)  # >= one batch of 128
    project = tiny_project(
        tmp, dict(train_per_batch=100, test=100, seed=4), ablation={"max_steps": 12},
        # the main pipeline's run (the variants: ablation.max_steps)
        train=dict(log_every=2, device="cpu", max_steps=6), run=dict(checkpoint_every=2, summary_every=12,
                                                                      queue_threads=1),
        eval={"batch_size": 50})
    set_params(project, "ablations", schedule_fast={"train": {"schedule": "fast", "max_epochs": 2},
                                                     "eval": {"every_steps": 3}},
               schedule_tutorial={"train": {"max_epochs": 2}, "eval": {"every_steps": 3}},
               tutorial_100k={"train": {"max_steps": 14}, "eval": {"every_steps": 7}},
               schedule_fast_50={"train": {"schedule": "fast", "max_epochs": 3},
                                 "eval": {"every_steps": 3}})
    raw = yaml.safe_load((project / "reports/params.yaml").read_text())
    for name in ("schedule_fast_80", "baseline_seed1", "precision_bf16"):  # one of each shape is enough
        del raw["ablations"][name]
    raw["dataset_ablations"] = {"svhn": {"data": {"dataset": "svhn", "url": str(tmp / "svhn"),
                                                  "md5": None}}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "tiny ablations")
    log = tmp / "reads.jsonl"
    env = recording_reads(log)
    outs = []
    for target in (["reports/dvc.yaml:report"], []):
        proc = subprocess.run([DVC, "repro", *target], cwd=project, env=env,
                              capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(proc.stdout)
    return {"tmp": tmp, "project": project, "log": log, "out": outs[0],
            "names": list(raw["ablations"]), "dataset_names": list(raw["dataset_ablations"])}


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc: a guard, say)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(d.name))
        except (OSError, IndexError, ValueError):
            pass
    return found


def processes_in(folder) -> list[int]:
    """The processes whose working folder is ``folder`` or below it (none must outlive
    the command that ran them there)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cwd = os.readlink(d / "cwd")
            if d.name.isdigit() and (cwd == str(folder) or cwd.startswith(f"{folder}/")):
                found.append(int(d.name))
        except OSError:
            pass
    return found

