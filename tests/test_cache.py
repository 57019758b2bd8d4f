"""The cache tells the truth: each stage's hash (its `params:` and `deps:`) covers everything
its code reads, and the code that runs is the code of the stage's own tree.

The coverage test stands guard for the next key or module: it runs every stage of
dvc.yaml and reports/dvc.yaml on a tiny archive with the params reads recorded
(CIFAR10_TUTORIAL_PARAM_READS), and walks the imports of each stage script.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial.data.synthetic import make_cifar10_archive
from cifar10_tutorial.cli import stage_command
from conftest import ROOT, copy_project, dvc, init_repo, recording_reads, set_params

# The import closure each stage's deps must list (also what `--write` puts there).
_spec = importlib.util.spec_from_file_location("stage_deps", ROOT / "devtools" / "stage_deps.py")
stage_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_deps)
import_closure = stage_deps.import_closure


# ----------------------------------------------------------------------------- helpers


def dvc_stages(root: Path) -> list[dict]:
    """Every stage of the project's pipelines as DVC resolves them (foreach expanded):
    name, script and arguments, params keys, and dependency paths relative to ``root``."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    out, cwd = [], os.getcwd()
    os.chdir(root)  # stage names (addressing) are relative to the working directory
    try:
        with Repo(str(root)) as repo:
            for stage in repo.index.stages:
                params = [k for d in stage.deps if isinstance(d, ParamsDependency)
                          for k in d.params]
                deps = [os.path.relpath(d.fs_path, root) for d in stage.deps
                        if not isinstance(d, ParamsDependency)]
                out.append({"name": stage.addressing, "cmd": stage.cmd.split()[1:],
                            "params": params, "deps": deps})
    finally:
        os.chdir(cwd)
    return out


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def uncovered_modules(root: Path) -> list[str]:
    problems = []
    for st in dvc_stages(root):
        for path in sorted(import_closure(root, root / st["cmd"][0])):
            if not covered(path, st["deps"]):
                problems.append(f"stage {st['name']}: its code imports {path}, not in its deps")
    return problems


def key_covered(key: str, declared: list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in declared)


# ----------------------------------------------------------------------------- (b) code


def test_every_stage_lists_the_modules_its_script_imports():
    assert uncovered_modules(ROOT) == []


def test_no_stage_lists_a_module_its_script_does_not_import():
    """A module dep the stage never runs would rerun it for nothing when that module changes;
    a folder of code would too (any module added to it, or edited, that the stage does not
    import), so each stage lists its modules one by one."""
    extra = []
    for st in dvc_stages(ROOT):
        imported = import_closure(ROOT, ROOT / st["cmd"][0])
        extra += [f"stage {st['name']}: {d} is in its deps but not imported"
                  for d in st["deps"] if d.endswith(".py") and d not in imported]
        extra += [f"stage {st['name']}: {d} is a folder of code; list the modules it imports"
                  for d in st["deps"] if d.startswith(("src/", "stages/")) and (ROOT / d).is_dir()]
    assert extra == []


def test_the_deps_tool_finds_a_stage_whose_code_deps_differ(tmp_path):
    """devtools/stage_deps.py rewrites a stale deps list to the stage's imports, and leaves
    data deps and comments as they were."""
    project = copy_project(tmp_path / "p")
    text = (project / "dvc.yaml").read_text()
    stale = text.replace("      - src/cifar10_tutorial/checkpoint_files.py\n", "", 1)
    assert stale != text
    (project / "dvc.yaml").write_text(stale)
    before, after = stage_deps.rewrite(project, "dvc.yaml")
    assert before == stale and after == text


