"""``cifar10 check-code``: do the exercise stages, with the workspace's code, still produce
what they produced with the code of the commit that made the committed exercise results?
If they do, the results stand for this code, and the exercise lock may say so.

A change of code in a variant's dependencies (a refactor, a comment, a new option that
is off by default) makes every variant stale in ``dvc status reports/dvc.yaml``, and
``dvc repro reports/dvc.yaml`` would retrain all of them. This runs each variant's own
stage command (reports/dvc.yaml's ``ablation@NAME``: its params, training, evaluation and
result files) at a short budget, one thread each, on a small data set (paused twice and
resumed, evaluated often), again on the workspace's own prepared data, the data the
results were made on (straight through, each variant's own evaluation, with the threads
a run takes), and again on the small data set straight through with OMP_NUM_THREADS=1
set all along (as users set it; each variant's own evaluation):
once with the code, reports/dvc.yaml and reports/params.yaml of ``--against`` (by
default the commit that last recorded ``reports/dvc.lock``) and once with the
workspace's, uncommitted edits included; then compares everything the stage writes: the
raw and averaged weights tensor for tensor, and every result file (metrics, evaluation
tables, curves, the variant's record), timings and the commit aside. It proves what those
short runs reach, and the learning rates and average decays of every step of the whole
runs (``learning_rate`` and ``ema_decay`` of both codes); not a change acting only later
in the loop, nor one keyed on what the check does not vary (another environment variable,
a file outside the code, reports/dvc.yaml and reports/params.yaml, such as .git/):
docs/exercises.md says what to run then.

Only when every variant agrees, and only when nothing but code changed for them (no data,
no result, no param change but one that leaves each variant's params as they were: a
key added or removed at its default, an override equal to what it overrides; ``dvc
status reports/dvc.yaml``), it records their stages as up to date, in one step:
the new lock is written beside the old and renamed over it, so an interrupted check
leaves the lock as it was or fully recorded. The report stage, whose own code writes the
report, is not recorded: the check's last line says to rerun it (``dvc repro -s
reports/dvc.yaml:report``, seconds) where its code changed. Any other
difference is one the variants' results do depend on: retraining them is then the honest
answer.

    cifar10 check-code                      # against the commit of reports/dvc.lock
    cifar10 check-code --against v1.2 --variant baseline --no-record
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import copy
import errno
import json
import math
import os
import re
import shutil
import shlex
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import yaml

from cifar10_tutorial.cli import dvc_executable
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import die_with_parent
from cifar10_tutorial.param_types import key_twice, load_yaml12
from cifar10_tutorial.params import twins

LOCK = Path("reports/dvc.lock")
EXERCISES = Path("reports/params.yaml")
PIPELINE = Path("reports/dvc.yaml")
CODE = ("src", "stages")  # the code trees a variant runs
TREE = (*CODE, str(PIPELINE), str(EXERCISES))  # and what says how it runs
VARIANT = "reports/dvc.yaml:ablation@"  # the stages whose every output the check compares
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# the short budget every variant is cut to, the same in both trees: steps where a variant
# counts steps, one epoch where it counts epochs, the held-out evaluation during training
# every few steps where it has one; all on the CPU, each at its own batch size
# (an odd number: the last step is off the evaluation grid, where a run evaluates anyway)
STEPS, EPOCHS, EVAL_EVERY = 13, 1, 2
# the small data set (its training images: a variant counting epochs crosses epoch ends in
# its 13 steps), and a second pass on the workspace's prepared data, what the results were
# trained and evaluated on (a change acting only on larger sets, on real images, or only
# on a fresh process, shows there), straight through, 13 steps (a variant counting epochs:
# 13 steps' worth at its own batch), each variant evaluated as it evaluates itself, at
# steps 12 and 13, one variant at a time with the threads a run takes (a change to how
# many shows there); synthetic data of CIFAR-10's sizes where the workspace has none
SMALL_TRAIN, FULL_TRAIN, FULL_HELD_OUT = 500, 50_000, 10_000
# the evaluation: in batches of EVAL_BATCH (several, the last one short, on the check's 50
# held-out images), and a held-out target every run reaches at its first evaluation (step
# 2, where the run is also paused: what a resume keeps of the targets reached shows); a
# trial's evaluation over TRIAL_IMAGES of them (fewer than the check's held-out images)
EVAL_BATCH, REACHED, TRIAL_IMAGES = 16, 0.01, 40
PAUSED = 75  # a stage's exit status when it paused at its deadline (CIFAR10_STOP_AT)
# how a pass runs each variant (run_variant): paused twice on one thread; straight through
# with the threads a run takes; straight through with OMP_NUM_THREADS=1 set all along
PAUSED_MODE, STRAIGHT, ONE_THREAD = "paused", "straight through", "one thread"
# what a result file records of the run rather than computes: when and where it ran, how
# fast, and which commit; everything else must be equal
# (a run's segments are computed: each one's steps from and to, which the model card prints;
# only their commit and times are records)
RECORD_KEYS = {"commit", "dirty", "cpu_load", "timestamp", "elapsed", "tensorboard_run"}
# a hash of the params: compared where both trees ran the same params (see differences)
PARAMS_HASH = "params_hash"
OWNER_RECORD = "owner.json"  # training.paths.OWNER, in a run's checkpoints folder
TIMING = re.compile(r"(^|_)(s|sec|secs|seconds|per_sec|per_sec_per_device|utc)$"
                    r"|^examples_per_sec")


def _parse_yaml(text: str, shown, fix: str):
    """``text``, the YAML file ``shown`` (reports/params.yaml, dvc.yaml, dvc.lock: the
    user's files), parsed: a mapping, or None for an empty file; else one line naming the
    file, the problem and its line, and ``fix``."""
    try:
        value = load_yaml12(text)  # as DVC reads them (YAML 1.2's numbers)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        where = f" on line {mark.line + 1}" if mark is not None else ""
        begun = getattr(exc, "context_mark", None)  # where the unclosed [ or " began
        if getattr(exc, "context", None) and begun is not None and mark is not None \
                and begun.line != mark.line:
            where += f", {exc.context} from line {begun.line + 1}"
        raise PipelineError(f"{shown}: not valid YAML ({problem}{where}); {fix}. Nothing was "
                            f"changed.") from None
    except (RecursionError, ValueError) as exc:  # nested without end, a huge integer
        raise PipelineError(f"{shown}: not YAML the check can read ({type(exc).__name__}); "
                            f"{fix}. Nothing was changed.") from None
    if value is not None and not isinstance(value, dict):
        raise PipelineError(f"{shown}: expected a YAML mapping (key: value lines), found a "
                            f"{type(value).__name__}; {fix}. Nothing was changed.")
    twice = key_twice(text)
    if twice:  # PyYAML keeps the last silently; DVC refuses the file
        raise PipelineError(f"{shown}: the key {twice[0]!r} appears twice (line {twice[1]}); "
                            f"keep one; {fix}. Nothing was changed.")
    if str(shown).endswith("dvc.lock") and value is not None \
            and not isinstance(value.get("stages", {}), dict):
        raise PipelineError(f"{shown}: expected stages: to be a mapping of stage names to "
                            f"their records, found a {type(value.get('stages')).__name__}; "
                            f"{fix}. Nothing was changed.")
    return value


def _read_yaml(path: Path, shown=None, fix: Optional[str] = None):
    """The YAML file ``path`` parsed (see _parse_yaml); ``shown``: the name to give it."""
    shown = shown or path
    fix = fix or f"fix it (`git diff {shown}` shows what changed since its commit), then rerun"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{shown}: cannot be read ({getattr(exc, 'strerror', None) or exc}); "
                            f"{fix}. Nothing was changed.") from None
    return _parse_yaml(text, shown, fix)


def _fix_of(where: str) -> str:
    """What to do about a damaged file of the workspace, or of the commit ``where``."""
    if where == "the workspace":
        return "fix it, then rerun"
    return "give --against a commit whose file is whole"


def _git(*args: str, cwd: Path = Path(".")) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise PipelineError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout.strip()


def lock_commit(root: Path) -> str:
    """The commit that last recorded the exercise lock."""
    commit = _git("log", "-1", "--format=%H", "--", str(LOCK), cwd=root)
    if not commit:
        raise PipelineError(f"{LOCK}: never committed here; give --against COMMIT")
    return commit


def _tree_of(commit: str, root: Path, dest: Path) -> Path:
    """What a variant runs (code, reports/dvc.yaml, reports/params.yaml) at ``commit``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, *TREE], cwd=root, capture_output=True)
    if archive.returncode:
        raise PipelineError(f"--against {commit}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def _workspace_tree(root: Path, dest: Path) -> Path:
    """The workspace's code, reports/dvc.yaml and reports/params.yaml as they are."""
    for part in TREE:
        if (root / part).is_dir():
            shutil.copytree(root / part, dest / part,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / part, dest / part)
    return dest


def fingerprint(root: Path) -> dict:
    """The md5 of every file of the workspace a variant runs (TREE), by path."""
    from cifar10_tutorial.files import md5_of

    found = {}
    for part in TREE:
        files = [root / part] if (root / part).is_file() else (root / part).rglob("*")
        found |= {str(f.relative_to(root)): md5_of(f) for f in files
                  if f.is_file() and "__pycache__" not in f.parts}
    return found


def _fixed_data(tmp: Path, data: Optional[Path], num_train: int = SMALL_TRAIN,
                num_test: int = 50, name: str = "small") -> Path:
    """``--data`` where given, else a synthetic CIFAR-10 archive of ``num_train`` training
    images (rounded up to its five batches) and ``num_test`` held-out ones, prepared by the
    stage's own code into ``tmp``."""
    if data is not None:
        meta = Path(data) / "meta.json"
        if not meta.is_file():
            what = ("no meta.json" if not meta.exists() and not meta.is_symlink() else
                    "its meta.json is not a regular file")
            raise PipelineError(f"--data {data}: not prepared data ({what}); give the "
                                f"folder the preprocess stage writes (its output in dvc.yaml)")
        from cifar10_tutorial.data.prepared import PrepareError, load_prepared

        try:  # damaged data: said of --data here, not of a run's link to it in a scratch tree
            load_prepared(data)
        except PrepareError as exc:
            raise PipelineError(f"--data {data}: {exc}") from None
        return Path(data).resolve()
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.preprocess import prepare
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    archive, out = tmp / f"{name}.tar.gz", tmp / f"prepared-{name}"
    make_cifar10_archive(archive, train_per_batch=-(-num_train // 5), test=num_test, seed=7)
    prepare(archive, out, CIFAR10)
    archive.unlink()
    return out


def short_budget(raw: dict, num_train: Optional[int] = None, own_eval: bool = False) -> dict:
    """reports/params.yaml (parsed) with every variant cut to the check's budget: STEPS
    where a variant counts steps, where it counts epochs EPOCHS, or (``num_train``, the
    training set's size) STEPS' worth at its own global batch; the same cut in both trees,
    so that only the code and its own params differ. ``own_eval``: each variant's own
    evaluation (batch size, targets, a trial's images), at the step before the last and at
    the last, where it evaluates while training at all; else the check's (batches of
    EVAL_BATCH every EVAL_EVERY steps, a target reached)."""
    import torch

    from cifar10_tutorial.params import TrainParams

    raw = copy.deepcopy(raw)
    base = raw.get("train") if isinstance(raw.get("train"), dict) else {}

    def epochs(train: dict) -> float:
        if num_train is None:
            return EPOCHS
        batch = train.get("batch_size", base.get("batch_size", TrainParams.batch_size))
        devices = train.get("num_devices", base.get("num_devices", TrainParams.num_devices))
        if not (isinstance(batch, int) and isinstance(devices, int)):
            return EPOCHS  # refused by the stage's own params check, in both trees
        return (STEPS - 0.5) * batch * devices / num_train  # STEPS steps, rounded up

    def cut(sections: dict) -> None:
        train, ev = sections.get("train"), sections.get("eval")
        if isinstance(train, dict):
            if train.get("device") is not None and (torch.cuda.is_available()
                                                    or train["device"] not in ("auto", "cpu")):
                # the CPU's path: where `auto` picks the CPU here it stays as the variant
                # writes it, so that code keyed on the setting runs as in its own run
                train["device"] = "cpu"
            if "max_steps" in train:
                train["max_steps"] = STEPS
            if train.get("max_epochs") is not None:
                train["max_epochs"] = epochs(train)
        if isinstance(ev, dict) and own_eval:
            # twice: one step before the last (a point inside the run) and at the last,
            # off the grid (where a run evaluates all the same); a run counting epochs
            # ends near STEPS too
            if isinstance(ev.get("every_steps"), int) and ev["every_steps"] > 0:
                ev["every_steps"] = STEPS - 1
        elif isinstance(ev, dict):
            if "batch_size" in ev:
                ev["batch_size"] = EVAL_BATCH
            if isinstance(ev.get("every_steps"), int) and ev["every_steps"] > 0:
                ev["every_steps"] = EVAL_EVERY
            targets = ev.get("targets")
            if isinstance(targets, list) and all(isinstance(t, (int, float)) for t in targets):
                ev["targets"] = sorted({REACHED, *targets})

    # the baseline's device, its default written out: the cut applies to it too
    train = raw.setdefault("train", {})
    if isinstance(train, dict):
        train.setdefault("device", TrainParams.device)
    from cifar10_tutorial.params import EvalParams

    # the baseline's evaluation, its defaults written out: the cut applies to them too
    ev = raw.setdefault("eval", {})
    if isinstance(ev, dict):
        ev.setdefault("batch_size", EvalParams.batch_size)
        ev.setdefault("every_steps", EvalParams.every_steps)
        ev.setdefault("targets", list(EvalParams().targets))
    cut(raw)
    ablation = raw.setdefault("ablation", {})
    ablation["max_steps"] = STEPS
    if ablation.get("trial_steps") is not None:  # results of a trial: its path runs too
        ablation["trial_steps"] = STEPS
        if ablation.get("trial_eval_images", 2000) is not None and not own_eval:
            ablation["trial_eval_images"] = TRIAL_IMAGES
    for overrides in (raw.get("ablations") or {}).values():
        if isinstance(overrides, dict):
            cut(overrides)
    raw["dataset_ablations"] = {}  # their own data: not what this check runs
    return raw


class Runs:
    """The stage commands running now, each in a process group of its own: an interrupted
    check (Ctrl-C, SIGTERM) stops them all, and none outlives it."""

    def __init__(self):
        self.procs: set = set()
        self.lock = threading.Lock()
        self.stopping = False

    def run(self, command: str, cwd: Path, env: dict,
            cpu: Optional[int] = None) -> subprocess.CompletedProcess:
        """``command``'s outcome; with ``cpu``, the process may run on that CPU only (the
        CPUs a run is granted decide the threads it takes)."""
        def before():
            die_with_parent(signal.SIGKILL)
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            proc = subprocess.Popen(["sh", "-c", command], cwd=cwd, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=before)
            self.procs.add(proc)
        try:
            out, _ = proc.communicate(timeout=3600)
        finally:
            with self.lock:
                self.procs.discard(proc)
        return subprocess.CompletedProcess(command, proc.returncode, out, "")

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            for proc in self.procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def run_variant(runs: Runs, tree: Path, data: Path, name: str, what: str,
                mode: str = PAUSED_MODE, cpu: Optional[int] = None) -> Path:
    """Variant ``name``'s stage command, as ``tree``'s reports/dvc.yaml gives it, run in
    ``tree`` (the stage's wdir) on ``data``; the tree it wrote in. ``mode``: paused twice
    (PAUSED_MODE), on one thread each segment; straight through with the threads a run
    takes (STRAIGHT, the code's own choice, as a run of the stage); or straight through
    with OMP_NUM_THREADS=1 set all along (ONE_THREAD, as users set it: code that acts only
    with the variable set, in training or in the evaluation, runs). The paused runs' one
    thread comes from each of the ways a run can get it: the first segment from
    OMP_NUM_THREADS=1, the other two from the code's own choice on one CPU (the process
    pinned to CPU ``cpu``), so that a change to either way shows."""
    pauses = mode == PAUSED_MODE
    pipeline = _read_yaml(tree / PIPELINE, f"{PIPELINE} of {what}", _fix_of(what)) or {}
    try:
        command = pipeline["stages"]["ablation"]["do"]["cmd"]
    except (KeyError, TypeError):
        raise PipelineError(f"{PIPELINE} of {what}: expected an ablation stage with a "
                            f"foreach ... do: cmd: (the variants' stage command); found none; "
                            f"{_fix_of(what)}") from None
    command = " ".join(_one_command(command, f"{PIPELINE} of {what}").split()
                       ).replace("${key}", name)  # a checked name (NAME)
    prepared = tree / "data" / "prepared"
    if not prepared.exists():
        prepared.parent.mkdir(parents=True, exist_ok=True)
        prepared.symlink_to(data, target_is_directory=True)
    # the environment DVC gives a stage command (its root and the stage's address)
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env = {**os.environ, **(one if mode != STRAIGHT else {}),
           "PYTHONPATH": str(tree / "src"), "DVC_STAGE": f"{VARIANT}{name}",
           "DVC_ROOT": str(tree)}
    for var in ("CIFAR10_STOP_AT", "CIFAR10_CHECKPOINT_MIRROR",
                # straight through, the code chooses its threads (OMP_NUM_THREADS set in
                # your shell would take that choice, and a change to it, out of the check;
                # the first pass runs the other branch, the variable set)
                *(() if mode != STRAIGHT else ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))):
        env.pop(var, None)
    if pauses:  # a checkpoint mirror (beside the tree: its files are not results)
        env["CIFAR10_CHECKPOINT_MIRROR"] = str(tree.parent / f"{tree.name}-mirror")
    # paused after its first step and again after its second, then continued: the
    # checkpoint and resume path runs too, and the record of a run in three segments
    # (exact resume makes the outputs those of a run straight through); the second time
    # as on another machine, from the mirror alone (what it keeps is what continues)
    proc = runs.run(f"exec {command}", tree, {**env, "CIFAR10_STOP_AT": "0"} if pauses else env)
    one_cpu = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if proc.returncode == PAUSED:
        proc = runs.run(f"exec {command}", tree, {**one_cpu, "CIFAR10_STOP_AT": "0"}, cpu)
    if proc.returncode == PAUSED:
        for folder in _run_folders(command.replace("{variant}", name), tree):
            shutil.rmtree(folder, ignore_errors=True)
        proc = runs.run(f"exec {command}", tree, one_cpu, cpu)
    if proc.returncode:
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise PipelineError(f"variant {name} did not run with {what}: {last}"
                            + _scratch_full(tree, last))
    return tree


def _scratch_full(tree: Path, said: str) -> str:
    """Where a variant ran out of disk in this check's scratch folder, what to do: the
    scratch lives in the temporary folder (TMPDIR), not in the stage's outputs."""
    if os.strerror(errno.ENOSPC) not in said:
        return ""
    if str(tree.parent) not in said and "an output file:" not in said:  # a full disk elsewhere
        return ""
    free = shutil.disk_usage(tree.parent).free
    return (f" (the check's scratch folder {tree.parent} is in the temporary folder, "
            f"{free / 1e9:.1f} GB free there: point TMPDIR at a folder with a few GB free, "
            f"then rerun)")


def _one_command(cmd, where) -> str:
    """The ablation stage's command: a string, or a list of one (DVC takes both); a list of
    several (DVC runs each in turn) is one line: the check runs a variant's one command."""
    if isinstance(cmd, list) and len(cmd) == 1:
        cmd = cmd[0]
    if not isinstance(cmd, str):
        raise PipelineError(f"{where}: the ablation stage's cmd: expected one command (a "
                            f"string, or a list of one), found "
                            f"{f'{len(cmd)} commands' if isinstance(cmd, list) else repr(cmd)}; "
                            f"the check runs a variant's one command: write it as one")
    return cmd


def _run_folders(command: str, tree: Path) -> list[Path]:
    """The folders a variant's stage command writes in ``tree`` (--work, --trial-work,
    --out; ``--flag value`` or ``--flag=value``): what another machine would not have."""
    words, found = shlex.split(command), []
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag in ("--work", "--trial-work", "--out"):
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            folder = (tree / value).resolve()
            if value and folder.is_relative_to(tree.resolve()) and folder != tree.resolve():
                found.append(folder)
    return found


# What a variant's whole run will do that its 13 steps here do not reach: the learning rate
# of every step and the decay of every weight-average update, from the tree's own code and
# its own reports/params.yaml at the full budget, for a training set of each size in
# argv[2:]. Run in each tree (its code on sys.path); printed as JSON, a digest per variant.
PLAN = """
import hashlib, json, struct, sys
from cifar10_tutorial.params import EXERCISES, load_params, variant_params
from cifar10_tutorial.training.optimization import (averaging_decay, ema_decay,
                                                    learning_rate, schedule)
params = load_params("reports/params.yaml", EXERCISES)
out = {}
for name in json.loads(sys.argv[1]):
    vp, h = variant_params(params, name), hashlib.sha256()
    for num_train in map(int, sys.argv[2:]):
        s = schedule(vp, num_train, vp.train.batch_size * vp.train.num_devices)
        d = averaging_decay(vp)
        for step in range(s.steps):
            h.update(struct.pack("<dd", learning_rate(step, s), ema_decay(d, step + 1)))
        h.update(str(s.steps).encode())
    out[name] = h.hexdigest()
print(json.dumps(out))
"""


def plans(runs: "Runs", tree: Path, names: list[str], sizes: list[int], what: str) -> dict:
    """Each variant's :data:`PLAN` digest, as ``tree``'s code and params give it."""
    script = tree.parent / f"plan-{tree.name}.py"
    script.write_text(PLAN)
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
    words = [sys.executable, str(script), json.dumps(names), *map(str, sizes)]
    proc = runs.run("exec " + " ".join(shlex.quote(w) for w in words), tree, env)
    if not proc.returncode:  # else: its error, not a schedule that differs
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    raise PipelineError(f"{LOCK} left as it is: the learning rates and weight averages of the "
                        f"variants' whole runs could not be computed with {what}'s code ({last}); "
                        f"the check cannot vouch for what its short runs do not reach: retrain "
                        f"the variants (dvc repro {PIPELINE})")


def _recorded(key, same_params: bool) -> bool:
    """Whether entry ``key`` records the run (when, where, how fast) rather than computes."""
    key = str(key)
    return (key in RECORD_KEYS or bool(TIMING.search(key))
            or (key == PARAMS_HASH and not same_params))


def _computed(value, same_params: bool):
    """``value`` (parsed JSON) without what it records of the run rather than computes
    (when, where: the commit, the load); its times and speeds kept by their kind only: they
    differ run to run, not whether the run writes them, nor as what (the report refuses
    a time that is text)."""
    def kind(v) -> str:
        return ("a number" if isinstance(v, (int, float)) and not isinstance(v, bool)
                else type(v).__name__)

    if isinstance(value, dict):
        return {k: (f"(a time or speed: {kind(v)})" if TIMING.search(str(k))
                    else _computed(v, same_params)) for k, v in value.items()
                if not (str(k) in RECORD_KEYS or (k == PARAMS_HASH and not same_params))}
    if isinstance(value, list):
        return [_computed(v, same_params) for v in value]
    return value


def _tsv(text: str) -> list[list[str]]:
    """A curve as compared: its header whole (a column one tree alone writes is a change of
    form), each row without the values of record columns (a timestamp)."""
    rows = [line.split("\t") for line in text.splitlines()]
    keep = [i for i, h in enumerate(rows[0] if rows else []) if h not in RECORD_KEYS]
    return rows[:1] + [[row[i] for i in keep if i < len(row)] for row in rows[1:]]


def _tensors(path: Path, same_params: bool = True) -> dict:
    """Every entry of a model or checkpoint file, flat by its path of keys, but records."""
    import torch

    return _flat(torch.load(path, map_location="cpu", weights_only=True),
                 lambda k: _recorded(k, same_params))


JSON_TEXT = ("segments", "targets_reached")  # checkpoint entries that are JSON text


def _flat(value, skip=lambda key: False) -> dict:
    """``value``'s leaves by their path of keys (``model.lrn``, ``segments.0.to_step``),
    leaving out the entries whose key ``skip`` says; a checkpoint's segments and targets
    reached (JSON text, as checkpoints hold them) are read as what they hold, so that
    their times are left out too."""
    flat: dict = {}

    def walk(value, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                if skip(k):
                    continue
                if k in JSON_TEXT and isinstance(v, str):
                    try:
                        v = json.loads(v)
                    except ValueError:
                        pass
                walk(v, f"{prefix}{k}.")
        elif isinstance(value, (list, tuple)) and value:
            for i, v in enumerate(value):
                walk(v, f"{prefix}{i}.")
        else:
            flat[prefix.rstrip(".")] = value

    walk(value, "")
    return flat


def _equal(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    return a == b


def written(tree: Path) -> set[Path]:
    """The files the stage commands wrote in ``tree``: all but what it ran (TREE), the data
    it read, the run locks (a pid and a time), TensorBoard's event files (the host and
    the time in their names) and the record of whose run a folder is (checkpoints/
    owner.json: who ran, not what a run computes)."""
    found = set()
    for folder, dirs, files in os.walk(tree):  # links are not followed: the data is one
        here = Path(folder).relative_to(tree)
        dirs[:] = [d for d in dirs if d not in ("tensorboard", "__pycache__")
                   and str(here / d) not in TREE]
        found |= {here / f for f in files
                  if str(here / f) not in TREE and not f.endswith(".run-lock")
                  and not (f == OWNER_RECORD and here.name == "checkpoints")}
    return found


NOT_JSON = object()  # what differences() reads in a .json file that holds no JSON


def differences(theirs: Path, ours: Path) -> tuple[list[str], int]:
    """What the variants wrote differently in the two trees (by path; in a file of
    tensors, which tensor), and how many tensors were compared."""
    found, compared, defaults, loaded = [], 0, _defaults(), {}

    def tensors(path: Path) -> Optional[dict]:  # each file read once (records but the
        if path not in loaded:                  # params hash out); None: not a model file
            try:
                loaded[path] = _tensors(path)
            except Exception:  # noqa: BLE001 (torch.load's many errors: the file is damaged)
                loaded[path] = None
        return loaded[path]

    def parsed(path: Path):  # JSON as written, or NOT_JSON where it is no JSON text
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            return NOT_JSON

    # the params hash of a run changes with its params: where both trees ran the same
    # reports/params.yaml and the workspace's code records no param the other's lacks (a
    # field added at its default), it must be the same
    added = any({k for k in tensors(ours / rel) or {} if _param_key(k)}
                - {k for k in tensors(theirs / rel) or {} if _param_key(k)}
                for rel in written(ours) if rel.name == "model.pt" and (theirs / rel).is_file())
    same = not added and (theirs / EXERCISES).read_bytes() == (ours / EXERCISES).read_bytes()
    # the results first, then the models, then the checkpoints they were resumed from
    for rel in sorted(written(theirs) | written(ours),
                      key=lambda r: ("checkpoints" in r.parts, r.suffix == ".pt", str(r))):
        a, b = theirs / rel, ours / rel
        if not a.is_file() or not b.is_file():
            found.append(f"{rel} (written by one tree only)")
        elif a.read_bytes() == b.read_bytes():
            continue  # the same bytes: the same, whatever the file holds
        elif TIMING.search(rel.stem):
            # a curve of the speed (examples_per_sec.tsv): how fast differs run to run, not
            # the steps it is logged at, by which the report times the targets reached
            if rel.suffix == ".tsv" and _steps(a.read_text(errors="replace")) != \
                    _steps(b.read_text(errors="replace")):
                found.append(f"{rel} (the steps it logs)")
        elif rel.suffix == ".pt" and (tensors(a) is None or tensors(b) is None):
            found.append(f"{rel} (not a model file as one tree wrote it)")
        elif rel.suffix == ".pt":
            ta, tb = ({k: v for k, v in tensors(f).items()
                       if same or k.rsplit(".", 1)[-1] != PARAMS_HASH} for f in (a, b))
            compared += len(tb)
            found += [f"{rel}:{k}" for k in sorted(set(ta) | set(tb))
                      if not (k in ta and k in tb and _equal(ta[k], tb[k]))
                      # the params a model file records: a key only the workspace's code
                      # knows, at its default, computes nothing new (the lock's check)
                      and not (k not in ta and _param_key(k) in defaults
                               and defaults[_param_key(k)] == tb[k])]
        elif rel.suffix == ".json" and NOT_JSON in (parsed(a), parsed(b)):
            found.append(f"{rel} (not JSON as one tree wrote it)")
        elif rel.suffix == ".json":
            # as written: 128 and 128.0, true and 1 are other values to the report
            if json.dumps(_computed(parsed(a), same), sort_keys=True) != \
                    json.dumps(_computed(parsed(b), same), sort_keys=True):
                found.append(str(rel))
        elif rel.suffix == ".tsv":
            if _tsv(a.read_text(errors="replace")) != _tsv(b.read_text(errors="replace")):
                found.append(str(rel))
        elif a.read_bytes() != b.read_bytes():
            found.append(str(rel))
    return found, compared


def _steps(text: str) -> list[list[str]]:
    """A speed curve as compared: its header whole, then each row's step and the kind of
    each other value (a speed is a positive number; its value differs run to run)."""
    def kind(value: str) -> str:
        try:
            number = float(value)
        except ValueError:
            return repr(value[:20])
        return "a positive number" if math.isfinite(number) and number > 0 else value[:20]

    rows = [line.split("\t") for line in text.splitlines()]
    return rows[:1] + [row[:1] + [kind(v) for v in row[1:]] for row in rows[1:]]


def _param_key(path: str) -> Optional[str]:
    """``model.norm`` for an entry ``params.model.norm`` or ``signature.params.model.norm``
    of a model or checkpoint file: the params it records."""
    m = re.search(r"(?:^|\.)params\.(.+)$", path)
    return m.group(1) if m else None


def _defaults() -> dict:
    """The workspace code's default params, flat (``model.lrn``: True)."""
    from cifar10_tutorial.params import params_from_dict, to_dict

    return _flat(to_dict(params_from_dict({})))


# ----------------------------------------------------------------- what may be recorded


def _added_defaults(recorded, current, defaults) -> bool:
    """``current`` is ``recorded`` plus keys set to their defaults (``defaults``: the
    workspace code's values of that section), nothing else."""
    if not isinstance(recorded, dict) or not isinstance(current, dict):
        return recorded == current
    if set(recorded) - set(current):
        return False
    for key, value in current.items():
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if key not in recorded:
            if not isinstance(defaults, dict) or key not in defaults or value != default:
                return False
        elif not _added_defaults(recorded[key], value, default):
            return False
    return True


def _lookup(raw, dotted: str):
    for part in dotted.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return None
        raw = raw[part]
    return raw


def _nested(dotted: dict) -> dict:
    """``{"train.seed": 1, "ablations.x": {...}}`` as the mapping reports/params.yaml holds."""
    raw: dict = {}
    for key, value in dotted.items():
        *parents, last = key.split(".")
        at = raw
        for part in parents:
            at = at.setdefault(part, {})
            if not isinstance(at, dict):
                return {}
        at[last] = copy.deepcopy(value)
    return raw


def _same_run_params(recorded: dict, current: dict, name: str) -> bool:
    """The variant ``name`` computed from the params its stage reads as the lock records
    them and as they are now (each resolved by the workspace's code: its sections, its
    defaults, the variant's overrides and budget) is the same run: a key added or removed
    at its default, or an override equal to the baseline's own value, computes nothing
    new. Params the code cannot read are no such case."""
    from cifar10_tutorial.params import ParamsError, params_from_dict, to_dict, variant_params

    try:
        made = [to_dict(variant_params(params_from_dict(_nested(p)), name))
                for p in (recorded, current)]
    except (ParamsError, TypeError, ValueError, KeyError, AttributeError):
        return False
    return made[0] == made[1]


def _params_change_computes_nothing(root: Path, stage: str, keys: dict) -> list[str]:
    """The params of ``stage`` that changed in more than what computes nothing new: keys
    added or removed at their defaults, an override equal to the value it overrides."""
    from cifar10_tutorial.params import params_from_dict, to_dict

    lock = _read_yaml(root / LOCK, LOCK) or {}
    recorded = (((lock.get("stages") or {}).get(stage.split(":", 1)[1]) or {})
                .get("params") or {}).get(str(EXERCISES)) or {}
    current = _read_yaml(root / EXERCISES, EXERCISES) or {}
    # the stage's params as they are now: the keys the lock records, and any DVC found new
    now = {}
    for key in {*recorded, *keys}:
        at, found = current, True
        for part in key.split("."):
            found = isinstance(at, dict) and part in at
            if not found:
                break
            at = at[part]
        if found:
            now[key] = at
    if _same_run_params(recorded, now, stage.split("@", 1)[-1]):
        return []
    defaults = to_dict(params_from_dict({}))
    changed = [key for key, state in keys.items()
               if not (state == "modified" and key.split(".")[0] in defaults
                       and _added_defaults(recorded.get(key), _lookup(current, key),
                                           _lookup(defaults, key)))]
    return changed or list(keys)


def _report_stale(root: Path) -> bool:
    """Whether `dvc status` finds the report stage changed (the check never records it:
    rerunning it takes seconds)."""
    proc = subprocess.run([dvc_executable(), "status", "--json", f"{PIPELINE}:report"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    try:
        return proc.returncode == 0 and bool(json.loads(proc.stdout or "{}"))
    except ValueError:
        return False


def stale_variants(root: Path, only: Optional[list[str]] = None) -> tuple[list[str], str]:
    """The variant stages ``dvc status reports/dvc.yaml`` finds changed in code (their
    code files, their command) or in params that leave each variant's own the same, and what
    else it found, in words (a changed param, data or result; a data-set variant, whose
    data preparation the check does not run). ``only``: those variants' stages alone (what
    other stages await, a variant never run say, is theirs to settle)."""
    proc = subprocess.run([dvc_executable(), "status", "--json", str(PIPELINE)],
                          cwd=root, capture_output=True, text=True)
    if proc.returncode:
        if "Unable to acquire lock" in proc.stderr:
            raise PipelineError(f"{LOCK} left as it is: another DVC command is running in "
                                f"this repository (it holds DVC's lock); try again once it "
                                f"has ended")
        return [], f"dvc status failed: {proc.stderr.strip()}"
    stages, other = [], []
    locked = (_read_yaml(root / LOCK, LOCK) or {}).get("stages") or {} \
        if (root / LOCK).is_file() else {}
    for stage, changes in json.loads(proc.stdout or "{}").items():
        if stage == "reports/dvc.yaml:report":
            continue  # rerun, not recorded: its code writes the report itself (seconds)
        if only is not None and stage not in {VARIANT + n for n in only}:
            continue
        if stage.startswith(VARIANT) and stage.split(":", 1)[1] not in locked:
            # no results of any code to compare with: its first run is dvc repro's
            other.append(f"{stage} never run (no entry in {LOCK}; run it first: dvc repro "
                         f"-s {stage}, or check the others with --variant)")
            continue
        found = []
        for change in changes:
            # a changed command (reports/dvc.yaml) is not code the check can vouch for: it
            # runs in a scratch copy, and a command may tell that copy from the repository
            if not isinstance(change, dict):
                found.append(f"{stage}: {change}")
                continue
            for kind, paths in change.items():
                for path, state in (paths.items() if isinstance(paths, dict) else []):
                    if kind == "changed deps" and path == str(EXERCISES) \
                            and isinstance(state, dict):
                        found += [f"{stage}: {path} {key} changed" for key in
                                  _params_change_computes_nothing(root, stage, state)]
                    elif not (kind == "changed deps" and state == "modified"
                              and path.split("/")[0] in CODE):
                        found.append(f"{stage}: {path} {state}")
        if not stage.startswith(VARIANT):
            found.append(f"{stage}: not a variant the check runs")
        other += found
        stages += [] if found else [stage]
    return stages, "; ".join(other[:3]) + (" ..." if len(other) > 3 else "")


def record(root: Path, stages: list[str], ran: Optional[dict] = None) -> None:
    """Record ``stages`` in reports/dvc.lock as DVC's own ``dvc commit -f`` would, written
    aside and renamed over the lock in one step; then ``dvc status`` must find them up to
    date, or the lock is put back as it was. ``ran``: the md5 of each file of the code the
    check ran (:func:`fingerprint`), which the lock's entries must record."""
    from dvc.lock import LockError
    from dvc.repo import Repo

    from cifar10_tutorial.files import write_text_atomic

    try:
        with Repo(str(root)) as repo, repo.lock:  # read, change and write under DVC's lock
            before = _record(root, repo, stages, ran)
    except LockError:  # another DVC command took it while the variants ran
        raise PipelineError(f"{LOCK} left as it is: another DVC command took DVC's lock "
                            f"while the check ran; run the check again once it has "
                            f"ended") from None
    still, _ = stale_variants(root)
    left = sorted(set(still) & set(stages))
    if left:
        write_text_atomic(root / LOCK, before)
        raise PipelineError(f"{LOCK} left as it is: recorded, {', '.join(left)} still showed "
                            f"as changed in dvc status; retrain them (dvc repro {PIPELINE})")


def _record(root: Path, repo, stages: list[str], ran: Optional[dict]) -> str:
    """:func:`record`'s part under DVC's lock: each stage's entry as DVC makes it, checked
    to differ from the lock's in code only, then the lock written; its text before."""
    from dvc.stage.serialize import to_lockfile
    from dvc.utils.serialize import dumps_yaml

    from cifar10_tutorial.files import md5_of, write_text_atomic

    before = (root / LOCK).read_text()
    lock = _parse_yaml(before, LOCK, "fix it, then rerun") or {}
    lock.setdefault("stages", {})
    for address in stages:
        (stage,) = repo.stage.collect(address)
        stage.save()
        for name, entry in to_lockfile(stage).items():
            moved = _more_than_code(lock["stages"].get(name) or {}, entry, address)
            # the code as DVC hashes it now, not as the check ran it: edited since
            moved = moved or next((f"{e['path']} changed after the check ran it; run the "
                                   f"check again once your edits are done"
                                   for e in entry.get("deps") or []
                                   if ran is not None and e["path"] in ran
                                   and e.get("md5") != ran[e["path"]]), None)
            moved = moved or _unlisted_code(root, stage.cmd, entry, address)
            # the pipeline and params as DVC reads them now, not as the check ran them
            moved = moved or next((f"{path} changed after the check ran it; run the check "
                                   f"again once your edits are done"
                                   for path in (str(PIPELINE), str(EXERCISES))
                                   if ran is not None and ran.get(path) is not None
                                   and md5_of(root / path) != ran[path]), None)
            if moved:  # data or results replaced while the variants ran, or declared
                raise PipelineError(f"{LOCK} left as it is: {moved}, or retrain (dvc "
                                    f"repro {PIPELINE})")
            lock["stages"][name] = entry
    write_text_atomic(root / LOCK, dumps_yaml(lock))
    return before


def _unlisted_code(root: Path, cmd, entry: dict, address: str) -> Optional[str]:
    """A module the stage's script imports that its deps in reports/dvc.yaml do not list:
    recorded, the lock would let a later change to that module pass as up to date (DVC
    hashes only the deps). None when every module it can run is listed."""
    from stage_imports import import_closure

    words = shlex.split(cmd if isinstance(cmd, str) else " ".join(cmd))
    script = next((w for w in words if w.endswith(".py")), None)
    if script is None or not (root / script).is_file():
        return f"{address} runs no stage script the check can read ({' '.join(words)[:80]})"
    deps = [e["path"].rstrip("/") for e in entry.get("deps") or []]
    missing = sorted(p for p in import_closure(root, root / script)
                     if not any(p == d or p.startswith(d + "/") for d in deps))
    if missing:
        return (f"{address} runs {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}, "
                f"which its deps in {PIPELINE} do not list (DVC would not see "
                f"{'it' if len(missing) == 1 else 'them'} change); list "
                f"{'it' if len(missing) == 1 else 'them'} (python devtools/stage_deps.py "
                f"--write), then rerun the check")
    return None


def _more_than_code(old: dict, new: dict, address: str) -> Optional[str]:
    """What, besides code, ``new`` (the stage's lock entry now) records unlike ``old``: a
    dependency (not code) or output whose hash changed, or dependencies, outputs or params
    that reports/dvc.yaml now declares otherwise (DVC's status does not show a dependency
    or a param taken out of a stage: recording it would let a later change to it pass as
    up to date); None when only code differs."""
    for kind, what in (("deps", "dependencies"), ("outs", "outputs")):
        was = {e["path"]: e for e in old.get(kind) or []}
        now = {e["path"] for e in new.get(kind) or []}
        # a module taken into or out of the deps is code, which the check ran: what the
        # stage runs and its deps do not list is refused by _unlisted_code
        if kind == "deps":
            was = {p: e for p, e in was.items() if p.split("/")[0] not in CODE}
            now = {p for p in now if p.split("/")[0] not in CODE}
        if set(was) != now:
            return (f"{PIPELINE} declares other {what} for {address} than the lock records "
                    f"({', '.join(sorted(set(was) ^ now)[:3])} added or removed), a change "
                    f"of the stage the check does not vouch for")
        for e in new.get(kind) or []:
            if kind == "deps" and e["path"].split("/")[0] in CODE:
                continue
            if {k: v for k, v in e.items()} != was.get(e["path"]):
                return (f"{e['path']} of {address} is not what the lock records, and the "
                        f"check did not make it; restore it")
    params, recorded = new.get("params") or {}, old.get("params") or {}
    gone = sorted(f"{file}:{key}" for file, values in recorded.items()
                  for key in values or {} if key not in (params.get(file) or {}))
    if gone:
        return (f"{PIPELINE} declares fewer params for {address} than the lock records "
                f"({', '.join(gone[:3])} removed), a change of the stage the check does "
                f"not vouch for")
    return None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 check-code", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="the commit to compare with (default: the commit that "
                    "last recorded reports/dvc.lock)")
    ap.add_argument("--data", type=Path, help="prepared data for the first pass (default: "
                    "a synthetic archive of 500 training images; the second pass runs on the "
                    "workspace's prepared data, or a synthetic CIFAR-10-sized archive)")
    ap.add_argument("--variant", action="append", metavar="NAME",
                    help="check this variant only (repeatable); only what is checked is "
                         "recorded. Default: every variant whose stage is stale, or every "
                         "variant with --no-record")
    ap.add_argument("--no-record", action="store_true",
                    help="only compare; never touch reports/dvc.lock")
    args = ap.parse_args(argv)
    root = Path.cwd()
    missing = [n for n in CODE if not (root / n).is_dir()]
    if missing:  # the workspace's code is the code of the folder it runs in
        raise PipelineError(f"check-code: {root} is not the repository root of a checkout of "
                            f"this project (no {', '.join(f'{n}/' for n in missing)}); run it "
                            f"from the folder that holds src/ and stages/")
    for part in CODE:  # copied file by file: a link to a folder (a loop, or code elsewhere)
        for folder, dirs, _ in os.walk(root / part):  # is not followed, and is refused
            for d in dirs:
                link = Path(folder) / d
                if link.is_symlink():
                    raise PipelineError(f"{link.relative_to(root)}: a link to a folder (to "
                                        f"{os.readlink(link)}) in the code a variant runs; the "
                                        f"check copies that code file by file: put the folder "
                                        f"itself there, or remove the link")
    # the user's files the check reads, each damaged one one line before anything runs
    # (DVC's own messages about them span many lines)
    for path in (EXERCISES, PIPELINE, *([] if args.no_record else [LOCK])):
        if (root / path).is_file():
            _read_yaml(root / path, path)
    if (root / EXERCISES).is_file():  # the variants' params as the stages load them: a file
        from cifar10_tutorial.params import EXERCISES as EXERCISES_FILE, load_params

        load_params(root / EXERCISES, EXERCISES_FILE)  # they cannot load is its one line
    for name in args.variant or []:
        if not NAME.fullmatch(name):
            raise PipelineError(f"--variant {name!r}: expected a variant name (a letter, then "
                                f"letters, digits, '_' or '-', at most 64)")
    unknown = [n for n in args.variant or [] if n not in _variants(root / EXERCISES)]
    datasets = (_read_yaml(root / EXERCISES, EXERCISES) or {}).get("dataset_ablations") \
        if (root / EXERCISES).is_file() else None
    if unknown and isinstance(datasets, dict) and unknown[0] in datasets:
        raise PipelineError(f"--variant {unknown[0]}: a data-set variant (dataset_ablations: "
                            f"of {EXERCISES}), trained on data of its own, which the check "
                            f"does not prepare: retrain it (dvc repro -s "
                            f"{PIPELINE}:dataset_ablation@{unknown[0]})")
    if unknown:  # a typo must not pass as "nothing to record"
        raise PipelineError(f"--variant {unknown[0]}: not a variant of {EXERCISES} (its "
                            f"variants: {', '.join(_variants(root / EXERCISES)[:8])}"
                            f"{' ...' if len(_variants(root / EXERCISES)) > 8 else ''})")
    if not args.no_record and not (root / LOCK).is_file() and not (root / LOCK).is_symlink():
        raise PipelineError(f"{LOCK}: missing, so there is nothing to record in; restore it "
                            f"(`git checkout -- {LOCK}`), or compare only (--no-record)")
    if args.against is not None and not args.against.strip():  # `--against=`: no default
        raise PipelineError("--against '': names no commit; give a commit or a branch, or "
                            f"leave --against out (the commit that last recorded {LOCK})")
    against = args.against or lock_commit(root)
    try:
        short = _git("rev-parse", "--short", "--verify", "--end-of-options",
                     f"{against}^{{commit}}", cwd=root)
    except PipelineError:
        raise PipelineError(f"--against {against}: names no commit of this repository; give "
                            f"a commit or a branch (by default the commit that last recorded "
                            f"{LOCK})") from None
    if args.no_record:
        stages = []
        names = args.variant or _variants(root / EXERCISES)
    else:
        stages, other = stale_variants(root, args.variant)
        if other:
            raise PipelineError(f"{LOCK} left as it is: more than code changed for the "
                                f"exercise pipeline ({other}); a changed param or data is a "
                                f"change the results depend on, and missing data must be "
                                f"prepared first (docs/exercises.md)")
        names = [s[len(VARIANT):] for s in stages]
        if args.variant:
            names = [n for n in names if n in args.variant]
            stages = [VARIANT + n for n in names]
        if not names:
            report = ("; the report stage is stale (its own code or inputs changed): `dvc "
                      "repro -s reports/dvc.yaml:report` reruns it" if _report_stale(root)
                      else "")
            print(f"nothing to record: no variant stage of {LOCK} is stale for code alone "
                  f"({'among ' + ', '.join(args.variant) if args.variant else 'dvc status'})"
                  f"{report}")
            return
    bad = [n for n in names if not NAME.fullmatch(str(n))]
    if bad:
        raise PipelineError(f"{EXERCISES}: variant name {bad[0]!r}: expected a letter, then "
                            f"letters, digits, '_' or '-' (at most 64)")
    names = list(dict.fromkeys(names))
    if not args.no_record:
        _trained_where_the_check_runs(root, names)
    before = fingerprint(root)
    verdict, on = _compare(root, against, short, args.data, names,
                           None if args.no_record else stages)
    print(f"identical: {len(names)} variant(s) ({', '.join(names)}) wrote the same raw and "
          f"averaged weights and results with the workspace's code as with {short}'s, "
          f"{STEPS} steps each on {on} ({verdict} tensors in the model and checkpoint "
          f"files), and learning_rate() and ema_decay() give the same values over their "
          f"whole runs; not seen: a change acting only after step {STEPS} otherwise (in "
          f"the loop that applies those values, say), one keyed on what the check sets "
          f"for its runs (a budget longer than {STEPS} steps, the evaluation's steps, "
          f"batch size, targets or images; train.device where it would pick a GPU) or on "
          f"what it does not vary (an environment "
          f"variable but OMP_NUM_THREADS, one a cluster's scheduler sets say), or in how "
          f"times and speeds are measured "
          f"(they differ run to run, and are left out): for such a change, compare the "
          f"variant's trial before and after (docs/exercises.md)")
    if args.no_record:
        return
    after = fingerprint(root)
    edited = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if edited:  # the lock would record code the check did not run
        raise PipelineError(f"{LOCK} left as it is: {', '.join(edited[:3])} changed while the "
                            f"check ran; run it again once your edits are done")
    record(root, stages, before)
    print(f"recorded {len(stages)} variant stage(s) of {LOCK} as up to date for this code "
          f"(reports/params.yaml changed, if at all, only where each variant's params stay "
          f"the same: keys added or removed at their defaults, overrides equal to what they "
          f"override); "
          f"commit it with your change (`dvc repro -s reports/dvc.yaml:report` reruns the "
          f"report where its own code changed)")


def _trained_where_the_check_runs(root: Path, names: list[str]) -> None:
    """The check runs every variant on the CPU: results trained on another kind of device
    (a GPU's copies, kernels and collectives) are not vouched for by it, and not recorded."""
    try:  # the results folder the ablation stage writes for a variant ({variant}: its name)
        cmd = _read_yaml(root / PIPELINE, PIPELINE)["stages"]["ablation"]["do"]["cmd"]
        words = shlex.split(" ".join(_one_command(cmd, PIPELINE).split()))
    except (KeyError, TypeError, ValueError, IndexError):
        return  # no such stage: its variants are refused elsewhere
    outs = [w.split("=", 1)[1] if w.startswith("--out=") else words[i + 1]
            for i, w in enumerate(words)
            if w.startswith("--out=") or (w == "--out" and i + 1 < len(words))]
    if len(outs) != 1:
        raise PipelineError(f"{LOCK} left as it is: {PIPELINE}'s ablation command gives "
                            f"{'no' if not outs else 'several'} --out, so the check cannot "
                            f"tell where the variants' results are (to see which device "
                            f"trained them); give it one --out")
    out = outs[0]
    for name in names:
        folder = root / out.replace("{variant}", name).replace("${key}", name)
        devices = {}
        for record in (folder / "variant.json", folder / "train" / "provenance.json"):
            try:  # each record names the device; either one off the CPU is enough
                devices[record] = json.loads(record.read_text()).get("device_type")
            except (OSError, ValueError, AttributeError):
                pass  # none yet: its stage is not one the check records (dvc status says)
        off_cpu = [(r, d) for r, d in devices.items() if d not in (None, "cpu")]
        if off_cpu:
            record, device = off_cpu[0]
            raise PipelineError(f"{LOCK} left as it is: {record} says {name} was trained on "
                                f"{device}, and this check runs the CPU's code path only; "
                                f"retrain it with the new code (dvc repro -s "
                                f"{PIPELINE}:ablation@{name}), or check the others with "
                                f"--variant")


def _variants(path: Path) -> list[str]:
    if os.path.lexists(path) and not path.is_file():  # never read (a FIFO would hang)
        raise PipelineError(f"{path}: not a regular file (a folder, FIFO, device or broken "
                            f"link), where the exercises' variants are defined; restore it "
                            f"(`git checkout -- {EXERCISES}`)")
    raw = _read_yaml(path, EXERCISES) if path.is_file() else None
    names = list(((raw or {}).get("ablations") or {}))
    if not names:
        raise PipelineError(f"{path}: no variants under ablations: to check")
    return names


# its scratch folder's name (cifar10-check-PID-*) and the mark that says it is the check's
SCRATCH, MARK = "cifar10-check", ".cifar10-check-code"


def _scratch():
    """This check's scratch folder (files.scratch_folder: those killed checks left are
    removed first)."""
    from cifar10_tutorial.files import scratch_folder

    return scratch_folder(SCRATCH, MARK, "cifar10 check-code")


def _workspace_data(root: Path) -> Optional[Path]:
    """The workspace's prepared data (the preprocess stage's output, what the exercise
    results were made on), checked as the stages load it; None where it has none."""
    from cifar10_tutorial.cli import stage_output
    from cifar10_tutorial.data.prepared import PrepareError, load_prepared

    try:
        folder = root / stage_output("preprocess", dvc_yaml=root / "dvc.yaml")
    except PipelineError:
        return None
    if not (folder / "meta.json").exists() and not (folder / "meta.json").is_symlink():
        return None
    try:
        load_prepared(folder)
    except PrepareError as exc:
        raise PipelineError(f"{exc} (the check's second pass runs on the workspace's prepared "
                            f"data; move it away to run it on synthetic data)") from None
    return folder.resolve()


def _training_set_sizes(own: Optional[Path]) -> list[int]:
    """The training-set sizes a whole run's schedule is compared at: those of the
    workspace's own prepared data ``own`` (loaded and checked once, by the caller) where it
    has some, and CIFAR-10's 50,000 and its dev split's 40,000."""
    return sorted({50000, 40000, *([_sizes(own)[0]] if own is not None else [])})


def _against_made_the_lock(root: Path, theirs: Path, stages: list[str], short: str) -> None:
    """The code of ``--against`` must be the code the lock records for each stage to record:
    the results are that code's, and the check compares the workspace with it. (The commit
    that last wrote the lock may hold later code that no variant was run with.)"""
    from cifar10_tutorial.files import md5_of

    recorded = (_read_yaml(root / LOCK, LOCK) or {}).get("stages") or {}
    for stage in stages:
        for dep in (recorded.get(stage.split(":", 1)[1]) or {}).get("deps") or []:
            path = dep.get("path", "")
            if path.split("/")[0] not in CODE:
                continue
            there = theirs / path
            if not there.is_file() or md5_of(there) != dep.get("md5"):
                raise PipelineError(
                    f"{LOCK} left as it is: {stage}'s results were made with another {path} "
                    f"than {short}'s (the lock records md5 {dep.get('md5')}); give --against "
                    f"the commit whose code made them, or retrain (dvc repro {PIPELINE})")


def _compare(root: Path, against: str, short: str, data: Optional[Path],
             names: list[str], record_for: Optional[list[str]] = None) -> tuple[int, str]:
    """Run ``names`` with both codes and compare; the number of tensors compared, and on
    what data (in words)."""
    runs = Runs()

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with _scratch() as tmp:
            own = _workspace_data(root)  # the second pass's
            data = _fixed_data(tmp, data)
            large_data = own or _fixed_data(tmp, None, FULL_TRAIN, FULL_HELD_OUT, name="large")
            large = _sizes(large_data)
            trees = {"theirs": _tree_of(against, root, tmp / "theirs"),
                     "ours": _workspace_tree(root, tmp / "ours")}
            changed = _what_changed(trees)
            raws = {}
            for key, tree in trees.items():
                where = short if key == "theirs" else "the workspace"
                raw = raws[key] = _read_yaml(tree / EXERCISES, f"{EXERCISES} of {where}",
                                             _fix_of(where)) or {}
                absent = [n for n in names if n not in (raw.get("ablations") or {})]
                if absent:
                    raise PipelineError(f"variant {absent[0]} is not in the {EXERCISES} of "
                                        f"{where}: nothing to compare it with; retrain it")
            # the whole runs' schedules, from the full params: what 13 steps do not reach
            sizes = _training_set_sizes(own)
            planned = {k: plans(runs, t, names, sizes, short if k == "theirs" else "the workspace")
                       for k, t in trees.items()}
            moved = [n for n in names if planned["theirs"].get(n) != planned["ours"].get(n)]
            if moved:
                raise PipelineError(
                    f"{changed} does not produce what {short}'s did: the learning rates or "
                    f"weight-average decays over the whole run of {', '.join(moved[:3])}"
                    f"{' ...' if len(moved) > 3 else ''} differ (training sets of "
                    f"{', '.join(map(str, sizes))} images); the committed results are not "
                    f"the workspace's: retrain the variants that read what changed "
                    f"(dvc repro {PIPELINE})")
            big = {k: _copy_tree(t, tmp / f"{k}-large") for k, t in trees.items()}
            one = {k: _copy_tree(t, tmp / f"{k}-one-thread") for k, t in trees.items()}
            passes = [(trees, data, None, PAUSED_MODE),  # (trees, data, training-set size, mode)
                      (big, large_data, large[0], STRAIGHT), (one, data, None, ONE_THREAD)]
            # cut to one budget, a variant whose own budget was all that set it apart (its
            # baseline's twin there: params.twins) computes what that one does; it is left
            # out of the pass, in both trees, and checked as that one
            as_twin: dict[str, dict[str, str]] = {}
            for these, where, num_train, mode in passes:
                budgets = {key: short_budget(raws[key], num_train, own_eval=mode != PAUSED_MODE)
                           for key in these}
                # as the variants' stages compare them, on this pass's data
                twin = as_twin[mode] = twins(budgets["ours"], *_what_data(where))
                for key, tree in these.items():
                    budget = budgets[key]
                    if isinstance(budget.get("ablations"), dict):
                        budget["ablations"] = {n: v for n, v in budget["ablations"].items()
                                               if n not in twin}
                    (tree / EXERCISES).write_text(yaml.safe_dump(budget, sort_keys=False))
            if record_for is not None:
                _against_made_the_lock(root, trees["theirs"], record_for, short)
            on = _on(passes, own)
            ran = max(len(set(twin.get(n, n) for n in names)) for twin in as_twin.values())
            rest = f" (of {len(names)}: the others as their twins)" if ran < len(names) else ""
            print(f"running {ran} variant(s){rest} for {STEPS} steps each, with the code of "
                  f"{short}, then with the workspace's: on {on}", flush=True)
            for twin in {n: t for pass_ in as_twin.values() for n, t in pass_.items()
                         if n in names}.items():
                print(f"{twin[0]}: at {STEPS} steps it computes what {twin[1]} does (its "
                      f"budget is all that sets it apart): checked as {twin[1]} in the passes "
                      f"where it is one", flush=True)
            for these, where, _, mode in passes:  # one thread each: two at a time; the
                jobs = [(n, these[key], where, what)  # threads a run takes: one at a time
                        for n in dict.fromkeys(as_twin[mode].get(n, n) for n in names)
                        for key, what in (("theirs", short), ("ours", "the workspace"))]
                wide = max(1, min(2, os.cpu_count() or 1)) if mode != STRAIGHT else 1
                # one CPU each for the paused runs' pinned segments, taken in turn
                cpus = (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else [None])
                with ThreadPoolExecutor(max_workers=wide) as pool:
                    futures = [pool.submit(run_variant, runs, t, d, n, what, mode,
                                           cpus[i % len(cpus)])
                               for i, (n, t, d, what) in enumerate(jobs)]
                    try:
                        for f in futures:
                            f.result()
                    except BaseException:
                        runs.stop()
                        for f in futures:
                            f.cancel()
                        raise
            differ, compared = [], 0
            for these, where, _, mode in passes:  # named by pass: two run on one data set
                found, count = differences(these["theirs"], these["ours"])
                differ += [f"{f} (on {_sizes(where)[0]} training images, {mode})"
                           for f in found]
                compared += count
    finally:
        runs.stop()
        signal.signal(signal.SIGTERM, previous)
    if differ:
        raise PipelineError(
            f"{changed} does not produce what {short}'s did: {len(differ)} "
            f"differ ({', '.join(differ[:3])}{' ...' if len(differ) > 3 else ''}); the "
            f"committed results are not the workspace's: retrain the variants that read "
            f"what changed (dvc repro {PIPELINE})")
    return compared, on


def _copy_tree(tree: Path, dest: Path) -> Path:
    """A copy of what a variant runs in ``tree`` (before any run wrote in it), for another
    pass."""
    for part in TREE:
        if (tree / part).is_dir():
            shutil.copytree(tree / part, dest / part)
        elif (tree / part).is_file():
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / part, dest / part)
    return dest


def _sizes(prepared: Path) -> tuple[int, int]:
    """The numbers of training and held-out images of prepared data (its meta.json)."""
    try:
        counts = json.loads((prepared / "meta.json").read_text())["counts"]
        return int(counts["train"]), int(counts["test"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0, 0


def _what_data(prepared: Path) -> tuple:
    """The training images of prepared data, whether its data set flips by default and
    its records per training file (:func:`.data.prepared.prepared_size`), what a variant's
    stage compares the variants with; None where unread."""
    from cifar10_tutorial.data.prepared import prepared_size

    try:
        return prepared_size(prepared)
    except PipelineError:
        return None, None, None


def _on(passes: list, own: Optional[Path]) -> str:
    """What each pass ran on, in words (``own``: the workspace's prepared data, if any)."""
    how = {PAUSED_MODE: f"(one thread: OMP_NUM_THREADS=1, then pinned to one CPU; paused "
                        f"twice, evaluated every {EVAL_EVERY} steps in batches of {EVAL_BATCH})",
           STRAIGHT: f"(the workspace's prepared data{'' if own else ' (none: synthetic)'}, "
                     f"straight through with the threads a run takes, each variant's own "
                     f"evaluation at steps {STEPS - 1} and {STEPS})",
           ONE_THREAD: f"again (straight through with OMP_NUM_THREADS=1 set all along, each "
                       f"variant's own evaluation at steps {STEPS - 1} and {STEPS})"}
    return ", ".join(f"{_sizes(where)[0]:,} training and {_sizes(where)[1]:,} held-out images "
                     f"{how[mode]}" for _, where, _, mode in passes)


def _what_changed(trees: dict) -> str:
    """The workspace, with which of what a variant runs differs between the two trees
    (its code, reports/dvc.yaml, reports/params.yaml): a difference is blamed on what
    changed."""
    theirs, ours = fingerprint(trees["theirs"]), fingerprint(trees["ours"])
    changed = {k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k)}
    parts = (["code"] if any(k.split("/")[0] in CODE for k in changed) else []) \
        + [str(p) for p in (PIPELINE, EXERCISES) if str(p) in changed]
    if not parts:  # the same files ran twice: the runs themselves are not reproducible
        return ("the workspace (no file a variant runs differs from the commit's: its runs "
                "are not deterministic here)")
    return f"the workspace (its {' and '.join(parts)} changed)"


if __name__ == "__main__":
    from cifar10_tutorial.cli import run_stage

    run_stage(main)
