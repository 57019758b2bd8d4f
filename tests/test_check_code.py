"""`cifar10 check-code` (tools/check_code.py) records the exercise lock only for what it ran:
each stale variant's own stage command with the code of both commits, every output it
writes compared (weights and result files); and it writes the lock in one step, so that
a kill at any moment leaves it as it was or fully recorded."""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, commit, dvc, init_repo, tiny_project

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A tiny project whose two variants ran and whose results and lock are committed, on
    600 training images: more than the check's small set, so that its second pass runs."""
    project = tiny_project(tmp_path_factory.mktemp("check"), dict(train_per_batch=120, test=50,
                                                                  seed=2),
                           ablation={"max_steps": 4}, eval={"batch_size": 25, "every_steps": 0},
                           train={"device": "cpu", "batch_size": 16, "log_every": 2},
                           run={"checkpoint_every": 2, "summary_every": 2})
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"] = {"baseline": {}, "softmax": {"model": {"output": "softmax"}}}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "dvc.yaml:preprocess")
    dvc(project, "repro", "reports/dvc.yaml")
    commit(project, "the exercises' results")
    return project


@pytest.fixture
def project(recorded, tmp_path):
    copy = tmp_path / "p"
    shutil.copytree(recorded, copy, symlinks=True)
    return copy