def test_training_and_evaluation_do_not_depend_on_fetching_or_parsing_the_data():
    """They read the prepared tensors (prepared.py): editing the downloader or the record
    parser must not rerun them, not even through a module they import; nor the exercise
    variants (only stages/dataset_ablation.py fetches and parses data)."""
    for script in ("train", "eval", "ablation"):
        closure = import_closure(ROOT, ROOT / "stages" / f"{script}.py")
        assert "src/cifar10_tutorial/data/prepared.py" in closure
        assert not {f"src/cifar10_tutorial/data/{m}.py"
                    for m in ("download", "preprocess", "datasets", "transfer")} & closure
    assert "src/cifar10_tutorial/data/download.py" in import_closure(
        ROOT, ROOT / "stages" / "dataset_ablation.py")


def test_the_import_check_names_a_missing_module(tmp_path):
    project = copy_project(tmp_path / "p")
    init_repo(project)
    text = (project / "dvc.yaml").read_text()
    (project / "dvc.yaml").write_text(text.replace("      - src/cifar10_tutorial/params.py\n", "", 1))
    problems = uncovered_modules(project)
    assert problems == ["stage download: its code imports src/cifar10_tutorial/params.py, "
                        "not in its deps"]


# ----------------------------------------------------------------------------- (a) params


@pytest.fixture(scope="module")
def recorded_run(exercise_run, tmp_path_factory):
    """Both pipelines run by `dvc repro` on tiny data, every stage with its params reads
    recorded (conftest's exercise_run, shared with the exercise pipeline's test), and the
    data stages once more on SVHN; returns (project, stages, reads per command)."""
    tmp, project, log = tmp_path_factory.mktemp("cache"), exercise_run["project"], exercise_run["log"]
    env = recording_reads(log)
    # the data stages once more on SVHN (a branch of their code the run above did not take)
    raw = yaml.safe_load((project / "params.yaml").read_text())
    other = copy_project(tmp / "svhn-main")
    raw["data"] = {"dataset": "svhn", "url": str(exercise_run["tmp"] / "svhn"), "md5": None}
    (other / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    for script in ("download", "preprocess"):
        cmd = [f"stages/{script}.py", *stage_command(f"{script}.py", other / "dvc.yaml")]
        proc = subprocess.run([sys.executable, *cmd], cwd=other, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    reads: dict = {}  # by DVC stage where DVC ran it, else by command
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        reads.setdefault(rec.get("stage") or tuple(rec["argv"]), set()).update(rec["reads"])
    return project, dvc_stages(project), reads


def stage_reads(reads: dict, st: dict) -> set:
    """A stage's recorded reads: those of its DVC stage and of its command run by hand
    (outside DVC); a variant's (``foreach``: one command for all) of its DVC stage only."""
    mine = reads.get(st["name"], set())
    return mine if "@" in st["name"] else mine | reads.get(tuple(st["cmd"]), set())


def test_the_reads_hook_records_each_key_where_its_value_came_from(tmp_path):
    """The recording the params checks below rest on: a section's field is its key, a
    variant's field the key it came from, the run section and validation are no reads."""
    log = tmp_path / "reads.jsonl"
    code = ("from cifar10_tutorial.params import params_from_dict, variant_params\n"
            "p = params_from_dict({'ablations': {'v': {'model': {'lrn': False}}}})\n"
            "p.train.batch_size, p.run.checkpoint_every\n"
            "v = variant_params(p, 'v')\n"
            "v.model.lrn, v.model.head, v.train.max_steps\n")
    subprocess.run([sys.executable, "-c", code], env=recording_reads(log), check=True)
    assert json.loads(log.read_text())["reads"] == [
        "ablation.max_steps", "ablation.trial_steps", "ablations.v", "ablations.v.model.lrn",
        "model.head", "train.batch_size"]
    # without the hook, nothing is recorded
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**recording_reads(log), "PYTHONPATH": ""})
    assert len(log.read_text().splitlines()) == 1


def uncovered_params(stages, reads) -> list[str]:
    problems = []
    for st in stages:
        got = stage_reads(reads, st)
        assert got, f"stage {st['name']} recorded no params reads (did it run?)"
        for key in sorted(got):
            if not key_covered(key, st["params"]):
                problems.append(f"stage {st['name']} reads {key}, not in its params")
    return problems


