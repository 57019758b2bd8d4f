"""The official gate on GitHub, gated the way DVC users compare a branch with main: against
the baseline of the merge base, kept on a git branch of its own (docs/ci.md, "The gate on
GitHub").

    python .ci/github_gate.py ARCHIVE    (in the venv; .ci/official-gate calls it)

- A push to the default branch runs the `official` configuration on ARCHIVE and keeps its
  gated metrics as that commit's baseline: `official/<sha>.json`, committed to the branch
  `ci-baselines` and pushed with the job's token (git plumbing on a scratch index: the
  checkout's files and branch are never touched). The push is retried on a race with
  another push job.
- A pull request (or a push to any other branch) finds the baseline of its merge base with
  the base branch, or of the nearest first-parent ancestor of it that has one (a newer
  commit's own run may still be going), gates its run against it under
  `regression.tolerances`, and exits 1 when a metric regressed. With none stored, it runs,
  gates nothing, and says so in one line.

Either way it appends a verdict line and the gate's table to $GITHUB_STEP_SUMMARY and
writes them to regression-comment.md, which the workflow posts on the pull request.

Environment: GITHUB_EVENT_NAME, GITHUB_REF, GITHUB_SHA, GITHUB_BASE_REF and
GITHUB_STEP_SUMMARY, as GitHub sets them; CIFAR10_CI_DEFAULT_BRANCH (the workflow passes the
repository's default branch; main without it), CIFAR10_CI_BASELINES (the branch,
ci-baselines), CIFAR10_CI_REMOTE (origin) and CIFAR10_CI_LOOKBACK (how many first-parent
ancestors of the merge base are searched, 50).
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's code is what is gated

from cifar10_tutorial.cli import run_stage  # noqa: E402
from cifar10_tutorial.errors import PipelineError  # noqa: E402
from cifar10_tutorial.files import write_text_atomic  # noqa: E402

CONFIG = "official"
COMMENT = "regression-comment.md"
BOT = {"GIT_AUTHOR_NAME": "github-actions[bot]", "GIT_COMMITTER_NAME": "github-actions[bot]",
       "GIT_AUTHOR_EMAIL": "41898282+github-actions[bot]@users.noreply.github.com",
       "GIT_COMMITTER_EMAIL": "41898282+github-actions[bot]@users.noreply.github.com"}


# the variables that name a branch, a commit or a remote, all passed to git, and their
# longest value: a branch name's length is bounded by a file name's
NAMES = {"GITHUB_EVENT_NAME": 255, "GITHUB_SHA": 255, "GITHUB_REF": 255, "GITHUB_BASE_REF": 255,
         "CIFAR10_CI_DEFAULT_BRANCH": 255, "CIFAR10_CI_BASELINES": 255,
         "CIFAR10_CI_REMOTE": 255}


def shown(value: str, limit: int = 40) -> str:
    """``value`` quoted for a message, cut to ``limit`` characters and its length said."""
    return repr(value) if len(value) <= limit else \
        f"{value[:limit]!r}... ({len(value):,} characters)"


def check_name(key: str, value: str) -> None:
    """A variable that names a branch, a commit or a remote holds at most its number of
    :data:`NAMES` characters, all printable."""
    # a leading '-' would reach git as an option (--upload-pack=... runs a command)
    if len(value) > NAMES[key] or not value.isprintable() or value.startswith("-"):
        raise PipelineError(f"{key}: expected a git name (at most {NAMES[key]:,} printable "
                            f"characters, not starting with '-'), found {shown(value)}; set "
                            f"it to the branch, commit or remote it stands for")


@dataclass
class Event:
    """What GitHub says about the run, from its environment variables."""
    name: str  # push, pull_request, ...
    sha: str
    ref: str  # refs/heads/main, refs/pull/7/merge
    base: str  # the branch to compare with: the pull request's base, else the default
    default: str
    branch: str  # where baselines are kept
    remote: str
    lookback: int

    @classmethod
    def from_env(cls, env=os.environ) -> "Event":
        for key in NAMES:
            check_name(key, env.get(key) or "")
        default = env.get("CIFAR10_CI_DEFAULT_BRANCH") or "main"
        sha = env.get("GITHUB_SHA") or git("rev-parse", "HEAD")
        lookback = (env.get("CIFAR10_CI_LOOKBACK") or "50").strip()
        if not re.fullmatch(r"[0-9]+", lookback) or int(lookback) < 1:  # ASCII digits only
            raise PipelineError(f"CIFAR10_CI_LOOKBACK: expected a whole number (how many "
                                f"first-parent ancestors of the merge base to search, e.g. 50), "
                                f"found {shown(lookback)}; set it to one or unset it")
        if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):  # it names a baseline's file
            raise PipelineError(f"GITHUB_SHA: expected a commit's full hash (40 hex digits), "
                                f"found {shown(sha)}; set it to the commit the run is for, "
                                f"or unset it (HEAD)")
        base = env.get("GITHUB_BASE_REF") or default
        branch = env.get("CIFAR10_CI_BASELINES") or "ci-baselines"
        if branch in (default, base):  # the gate commits baselines onto it
            raise PipelineError(f"CIFAR10_CI_BASELINES: {shown(branch)} is the branch the code "
                                f"is on (the default branch or the pull request's base); the "
                                f"baselines need a branch of their own: set it to another "
                                f"name, or unset it (ci-baselines)")
        remote = env.get("CIFAR10_CI_REMOTE") or "origin"
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", remote):  # its refs name it
            raise PipelineError(f"CIFAR10_CI_REMOTE: expected the name of a git remote (`git "
                                f"remote`), found {shown(remote)}: a URL or path has no "
                                f"tracking branches; add it (`git remote add NAME URL`) and "
                                f"set the name")
        return cls(name=env.get("GITHUB_EVENT_NAME", ""), sha=sha, ref=env.get("GITHUB_REF", ""),
                   base=base, default=default, branch=branch,
                   remote=remote,
                   lookback=int(lookback))

    @property
    def stores(self) -> bool:
        """A push to the default branch keeps its metrics; every other run is gated."""
        return self.name == "push" and self.ref == f"refs/heads/{self.default}"

    def tracking(self, branch: str) -> str:
        return f"refs/remotes/{self.remote}/{branch}"


def git(*args: str, env: Optional[dict] = None, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise PipelineError(f"`git {' '.join(args)}` failed: "
                            f"{' '.join(proc.stderr.split())[:300]}")
    return proc.stdout.strip()


def fetch(event: Event, branch: str) -> bool:
    """The remote's ``branch`` into its tracking ref; False when the remote has none (the
    baselines branch before the first push to the default branch stored one)."""
    proc = subprocess.run(["git", "fetch", "-q", event.remote,
                           f"+refs/heads/{branch}:{event.tracking(branch)}"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        return True
    if "couldn't find remote ref" in proc.stderr:
        git("update-ref", "-d", event.tracking(branch), check=False)  # gone there: gone here
        return False
    raise PipelineError(f"`git fetch {event.remote} {branch}` failed: "
                        f"{' '.join(proc.stderr.split())[:300]}")


def stored(event: Event) -> set[str]:
    """The commits that have a baseline on the baselines branch (as fetched)."""
    names = git("ls-tree", "--name-only", f"{event.tracking(event.branch)}:{CONFIG}", check=False)
    return {n[:-len(".json")] for n in names.splitlines() if n.endswith(".json")}


def find_baseline(event: Event, start: str) -> tuple[Optional[str], int]:
    """The newest first-parent ancestor of ``start`` (itself included) that has a stored
    baseline and how many commits before ``start`` it is; (None, how many commits were
    searched) when none has."""
    have = stored(event)
    history = git("rev-list", "--first-parent", f"--max-count={event.lookback}",
                  start).splitlines()
    for distance, sha in enumerate(history):
        if sha in have:
            return sha, distance
    return None, len(history)


def merge_base(event: Event) -> str:
    if git("rev-parse", "--is-shallow-repository") == "true":
        raise PipelineError("the checkout is shallow (actions/checkout's fetch-depth: 1), so "
                            "the merge base cannot be found; set `fetch-depth: 0` on the "
                            "gate job's checkout (.github/workflows/ci.yml)")
    if not fetch(event, event.base):
        raise PipelineError(f"the remote {event.remote} has no branch {event.base} to compare "
                            f"with; set GITHUB_BASE_REF or CIFAR10_CI_DEFAULT_BRANCH to it")
    return git("merge-base", "HEAD", event.tracking(event.base))


def store(event: Event, metrics: Path, attempts: int = 3) -> str:
    """Commit ``metrics`` as ``official/<sha>.json`` on the baselines branch and push it;
    when another push job pushed in between (rejected), fetch and commit again. The path it
    was stored at."""
    path = f"{CONFIG}/{event.sha}.json"
    blob = git("hash-object", "-w", str(metrics))
    for attempt in range(1, attempts + 1):
        parent = event.tracking(event.branch) if fetch(event, event.branch) else None
        with tempfile.TemporaryDirectory() as tmp:
            index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git("read-tree", *([parent] if parent else ["--empty"]), env=index)
            git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=index)
            tree = git("write-tree", env=index)
        commit = git("commit-tree", tree, *(["-p", parent] if parent else []), "-m",
                     f"Baseline of {event.sha[:12]} ({CONFIG})\n\nMeasured by the gate job "
                     f"on {event.ref}: the gated metrics of .ci/configs/{CONFIG}.yaml.",
                     env=BOT)
        proc = subprocess.run(["git", "push", "-q", event.remote,
                               f"{commit}:refs/heads/{event.branch}"],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode == 0:
            git("update-ref", event.tracking(event.branch), commit)
            return path
        if attempt == attempts or "rejected" not in proc.stderr:
            break
    fix = ("other jobs kept pushing first: rerun this job" if "rejected" in proc.stderr
           else "the gate job needs `permissions: contents: write`")
    raise PipelineError(f"could not push the baseline {path} to {event.remote} "
                        f"{event.branch} ({attempt} attempt(s)): "
                        f"{' '.join(proc.stderr.split())[:300]}; {fix}")


def improvements(metrics: Path, baseline: Path) -> list[str]:
    """The gated metrics that moved the better way by more than their tolerance."""
    from cifar10_tutorial.params import load_params

    now, base = json.loads(metrics.read_text()), json.loads(baseline.read_text())
    out = []
    for metric, tol in load_params(ROOT / "params.yaml").regression.tolerances.items():
        if metric in now and metric in base:
            change = now[metric] - base[metric]
            better = change if tol.direction == "max_drop" else -change
            if better > abs(tol.signed):
                out.append(f"{metric} ({change:+.4f})")
    return out


def run(archive: Path, **how) -> tuple[int, str]:
    """The configuration's run (``how``: run_config's baseline_file, no_baseline,
    metrics_out); its exit status and the gate's table (empty when none was made)."""
    from ci import run_config  # .ci/ci.py, beside this script

    rc = run_config(CONFIG, ROOT, real_archive=archive, **how)
    table = ROOT / f"regression-{CONFIG}.md"
    return rc, table.read_text().strip() if table.is_file() else ""


