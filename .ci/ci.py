"""CI regression runs: the whole pipeline under a small, fixed configuration, gated by the
`regression` stage against a committed baseline.

    python .ci/ci.py synthetic                       # archive built here
    python .ci/ci.py real --real-archive REAL.tar.gz  # real images (docs/ci.md)
    python .ci/ci.py real --real-archive REAL.tar.gz --update-baseline
    python .ci/ci.py official --real-archive A.tar.gz --baseline B.json \
        --metrics-out M.json        # against a baseline kept elsewhere (.ci/github_gate.py)

A configuration is ``.ci/configs/<name>.yaml``: which archive to build, whether to run the
exercise pipeline too, and dotted overrides of ``params.yaml`` (``params``) and of the
exercise pipeline's ``reports/params.yaml`` (``exercise_params``) (the files are never
edited: the run happens in a scratch copy of the working tree, a git repository of its own,
so that the developer's data, cache and experiments are untouched). Exit status 1 when the
pipeline or the gate fails; the gate prints its Markdown table either way.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's package, as the stage scripts run it (stages/_tree.py), whatever else
# is installed: the code that runs is the code whose commit the results name.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import argparse
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Optional

import yaml

from cifar10_tutorial.cli import EXERCISE_PARAMS, run_stage, stage_output
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.param_types import key_twice, load_yaml12
from cifar10_tutorial.files import md5_of, scratch_folder, sha256_of, write_text_atomic
from cifar10_tutorial.guard import group_alive, kill_group, start_guarded, stop_group, stop_guarded

CONFIGS = Path(".ci/configs")
# configurations that may run without a committed baseline: the official archive's can
# only be measured where it can be downloaded; every other one gates against its own
BASELINE_LESS = ("official",)
SCRATCH, SCRATCH_MARK = "cifar10-ci", ".cifar10-ci-scratch"  # the run's folder in the temp dir


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # a configuration's name: never a path


def load_config(name: str, root: Path) -> dict:
    known = sorted(p.stem for p in (root / CONFIGS).glob("*.yaml"))
    if not NAME.fullmatch(name):
        raise PipelineError(f"ci: {name[:80]!r}: expected the name of a configuration in "
                            f"{CONFIGS}/ (a letter or digit, then letters, digits, _ or -), "
                            f"not a path; known: {', '.join(known) or 'none'}")
    path = root / CONFIGS / f"{name}.yaml"
    if path.exists() and not path.is_file():
        raise PipelineError(f"{path}: {'a folder' if path.is_dir() else 'not a regular file'}, "
                            f"expected a configuration's YAML file; move it away")
    if not path.is_file():
        raise PipelineError(f"{path}: no such CI configuration; " + (
            f"known: {', '.join(known)}" if known else f"{root} holds none: run it from the "
            f"repository root"))
    try:
        text = path.read_text()
        config = load_yaml12(text)
        twice = key_twice(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None)
        raise PipelineError(f"{path}: cannot be read as YAML ({type(exc).__name__}"
                            f"{f' at line {where.line + 1}' if where else ''}); fix it, or "
                            f"`git checkout {path}`") from None
    expected = (f"expected a mapping with keys archive (synthetic | given), archive_args, "
                f"report (true | false), params and exercise_params (each a mapping of "
                f"section.key: value)")
    if twice:  # PyYAML keeps the last silently; DVC's params reader refuses it
        raise PipelineError(f"{path}: the key {twice[0]!r} appears twice (line {twice[1]}); "
                            f"keep one")
    if not isinstance(config, dict):
        raise PipelineError(f"{path}: {expected}; found "
                            f"{'nothing' if config is None else 'a ' + type(config).__name__}")
    unknown = set(config) - {"archive", "archive_args", "report", "params", "exercise_params"}
    if unknown or config.get("archive") not in ("synthetic", "given"):
        raise PipelineError(f"{path}: {expected}; found {sorted(map(str, config))} (archive: "
                            f"{config.get('archive')!r})")
    for key in ("params", "exercise_params", "archive_args"):
        value = config.get(key)
        if value is not None and not (isinstance(value, dict)
                                      and all(isinstance(k, str) for k in value)):
            raise PipelineError(f"{path}: {key}: expected a mapping of names to values, found "
                                f"a {type(value).__name__}")
    for key in ("params", "exercise_params"):  # `train: {...}` beside `train.x: ...`: the
        values = config.get(key) or {}          # section replaced the dotted keys silently
        both = sorted(k for k in values if "." not in k
                      and any(o.startswith(k + ".") for o in values))
        if both:
            raise PipelineError(f"{path}: {key}: {both[0]} is given both as a section and as "
                                f"dotted keys ({both[0]}.KEY); write each as {both[0]}.KEY")
    for key, whole in (("params", ()), ("exercise_params", ("ablations", "dataset_ablations"))):
        # a section (`regression: {...}`) replaces params.yaml's whole section, and a check
        # that reads the dotted key (the baseline's place) would not see it
        section = sorted(k for k, v in (config.get(key) or {}).items()
                         if "." not in k and k not in whole)
        if section:
            target = "params.yaml" if key == "params" else "reports/params.yaml"
            raise PipelineError(f"{path}: {key}: {section[0]}: a section, which would replace "
                                f"{target}'s whole {section[0]}: section; write each key "
                                f"dotted ({section[0]}.KEY: value)")
    params = config.get("params") or {}
    theirs = sorted(k for k in ("data.url", "data.md5") if k in params)
    if theirs or "data" in params:  # the runner sets them to the archive it builds or takes
        raise PipelineError(f"{path}: params: {(theirs or ['data'])[0]}: the runner sets the "
                            f"data to the archive of archive: (synthetic, or the one given "
                            f"with --real-archive); remove it")
    if params.get("data.dataset", "cifar10") != "cifar10":
        raise PipelineError(f"{path}: params: data.dataset: {params['data.dataset']!r}, but "
                            f"the runner's archive (archive: {config['archive']}) is CIFAR-10's "
                            f"layout; remove it")
    args = set(config.get("archive_args") or {}) - {"train_per_batch", "test", "seed"}
    if args:
        raise PipelineError(f"{path}: archive_args: {sorted(args)[0]}: expected "
                            f"train_per_batch, test or seed (the synthetic archive's sizes)")
    for key, value in (config.get("archive_args") or {}).items():
        # the synthetic archive is built in memory: at most CIFAR-10's own sizes
        least, most = (0, 2**32 - 1) if key == "seed" else (1, 10_000)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise PipelineError(f"{path}: archive_args: {key}: expected a whole number from "
                                f"{least} to {most:,}, found {value!r}")
    if not isinstance(config.get("report", False), bool):
        raise PipelineError(f"{path}: report: expected true or false, found "
                            f"{config['report']!r}")
    if config.get("report") and not config.get("exercise_params"):
        raise PipelineError(f"{path}: report: true runs the exercise pipeline, and without "
                            f"exercise_params it runs reports/params.yaml's full budgets (16 "
                            f"variants, 10,000 steps each); give exercise_params (at least "
                            f"ablation.max_steps and train.batch_size), or report: false")
    if config.get("exercise_params") and not config.get("report"):
        raise PipelineError(f"{path}: exercise_params: set, but report is false, and only "
                            f"report: true runs the exercise pipeline that reads them; set "
                            f"report: true, or remove exercise_params")
    return config


def copy_worktree(root: Path, dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of ``root`` into a fresh git repo."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    head = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip() or "no commit"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    subject = (f"CI scratch copy of {head}" + (" with uncommitted changes" if dirty else ""))
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", subject]):
        subprocess.run(git + cmd, cwd=dest, check=True, capture_output=True)


def build_archive(config: dict, given: Optional[Path], out: Path) -> Optional[str]:
    """The configuration's archive at ``out`` (synthetic: made here; given: a copy of the
    real archive passed with --real-archive); its md5, or None when none was given."""
    if config["archive"] == "synthetic":
        from cifar10_tutorial.data.synthetic import make_cifar10_archive
        return make_cifar10_archive(out, **(config.get("archive_args") or {}))["md5"]
    if given is None:
        return None
    if not Path(given).is_file():
        raise PipelineError(f"--real-archive {given}: no such file; give a CIFAR-10 archive in "
                            f"the official binary layout (docs/ci.md)")
    with open(given, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            raise PipelineError(f"--real-archive {given}: not a gzip tar; give a CIFAR-10 "
                                f"archive in the official binary layout (cifar-10-binary."
                                f"tar.gz, or one `cifar10 dev-split` builds; docs/ci.md)")
    shutil.copyfile(given, out)
    return md5_of(out)


def apply_overrides(params_path: Path, overrides: dict) -> None:
    """``section.key: value`` (or ``section: value``) into params.yaml."""
    raw = load_yaml12(params_path.read_text())  # as DVC and the stages read it
    for dotted, value in overrides.items():
        parts = dotted.split(".", 1)
        if len(parts) == 1:
            raw[parts[0]] = value
        else:
            raw.setdefault(parts[0], {})[parts[1]] = value
    params_path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _check_overrides(path: Path, project: Path, config: dict) -> None:
    """The params files as the configuration ``path`` leaves them, checked before anything
    runs: a key it misspells is named in it, not in the scratch copy a stage would name."""
    from cifar10_tutorial.params import EXERCISES, ParamsError, load_params

    for key, file, sections in (("params", "params.yaml", None),
                                ("exercise_params", EXERCISE_PARAMS, EXERCISES)):
        if key == "exercise_params" and not config.get(key):
            continue
        try:
            load_params(project / file, *([sections] if sections else []))
        except ParamsError as exc:
            said = str(exc).replace(f"{project / file}: ", "", 1)
            raise PipelineError(f"{path}: {key}: {said}") from None


# what a user's shell may set for their own runs and a CI run never takes: a deadline would
# pause it (its scratch copy is gone after), a mirror would resume another code's run
RUN_VARIABLES = ("CIFAR10_STOP_AT", "CIFAR10_CHECKPOINT_MIRROR", "CIFAR10_PAUSE_MARK",
                 "CIFAR10_NNODES", "CIFAR10_RDZV_ENDPOINT", "CIFAR10_RDZV_ID")
THREADS = "2"  # the CPU threads of every CI run (a user's OMP_NUM_THREADS=1 moved loss_avg
# past its tolerance on the synthetic configuration)
GRACE = 10.0  # seconds the pipeline's processes get to end on SIGTERM before SIGKILL


def _run(cmd: list[str], cwd: Path, env: dict) -> int:
    """``cmd``'s exit status. It runs under a guard in a process group of its own
    (:mod:`cifar10_tutorial.guard`), which is stopped, its stages included, when this
    process is interrupted (Ctrl-C, or a SIGTERM the caller turns into one) or killed."""
    print(f"$ {' '.join(cmd)}", flush=True)
    proc = start_guarded(cmd, GRACE, cwd=cwd, env=env)
    try:
        rc = proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    if rc < 0:  # the guard itself killed (kill -9): the stages it started run on in its group
        print(f"error: the guard of `{' '.join(cmd)}` (pid {proc.pid}) was killed by signal "
              f"{-rc}; its processes are stopped and the run ends here", flush=True)
        rc = 128 - rc
    if group_alive(proc.pid):  # none must outlive the run: the scratch goes next
        _stop_group(proc)
    return rc


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop ``proc``'s process group: through its guard while it runs (one SIGTERM each,
    then its grace); else SIGTERM to the members left, and SIGKILL after :data:`GRACE`."""
    if proc.poll() is None:
        stop_guarded(proc)
        try:
            proc.wait(timeout=GRACE + 5)
        except subprocess.TimeoutExpired:
            pass
    else:
        stop_group(proc.pid, GRACE)
    kill_group(proc.pid)
    proc.wait()


