"""The official gate on GitHub (.ci/github_gate.py, docs/ci.md "The gate on GitHub"): a
push to the default branch stores its baseline on the branch ci-baselines, a pull request
is gated against the baseline of its merge base. Here GitHub is a local bare repository
(the remote the runner's checkout pushes to and fetches from), the official archive a
local HTTP server's, and the workflow's own step commands run with GitHub's environment
variables set."""
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, commit, copy_project, init_repo

TOLERATED = {"eval.precision_at_1", "eval.precision_at_1_raw", "train.loss_avg"}


def sh(cwd, *cmd):
    """``git ...`` or another command in ``cwd``; it must succeed; its stdout."""
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def clean_env(**extra):
    """This process's environment without GitHub's variables (the tests run on GitHub too:
    a real summary must not receive theirs), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CIFAR10_CI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return {**env, **extra}


def github_gate(root: Path):
    """.ci/github_gate.py as a module, working in the checkout ``root``."""
    spec = importlib.util.spec_from_file_location("github_gate", ROOT / ".ci/github_gate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    module.ROOT = root
    return module


def remote_and_checkout(tmp_path, project: Path) -> tuple[Path, Path]:
    """A bare repository standing for GitHub, holding ``project``'s main branch, and the
    runner's checkout of it (full history, as `fetch-depth: 0` gives)."""
    origin = tmp_path / "origin.git"
    sh(tmp_path, "git", "init", "-q", "--bare", str(origin))
    sh(origin, "git", "symbolic-ref", "HEAD", "refs/heads/main")  # GitHub's default branch
    sh(project, "git", "branch", "-M", "main")
    sh(project, "git", "remote", "add", "origin", str(origin))
    sh(project, "git", "push", "-q", "origin", "main")
    runner = tmp_path / "runner"
    sh(tmp_path, "git", "clone", "-q", str(origin), str(runner))
    return origin, runner


def pull_request(project: Path, runner: Path, branch: str, number: int) -> str:
    """GitHub's merge ref of ``branch`` into main (refs/pull/N/merge), checked out in the
    runner's checkout the way actions/checkout does; its sha."""
    sh(project, "git", "push", "-q", "origin", branch)
    sh(project, "git", "checkout", "-q", "--detach", "main")
    sh(project, "git", "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff",
       branch, "-m", f"Merge {branch} into main")
    merge = sh(project, "git", "rev-parse", "HEAD")
    sh(project, "git", "push", "-q", "origin", f"HEAD:refs/pull/{number}/merge")
    sh(project, "git", "checkout", "-q", "main")
    sh(runner, "git", "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*",
       f"+refs/pull/{number}/merge:refs/remotes/pull/{number}/merge")
    sh(runner, "git", "checkout", "-q", "--detach", merge)
    return merge


def event(module, name, sha, ref, base="", lookback=50):
    return module.Event(name=name, sha=sha, ref=ref, base=base or "main", default="main",
                        branch="ci-baselines", remote="origin", lookback=lookback)


# ------------------------------------------------------------ the lookup, without a run


def test_baselines_are_stored_on_a_branch_and_found_by_the_merge_base(tmp_path):
    """The storage and the lookup: a push stores `official/<sha>.json` on ci-baselines
    (creating the branch, then adding to it) without touching the checkout; a pull request
    finds the merge base's, or the nearest first-parent ancestor's while the merge base has
    none, or says there is none."""
    project = tmp_path / "dev"
    project.mkdir()
    sh(project, "git", "init", "-q")
    (project / "a.txt").write_text("1\n")
    commit(project, "c1")
    c1 = sh(project, "git", "rev-parse", "HEAD")
    (project / "a.txt").write_text("2\n")
    commit(project, "c2")
    c2 = sh(project, "git", "rev-parse", "HEAD")
    origin, runner = remote_and_checkout(tmp_path, project)
    gate = github_gate(runner)
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"eval.precision_at_1": 0.5}))

    pr = event(gate, "pull_request", "x", "refs/pull/1/merge")
    assert gate.find_baseline(pr, c2) == (None, 2)  # no branch yet: nothing stored

    sh(runner, "git", "checkout", "-q", "--detach", c1)
    status = sh(runner, "git", "status", "--porcelain")
    assert gate.store(event(gate, "push", c1, "refs/heads/main"), metrics) == f"official/{c1}.json"
    assert sh(runner, "git", "status", "--porcelain") == status  # the checkout untouched
    assert json.loads(sh(origin, "git", "show", f"ci-baselines:official/{c1}.json")) == \
        {"eval.precision_at_1": 0.5}

    (project / "b.txt").write_text("feature\n")
    sh(project, "git", "checkout", "-q", "-b", "feature")
    commit(project, "feature")
    pull_request(project, runner, "feature", 1)
    base = gate.merge_base(pr)
    assert base == c2
    assert gate.find_baseline(pr, base) == (c1, 1)  # c2's own run has not stored one
    assert gate.find_baseline(event(gate, "pull_request", "x", "", lookback=1), base) == \
        (None, 1)

    metrics.write_text(json.dumps({"eval.precision_at_1": 0.6}))
    assert gate.store(event(gate, "push", c2, "refs/heads/main"), metrics) == f"official/{c2}.json"
    assert gate.find_baseline(pr, base) == (c2, 0)
    listing = sh(origin, "git", "ls-tree", "-r", "--name-only", "ci-baselines")
    assert listing.split() == sorted([f"official/{c1}.json", f"official/{c2}.json"])
    assert sh(origin, "git", "rev-list", "--count", "ci-baselines") == "2"