@pytest.mark.e2e
def test_every_stage_declares_the_params_it_reads(recorded_run):
    _, stages, reads = recorded_run
    names = {st["name"] for st in stages}
    assert {"download", "preprocess", "train", "eval", "regression",
            "reports/dvc.yaml:ablation@devices_2x64", "reports/dvc.yaml:dataset_ablation@svhn",
            "reports/dvc.yaml:report"} <= names
    assert uncovered_params(stages, reads) == []
    # the recording is real: keys each stage must read are among its reads
    by_name = {st["name"]: stage_reads(reads, st) for st in stages}
    assert {"data.url", "data.md5", "data.dataset"} <= by_name["download"]
    assert {"data.label", "data.svhn_extra"} <= by_name["preprocess"]
    assert {"train.batch_size", "model.lrn", "input.shuffle"} <= by_name["train"]
    assert {"ablations.softmax.model.output", "ablation.max_steps"} <= \
        by_name["reports/dvc.yaml:ablation@softmax"]
    assert "dataset_ablations.svhn.data.dataset" in by_name["reports/dvc.yaml:dataset_ablation@svhn"]


def overdeclared_params(stages, reads) -> list[str]:
    """Keys a stage declares of which it reads nothing: a change to one would rerun it for
    nothing (eval.interval_secs, say, must not rerun the exercise variants). The variants of a
    `foreach` share one list of params: there a key counts as read when any variant reads
    it (a variant that sets train.seed itself does not read the shared train.seed, which
    still reruns it: a cost of one list for all)."""
    def group(st) -> str:
        return st["name"].split("@")[0]

    read_by_group: dict[str, set] = {}
    for st in stages:
        read_by_group.setdefault(group(st), set()).update(stage_reads(reads, st))
    problems = []
    for st in stages:
        got = read_by_group[group(st)]
        for declared in st["params"]:
            if not any(key_covered(key, [declared]) for key in got):
                problems.append(f"stage {st['name']} declares {declared}, never read")
    return problems


@pytest.mark.e2e
def test_no_stage_declares_a_param_it_never_reads(recorded_run):
    _, stages, reads = recorded_run
    assert overdeclared_params(stages, reads) == []
    # and the check is real: the exercise stages' former `eval` would be named
    old = [dict(st, params=[*st["params"], "eval.interval_secs"])
           if st["name"] == "reports/dvc.yaml:ablation@softmax" else st for st in stages]
    assert overdeclared_params(old, reads) == [
        "stage reports/dvc.yaml:ablation@softmax declares eval.interval_secs, never read"]


@pytest.mark.e2e
def test_the_params_check_names_an_undeclared_key(recorded_run):
    """A key the stage reads and does not declare is named: preprocess declaring only
    data.dataset, url and md5 reads data.label and data.svhn_extra too."""
    _, stages, reads = recorded_run
    old = [dict(st, params=["data.dataset", "data.url", "data.md5"])
           if st["name"] == "preprocess" else st for st in stages]
    problems = uncovered_params(old, reads)
    assert "stage preprocess reads data.label, not in its params" in problems
    assert "stage preprocess reads data.svhn_extra, not in its params" in problems


@pytest.mark.e2e
def test_both_pipelines_are_up_to_date_after_the_run(recorded_run):
    project, _, _ = recorded_run
    out = dvc(project, "status").stdout
    assert "Data and pipelines are up to date" in out, out