def _outputs(project: Path) -> list[Path]:
    """The run's train and eval metrics and the gate's table, in the scratch copy."""
    return [project / stage_output(stage, suffix, project / "dvc.yaml")
            for stage, suffix in (("train", "metrics.json"), ("eval", "metrics.json"),
                                  ("regression", ".md"))]


def _keep_results(project: Path, root: Path, name: str, metrics_out: Optional[Path]) -> None:
    """The gate's table beside the checkout as ``regression-<name>.md`` (for a pull-request
    comment, docs/ci.md), and the run's gated metrics (the keys of its
    regression.tolerances, in the baseline's format) to ``metrics_out``: each only where
    this run made it, also when the gate failed."""
    from cifar10_tutorial.params import load_params
    from cifar10_tutorial.regression import update_baseline

    train, evals, table = _outputs(project)
    kept = root / f"regression-{name}.md"
    if _owned_table(kept) is None:  # checked before the run too: a user's file stays
        if table.is_file():
            _keep_table(table, kept)
        else:  # an earlier run's table never stands for this one
            kept.unlink(missing_ok=True)
            kept.with_name(f".{kept.name}.sha256").unlink(missing_ok=True)
    if metrics_out is not None and train.is_file() and evals.is_file():
        tolerances = load_params(project / "params.yaml").regression.tolerances
        metrics_out.parent.mkdir(parents=True, exist_ok=True)
        update_baseline(str(metrics_out), tolerances, {"train": train, "eval": evals})