def check(project, *args, prelude="", env=None):
    """tools/check_code.py with ``args`` in ``project`` (``env``: the environment it runs
    in, else this one)."""
    code = (f"{prelude}\nimport runpy, sys\nsys.argv = ['check_code.py', *{list(args)!r}]\n"
            f"sys.path.insert(0, 'tools')\nrunpy.run_path('tools/check_code.py', "
            f"run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                          text=True, timeout=900, env=env)


def without_thread_variables(**extra) -> dict:
    """This environment without OMP_NUM_THREADS and MKL_NUM_THREADS, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**env, **extra}


def edit(project, path, old, new):
    file = project / path
    text = file.read_text()
    assert old in text, old
    file.write_text(text.replace(old, new))


def comment(project):
    loop = project / "src/cifar10_tutorial/training/train.py"
    loop.write_text(loop.read_text() + "\n# a comment changes no result\n")


def stale(project):
    return dvc(project, "status", "reports/dvc.yaml").stdout


def test_a_comment_is_recorded_after_both_variants_ran_alike(project):
    comment(project)
    assert "ablation@softmax" in stale(project)
    proc = check(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical: 2 variant(s) (baseline, softmax) wrote the same raw and averaged " \
           "weights and results" in proc.stdout
    assert "13 steps each on 500 training and 50 held-out images (one thread: " \
           "OMP_NUM_THREADS=1, then pinned to one CPU; paused twice, " \
           "evaluated every 2 steps in batches of 16), 600 training and 50 held-out images " \
           "(the workspace's prepared data, straight through with the threads a run takes, " \
           "each variant's own evaluation at steps 12 and 13), 500 training and 50 held-out " \
           "images again (straight through with OMP_NUM_THREADS=1 set all along, each " \
           "variant's own evaluation at steps 12 and 13)" in proc.stdout
    assert "recorded 2 variant stage(s)" in proc.stdout
    assert "up to date" in stale(project)


def test_a_variant_set_apart_by_its_budget_alone_is_checked_as_its_twin(project):
    """Cut to the check's budget, a variant whose own budget is all that sets it apart
    computes what its baseline does (and a file of both would be refused as twins): it is
    checked as that one, named so, and recorded with the rest."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"]["long"] = {"train": {"max_steps": 6}}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "reports/dvc.yaml:ablation@long")
    commit(project, "a variant of a budget of its own")
    comment(project)
    proc = check(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "long: at 13 steps it computes what baseline does (its budget is all that sets " \
           "it apart): checked as baseline" in proc.stdout
    assert "recorded 3 variant stage(s)" in proc.stdout
    assert "ablation@" not in stale(project)  # (the report, never rerun here, is stale)


@pytest.mark.parametrize("path, old, new, named", [
    # the evaluation: the weights are the same, the precision recorded is not
    ("src/cifar10_tutorial/evaluation/evaluate.py",
     'metrics = {"precision_at_1": r["precision_at_1"],',
     'metrics = {"precision_at_1": r["precision_at_1"] * 0.5,', "metrics.json"),
    # the variants' params: every variant trains half its budget
    ("src/cifar10_tutorial/params.py",
     'base["train"]["max_steps"] = base["ablation"]["max_steps"]\n',
     'base["train"]["max_steps"] = base["ablation"]["max_steps"] // 2\n',
     "over the whole run of baseline"),
    # the segments a run was trained in, whose steps the model card prints
    ("src/cifar10_tutorial/training/segments.py",
     '"from_step": step, "to_step": step,', '"from_step": 0, "to_step": step,',
     "train/provenance.json"),
    # a run paused twice: its segments (a resumed run that kept only the last one)
    ("src/cifar10_tutorial/training/segments.py",
     'done = json.loads(ckpt["segments"]) if ckpt is not None else []',
     'done = json.loads(ckpt["segments"])[-1:] if ckpt is not None else []',
     "train/provenance.json"),
    # the evaluation past its first batch (the check evaluates in several)
    ("src/cifar10_tutorial/scoring.py", "out.append(model.logits(x).float())",
     "out.append(model.logits(x if i == 0 else x.flip(-1)).float())", "metrics.json"),
    # the speed curve logged a step late: its speeds differ run to run, its steps do not
    # (the report times the targets reached by them)
    ("src/cifar10_tutorial/training/monitoring.py",
     '"train/cross_entropy": ce, "train/examples_per_sec": eps})',
     '"train/cross_entropy": ce})\n            self.log(step + 1, {"train/examples_per_sec": eps})',
     "examples_per_sec.tsv (the steps it logs)"),
    # a figure written as another type: 128 and 128.0 are other values to the report
    ("src/cifar10_tutorial/exercises/ablation.py",
     '"global_batch_size": run["global_batch_size"],',
     '"global_batch_size": float(run["global_batch_size"]),', "variant.json"),
    # a time written as text: its value differs run to run, not its kind
    ("src/cifar10_tutorial/training/train.py", '"wall_time_s": total_time,',
     '"wall_time_s": str(total_time),', "metrics.json"),
])
def test_a_change_of_what_a_variant_writes_is_refused(project, path, old, new, named):
    edit(project, path, old, new)
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "the workspace (its code changed) does not produce what" in line \
        and named in line, line
    assert (project / "reports/dvc.lock").read_bytes() == lock


@pytest.mark.parametrize("path, old, new", [
    # only on more training images than the small set's 500
    ("src/cifar10_tutorial/training/train.py", "lr = learning_rate(run.step, sched)\n",
     "lr = learning_rate(run.step, sched) * (0.5 if len(data.train_labels) > 550 else 1)\n"),
    # only in a run that started at step 0 and went past step 2 (the paused runs restart)
    ("src/cifar10_tutorial/training/train.py", "lr = learning_rate(run.step, sched)\n",
     "lr = learning_rate(run.step, sched) * (0.5 if run.start == 0 and run.step >= 3 else 1)\n"),
    # only in evaluation batches larger than the small pass's 16 (the variants' own: 25)
    ("src/cifar10_tutorial/scoring.py", "out.append(model.logits(x).float())",
     "out.append(model.logits(x).float() * (2 if len(x) > 16 else 1))"),
], ids=["larger-training-set", "a-run-straight-through", "the-variants-eval-batch"])
def test_a_change_only_the_second_pass_reaches_is_refused(project, path, old, new):
    """The small pass (500 images, paused twice, the check's evaluation) does not reach a
    change acting only on a larger set, only in a run straight through, or only at the
    variants' own evaluation batch; the second pass, at the sizes the results were made on
    (600 training images here), straight through, with each variant's evaluation, does."""
    edit(project, path, old, new)
    proc = check(project, "--no-record", "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "the workspace (its code changed) does not produce what" in line \
        and "(on 600 training images, straight through)" in line \
        and ", paused)" not in line, line  # the paused pass, the first listed, saw none


def test_a_difference_is_blamed_on_what_changed(project):
    """Only a variant's param changed: the check says so, not that the code did."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"]["softmax"]["train"] = {"seed": 9}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = check(project, "--no-record", "--variant", "softmax")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "the workspace (its reports/params.yaml changed) does not produce what" in line, line


def test_a_resume_that_forgets_the_targets_reached_is_refused(project):
    """The check evaluates on the held-out images at step 2, where it also pauses, with a
    target every run reaches there: a resume that forgets the targets reached before it
    records them again later, and is refused."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["eval"]["every_steps"] = 100  # held-out evaluation on (the check cuts it to 2)
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "held-out evaluation on")
    edit(project, "src/cifar10_tutorial/training/checkpoints.py",
         '"reached": json.loads(ckpt.get("targets_reached", "{}"))}', '"reached": {}}')
    proc = check(project, "--no-record", "--variant", "baseline", "--against", "HEAD")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "does not produce what" in line and "metrics.json" in line, line


@pytest.mark.parametrize("variant", ["baseline", "softmax"], ids=["counting-steps",
                                                                   "counting-epochs"])
def test_a_change_to_the_evaluation_off_its_grid_is_refused(project, variant):
    """A run evaluates the held-out images every eval.every_steps and at its last step,
    wherever that falls: the check's runs end off their grid (13 steps, every 2; and in
    the second pass, a variant counting epochs too, every 12), so a change that drops the
    last step's evaluation (runs whose length is no multiple of every_steps lose their last
    held-out point) is seen."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["eval"]["every_steps"] = 100  # held-out evaluation on (the check cuts it)
    raw["ablations"]["softmax"]["train"] = {"max_epochs": 2}  # one variant counts epochs
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "held-out evaluation on")
    edit(project, "src/cifar10_tutorial/training/monitoring.py",
         "(step % self.every == 0 or step == max_steps)", "step % self.every == 0")
    proc = check(project, "--no-record", "--variant", variant, "--against", "HEAD")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "does not produce what" in line, line


def test_results_of_a_trial_are_checked_through_the_trials_path(project):
    """Committed results of a trial (ablation.trial_steps set) are compared through the
    trial's own path: a change to how a trial cuts its held-out images is refused."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablation"]["trial_steps"] = 4
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "a trial")
    edit(project, "src/cifar10_tutorial/exercises/ablation.py",
         "test_images=data.test_images[:keep],\n                               "
         "test_labels=data.test_labels[:keep],",
         "test_images=data.test_images[:keep // 2],\n                               "
         "test_labels=data.test_labels[:keep // 2],")
    proc = check(project, "--no-record", "--variant", "baseline", "--against", "HEAD")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr.strip().splitlines()[-1]