def two_commits(project: Path) -> Path:
    """A git repository of two commits of one file."""
    project.mkdir()
    sh(project, "git", "init", "-q")
    for n in range(2):
        (project / "a.txt").write_text(f"{n}\n")
        commit(project, f"c{n}")
    return project


def test_a_shallow_checkout_is_one_line_naming_fetch_depth(tmp_path):
    project = two_commits(tmp_path / "dev")
    origin, _ = remote_and_checkout(tmp_path, project)
    shallow = tmp_path / "shallow"
    sh(tmp_path, "git", "clone", "-q", "--depth", "1", f"file://{origin}", str(shallow))
    gate = github_gate(shallow)
    with pytest.raises(gate.PipelineError, match=r"^the checkout is shallow .*set `fetch-depth: "
                                                 r"0` on the gate job's checkout"):
        gate.merge_base(event(gate, "pull_request", "x", "refs/pull/1/merge"))


def test_improvements_are_the_moves_past_the_tolerance_the_better_way(tmp_path):
    gate = github_gate(ROOT)  # the project's params.yaml: its tolerances
    base, now = tmp_path / "b.json", tmp_path / "m.json"
    base.write_text(json.dumps({"eval.precision_at_1": 0.50, "eval.precision_at_1_raw": 0.50,
                                "train.loss_avg": 2.0}))
    now.write_text(json.dumps({"eval.precision_at_1": 0.60, "eval.precision_at_1_raw": 0.51,
                               "train.loss_avg": 1.5}))
    assert gate.improvements(now, base) == ["eval.precision_at_1 (+0.1000)",
                                            "train.loss_avg (-0.5000)"]


# ------------------------------------------------- the workflow's steps, as GitHub runs them


def workflow_step(needle: str) -> tuple[dict, dict]:
    """The gate job of .github/workflows/ci.yml and its step whose command holds ``needle``."""
    job = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]["gate"]
    steps = [s for s in job["steps"] if needle in s.get("run", "")]
    assert len(steps) == 1, [s.get("name") for s in job["steps"]]
    return job, steps[0]


def expand(text: str, context: dict) -> str:
    """GitHub's ``${{ ... }}`` expressions of the workflow, from ``context``; one this test
    does not know fails it (a new one in the workflow needs a value here)."""
    def value(match):
        name = match.group(1).strip()
        assert name in context, f"the workflow uses ${{{{ {name} }}}}: give it a value here"
        return context[name]
    return re.sub(r"\$\{\{(.+?)\}\}", value, text)


def run_step(step: dict, job: dict, checkout: Path, github: dict, extra: dict):
    """The step's `run:` as the runner runs it: bash -eo pipefail in the checkout, the job's
    env (its expressions expanded) and GitHub's variables in the environment."""
    context = {"github.workspace": str(checkout), "github.event.repository.default_branch": "main"}
    env = clean_env(**{k: expand(str(v), context) for k, v in job.get("env", {}).items()},
                    GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(checkout), **github, **extra)
    script = checkout.parent / "step.sh"
    script.write_text(expand(step["run"], context))
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture
def served_archive(tmp_path):
    """A local HTTP server (127.0.0.1) serving an archive in the official layout, and a
    params file whose data section points at it (CIFAR10_CI_PARAMS)."""
    from cifar10_tutorial.data.synthetic import make_cifar10_archive

    served = tmp_path / "served"
    served.mkdir()
    info = make_cifar10_archive(served / "cifar-10-binary.tar.gz", train_per_batch=100,
                                test=200, seed=1)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(url=f"http://127.0.0.1:{httpd.server_port}/cifar-10-binary.tar.gz",
                          md5=info["md5"])
    path = tmp_path / "served-params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    yield path
    httpd.shutdown()
    httpd.server_close()