def _inside_checkout(root: Path, baseline: Optional[str], config: Path) -> None:
    """A configuration's ``regression.baseline`` is a file of the checkout (the run reads it
    there and --update-baseline writes it): a path leading out of it, by ``..``, an absolute
    path or a link, is refused before anything runs."""
    if baseline is None:
        return
    path = Path(str(baseline))
    where = (root / path).resolve()
    how = ("is an absolute path" if path.is_absolute() else "goes up (..)" if ".." in path.parts
           else "names the checkout itself" if where == root.resolve()
           else None if where.is_relative_to(root.resolve()) else "leads out of the checkout")
    if how is not None:
        raise PipelineError(f"{config}: regression.baseline: {str(baseline)[:120]!r} {how} "
                            f"({where}); expected a path relative to the checkout and inside "
                            f"it (as reports/baseline/NAME.json), where the gate reads and "
                            f"writes it")
    from cifar10_tutorial.ownership import refuse_foreign_place
    from cifar10_tutorial.regression import not_a_baseline

    why = not_a_baseline(where if not (root / path).is_symlink() else root / path)
    if why is not None:  # what --update-baseline would overwrite, and the gate read
        raise PipelineError(f"{config}: regression.baseline: {baseline}: {why}; give a path of "
                            f"its own (as reports/baseline/NAME.json). Nothing was run.")
    here = Path.cwd()
    try:  # the checkout's code, git's and DVC's folders, a stage's output: never a baseline's
        os.chdir(root)
        refuse_foreign_place(path, "regression.baseline", feeds=(("regression", None),))
    except PipelineError as exc:
        raise PipelineError(f"{config}: {str(exc).replace('Nothing was changed.', 'Nothing was run.')}"
                            ) from None
    finally:
        os.chdir(here)