def test_a_new_key_at_its_default_is_recorded_and_at_another_value_refused(project):
    """A param the code gains, written into reports/params.yaml at its default, computes
    nothing new: the variants stay valid. At another value it is a change they depend on."""
    edit(project, "src/cifar10_tutorial/params.py",
         "class ModelParams:\n", "class ModelParams:\n    norm: str = \"lrn\"\n")
    edit(project, "src/cifar10_tutorial/model.py", "batch_norm: bool = False):",
         "batch_norm: bool = False, norm: str = \"lrn\"):")  # the network takes it
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["model"]["norm"] = "batch"
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "more than code changed" in proc.stderr and "model changed" in proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock
    raw["model"]["norm"] = "lrn"
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = check(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ablation@" not in stale(project)  # the report reruns: it reads params.py
    assert yaml.safe_load((project / "reports/dvc.lock").read_text())["stages"][
        "ablation@baseline"]["params"]["reports/params.yaml"]["model"]["norm"] == "lrn"


@pytest.mark.parametrize("edit_params, same", [
    (lambda raw: raw["ablations"]["baseline"].update(train={"seed": raw["train"]["seed"]}),
     True),  # an override equal to the baseline's own value
    (lambda raw: raw["model"].pop("dropout"), True),  # a key removed at its default
    (lambda raw: raw["ablations"]["softmax"]["model"].update(lrn=True), True),  # ditto
    (lambda raw: raw["ablations"]["baseline"].update(train={"seed": 99}), False),
    (lambda raw: raw["model"].update(dropout=0.5), False),
    (lambda raw: raw["ablations"]["softmax"]["model"].pop("output"), False),  # softmax gone
], ids=["override-equal", "removed-at-default", "override-default", "override-other",
        "section-other", "override-removed"])
def test_a_param_change_that_leaves_each_variants_params_as_they_were_is_code_only(
        project, edit_params, same):
    """What a variant computes comes from its params resolved (sections, defaults, its
    overrides): a change of reports/params.yaml that leaves them as they were (a key
    removed at its default, an override equal to what it overrides) computes nothing new,
    and the check may record it; one that changes them is named, and refused."""
    sys.path.insert(0, str(project / "tools"))
    try:
        from check_code import stale_variants
    finally:
        sys.path.remove(str(project / "tools"))
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    edit_params(raw)
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    here = os.getcwd()
    os.chdir(project)
    try:
        stages, other = stale_variants(project)
    finally:
        os.chdir(here)
    assert stages or other, "the edit changed no stage's params"
    if same:
        assert other == "" and stages, other
    else:
        assert "reports/params.yaml" in other and "changed" in other, other
        assert "ablation@" in other


def test_an_override_equal_to_the_baselines_value_is_recorded(project):
    """The whole check: a variant's override written at the value it already had runs
    the same, and is recorded; dvc status then finds the variant up to date."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"]["baseline"] = {"train": {"seed": raw["train"]["seed"]}}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert "ablation@baseline" in stale(project)
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ablation@baseline" not in stale(project)


@pytest.mark.parametrize("old, new", [
    # the staircase, first reached far past the check's short runs
    ("s.decay_factor ** (step // s.decay_steps)", "s.decay_factor ** (2 * (step // s.decay_steps))"),
    # the averages' decay, capped: it shows only after thousands of steps
    ("return min(decay, (1.0 + num_updates) / (10.0 + num_updates))",
     "return min(min(decay, 0.999), (1.0 + num_updates) / (10.0 + num_updates))"),
])
def test_a_change_its_short_runs_do_not_reach_is_refused(project, old, new):
    """Each variant runs 13 steps here; what its whole run does after them (the learning
    rate of every step, the decay of every average) is compared too, from both codes and
    their own params at the full budget."""
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablation"]["max_steps"] = 20000  # a whole run that reaches both
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "a long budget")
    edit(project, "src/cifar10_tutorial/training/optimization.py", old, new)
    proc = check(project, "--no-record", "--variant", "baseline", "--against", "HEAD")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "the learning rates or weight-average decays over the whole run of baseline " \
           "differ" in line, line


@pytest.mark.parametrize("form", ["--out 'reports", "--out='reports"], ids=["out-space", "out-equals"])
def test_results_trained_on_a_gpu_are_not_recorded_by_a_cpu_check(project, form):
    """The check runs the CPU's code path: a variant whose committed results were trained
    on a GPU is not vouched for, and the lock is left as it is (whichever form the stage
    command gives --out in)."""
    import json

    if form != "--out 'reports":  # the lock records the command as written now
        edit(project, "reports/dvc.yaml", "--out 'reports", form)
        dvc(project, "commit", "-f", "reports/dvc.yaml")
    record = project / "reports/ablations/softmax/variant.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "device_type": "cuda"}))
    dvc(project, "commit", "-f", "reports/dvc.yaml:ablation@softmax")  # as if trained there
    commit(project, "softmax trained on a GPU")
    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "says softmax was trained on cuda" in proc.stderr.strip().splitlines()[-1]
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_a_named_variant_is_recorded_beside_one_never_run(project):
    """--variant baseline checks and records baseline alone: a variant added to
    reports/params.yaml and never run (its stage awaits its first run) is not baseline's
    business, and is left as it is."""
    comment(project)
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["ablations"]["mine"] = {"train": {"seed": 5}}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical: 1 variant(s) (baseline)" in proc.stdout
    left = stale(project)
    assert "ablation@baseline" not in left and "ablation@mine" in left \
        and "ablation@softmax" in left
    # a name that is no variant: not "nothing to record"
    proc = check(project, "--variant", "basline")
    assert proc.returncode == 1 and "--variant basline: not a variant of reports/params.yaml" \
        in proc.stderr, proc.stdout + proc.stderr
    # all of them: the new one is more than code, and the lock is left as it is
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project)
    assert proc.returncode == 1 and "ablation@mine never run (no entry in " \
        "reports/dvc.lock" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


# Kills the process that makes the Nth write touching reports/dvc.lock (an open for
# writing, a rename or a removal of the lock or of a file beside it), with SIGKILL: no
# clean-up. A sitecustomize, so that it counts in every Python process the check starts
# (DVC's too), the count kept in a file.
KILLER = """
import os, signal, sys
N, COUNT = os.environ.get("KILL_AT_WRITE"), os.environ.get("KILL_COUNT")
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path, mode, flags = os.fsdecode(args[0]), args[1], args[2] or 0
        writes = (any(m in mode for m in "wax+") if isinstance(mode, str) else
                  bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)))
        touches = "dvc.lock" in path and writes
    elif event in ("os.rename", "os.replace", "os.remove", "os.truncate"):
        touches = any("dvc.lock" in os.fsdecode(a) for a in args[:2]
                      if isinstance(a, (str, bytes, os.PathLike)))
    else:
        return
    if touches:
        with open(COUNT, "a") as f:
            f.write(".")
        if os.path.getsize(COUNT) == int(N):
            os.kill(os.getpid(), signal.SIGKILL)