def measure_and_store(event: Event, archive: Path, work: Path) -> tuple[int, str, str]:
    metrics = work / "metrics.json"
    rc, table = run(archive, no_baseline=f"a push to {event.default} measures its baseline",
                    metrics_out=metrics)
    if rc != 0 or not metrics.is_file():
        return 1, (f"**FAILED**: the pipeline failed on {event.sha[:12]}; no baseline stored "
                   f"for it (see the job's log)"), table
    path = store(event, metrics)
    return 0, (f"**BASELINE STORED** for {event.sha[:12]} on {event.default}: `{path}` on the "
               f"branch `{event.branch}`; pull requests based on this commit are gated against "
               f"it"), table


def check_stored(event: Event, sha: str, text: str) -> None:
    """A stored baseline is a JSON object of finite numbers (the push job writes one); any
    other is damaged, and no run is gated against it."""
    try:
        values = json.loads(text)
    except ValueError:
        values = None
    if not isinstance(values, dict) or not values:
        found = f"not a JSON object of metrics: {shown(text)}"
    else:
        bad = [(k, v) for k, v in values.items() if isinstance(v, bool)
               or not isinstance(v, (int, float)) or not math.isfinite(v)]
        if not bad:
            return
        found = f"{bad[0][0]} is {bad[0][1]!r}"
    raise PipelineError(f"the stored baseline `{event.branch}:{CONFIG}/{sha}.json` is damaged "
                        f"({found}), expected the gated metrics as finite numbers; nothing was "
                        f"gated: re-run the gate job of the push of {sha[:12]} to "
                        f"{event.default}, which stores it again")


