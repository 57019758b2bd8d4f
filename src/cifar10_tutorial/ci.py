"""CI regression runs: the whole pipeline under a small, fixed configuration, gated by the
`regression` stage against a committed baseline.

    python -m cifar10_tutorial.ci synthetic                       # archive built here
    python -m cifar10_tutorial.ci real --real-archive REAL.tar.gz  # real images (docs/ci.md)
    python -m cifar10_tutorial.ci real --real-archive REAL.tar.gz --update-baseline

A configuration is ``.ci/configs/<name>.yaml``: which archive to build, whether to run the
exercise pipeline too, and dotted overrides of ``params.yaml`` (the file itself is never
edited: the run happens in a scratch copy of the working tree, a git repository of its own,
so that the developer's data, cache and experiments are untouched). Exit status 1 when the
pipeline or the gate fails; the gate prints its Markdown table either way.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

from .cli import run_stage, stage_output
from .errors import PipelineError
from .files import md5_of

CONFIGS = Path(".ci/configs")


def load_config(name: str, root: Path) -> dict:
    path = root / CONFIGS / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (root / CONFIGS).glob("*.yaml"))
        raise PipelineError(f"{path}: no such CI configuration; known: {', '.join(known)}")
    config = yaml.safe_load(path.read_text())
    unknown = set(config) - {"archive", "archive_args", "report", "params"}
    if unknown or config.get("archive") not in ("synthetic", "given"):
        raise PipelineError(f"{path}: expected keys archive (synthetic | given), archive_args, "
                            f"report, params; found {sorted(config)} (archive: "
                            f"{config.get('archive')!r})")
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
        from .data.synthetic import make_cifar10_archive
        return make_cifar10_archive(out, **(config.get("archive_args") or {}))["md5"]
    if given is None:
        return None
    if not Path(given).is_file():
        raise PipelineError(f"--real-archive {given}: no such file; give a CIFAR-10 archive in "
                            f"the official binary layout (docs/ci.md)")
    shutil.copyfile(given, out)
    return md5_of(out)


def apply_overrides(params_path: Path, overrides: dict) -> None:
    """``section.key: value`` (or ``section: value``) into params.yaml."""
    raw = yaml.safe_load(params_path.read_text())
    for dotted, value in overrides.items():
        parts = dotted.split(".", 1)
        if len(parts) == 1:
            raw[parts[0]] = value
        else:
            raw.setdefault(parts[0], {})[parts[1]] = value
    params_path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _run(cmd: list[str], cwd: Path, env: dict) -> int:
    print(f"$ {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, cwd=cwd, env=env).returncode


def run_config(name: str, root: Path = Path("."), update_baseline: bool = False,
               keep: bool = False, real_archive: Optional[Path] = None) -> int:
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
        overrides = {**(config.get("params") or {}),
                     "data.url": str(scratch / "archive.tar.gz"), "data.md5": md5}
        apply_overrides(project / "params.yaml", overrides)
        env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
        baseline = overrides.get("regression.baseline")
        if baseline and not update_baseline and not (root / baseline).is_file():
            # a configuration whose baseline was never measured (the official archive's can
            # only be measured where it can be downloaded): it runs, shows, and gates nothing
            apply_overrides(project / "params.yaml", {"regression.baseline": None})
            rc = _run(["dvc", "repro"], project, env)
            print(f"CI configuration {name}: NO BASELINE yet ({baseline} is not committed): it "
                  f"ran ({'ok' if rc == 0 else 'FAILED'}) and gated nothing; measure one with "
                  f"`python -m cifar10_tutorial.ci {name} --real-archive ARCHIVE "
                  f"--update-baseline` and commit it")
            return rc
        if update_baseline:
            if not baseline:
                raise PipelineError(f"{CONFIGS / name}.yaml sets no regression.baseline")
            rc = (_run(["dvc", "repro", "eval"], project, env)
                  or _run([sys.executable, "stages/regression.py", "--update"], project, env))
            if rc == 0:
                (root / baseline).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(project / baseline, root / baseline)
                print(f"updated {baseline}; review `git diff {baseline}` and commit it")
            return rc
        rc = _run(["dvc", "repro"], project, env)  # download .. eval, then the gate
        table = project / stage_output("regression", ".md", project / "dvc.yaml")
        if table.is_file():  # for a pull-request comment (docs/ci.md)
            shutil.copy2(table, root / f"regression-{name}.md")
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="+", help="names of .ci/configs/*.yaml")
    ap.add_argument("--update-baseline", action="store_true",
                    help="rewrite the configuration's baseline from a fresh run instead of gating")
    ap.add_argument("--keep", action="store_true", help="keep the scratch project for inspection")
    ap.add_argument("--real-archive", type=Path, help="the archive (official binary layout) of "
                    "the configurations that run on real images; without it they are skipped")
    args = ap.parse_args(argv)

    def go() -> None:
        failed = [c for c in args.config
                  if run_config(c, Path("."), args.update_baseline, args.keep, args.real_archive)]
        if failed:
            raise PipelineError(f"CI configuration(s) failed: {', '.join(failed)}")
    run_stage(go)


if __name__ == "__main__":
    main()