def _committed(root: Path, path: Path) -> Optional[str]:
    """Why ``path`` is the checkout's own (a file git tracks there: a committed baseline or
    result), or None."""
    where = path.resolve()
    if not where.is_file() or not where.is_relative_to(root.resolve()):
        return None
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", str(where)], cwd=root,
                             capture_output=True).returncode == 0
    return "a file the checkout's git tracks (a committed baseline or result)" if tracked else None


def _baseline_of_its_own(root: Path, name: str, baseline: str) -> None:
    """--update-baseline rewrites a baseline that only configuration ``name`` names: one
    that another configuration gates against is that one's (measured at its own budget)."""
    mine = (root / baseline).resolve()
    for other in sorted((root / CONFIGS).glob("*.yaml")):
        if other.stem == name or not other.is_file():
            continue
        try:
            theirs = ((load_yaml12(other.read_text()) or {}).get("params") or {}
                      ).get("regression.baseline")
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(theirs, str) and (root / theirs).resolve() == mine:
            raise PipelineError(f"{CONFIGS / name}.yaml: regression.baseline {baseline} is also "
                                f"the baseline of {other.stem} ({other.relative_to(root)}), "
                                f"measured by its own run; give {name} a baseline of its own. "
                                f"Nothing was run.")


def _owned_table(kept: Path) -> Optional[str]:
    """Why the gate's table beside the checkout (``regression-NAME.md``) is not this
    command's to replace, or None: a link or a folder there, or a file whose content is not
    what an earlier run wrote (its sha256 in ``.regression-NAME.md.sha256`` beside it)."""
    if kept.is_symlink() or (kept.exists() and not kept.is_file()):
        return f"a {'link' if kept.is_symlink() else 'folder'}"
    if not kept.exists():
        return None
    record = kept.with_name(f".{kept.name}.sha256")
    try:
        ours = set(record.read_text().split()) if record.is_file() and not record.is_symlink() \
            else set()
    except (OSError, UnicodeDecodeError):
        ours = set()
    if sha256_of(kept) not in ours:
        return "a file this command did not write (or edited since)"
    return None