def against_stored(table: str, stored_as: str) -> str:
    """The gate's table as it reads against a stored baseline: naming it, not the scratch
    copy's file it was copied to, and without what concerns a baseline committed to the
    branch (`dvc metrics diff` against its commit, the advice to commit a new one): the
    verdict says what to do."""
    table = re.sub(r"\ARegression check against \S+?:", f"Regression check against the stored "
                   f"baseline `{stored_as}`:", table)
    table = re.sub(r" If the change is intended, update the baseline .*? with the change\.", "",
                   table, flags=re.S)
    return re.sub(r"\n\n\(?`dvc metrics diff.*\Z", "", table, flags=re.S)


def tolerances(commit: Optional[str]) -> dict:
    """The gate's tolerances at ``commit`` (None: the checkout): params.yaml's
    regression.tolerances, and the configuration's own where it sets them."""
    import yaml

    from cifar10_tutorial.param_types import load_yaml12

    def read(path: str):  # as DVC and the stages read it (YAML 1.2: 2e-2 is a number)
        text = (git("show", f"{commit}:{path}", check=False) if commit
                else (ROOT / path).read_text() if (ROOT / path).is_file() else "")
        try:
            return load_yaml12(text) or {}
        except yaml.YAMLError:
            return {}

    params, config = read("params.yaml"), read(f".ci/configs/{CONFIG}.yaml")
    main = ((params.get("regression") or {}) if isinstance(params, dict) else {}) or {}
    own = ((config.get("params") or {}) if isinstance(config, dict) else {}) or {}
    return {"params.yaml": main.get("tolerances") if isinstance(main, dict) else None,
            f".ci/configs/{CONFIG}.yaml": own.get("regression.tolerances")}