if N:
    sys.addaudithook(hook)
"""


def test_a_kill_at_any_write_leaves_the_lock_as_it_was_or_recorded(project, tmp_path):
    comment(project)
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(KILLER)
    lock = (project / "reports/dvc.lock").read_bytes()
    outcomes = []
    for n in range(1, 8):
        count = tmp_path / f"count{n}"
        proc = subprocess.run(
            [sys.executable, "tools/check_code.py"], cwd=project, capture_output=True,
            text=True, timeout=900, env={**os.environ, "KILL_AT_WRITE": str(n),
                                         "KILL_COUNT": str(count),
                                         "PYTHONPATH": str(tmp_path / "hook")})
        now = (project / "reports/dvc.lock").read_bytes()
        if not count.exists() or count.stat().st_size < n:  # fewer writes: ran to the end
            assert proc.returncode == 0, proc.stdout + proc.stderr
            outcomes.append("finished")
            break
        if now == lock:
            outcomes.append("as it was")
        else:  # the only other state allowed: fully recorded
            assert "ablation@" not in stale(project), (n, proc.stderr[-500:], now[:200])
            outcomes.append("recorded")
            (project / "reports/dvc.lock").write_bytes(lock)
    assert outcomes[-1] == "finished" and "as it was" in outcomes, outcomes
    assert "ablation@" not in stale(project)
    assert sorted(p.name for p in (project / "reports").glob("dvc.lock*")) == ["dvc.lock"]


@pytest.mark.parametrize("path, line, named", [
    ("src/cifar10_tutorial/model.py", "\\nLRN_BETA = 0.5\\n",
     "src/cifar10_tutorial/model.py changed while the check ran"),
    # a result the check did not make: recording would bless it
    ("reports/ablations/baseline/metrics.json", " ",
     "reports/ablations/baseline/metrics.json of reports/dvc.yaml:ablation@baseline is not "
     "what the lock records")])
def test_files_changed_while_the_check_runs_are_not_recorded(project, tmp_path, path, line,
                                                             named):
    """The lock records the files as they are when it is written: code edited while the
    variants ran is code the check did not run, and results or data replaced meanwhile are
    not what it compared; nothing is recorded."""
    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    (tmp_path / "hook").mkdir()
    # the edit lands when the check starts its first variant
    (tmp_path / "hook" / "sitecustomize.py").write_text(
        "import os, sys\n"
        "def hook(event, args):\n"
        "    if event == 'subprocess.Popen' and list(args[1])[:1] == ['sh'] and "
        "not os.path.exists(os.environ['EDIT_ONCE']):\n"
        "        open(os.environ['EDIT_ONCE'], 'w').close()\n"
        f"        with open({path!r}, 'a') as f:\n"
        f"            f.write('{line}')\n"
        "sys.addaudithook(hook)\n")
    proc = subprocess.run([sys.executable, "tools/check_code.py"], cwd=project,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "hook"),
                               "EDIT_ONCE": str(tmp_path / "edited")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert named in proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


@pytest.mark.parametrize("line, named", [
    ("        - src/cifar10_tutorial/scoring.py\n",
     "reports/dvc.yaml:ablation@baseline runs src/cifar10_tutorial/scoring.py, which its "
     "deps in reports/dvc.yaml do not list"),
    ("        - data/prepared\n",
     "declares other dependencies for reports/dvc.yaml:ablation@baseline than the lock "
     "records (data/prepared added or removed)"),
    ("          - train.seed\n",
     "declares fewer params for reports/dvc.yaml:ablation@baseline than the lock records "
     "(reports/params.yaml:train.seed removed)"),
], ids=["a-module", "a-data-dependency", "a-param"])
def test_a_dependency_or_param_taken_out_of_the_stage_is_not_recorded(project, line, named):
    """DVC's status does not show a dependency or a param taken out of a variant's stage in
    reports/dvc.yaml; recorded, a later change to it would pass as up to date. The lock is
    left as it is."""
    pipeline = project / "reports/dvc.yaml"
    text = pipeline.read_text()
    pipeline.write_text(text.replace(line, "", 1))
    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert named in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_a_module_the_deps_do_not_list_is_not_recorded_until_listed(project):
    """A refactor into a module reports/dvc.yaml's deps do not list trains alike, but
    recorded, a later change to that module would pass as up to date (DVC hashes only the
    deps): refused, naming it; once listed, the same change is recorded with it."""
    (project / "src/cifar10_tutorial/lrn_constants.py").write_text(
        '"""The LRN constants."""\nLRN_ALPHA = 0.001 / 9.0\n')
    edit(project, "src/cifar10_tutorial/model.py", "LRN_ALPHA = 0.001 / 9.0",
         "from .lrn_constants import LRN_ALPHA  # moved")
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("ablation@baseline runs src/cifar10_tutorial/lrn_constants.py, which its deps in "
            "reports/dvc.yaml do not list") in proc.stderr, proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock
    edit(project, "reports/dvc.yaml", "        - src/cifar10_tutorial/model.py\n",
         "        - src/cifar10_tutorial/lrn_constants.py\n"
         "        - src/cifar10_tutorial/model.py\n")
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recorded = yaml.safe_load((project / "reports/dvc.lock").read_text())
    deps = [d["path"] for d in recorded["stages"]["ablation@baseline"]["deps"]]
    assert "src/cifar10_tutorial/lrn_constants.py" in deps


def test_a_change_acting_on_the_workspaces_data_only_is_refused(project):
    """A change that acts only on the images the results were made on (here: keyed on the
    workspace's first training image; in life, say, a clamp only low-contrast real images
    reach) is not seen on synthetic data: the second pass runs on the workspace's own
    prepared data."""
    import numpy as np

    first = int(np.load(project / "data/prepared/train_images.npy")[0].sum())
    edit(project, "src/cifar10_tutorial/data/prepared.py",
         "    return Prepared(meta=meta, **arrays)",
         f"    if int(arrays['train_images'][0].sum()) == {first}:  # this data set only\n"
         f"        arrays['test_labels'] = (arrays['test_labels'] + 1) % 10\n"
         f"    return Prepared(meta=meta, **arrays)")
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr and "on 600 training images" in proc.stderr, \
        proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_damaged_workspace_data_is_one_line_before_anything_runs(project):
    """The second pass loads the workspace's prepared data as the stages do: a meta.json
    that claims a billion images is one line naming it (not an allocation of terabytes)."""
    import json

    meta = project / "data/prepared/meta.json"
    raw = json.loads(meta.read_text())
    raw["counts"]["train"] = 10 ** 9
    meta.write_text(json.dumps(raw))
    comment(project)
    proc = check(project, "--no-record", "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "data/prepared: train has" in last and "1000000000" in last, last
    assert last.endswith("(the check's second pass runs on the workspace's prepared data; move "
                         "it away to run it on synthetic data)"), last


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity")
                    else (os.cpu_count() or 1) < 2, reason="one CPU: every run takes one thread")
@pytest.mark.parametrize("shell, change", [
    ({}, "torch.set_num_threads(1)  # one thread"),
    ({"OMP_NUM_THREADS": "1"}, "torch.set_num_threads(1)  # one thread"),
    # acts only where a run is granted one CPU (where the committed results were made)
    ({}, "torch.set_num_threads(max(2, n // processes_on_node))"),
], ids=["unset", "omp-1-exported", "two-threads-on-one-cpu"])
def test_a_change_to_the_threads_a_run_takes_is_refused(project, shell, change):
    """A change to how many threads a run takes (which changes the arithmetic's order,
    hence the weights) is refused: on this machine's CPUs in the second pass, which runs
    with the code's own choice whatever OMP_NUM_THREADS the shell that runs the check
    exports; on one CPU in the first, whose later segments are pinned to one."""
    edit(project, "src/cifar10_tutorial/devices.py",
         "torch.set_num_threads(max(1, n // processes_on_node))", change)
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project, "--variant", "baseline", env=without_thread_variables(**shell))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr, proc.stdout + proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


@pytest.mark.parametrize("path, old, new", [
    # the evaluation, only with OMP_NUM_THREADS set
    ("src/cifar10_tutorial/evaluation/evaluate.py",
     'metrics = {"precision_at_1": r["precision_at_1"],',
     'metrics = {"precision_at_1": r["precision_at_1"] - (0.05 if __import__("os").environ.get('
     '"OMP_NUM_THREADS") else 0.0),'),
    # the training past step 2, only with OMP_NUM_THREADS set
    ("src/cifar10_tutorial/training/train.py", "lr = learning_rate(run.step, sched)\n",
     "lr = learning_rate(run.step, sched) * (0.5 if __import__('os').environ.get("
     "'OMP_NUM_THREADS') and run.step >= 2 else 1)\n"),
], ids=["evaluation", "training-after-step-2"])
def test_a_change_acting_only_with_the_thread_variable_set_is_refused(project, path, old, new):
    """Users set OMP_NUM_THREADS=1; the check's paused pass sets it for one step only and
    its second pass unsets it: its third pass runs straight through with it set, each
    variant evaluating itself, so a change acting only then shows."""
    edit(project, path, old, new)
    proc = check(project, "--variant", "baseline", "--no-record", env=without_thread_variables())
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr, proc.stdout + proc.stderr


def test_a_link_to_a_folder_in_the_code_is_one_line(project):
    """The check copies the code file by file: a link to a folder there (here a loop) is
    one line naming it, before anything runs."""
    (project / "src/cifar10_tutorial/loop").symlink_to("..")
    proc = check(project, "--no-record", "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "src/cifar10_tutorial/loop: a link to a folder (to ..) in the code a variant runs" \
        in proc.stderr.strip().splitlines()[-1]


def test_params_edited_between_the_check_and_the_record_are_not_recorded(project, tmp_path):
    """reports/params.yaml edited in the instant between the comparison and DVC's hashing
    (here: as the record takes DVC's lock): the lock would record params no variant ran
    with; it is left as it is."""
    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(
        "import os, re, sys\n"
        "ran = []\n"
        "def hook(event, args):\n"
        "    if event == 'subprocess.Popen' and list(args[1])[:1] == ['sh']:\n"
        "        ran.append(1)\n"
        "    if event == 'open' and ran and str(args[0]).endswith('.dvc/tmp/lock') and "
        "not os.path.exists(os.environ['EDIT_ONCE']):\n"
        "        open(os.environ['EDIT_ONCE'], 'w').close()\n"
        "        text = open('reports/params.yaml').read()\n"
        "        with open('reports/params.yaml', 'w') as f:\n"
        "            f.write(re.sub(r'(?m)^  seed: 0$', '  seed: 5', text))\n"
        "sys.addaudithook(hook)\n")
    assert "\n  seed: 0\n" in (project / "reports/params.yaml").read_text()
    proc = subprocess.run([sys.executable, "tools/check_code.py", "--variant", "baseline"],
                          cwd=project, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "hook"),
                               "EDIT_ONCE": str(tmp_path / "edited")})
    assert (tmp_path / "edited").exists(), proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "reports/params.yaml changed after the check ran it" in proc.stderr, proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_a_run_continued_from_the_mirror_alone_is_compared(project):
    """The second resume of the first pass runs as on another machine, from the checkpoint
    mirror alone: a change to what the mirror keeps (here the curves no longer pushed),
    which a continued run then lacks, is refused."""
    edit(project, "src/cifar10_tutorial/training/mirror.py", 'plots.rglob("*.tsv")',
         'plots.glob("*.tsv")')
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "does not produce what" in proc.stderr and "on 500 training images" in proc.stderr, \
        proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_a_changed_stage_command_is_not_recorded(project):
    """reports/dvc.yaml's command is not code the check can vouch for (it runs in a scratch
    copy, which a command may tell from the repository): a change of it is refused."""
    edit(project, "reports/dvc.yaml", "--data data/prepared", "--data  data/prepared")
    lock = (project / "reports/dvc.lock").read_bytes()
    proc = check(project)
    assert proc.returncode == 1 and "changed command" in proc.stderr, proc.stderr
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_results_of_older_code_than_the_locks_commit_are_not_recorded(project):
    """The commit that last wrote the lock may hold code no variant ran with (a change
    committed without retraining, then another variant rerun): the check compares with
    the code the lock records for each stage, or refuses."""
    edit(project, "src/cifar10_tutorial/model.py", "LRN_ALPHA = 0.001 / 9.0",
         "LRN_ALPHA = 0.002 / 9.0")
    commit(project, "the math changed; no variant retrained")
    lock = project / "reports/dvc.lock"
    lock.write_text(lock.read_text() + "\n")  # the lock's last commit: this one
    commit(project, "the lock touched")
    comment(project)
    before = lock.read_bytes()
    proc = check(project, "--variant", "baseline")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "results were made with another src/cifar10_tutorial/model.py" in proc.stderr
    assert lock.read_bytes() == before


def _a_committed_lock(root):
    """A repository with one variant, an empty pipeline and its lock committed: what
    check-code reads before anything runs."""
    init_repo(root)
    for folder in ("src", "stages", "reports"):
        (root / folder).mkdir()
        (root / folder / "README.md").write_text("a file git keeps\n")
    (root / "reports/params.yaml").write_text("ablations:\n  baseline: {}\n")
    (root / "reports/dvc.yaml").write_text("stages: {}\n")
    (root / "reports/dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    commit(root, "the lock")


@pytest.mark.parametrize("path, text, args, problem", [
    ("reports/params.yaml", "eval: {}\nablations: [\n", ["--no-record"],
     r"expected the node content, but found '<stream end>' on line 3"),
    ("reports/dvc.lock", "schema: '2.0'\nstages:\n  a: [1, 2\n  b: 3\n", [],
     r"expected ',' or '\]', but got ':' on line 4, while parsing a flow sequence from line 3"),
    ("reports/dvc.yaml", "- a list\n", ["--no-record"], r"expected a YAML mapping \(key: value "
                                                        r"lines\), found a list"),
    ("reports/dvc.yaml", "stages: {}\nstages: {}\n", ["--no-record"],
     r"the key 'stages' appears twice \(line 2\); keep one"),
    ("reports/dvc.lock", "schema: '2.0'\nstages: [1]\n", [],
     r"expected stages: to be a mapping of stage names to their records, found a list"),
], ids=["params", "lock", "pipeline", "pipeline-key-twice", "lock-shape"])
def test_a_damaged_yaml_file_is_one_line_naming_it(tmp_path, monkeypatch, path, text, args,
                                                   problem):
    """reports/params.yaml, dvc.yaml or dvc.lock that YAML cannot read (an edit cut short):
    one line naming the file and the problem with its line, before anything runs; nothing
    changed. (No project needed: the files are read first; a repository where the lock was
    committed all the same.)"""
    import check_code
    from cifar10_tutorial.errors import PipelineError

    _a_committed_lock(tmp_path)
    damaged = tmp_path / path
    damaged.write_text(text)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*")
              if p.is_file() and ".git" not in p.parts}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=r"^" + path.replace(".", r"\.") + r": (not valid "
                       r"YAML \()?" + problem + r".*Nothing was changed\.$"):
        check_code.main(args)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*")
            if p.is_file() and ".git" not in p.parts} == before


@pytest.mark.parametrize("text, said", [
    ("ablations: [baseline, softmax]\ndataset_ablations: {}\n", r"ablations: expected a mapping"),
    # YAML 1.1 would read `yes` as true; DVC (YAML 1.2) as text, and so does the loader
    ("model: {lrn: yes}\nablations: {baseline: {}}\ndataset_ablations: {}\n",
     r"model\.lrn: expected true or false, found 'yes'"),
], ids=["ablations-a-list", "a-word-yaml-1-1-reads-as-a-boolean"])
def test_params_the_variants_cannot_load_are_one_line_before_anything_runs(tmp_path, monkeypatch,
                                                                           text, said):
    """A reports/params.yaml that YAML reads but the variants' loader refuses (DVC's status
    may still call it up to date) is the loader's one line, before anything runs: not a
    schedule difference made up from a plan that could not be computed."""
    import check_code
    from cifar10_tutorial.errors import PipelineError

    for folder in ("src", "stages", "reports"):
        (tmp_path / folder).mkdir()
    (tmp_path / "reports/params.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError, match=rf"reports/params\.yaml: {said}"):
        check_code.main(["--no-record", "--variant", "baseline"])
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["params.yaml"]


def test_dvcs_lock_taken_while_the_check_runs_is_one_line(project):
    """Another DVC command (a `dvc repro` started meanwhile) holds DVC's lock when the check
    comes to record: one line saying to run it again, the lock as it was; not DVC's
    double traceback."""
    import check_code
    from cifar10_tutorial.errors import PipelineError

    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", "from dvc.repo import Repo\nimport time\n"
                               "Repo('.').lock.__enter__()\nprint('held', flush=True)\n"
                               "time.sleep(120)\n"], cwd=project, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PipelineError, match=r"^reports/dvc\.lock left as it is: another "
                                                r"DVC command took DVC's lock while the check "
                                                r"ran; run the check again"):
            check_code.record(project, ["reports/dvc.yaml:ablation@baseline"])
    finally:
        holder.kill()
        holder.wait()
    assert (project / "reports/dvc.lock").read_bytes() == lock


def test_code_edited_after_the_check_ran_is_not_recorded(project, monkeypatch):
    """An edit landing after the check's last look at the code and before DVC hashes it for
    the lock: the lock would record code the check never ran. The entries' hashes must be
    those of the code it ran; else nothing is recorded."""
    import check_code
    from cifar10_tutorial.errors import PipelineError

    monkeypatch.chdir(project)  # where the check runs: the repository's root
    comment(project)
    lock = (project / "reports/dvc.lock").read_bytes()
    ran = check_code.fingerprint(project)
    edit(project, "src/cifar10_tutorial/scoring.py", "out.append(model.logits(x).float())",
         "out.append(model.logits(x.flip(-1)).float())")
    with pytest.raises(PipelineError, match=r"^reports/dvc\.lock left as it is: "
                                            r"src/cifar10_tutorial/scoring\.py changed after "
                                            r"the check ran it"):
        check_code.record(project, ["reports/dvc.yaml:ablation@baseline"], ran)
    assert (project / "reports/dvc.lock").read_bytes() == lock
    check_code.record(project, ["reports/dvc.yaml:ablation@baseline"],
                      check_code.fingerprint(project))  # the code it ran: recorded
    assert (project / "reports/dvc.lock").read_bytes() != lock


def test_a_missing_lock_or_a_data_set_variant_is_named_for_what_it_is(project):
    """With reports/dvc.lock deleted, the check says to restore it (not that every variant
    was never run); a data-set variant given to --variant is named as one, which the check
    does not run (not "not a variant")."""
    lock = project / "reports/dvc.lock"
    text = lock.read_bytes()
    lock.unlink()
    proc = check(project)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: reports/dvc.lock: missing, so there is nothing to record in; restore it "
        "(`git checkout -- reports/dvc.lock`), or compare only (--no-record)"), proc.stderr
    lock.write_bytes(text)
    # an --against that names no commit: said as such, not git's "Needed a single revision"
    proc = check(project, "--no-record", "--against", "deadbeef")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: --against deadbeef: names no commit of this repository; give a commit or a "
        "branch (by default the commit that last recorded reports/dvc.lock)"), proc.stderr
    for empty in ("--against=", "--against= "):  # no commit named: not taken as the default
        proc = check(project, "--no-record", empty)
        assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
            "error: --against '': names no commit; give a commit or a branch"), proc.stderr
    exercises = project / "reports/params.yaml"
    raw = yaml.safe_load(exercises.read_text())
    raw["dataset_ablations"] = {"svhn": {"data": {"dataset": "svhn"}}}
    exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = check(project, "--variant", "svhn")
    assert proc.returncode == 1 and "--variant svhn: a data-set variant (dataset_ablations: " \
        "of reports/params.yaml)" in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_the_stage_command_as_a_list_of_one_is_read_and_of_several_refused():
    """DVC takes a stage's cmd as a string or a list: a list of one is that command; a
    list of several (run in turn) is one line, not a traceback."""
    import check_code
    from cifar10_tutorial.errors import PipelineError

    assert check_code._one_command(["python stages/ablation.py --out x"], "p") == \
        "python stages/ablation.py --out x"
    with pytest.raises(PipelineError, match=r"^p: the ablation stage's cmd: expected one "
                                            r"command .*found 2 commands"):
        check_code._one_command(["a", "b"], "p")


def test_variants_params_that_are_no_file_are_named_so(tmp_path, monkeypatch):
    """reports/params.yaml a FIFO (or a folder): one line saying it is no regular file,
    never read (a FIFO's read would wait for ever), not "no variants"; nothing made."""
    import os
    import signal

    import check_code
    from cifar10_tutorial.errors import PipelineError

    _a_committed_lock(tmp_path)
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "reports/params.yaml"
    for make in (os.mkfifo, os.mkdir):
        params.unlink()  # the file, then the FIFO
        make(params)
        old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError()))
        signal.alarm(60)
        try:
            with pytest.raises(PipelineError, match=r"reports/params\.yaml: not a regular file "
                                                    r"\(a folder, FIFO, device or broken link\)"):
                check_code.main(["--no-record"])
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "README.md", "dvc.lock", "dvc.yaml", "params.yaml"]


def test_a_change_to_the_reports_code_alone_is_named_not_recorded(project):
    """The report's own code changed, no variant's: nothing for the check to record, and
    it says the report stage is stale and how to rerun it (seconds), not silence."""
    lock = (project / "reports/dvc.lock").read_bytes()
    edit(project, "src/cifar10_tutorial/report/yours.py", '"""The report\'s sections',
         '# a comment\n"""The report\'s sections')
    proc = check(project)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to record" in proc.stdout and "the report stage is stale" in proc.stdout \
        and "dvc repro -s reports/dvc.yaml:report" in proc.stdout, proc.stdout
    assert (project / "reports/dvc.lock").read_bytes() == lock