def _keep_table(table: Path, kept: Path) -> None:
    """``table`` (this run's) to ``kept``, its sha256 recorded first (beside the old one's,
    until the new file is in place), so that the next run knows the file as its own."""
    record = kept.with_name(f".{kept.name}.sha256")
    new = sha256_of(table)
    old = sha256_of(kept) if kept.is_file() else ""
    write_text_atomic(record, f"{old}\n{new}\n".lstrip())
    write_text_atomic(kept, table.read_text())
    write_text_atomic(record, f"{new}\n")


def _place_baseline(name: str, baseline: Optional[str], root: Path, project: Path,
                    baseline_file: Optional[Path], no_baseline: Optional[str]) -> Optional[str]:
    """Put the baseline to gate against into the scratch copy: ``baseline_file`` (one kept
    outside git; on GitHub the merge base's) or the committed one. The reason it gates
    nothing when there is none (``no_baseline``, the committed file missing, or the run's
    regression.baseline null)."""
    if baseline_file is not None:
        if not baseline:
            raise PipelineError(f"{CONFIGS / name}.yaml sets no regression.baseline, the path "
                                f"--baseline's file is put at; add one to its params (as "
                                f"regression.baseline: reports/baseline/{name}.json), or run "
                                f"without --baseline")
        (project / baseline).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(baseline_file, project / baseline)
        return None
    if no_baseline is None and baseline and not (root / baseline).is_file():
        config = load_config(name, root)
        measure = (f"python .ci/ci.py {name}"
                   + (" --real-archive ARCHIVE" if config["archive"] == "given" else "")
                   + " --update-baseline")
        if name not in BASELINE_LESS:  # a gate that passes because its baseline went missing
            raise PipelineError(f"{baseline}: missing, and CI configuration {name} gates "
                                f"against it: restore it (`git checkout -- {baseline}`) or "
                                f"measure a new one with `{measure}` and commit it")
        # the official archive's can only be measured where it can be downloaded
        return f"{baseline} is not committed; measure one with `{measure}` and commit it"
    if no_baseline is None:
        from cifar10_tutorial.params import load_params

        if load_params(project / "params.yaml").regression.baseline is None:
            # the stage then gates nothing: never a pass
            return f"regression.baseline is null in {CONFIGS / name}.yaml's run"
    return no_baseline