def gate(event: Event, archive: Path, work: Path) -> tuple[int, str, str]:
    base = merge_base(event)
    theirs, ours = tolerances(base), tolerances(None)
    changed = [where for where in ours if ours[where] != theirs.get(where)]
    config = f".ci/configs/{CONFIG}.yaml"
    if git("show", f"{base}:{config}", check=False) != (
            (ROOT / config).read_text().strip() if (ROOT / config).is_file() else ""):
        # the run's params, steps and data: a change there (an override that hides one of
        # params.yaml, fewer steps) is not measured against the baseline of another run
        return 1, (f"**CONFIGURATION CHANGED**: this pull request changes {config}, the "
                   f"gate's own run, from that of the merge base {base[:12]}, so its figures "
                   f"do not compare with the stored baseline; review the change, and merge it "
                   f"if it is intended: the push to {event.default} then stores the new "
                   f"run's baseline"), ""
    if changed:  # a change is not judged by rules it sets itself
        return 1, (f"**TOLERANCES CHANGED**: this pull request changes the gate's "
                   f"regression.tolerances ({', '.join(changed)}) from those of the merge "
                   f"base {base[:12]}, so it is not gated by its own rules; review the new "
                   f"tolerances, and merge it if they are intended: the push to "
                   f"{event.default} then gates with them"), ""
    fetch(event, event.branch)
    sha, distance = find_baseline(event, base)
    if sha is None:
        rc, table = run(archive, no_baseline="none stored for the merge base")
        return rc, (f"**NO BASELINE**: none stored on the branch `{event.branch}` for the merge "
                    f"base {base[:12]} with {event.base} nor the {distance - 1} commit(s) before "
                    f"it, so this run GATED NOTHING" + (
                        "" if rc == 0 else "; and its pipeline FAILED (see the job's log)")), table
    baseline, metrics = work / "baseline.json", work / "metrics.json"
    stored_as = f"{event.branch}:{CONFIG}/{sha}.json"
    text = git("show", f"{event.tracking(event.branch)}:{CONFIG}/{sha}.json")
    check_stored(event, sha, text)
    baseline.write_text(text + "\n")
    rc, table = run(archive, baseline_file=baseline, metrics_out=metrics)
    table = against_stored(table, stored_as)
    which = (f"the baseline of {sha[:12]} on {event.base}, "
             + ("the merge base" if distance == 0 else
                f"{distance} commit(s) before the merge base {base[:12]}, which has none yet"))
    if "REGRESSION in " in table:
        failed = table.split("REGRESSION in ", 1)[1].split(". ", 1)[0]
        return 1, (f"**REGRESSED** against {which}: {failed} moved past the tolerance. If "
                   f"that is intended, merge it all the same: the push to {event.default} "
                   f"stores its metrics as the new baseline, no file to commit"), table
    if rc != 0 or not metrics.is_file():
        return 1, (f"**FAILED**: the pipeline failed before the gate; nothing was compared "
                   f"with {which} (see the job's log)"), table
    better = improvements(metrics, baseline)
    return 0, (f"**PASSED** against {which}" + (
        f"; improved past the tolerance: {', '.join(better)}" if better else "")), table


