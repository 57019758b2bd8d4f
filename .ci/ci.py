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
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Optional

import yaml

from cifar10_tutorial.cli import EXERCISE_PARAMS, run_stage, stage_output
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.param_types import load_yaml12
from cifar10_tutorial.files import md5_of, write_text_atomic

CONFIGS = Path(".ci/configs")
# configurations that may run without a committed baseline: the official archive's can
# only be measured where it can be downloaded; every other one gates against its own
BASELINE_LESS = ("official",)


def load_config(name: str, root: Path) -> dict:
    path = root / CONFIGS / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (root / CONFIGS).glob("*.yaml"))
        raise PipelineError(f"{path}: no such CI configuration; " + (
            f"known: {', '.join(known)}" if known else f"{root} holds none: run it from the "
            f"repository root"))
    try:
        config = load_yaml12(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None)
        raise PipelineError(f"{path}: cannot be read as YAML ({type(exc).__name__}"
                            f"{f' at line {where.line + 1}' if where else ''}); fix it, or "
                            f"`git checkout {path}`") from None
    expected = (f"expected a mapping with keys archive (synthetic | given), archive_args, "
                f"report (true | false), params and exercise_params (each a mapping of "
                f"section.key: value)")
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
    args = set(config.get("archive_args") or {}) - {"train_per_batch", "test", "seed"}
    if args:
        raise PipelineError(f"{path}: archive_args: {sorted(args)[0]}: expected "
                            f"train_per_batch, test or seed (the synthetic archive's sizes)")
    if not isinstance(config.get("report", False), bool):
        raise PipelineError(f"{path}: report: expected true or false, found "
                            f"{config['report']!r}")
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


def _run(cmd: list[str], cwd: Path, env: dict) -> int:
    """``cmd``'s exit status. It runs in a process group of its own, which is stopped, its
    stages included, when this process is interrupted (Ctrl-C, or a SIGTERM the caller
    turns into one)."""
    print(f"$ {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        _stop_group(proc)
        raise


def _stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to ``proc``'s process group; SIGKILL to what is left of it after ``grace``
    seconds (or at once, for the stages ``proc`` leaves behind when it exits)."""
    def group(sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    group(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    group(signal.SIGKILL)
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
    kept.unlink(missing_ok=True)  # an earlier run's table never stands for this one
    if table.is_file():
        shutil.copy2(table, kept)
    if metrics_out is not None and train.is_file() and evals.is_file():
        tolerances = load_params(project / "params.yaml").regression.tolerances
        metrics_out.parent.mkdir(parents=True, exist_ok=True)
        update_baseline(str(metrics_out), tolerances, {"train": train, "eval": evals})


def _place_baseline(name: str, baseline: Optional[str], root: Path, project: Path,
                    baseline_file: Optional[Path], no_baseline: Optional[str]) -> Optional[str]:
    """Put the baseline to gate against into the scratch copy: ``baseline_file`` (one kept
    outside git; on GitHub the merge base's) or the committed one. The reason it gates
    nothing when there is none (``no_baseline``, or the committed file is missing)."""
    if baseline_file is not None:
        if not baseline:
            raise PipelineError(f"{CONFIGS / name}.yaml sets no regression.baseline")
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
    scratch = Path(tempfile.mkdtemp(prefix=f"ci-{name}-"))
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
        env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
        baseline = overrides.get("regression.baseline")
        if not update_baseline:
            no_baseline = _place_baseline(name, baseline, root, project, baseline_file,
                                          no_baseline)
        if no_baseline is not None:  # it runs and shows its metrics; it never says "ok"
            apply_overrides(project / "params.yaml", {"regression.baseline": None})
            rc = _run(["dvc", "repro"], project, env)
            _keep_results(project, root, name, metrics_out)
            print(f"CI configuration {name}: NO BASELINE ({no_baseline}): GATED NOTHING; the "
                  f"pipeline {'ran through' if rc == 0 else 'FAILED'}")
            return rc
        if update_baseline:
            if not baseline:
                raise PipelineError(f"{CONFIGS / name}.yaml sets no regression.baseline")
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
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


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
        if (args.baseline or args.metrics_out) and len(args.config) != 1:
            raise PipelineError("--baseline and --metrics-out take one configuration, found "
                                f"{len(args.config)} ({' '.join(args.config)}); run each alone")
        if args.baseline and not args.baseline.is_file():
            raise PipelineError(f"--baseline {args.baseline}: no such file; give a baseline "
                                f"JSON file (stages/regression.py --update writes one)")
        failed = [c for c in args.config
                  if run_config(c, Path("."), args.update_baseline, args.keep, args.real_archive,
                                args.baseline, args.no_baseline, args.metrics_out)]
        if failed:
            raise PipelineError(f"CI configuration(s) failed: {', '.join(failed)}")
    run_stage(go)


if __name__ == "__main__":
    main()