def run_config(name: str, root: Path = Path("."), update_baseline: bool = False,
               keep: bool = False, real_archive: Optional[Path] = None,
               baseline_file: Optional[Path] = None, no_baseline: Optional[str] = None,
               metrics_out: Optional[Path] = None) -> int:
    """Run configuration ``name``; its exit status. ``baseline_file`` gates against that
    file instead of the committed one; ``no_baseline`` (the reason) gates nothing;
    ``metrics_out`` receives the run's gated metrics when its pipeline ran through."""
    root = root.resolve()
    config = load_config(name, root)
    kept = root / f"regression-{name}.md"
    refused = _owned_table(kept)
    if refused:  # before the run, not after it: never replaced, never a traceback
        raise PipelineError(f"{kept}: {refused}, where this command keeps the gate's table of "
                            f"{name}; move it away, then rerun. Nothing was run.")
    baseline = (config.get("params") or {}).get("regression.baseline")
    _inside_checkout(root, baseline, root / CONFIGS / f"{name}.yaml")
    if update_baseline and baseline:
        _baseline_of_its_own(root, name, baseline)
    if metrics_out is not None and (metrics_out.is_symlink() or metrics_out.is_dir()):
        raise PipelineError(f"--metrics-out {metrics_out}: a "
                            f"{'link' if metrics_out.is_symlink() else 'folder'}, where this "
                            f"run writes a file of its own; give another path. Nothing was run.")
    if metrics_out is not None:
        from cifar10_tutorial.ownership import ensure_writable, refuse_foreign_place
        from cifar10_tutorial.regression import not_a_baseline

        why = not_a_baseline(metrics_out) or _committed(root, metrics_out)
        if why is not None:  # refused now, not after the run
            raise PipelineError(f"--metrics-out {metrics_out}: {why}, where this run writes "
                                f"its metrics in the baseline's format; give another path. "
                                f"Nothing was run.")
        ensure_writable(metrics_out.parent)  # a folder that cannot be made: now, not after
        refuse_foreign_place(metrics_out, "--metrics-out", feeds=(("regression", None),))  # git's, the code's, a stage's
    if baseline_file is not None:
        from cifar10_tutorial.regression import impossible_in, not_a_baseline

        why = not_a_baseline(baseline_file) if baseline_file.is_file() else "not a file"
        why = why or impossible_in(baseline_file)
        if why is not None:  # the whole run first, then this: never
            raise PipelineError(f"--baseline {baseline_file}: {why}; give a baseline file "
                                f"(the gated metrics, as `--update-baseline` writes them). "
                                f"Nothing was run.")
    # in a scratch folder of its own (the PID in its name): the next run removes one a kill
    # -9 left, once the process is gone
    with scratch_folder(SCRATCH, SCRATCH_MARK, f"cifar10 ci {name}") as scratch:
        start = time.perf_counter()
        try:
            project = scratch / "project"
            project.mkdir()
            copy_worktree(root, project)
            md5 = build_archive(config, real_archive, scratch / "archive.tar.gz")
            if md5 is None:
                print(f"CI configuration {name}: SKIPPED, nothing gated by it: it runs on a real "
                      f"archive, and none was given (--real-archive; see docs/ci.md)")
                return 0
            for stale in _outputs(project):  # the committed ones: what is kept is this run's
                stale.unlink(missing_ok=True)
            overrides = {**(config.get("params") or {}),
                         "data.url": str(scratch / "archive.tar.gz"), "data.md5": md5}
            apply_overrides(project / "params.yaml", overrides)
            if config.get("exercise_params"):
                apply_overrides(project / EXERCISE_PARAMS, config["exercise_params"])
            _check_overrides(root / CONFIGS / f"{name}.yaml", project, config)
            env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
                   # one thread count wherever it runs: the sums a run makes depend on it,
                   # and the committed baselines were measured at it
                   "OMP_NUM_THREADS": THREADS, "MKL_NUM_THREADS": THREADS}
            for var in RUN_VARIABLES:  # a CI run is whole, of this code, from step 0
                env.pop(var, None)
            baseline = overrides.get("regression.baseline")
            if not update_baseline:
                no_baseline = _place_baseline(name, baseline, root, project, baseline_file,
                                              no_baseline)
            if no_baseline is not None:  # it runs and shows its metrics; it never says "ok"
                apply_overrides(project / "params.yaml", {"regression.baseline": None})
                rc = _run(["dvc", "repro"], project, env)
                _keep_results(project, root, name, metrics_out)
                if rc == 0 and config.get("report"):  # the exercise pipeline runs all the same
                    rc = _run(["dvc", "repro", "reports/dvc.yaml:report"], project, env)
                print(f"CI configuration {name}: NO BASELINE ({no_baseline}): GATED NOTHING; the "
                      f"pipeline {'ran through' if rc == 0 else 'FAILED'}")
                return rc
            if update_baseline:
                if not baseline:
                    raise PipelineError(f"{CONFIGS / name}.yaml sets no regression.baseline, the "
                                        f"file --update-baseline writes; add one to its params "
                                        f"(as regression.baseline: reports/baseline/{name}.json)")
                rc = (_run(["dvc", "repro", "eval"], project, env)
                      or _run([sys.executable, "stages/regression.py", "--update"], project, env))
                if rc == 0:
                    # written beside it and renamed over it: a link there is refused, never
                    # written through onto the file it points to
                    write_text_atomic(root / baseline, (project / baseline).read_text())
                    print(f"updated {baseline}; review `git diff {baseline}` and commit it")
                return rc
            rc = _run(["dvc", "repro"], project, env)  # download .. eval, then the gate
            _keep_results(project, root, name, metrics_out)
            if rc == 0 and config.get("report"):
                rc = _run(["dvc", "repro", "reports/dvc.yaml:report"], project, env)
            verdict = "passed" if rc == 0 else "FAILED"
            print(f"CI configuration {name}: {verdict} in {time.perf_counter() - start:.0f} s"
                  + (f" (scratch kept: {project})" if keep else ""))
            return rc
        finally:
            if keep:  # the user's now: unmarked, no later run removes it
                (scratch / SCRATCH_MARK).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="cifar10 ci", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="+", help="names of .ci/configs/*.yaml")
    ap.add_argument("--update-baseline", action="store_true",
                    help="rewrite the configuration's baseline from a fresh run instead of gating")
    ap.add_argument("--keep", action="store_true", help="keep the scratch project for inspection")
    ap.add_argument("--real-archive", type=Path, help="the archive (official binary layout) of "
                    "the configurations that run on real images; without it they are skipped")
    ap.add_argument("--baseline", type=Path, help="gate against this baseline file instead "
                    "of the configuration's committed one (one configuration)")
    ap.add_argument("--no-baseline", metavar="REASON", help="gate nothing, saying why (the "
                    "run still shows its metrics)")
    ap.add_argument("--metrics-out", type=Path, help="write the run's gated metrics here, in "
                    "the baseline's format (one configuration)")
    args = ap.parse_args(argv)

    def stop(signum, frame):  # SIGTERM (a cancelled job, a kill) unwinds as Ctrl-C does:
        raise KeyboardInterrupt  # the pipeline's process group stopped, the scratch removed

    signal.signal(signal.SIGTERM, stop)

    def go() -> None:
        given = [o for o, v in (("--baseline", args.baseline),
                                ("--update-baseline", args.update_baseline),
                                ("--no-baseline", args.no_baseline is not None)) if v]
        if len(given) > 1:  # one would be read (or written), the other silently dropped
            raise PipelineError(f"{' and '.join(given)}: give one (--baseline gates against "
                                f"another file, --update-baseline rewrites the configuration's "
                                f"own, --no-baseline gates nothing)")
        if args.no_baseline is not None and not args.no_baseline.isprintable():
            raise PipelineError("--no-baseline: the reason holds a newline or another "
                                "control character, and it is printed in the verdict's line; "
                                "give it on one line")
        if args.no_baseline is not None and not args.no_baseline.strip():
            raise PipelineError("--no-baseline: expected the reason nothing is gated (it is "
                                "said in the verdict), found none")
        if (args.baseline or args.metrics_out) and len(args.config) != 1:
            raise PipelineError("--baseline and --metrics-out take one configuration, found "
                                f"{len(args.config)} ({' '.join(args.config)}); run each alone")
        if args.baseline and not args.baseline.is_file():
            what = ("no such file" if not args.baseline.exists() else
                    "a folder" if args.baseline.is_dir() else "not a regular file")
            raise PipelineError(f"--baseline {args.baseline}: {what}; give a baseline "
                                f"JSON file (stages/regression.py --update writes one)")
        if args.real_archive is not None:  # checked here, not after another config's run
            if not args.real_archive.is_file():
                what = ("no such file" if not args.real_archive.exists() else
                        "a folder" if args.real_archive.is_dir() else "not a regular file")
                raise PipelineError(f"--real-archive {args.real_archive}: {what}; give the "
                                    f"archive of real images (docs/ci.md)")
            readers = [c for c in args.config
                       if load_config(c, Path("."))["archive"] == "given"]
            if not readers:
                raise PipelineError(f"--real-archive: no configuration given reads it "
                                    f"({', '.join(args.config)} build their own archive); "
                                    f"drop it, or name a configuration with archive: given")
        failed = [c for c in args.config
                  if run_config(c, Path("."), args.update_baseline, args.keep, args.real_archive,
                                args.baseline, args.no_baseline, args.metrics_out)]
        if failed:
            raise PipelineError(f"CI configuration(s) failed: {', '.join(failed)}")
    run_stage(go)


if __name__ == "__main__":
    main()