HEADER = "### Regression gate, `"  # the first line of every comment the gate writes


def _record() -> Path:
    """The sha256 of each comment the gate wrote, beside it (the CI runner keeps its
    tables so): what is at the comment's path is the gate's only while it is one of these."""
    return ROOT / f".{COMMENT}.sha256"


def foreign_comment() -> Optional[str]:
    """What is at the comment's path where it is not the gate's own: a folder, or a file
    whose content is not one the gate wrote (a draft there, even one starting like a
    comment of the gate's). A link is replaced (the link itself, never what it points to)."""
    import hashlib

    path = ROOT / COMMENT
    if path.is_symlink() or not path.exists():
        return None
    if not path.is_file():
        return "not a file"
    record = _record()
    try:
        ours = set(record.read_text().split()) if record.is_file() and not record.is_symlink() \
            else set()
        mine = hashlib.sha256(path.read_bytes()).hexdigest() in ours
    except (OSError, UnicodeDecodeError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return None if mine else "a file the gate did not write (or edited since)"


def _write_comment(text: str) -> None:
    """The comment, its sha256 recorded first (beside the old one's until it is in place)."""
    import hashlib

    path, record = ROOT / COMMENT, _record()
    new = hashlib.sha256(text.encode()).hexdigest()
    old = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and \
        not path.is_symlink() else ""
    if record.is_symlink():
        record.unlink()  # the link only: the record is the gate's own file
    write_text_atomic(record, f"{old}\n{new}\n".lstrip())
    write_text_atomic(path, text)
    write_text_atomic(record, f"{new}\n")


def _checkout_folders() -> list[Path]:
    """The checkout's work tree and its git folders (a worktree's, and the repository's
    they share, may lie outside the work tree), and the other work trees of that
    repository (git worktree list): what git needs, and the same project's files, are
    the checkout's too."""
    folders = [Path(os.path.realpath(ROOT))]
    for args in (["rev-parse", "--absolute-git-dir"], ["rev-parse", "--git-common-dir"],
                 ["worktree", "list", "--porcelain"]):
        try:
            out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                 timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode:
            continue
        lines = out.stdout.splitlines()
        if args[0] == "worktree":
            lines = [line[len("worktree "):] for line in lines if line.startswith("worktree ")]
        folders += [Path(os.path.realpath(ROOT / line.strip())) for line in lines if line.strip()]
    return folders


def report(event: Event, verdict: str, table: str) -> None:
    """The verdict and the table: the job's summary (appended) and the comment's file."""
    text = (f"{HEADER}{CONFIG}` configuration, {event.sha[:12]}\n\n{verdict}\n\n"
            + (table or "(no table: the pipeline stopped before the regression stage)") + "\n")
    try:  # the gate's own file in a CI checkout: a link there is replaced, never written through
        if (why := foreign_comment()) is not None:
            raise PipelineError(why)
        if (ROOT / COMMENT).is_symlink():
            (ROOT / COMMENT).unlink()  # the link only: what it points to stays as it is
        _write_comment(text)
    except (OSError, PipelineError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)[:120]
        raise PipelineError(f"{ROOT / COMMENT}: the comment cannot be written there "
                            f"({why}); expected a file or nothing: move what is "
                            f"there away. The verdict: {verdict.splitlines()[0][:200]}") from None
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    # GitHub's lies outside the checkout: one inside it (a code file, say) is not the
    # gate's to write, which writes only its comment there
    where = Path(os.path.realpath(summary or "/"))
    if summary and any(where == root or root in where.parents for root in _checkout_folders()):
        print(f"warning: GITHUB_STEP_SUMMARY {shown(summary, 200)}: inside the checkout "
              f"(its work tree or git folder), where the gate writes only {COMMENT}; the "
              f"verdict is not in the job's summary (expected GitHub's file, outside the "
              f"checkout)", file=sys.stderr)
    elif summary:
        try:  # O_NONBLOCK: a FIFO there must not hang the gate (GitHub's is a regular file)
            fd = os.open(summary, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
            with os.fdopen(fd, "a") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, "not a regular file")
                if os.fstat(fd).st_nlink > 1:  # GitHub's has one name; another may be ours
                    raise OSError(errno.EMLINK, "a file of other names too (hard links), "
                                                "which may be one of the checkout's")
                f.write(text + "\n")
        except OSError as exc:  # the verdict stands: it is printed and in the comment's file
            print(f"warning: GITHUB_STEP_SUMMARY {shown(summary, 200)}: {exc.strerror or exc}; "
                  f"the verdict is not in the job's summary (expected a writable file)",
                  file=sys.stderr)
    print(verdict.replace("**", ""))


def stop_on_term() -> None:
    """SIGTERM (a cancelled job) unwinds the gate as Ctrl-C does: its pipeline's processes
    are stopped and its scratch folders removed on the way out (.ci/ci.py run_config)."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)


def main() -> None:
    stop_on_term()
    if len(sys.argv) != 2:
        raise PipelineError("usage: python .ci/github_gate.py ARCHIVE (the official archive)")
    archive = Path(sys.argv[1]).resolve()
    if (why := foreign_comment()) is not None:  # before the run: a user's file stays
        raise PipelineError(f"{ROOT / COMMENT}: {why}, where the gate writes its comment; "
                            f"move it away, then rerun. Nothing was run.")
    event = Event.from_env()
    head = git("rev-parse", "HEAD")
    if event.sha != head:  # the checkout is measured; its figures are filed as GITHUB_SHA's
        raise PipelineError(f"GITHUB_SHA {event.sha[:12]} is not the checkout's HEAD "
                            f"({head[:12]}): the gate measures the code checked out and files "
                            f"its figures under GITHUB_SHA; check that commit out, or unset "
                            f"GITHUB_SHA. Nothing was run.")
    dirty = git("status", "--porcelain", "--untracked-files=no").splitlines()
    if dirty:  # the run copies the working tree: its figures would be filed as HEAD's
        raise PipelineError(f"the checkout has changes git has not committed ({len(dirty)}, "
                            f"first: {dirty[0].strip()[:120]}): the gate measures the working "
                            f"tree and files its figures as commit {head[:12]}'s; commit or "
                            f"stash them, then rerun. Nothing was run.")
    if not archive.is_file():  # ci.py would name it as its own --real-archive option
        raise PipelineError(f"ARCHIVE {sys.argv[1]}: no such file; give the official archive "
                            f"(usage: python .ci/github_gate.py ARCHIVE)")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            rc, verdict, table = (measure_and_store if event.stores else gate)(
                event, archive, Path(tmp))
        except PipelineError as exc:  # said where a reader of the pull request looks, too
            report(event, f"**FAILED**: {exc}", "")
            raise
    report(event, verdict, table)
    if rc != 0:
        raise PipelineError(verdict.replace("**", ""))


if __name__ == "__main__":
    run_stage(main)