def gate_project(tmp_path) -> Path:
    """The project with its .ci/ and workflow, the `official` configuration made tiny (30
    steps on the served archive: at the default learning rate it learns, at 1e-5 it does
    not), as a git + DVC repository."""
    project = copy_project(tmp_path / "dev")
    shutil.copytree(ROOT / ".ci", project / ".ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / ".github", project / ".github")
    config = yaml.safe_load((project / ".ci/configs/official.yaml").read_text())
    config["params"].update({"train.max_steps": 30, "train.batch_size": 32, "train.log_every": 10,
                             "run.checkpoint_every": 30, "eval.every_steps": 0,
                             "input.min_fraction_of_examples_in_queue": 0.1})
    (project / ".ci/configs/official.yaml").write_text(yaml.safe_dump(config))
    init_repo(project)
    return project


def github_env(name: str, sha: str, ref: str, summary: Path, base: str = "") -> dict:
    return {"GITHUB_EVENT_NAME": name, "GITHUB_SHA": sha, "GITHUB_REF": ref,
            "GITHUB_BASE_REF": base, "GITHUB_STEP_SUMMARY": str(summary)}


def link_venv(checkout: Path) -> None:
    """The step sources .venv/bin/activate, which .ci/run made on the runner: this venv."""
    (checkout / ".venv").symlink_to(Path(sys.executable).parent.parent)


@pytest.mark.e2e
def test_a_push_stores_the_baseline_and_a_worse_pull_request_fails_with_the_table(
        tmp_path, served_archive):
    """The sequence of the issue, by the workflow as written: a push to main stores its
    baseline on ci-baselines; a pull request that lowers train.initial_lr to 1e-5 is gated
    against it and fails, with the table in the job's summary and in the comment's file."""
    project = gate_project(tmp_path)
    origin, runner = remote_and_checkout(tmp_path, project)
    link_venv(runner)
    job, step = workflow_step(".ci/official-gate")
    assert step["if"] == "${{ !cancelled() }}"  # also after a failed test step
    extra = {"CIFAR10_CI_PARAMS": str(served_archive)}

    main = sh(runner, "git", "rev-parse", "HEAD")
    summary = tmp_path / "summary-push.md"
    proc = run_step(step, job, runner, github_env("push", main, "refs/heads/main", summary), extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"**BASELINE STORED** for {main[:12]} on main: `official/{main}.json` on the " \
           f"branch `ci-baselines`" in summary.read_text()
    stored = json.loads(sh(origin, "git", "show", f"ci-baselines:official/{main}.json"))
    assert set(stored) == TOLERATED and stored["eval.precision_at_1"] > 0.3, stored
    assert sh(runner, "git", "status", "--porcelain", "--untracked-files=no") == ""

    sh(project, "git", "checkout", "-q", "-b", "lower-lr")
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["train"]["initial_lr"] = 1.0e-5
    (project / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "Lower the learning rate")
    merge = pull_request(project, runner, "lower-lr", 7)
    summary = tmp_path / "summary-pr.md"
    proc = run_step(step, job, runner, github_env("pull_request", merge, "refs/pull/7/merge",
                                                  summary, base="main"), extra)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = summary.read_text()
    assert f"**REGRESSED** against the baseline of {main[:12]} on main, the merge base: " \
           f"eval.precision_at_1" in text, text
    assert re.search(r"\| eval.precision_at_1 \| 0\.\d{4} \| 0\.\d{4} \| -0\.\d{4} \| >= -0.0200 "
                     r"\| \*\*FAIL\*\*: dropped more than allowed \|", text), text
    assert "error: REGRESSED against the baseline of" in proc.stderr
    assert (runner / "regression-comment.md").read_text().strip() == text.strip()
    _, comment = workflow_step("cml comment update")
    assert "regression-comment.md" in comment["run"] and comment["continue-on-error"] is True
    assert comment["if"] == "${{ !cancelled() && github.event_name == 'pull_request' }}"


@pytest.mark.e2e
def test_without_a_baseline_it_says_so_and_a_better_pull_request_passes_improved(
        tmp_path, served_archive):
    """The other decisions, by the same step: a pull request before main stored any
    baseline runs and says in one line that it gated nothing (never "ok"); once main (here
    at a learning rate of 1e-5) has stored its baseline, the same pull request (back to the
    default rate) passes and names what improved."""
    project = gate_project(tmp_path)
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["train"]["initial_lr"] = 1.0e-5
    (project / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "A learning rate that learns nothing in 30 steps")
    origin, runner = remote_and_checkout(tmp_path, project)
    link_venv(runner)
    job, step = workflow_step(".ci/official-gate")
    extra = {"CIFAR10_CI_PARAMS": str(served_archive)}
    main = sh(runner, "git", "rev-parse", "HEAD")

    sh(project, "git", "checkout", "-q", "-b", "restore-lr")
    shutil.copy2(ROOT / "params.yaml", project / "params.yaml")
    commit(project, "Restore the learning rate")
    merge = pull_request(project, runner, "restore-lr", 3)
    pr_env = functools.partial(github_env, "pull_request", merge, "refs/pull/3/merge", base="main")
    proc = run_step(step, job, runner, pr_env(tmp_path / "summary-none.md"), extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = (tmp_path / "summary-none.md").read_text()
    verdicts = [line for line in text.splitlines() if line.startswith("**")]
    assert verdicts == [f"**NO BASELINE**: none stored on the branch `ci-baselines` for the "
                        f"merge base {main[:12]} with main nor the 1 commit(s) before it, so this "
                        f"run GATED NOTHING"], text
    assert not re.search(r"\bok\b", text, flags=re.I), text
    # the run's metrics, shown, not gated (the figure depends on the threads torch has)
    assert re.search(r"\| eval\.precision_at_1 \| 0\.\d{4} \|\n", text), text
    assert (runner / "regression-comment.md").read_text().strip() == text.strip()

    sh(runner, "git", "checkout", "-q", "main")
    proc = run_step(step, job, runner, github_env("push", main, "refs/heads/main",
                                                  tmp_path / "summary-push.md"), extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads(sh(origin, "git", "show", f"ci-baselines:official/{main}.json"))[
        "eval.precision_at_1"] == pytest.approx(0.1)

    sh(runner, "git", "checkout", "-q", "--detach", merge)
    proc = run_step(step, job, runner, pr_env(tmp_path / "summary-pr.md"), extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = (tmp_path / "summary-pr.md").read_text()
    assert re.search(rf"\*\*PASSED\*\* against the baseline of {main[:12]} on main, the merge "
                     r"base; improved past the tolerance: eval\.precision_at_1 \(\+0\.\d{4}\), "
                     r"eval\.precision_at_1_raw \(\+0\.\d{4}\), train\.loss_avg \(-\d\.\d{4}\)",
                     text), text
    assert re.search(r"\| eval\.precision_at_1 \| 0\.1000 \| 0\.\d{4} \| \+0\.\d{4} \| "
                     r"max drop 0\.0200 \| ok \||\| eval\.precision_at_1 \| 0\.1000 \| 0\.\d{4} \| "
                     r"\+0\.\d{4} \| >= -0\.0200 \| ok \|", text), text


def test_a_push_that_loses_a_race_for_the_branch_stores_again(tmp_path):
    """Two push jobs store at once: the one whose push is rejected (the other pushed between
    its fetch and its push; here a pre-push hook does, once) fetches and commits again, and
    both baselines are kept."""
    project = two_commits(tmp_path / "dev")
    c0, c1 = sh(project, "git", "rev-list", "--reverse", "HEAD").split()
    origin, runner = remote_and_checkout(tmp_path, project)
    other = tmp_path / "other"
    sh(tmp_path, "git", "clone", "-q", str(origin), str(other))
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"eval.precision_at_1": 0.5}))
    hook = runner / ".git/hooks/pre-push"
    hook.write_text(f"""#!/bin/sh
[ -e {tmp_path}/raced ] && exit 0
touch {tmp_path}/raced
unset GIT_DIR GIT_INDEX_FILE
{sys.executable} -c "import importlib.util, sys, pathlib
spec = importlib.util.spec_from_file_location('g', '{ROOT / '.ci/github_gate.py'}')
m = importlib.util.module_from_spec(spec); sys.modules['g'] = m; spec.loader.exec_module(m)
m.ROOT = pathlib.Path('{other}')
e = m.Event('push', '{c0}', 'refs/heads/main', 'main', 'main', 'ci-baselines', 'origin', 50)
m.store(e, pathlib.Path('{metrics}'))"
""")
    hook.chmod(0o755)
    gate = github_gate(runner)
    assert gate.store(event(gate, "push", c1, "refs/heads/main"), metrics) == f"official/{c1}.json"
    assert (tmp_path / "raced").exists()  # the other job did push first
    listing = sh(origin, "git", "ls-tree", "-r", "--name-only", "ci-baselines").split()
    assert listing == sorted([f"official/{c0}.json", f"official/{c1}.json"])
    assert sh(origin, "git", "rev-list", "--count", "ci-baselines") == "2"


# ------------------------------------------------ its inputs and outputs, one line each


def test_bad_environment_variables_are_one_line_each(tmp_path):
    """A lookback that is not a whole number, a branch name too long to pass to git: one
    line naming the variable, what it expected and what it found, before any git command
    (here by the script, as the workflow runs it)."""
    gate = github_gate(ROOT)
    with pytest.raises(gate.PipelineError, match=r"^CIFAR10_CI_LOOKBACK: expected a whole "
                       r"number \(how many first-parent ancestors of the merge base to search, "
                       r"e\.g\. 50\), found 'abc'; set it to one or unset it$"):
        gate.Event.from_env({"GITHUB_SHA": "f" * 40, "CIFAR10_CI_LOOKBACK": "abc"})
    assert gate.Event.from_env({"GITHUB_SHA": "f" * 40, "CIFAR10_CI_LOOKBACK": "7"}).lookback == 7
    with pytest.raises(gate.PipelineError, match=r"^GITHUB_BASE_REF: expected a git name \(at "
                       r"most 255 printable characters, not starting with '-'\), found "
                       r"'b{40}'\.\.\. \(70,000 characters\); set it to the branch, commit "
                       r"or remote it stands for$"):
        gate.Event.from_env({"GITHUB_SHA": "f" * 40, "GITHUB_BASE_REF": "b" * 70_000})
    # digits of other scripts pass str.isdigit but not int(); an option reaches git as one
    with pytest.raises(gate.PipelineError, match=r"^CIFAR10_CI_LOOKBACK: expected a whole"):
        gate.Event.from_env({"GITHUB_SHA": "f" * 40, "CIFAR10_CI_LOOKBACK": "\u00b2"})
    for key in ("CIFAR10_CI_REMOTE", "GITHUB_BASE_REF", "CIFAR10_CI_BASELINES", "GITHUB_SHA"):
        with pytest.raises(gate.PipelineError, match=rf"^{key}: expected a git name .*not "
                                                     r"starting with '-'"):
            gate.Event.from_env({"GITHUB_SHA": "f" * 40, key: f"--upload-pack=touch {tmp_path}/p"})
    assert not (tmp_path / "p").exists()
    # a commit that is no full hash names a baseline's file: refused
    for sha in ("not a sha", "../../evil", "f" * 39):
        with pytest.raises(gate.PipelineError, match=r"^GITHUB_SHA: expected a commit's full "
                                                     r"hash \(40 hex digits\)"):
            gate.Event.from_env({"GITHUB_SHA": sha})
    # the baselines branch must not be the code's: the gate commits baselines onto it
    for env in ({"CIFAR10_CI_BASELINES": "main"},
                {"CIFAR10_CI_BASELINES": "dev", "CIFAR10_CI_DEFAULT_BRANCH": "dev"},
                {"CIFAR10_CI_BASELINES": "release", "GITHUB_BASE_REF": "release"}):
        with pytest.raises(gate.PipelineError, match=r"^CIFAR10_CI_BASELINES: '\w+' is the "
                                                     r"branch the code is on"):
            gate.Event.from_env({"GITHUB_SHA": "f" * 40, **env})
    for key, value in (("CIFAR10_CI_LOOKBACK", "abc"), ("GITHUB_BASE_REF", "b" * 70_000)):
        proc = subprocess.run([sys.executable, str(ROOT / ".ci/github_gate.py"), "a.tar.gz"],
                              cwd=tmp_path, capture_output=True, text=True,
                              env=clean_env(GITHUB_SHA="x", **{key: value}))
        assert proc.returncode == 1 and proc.stderr.startswith(f"error: {key}: expected ")
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_the_comment_replaces_a_link_and_an_unwritable_summary_is_one_warning(
        tmp_path, monkeypatch, capsys):
    """The comment's file is written beside its name and renamed into place: a link there
    is replaced, the file it points to untouched. A job summary that cannot be written (a
    folder) is one warning line: the verdict stands."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("someone else's\n")
    (checkout / "regression-comment.md").symlink_to(foreign)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    gate = github_gate(checkout)
    pr = event(gate, "pull_request", "f" * 40, "refs/pull/1/merge")
    gate.report(pr, "**PASSED** here", "| table |")
    assert foreign.read_text() == "someone else's\n"
    comment = checkout / "regression-comment.md"
    assert not comment.is_symlink() and "**PASSED** here\n\n| table |" in comment.read_text()
    capsys.readouterr()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))
    gate.report(pr, "**PASSED** here", "| table |")
    out, err = capsys.readouterr()
    assert out == "PASSED here\n"
    assert err == (f"warning: GITHUB_STEP_SUMMARY '{tmp_path}': Is a directory; the verdict is "
                   f"not in the job's summary (expected a writable file)\n")
    # a FIFO (no reader: the open would block for ever; a reader: not a file) is a warning
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(fifo))
    gate.report(pr, "**PASSED** here", "| table |")
    out, err = capsys.readouterr()
    assert out == "PASSED here\n" and err.startswith(f"warning: GITHUB_STEP_SUMMARY '{fifo}': ")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        gate.report(pr, "**PASSED** here", "| table |")
    finally:
        os.close(reader)
    out, err = capsys.readouterr()
    assert out == "PASSED here\n" and err == (
        f"warning: GITHUB_STEP_SUMMARY '{fifo}': not a regular file; the verdict is not in the "
        f"job's summary (expected a writable file)\n")
    # a file of the checkout (a code file, through a link too): never appended to
    code = checkout / "model.py"
    code.write_text("x = 1\n")
    (tmp_path / "to-code").symlink_to(code)
    for given in (code, tmp_path / "to-code", checkout):
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(given))
        gate.report(pr, "**PASSED** here", "| table |")
        out, err = capsys.readouterr()
        assert out == "PASSED here\n" and err == (
            f"warning: GITHUB_STEP_SUMMARY '{given}': inside the checkout (its work tree or "
            f"git folder), where the gate writes only regression-comment.md; the verdict is "
            f"not in the job's summary (expected GitHub's file, outside the checkout)\n"), err
    assert code.read_text() == "x = 1\n"
    # the checkout's git folder outside its work tree (a worktree's, the repository's)
    repo, wt = tmp_path / "repo", tmp_path / "wt"
    sh(tmp_path, "git", "init", "-q", str(repo))
    sh(repo, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
       "--allow-empty", "-m", "x")
    sh(repo, "git", "worktree", "add", "-q", str(wt))
    gate.ROOT = wt
    head = repo / ".git" / "worktrees" / "wt" / "HEAD"
    (repo / "code.py").write_text("x = 1\n")  # the main work tree's file: the same project's
    before = {p: p.read_bytes() for p in (head, repo / ".git" / "HEAD", repo / "code.py")}
    for given in before:
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(given))
        gate.report(pr, "**PASSED** here", "| table |")
        out, err = capsys.readouterr()
        assert out == "PASSED here\n" and "inside the checkout (its work tree or git folder)" \
            in err, err
    assert {p: p.read_bytes() for p in before} == before
    sh(wt, "git", "rev-parse", "HEAD")
    gate.ROOT = checkout
    # nor through a hard link outside it: the same file under another name
    os.link(code, tmp_path / "hard-link")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "hard-link"))
    gate.report(pr, "**PASSED** here", "| table |")
    out, err = capsys.readouterr()
    assert out == "PASSED here\n" and "hard links" in err and err.count("\n") == 1, err
    assert code.read_text() == "x = 1\n"


def stored_baseline(tmp_path, values: str):
    """A checkout whose merge base with main has ``values`` stored on ci-baselines (as a
    push job stores it, or as a hand-pushed file), and the gate module working in it."""
    project = two_commits(tmp_path / "dev")
    base = sh(project, "git", "rev-parse", "HEAD")
    origin, runner = remote_and_checkout(tmp_path, project)
    gate = github_gate(runner)
    (tmp_path / "m.json").write_text(values)
    gate.store(event(gate, "push", base, "refs/heads/main"), tmp_path / "m.json")
    (project / "b.txt").write_text("feature\n")
    sh(project, "git", "checkout", "-q", "-b", "feature")
    commit(project, "feature")
    pull_request(project, runner, "feature", 1)
    return gate, runner, base


def test_a_damaged_stored_baseline_is_said_so_and_nothing_runs(tmp_path):
    gate, _, base = stored_baseline(tmp_path, '{"eval.precision_at_1": NaN}')

    def run(*args, **kwargs):
        raise AssertionError("a run was gated against a damaged baseline")

    gate.run = run
    (tmp_path / "work").mkdir()
    with pytest.raises(gate.PipelineError, match=(
            rf"^the stored baseline `ci-baselines:official/{base}\.json` is damaged "
            r"\(eval\.precision_at_1 is nan\), expected the gated metrics as finite numbers; "
            rf"nothing was gated: re-run the gate job of the push of {base[:12]} to main, "
            r"which stores it again$")):
        gate.gate(event(gate, "pull_request", "x", "refs/pull/1/merge"), tmp_path / "a.tar.gz",
                  tmp_path / "work")


def test_the_table_names_the_stored_baseline_it_was_gated_against(tmp_path, monkeypatch):
    """The regression stage's table, made in the scratch copy where the stored baseline is
    copied to the configuration's file, names the stored baseline instead, without the
    advice to commit a baseline file or the note that it is not committed."""
    from cifar10_tutorial.regression import RegressionError, gate as regress, metrics_diff_md

    gate, runner, base = stored_baseline(tmp_path, '{"eval.precision_at_1": 0.8}')
    monkeypatch.chdir(runner)  # a git repository where the copied baseline is not committed
    named = "reports/baseline/ci-official.json"

    def run(archive, baseline_file, metrics_out):
        (runner / named).parent.mkdir(parents=True)
        shutil.copyfile(baseline_file, runner / named)
        from test_regression import write_eval  # the eval stage's set: figures and CSVs

        files = {"eval": write_eval(tmp_path / "eval", {"precision_at_1": 0.5,
                                                        "num_examples": 1000})}
        metrics_out.write_text(json.dumps({"eval.precision_at_1": 0.5}))
        try:
            text = regress(named, {"eval.precision_at_1": {"max_drop": 0.02}}, files)
        except RegressionError as exc:
            text = str(exc)
        return 1, text + "\n\n" + metrics_diff_md(named, files)

    gate.run = run
    (tmp_path / "work").mkdir()
    rc, verdict, table = gate.gate(event(gate, "pull_request", "x", "refs/pull/1/merge"),
                                   tmp_path / "a.tar.gz", tmp_path / "work")
    assert rc == 1 and verdict.startswith(f"**REGRESSED** against the baseline of {base[:12]}")
    assert table.startswith(f"Regression check against the stored baseline "
                            f"`ci-baselines:official/{base}.json`:\n\n| metric |"), table
    assert table.endswith("\n\nREGRESSION in eval.precision_at_1."), table
    assert named not in table and "commit" not in table


@pytest.mark.parametrize("entry", ["gate", "cifar10 ci"])
def test_a_terminated_gate_stops_its_pipeline_and_removes_its_scratch(tmp_path, entry):
    """SIGTERM to the gate (or to `cifar10 ci` itself) while its pipeline runs (here a
    stand-in for `dvc repro` that starts a stage of its own and waits): it exits in one
    line, no process of the pipeline is left, and no scratch folder."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "a.tar.gz").write_bytes(b"")  # the stand-in pipeline never reads it
    pids = tmp_path / "pids"
    script = tmp_path / "gate.py"
    script.write_text(f"""import importlib.util, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / '.ci')!r})
import ci
spec = importlib.util.spec_from_file_location("github_gate", {str(ROOT / '.ci/github_gate.py')!r})
g = importlib.util.module_from_spec(spec); sys.modules[spec.name] = g; spec.loader.exec_module(g)
git = g.git  # the checkout as committed, whatever is being edited in it
g.git = lambda *a, **k: "" if a[:1] == ("status",) else git(*a, **k)
ci.load_config = lambda name, root: {{"archive": "given", "params": {{}}}}
ci.copy_worktree = ci.apply_overrides = ci._keep_results = ci._check_overrides = lambda *args: None
ci.build_archive = lambda *args: "0" * 32
ci._place_baseline = lambda *args: None
ci._outputs = lambda project: []
run = ci._run
ci._run = lambda cmd, cwd, env: run(["bash", "-c", "sleep 300 & echo $$ $! > {pids}; wait"],
                                    cwd, env)
def gate(event, archive, work):
    (work / "b.json").write_text('{{"eval.precision_at_1": 0.5}}')
    return (*g.run(archive, baseline_file=work / "b.json", metrics_out=work / "m.json"), "")[:3]
g.gate = gate
sys.argv = ["github_gate.py", "a.tar.gz"]
""" + ("g.run_stage(g.main)\n" if entry == "gate" else "ci.main(['official'])\n"))
    log = tmp_path / "stderr"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=stderr,
                                env=clean_env(GITHUB_SHA=sh(ROOT, "git", "rev-parse", "HEAD"),
                                              TMPDIR=str(scratch),
                                              PYTHONPATH=str(ROOT / "src")))
    started = []
    try:
        for _ in range(300):
            if pids.is_file() and len(pids.read_text().split()) == 2:
                break
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        started = [int(pid) for pid in pids.read_text().split()]
        assert list(scratch.iterdir())  # the gate's scratch folders, while it runs
        proc.terminate()
        assert proc.wait(timeout=60) == 130
        err = log.read_text()
        assert err.splitlines() == ["interrupted"], err
        time.sleep(0.2)
        left = [pid for pid in started if Path(f"/proc/{pid}").exists()
                and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
        assert left == [], "the pipeline's processes outlived the gate"
        assert list(scratch.iterdir()) == []
    finally:
        proc.kill()
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_pull_request_that_changes_the_tolerances_is_not_passed_by_them(tmp_path):
    """A pull request that loosens regression.tolerances would be gated by the rules it
    sets: the gate says so, fails, and runs nothing (the push to main gates with them)."""
    gate, runner, base = stored_baseline(tmp_path, '{"eval.precision_at_1": 0.8}')

    def run(*args, **kwargs):
        raise AssertionError("a change was gated by the tolerances it sets")

    gate.run = run
    (tmp_path / "work").mkdir()
    (runner / "params.yaml").write_text("regression:\n  tolerances:\n"
                                        "    eval.precision_at_1: {max_drop: 0.9}\n")
    rc, verdict, table = gate.gate(event(gate, "pull_request", "x", "refs/pull/1/merge"),
                                   tmp_path / "a.tar.gz", tmp_path / "work")
    assert rc == 1 and table == ""
    assert verdict.startswith(f"**TOLERANCES CHANGED**: this pull request changes the gate's "
                              f"regression.tolerances (params.yaml) from those of the merge "
                              f"base {base[:12]}"), verdict


def test_the_comment_is_never_written_over_a_users_file(tmp_path, monkeypatch):
    """regression-comment.md holding a user's draft (git-ignored: lost for good if
    replaced): the gate refuses before it runs, and at the end keeps the file and says
    the verdict in its error; its own earlier comment is replaced."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    gate = github_gate(checkout)
    draft = checkout / "regression-comment.md"
    draft.write_text("my hand-written draft\n")
    assert gate.foreign_comment() == "a file the gate did not write (or edited since)"
    # a draft that starts as the gate's comments do is still the user's
    draft.write_text("### Regression gate, `official` configuration, abc\n\nmy edits\n")
    assert gate.foreign_comment() == "a file the gate did not write (or edited since)"
    draft.write_text("my hand-written draft\n")
    pr = event(gate, "pull_request", "f" * 40, "refs/pull/1/merge")
    with pytest.raises(gate.PipelineError, match=r"the comment cannot be written there \(a file "
                                                 r"the gate did not write \(or edited since\)\).*"
                                                 r"The verdict: "
                                                 r"\*\*PASSED\*\* here"):
        gate.report(pr, "**PASSED** here", "| table |")
    assert draft.read_text() == "my hand-written draft\n"
    draft.unlink()
    gate.report(pr, "**PASSED** here", "| table |")
    assert gate.foreign_comment() is None
    gate.report(pr, "**FAILED** now", "| table |")
    assert "**FAILED** now" in draft.read_text()


def test_a_gate_for_another_commit_than_the_checkout_runs_nothing(tmp_path):
    """GITHUB_SHA names the commit whose figures are stored (a push) or gated: another
    commit than the one checked out would file one commit's figures as another's."""
    proc = subprocess.run([sys.executable, str(ROOT / ".ci/github_gate.py"), "a.tar.gz"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(GITHUB_SHA="f" * 40, GITHUB_EVENT_NAME="push",
                                        GITHUB_REF="refs/heads/main"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: GITHUB_SHA ffffffffffff is not the checkout's HEAD ("), \
        proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Nothing was run." in proc.stderr


@pytest.mark.parametrize("remote", ["file:///tmp/origin.git", "/tmp/origin.git", "../origin.git",
                                    "git@github.com:x/y.git"])
def test_a_remote_given_as_a_url_or_path_is_one_line(remote):
    """CIFAR10_CI_REMOTE names a remote, whose tracking branches the gate reads: a URL or a
    path has none (every fetch failed with 'invalid refspec'); said before anything runs."""
    gate = github_gate(ROOT)
    with pytest.raises(gate.PipelineError, match=r"^CIFAR10_CI_REMOTE: expected the name of a "
                                                 r"git remote \(`git remote`\)"):
        gate.Event.from_env({"GITHUB_SHA": "f" * 40, "CIFAR10_CI_REMOTE": remote})
    assert gate.Event.from_env({"GITHUB_SHA": "f" * 40, "CIFAR10_CI_REMOTE": "upstream"}
                               ).remote == "upstream"


def test_a_checkout_with_uncommitted_changes_runs_nothing(tmp_path):
    """The run copies the working tree: a change not committed would be measured and its
    figures stored (a push) or gated (a pull request) as the commit's."""
    project = two_commits(tmp_path / "dev")
    shutil.copytree(ROOT / ".ci", project / ".ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__"))
    commit(project, "the gate")
    (project / "a.txt").write_text("edited, not committed\n")
    proc = subprocess.run([sys.executable, str(project / ".ci/github_gate.py"), "a.tar.gz"],
                          cwd=project, capture_output=True, text=True,
                          env=clean_env(GITHUB_EVENT_NAME="push", GITHUB_REF="refs/heads/main"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: the checkout has changes git has not committed (1, "
                                  "first: M a.txt)"), proc.stderr
    assert "Nothing was run." in proc.stderr


def test_a_pull_request_that_changes_the_gates_own_run_is_not_compared(tmp_path):
    """A pull request that changes .ci/configs/official.yaml (an override hiding a change of
    params.yaml, fewer steps) would be measured by another run than the baseline's: the
    gate says so, fails, and runs nothing."""
    gate, runner, base = stored_baseline(tmp_path, '{"eval.precision_at_1": 0.8}')

    def run(*args, **kwargs):
        raise AssertionError("another run was compared with the stored baseline")

    gate.run = run
    (tmp_path / "work").mkdir()
    (runner / ".ci/configs").mkdir(parents=True)
    (runner / ".ci/configs/official.yaml").write_text("params: {train.initial_lr: 0.1}\n")
    rc, verdict, table = gate.gate(event(gate, "pull_request", "x", "refs/pull/1/merge"),
                                   tmp_path / "a.tar.gz", tmp_path / "work")
    assert rc == 1 and table == ""
    assert verdict.startswith("**CONFIGURATION CHANGED**: this pull request changes "
                              ".ci/configs/official.yaml"), verdict