@pytest.mark.e2e
def test_main_pipeline_experiments_leave_the_exercises_up_to_date(recorded_run):
    """The variants start from a baseline of their own, reports/params.yaml: a change to
    params.yaml's model, input, train, eval or fast (the README's `dvc exp run -S
    train.batch_size=64`) stales the main run only, never the 16 variants; a change to
    reports/params.yaml stales them."""
    project, _, _ = recorded_run
    main, exercises = project / "params.yaml", project / "reports/params.yaml"
    texts = main.read_text(), exercises.read_text()
    try:
        raw = yaml.safe_load(texts[0])
        raw["train"].update(max_steps=5000, max_epochs=3, batch_size=64, seed=7)
        raw["model"].update(dropout=0.5)
        raw["input"].update(shuffle="permutation")
        raw["eval"].update(batch_size=100)
        raw["fast"].update(peak_lr=0.2)
        main.write_text(yaml.safe_dump(raw, sort_keys=False))
        out = dvc(project, "status", "reports/dvc.yaml").stdout
        assert "up to date" in out, out
        assert "train" in dvc(project, "status", "train").stdout  # the main run is stale
        raw = yaml.safe_load(texts[1])
        raw["train"]["seed"] = 7  # the exercises' own baseline reaches every variant
        exercises.write_text(yaml.safe_dump(raw, sort_keys=False))
        out = dvc(project, "status", "reports/dvc.yaml").stdout
        assert "ablation@softmax" in out and "train.seed" in out, out
    finally:
        main.write_text(texts[0])
        exercises.write_text(texts[1])


# ----------------------------------------------------------------------------- own tree


def test_a_stage_runs_the_code_of_its_own_tree(tmp_path):
    """The venv's package (an editable install of another checkout) is not what runs: a
    second clone with a broken module fails, and a healthy one runs its own code."""
    archive = tmp_path / "a.tar.gz"
    md5 = make_cifar10_archive(archive, train_per_batch=5, test=5, seed=1)["md5"]
    clone = copy_project(tmp_path / "clone")
    set_params(clone, "data", url=str(archive), md5=md5)
    (clone / "src/cifar10_tutorial/data/download.py").write_text("raise RuntimeError('broken clone')\n")
    proc = subprocess.run([sys.executable, "stages/download.py"], cwd=clone, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "broken clone" in proc.stderr
    healthy = copy_project(tmp_path / "healthy")
    set_params(healthy, "data", url=str(archive), md5=md5)
    marker = "\nprint('running', __file__)\n"
    with open(healthy / "src/cifar10_tutorial/data/download.py", "a") as f:
        f.write(marker)
    proc = subprocess.run([sys.executable, "stages/download.py"], cwd=healthy,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"running {healthy / 'src/cifar10_tutorial/data/download.py'}" in proc.stdout


def test_a_stray_module_beside_the_stages_or_the_package_never_runs_in_a_stage(tmp_path):
    """A module in stages/ or src/ named like an installed package (yaml) would run inside
    every stage in its place, outside what DVC hashes: the stage folder is no import
    location, and a module beside the package in src/ stops the stage in one line."""
    archive = tmp_path / "a.tar.gz"
    md5 = make_cifar10_archive(archive, train_per_batch=5, test=5, seed=1)["md5"]
    clone = copy_project(tmp_path / "clone")
    set_params(clone, "data", url=str(archive), md5=md5)
    for name in ("yaml", "pathlib"):  # pathlib: imported by the stage's first import itself
        (clone / f"stages/{name}.py").write_text(
            f"raise SystemExit('the stray stages/{name}.py ran')\n")
    proc = subprocess.run([sys.executable, "stages/download.py"], cwd=clone, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and ".py ran" not in proc.stderr, proc.stderr
    (clone / "src/yaml.py").write_text("raise SystemExit('the stray src/yaml.py ran')\n")
    proc = subprocess.run([sys.executable, "stages/download.py"], cwd=clone, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "yaml.py ran" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (f"error: {clone / 'src/yaml.py'}: src/ holds the package "
                                   f"cifar10_tutorial only; a module beside it would be imported "
                                   f"by every stage in place of an installed one, outside what "
                                   f"DVC hashes; move it out of src/")
