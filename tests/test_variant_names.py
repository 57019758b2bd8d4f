"""A variant's name reaches no shell: reports/dvc.yaml's commands, rendered by DVC for
names a shell would read as code, run the same fixed words for every variant, and the
stage takes the name from DVC (its stage's own), refusing it before any path or params."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.exercises.ablation import dvc_stage_variant, variant_name
from cifar10_tutorial.params import ParamsError
from conftest import ROOT

# names a shell reads as several words, other commands, substitutions or an option; {tmp}
# is where a command they ran would leave its file
HOSTILE = ["x;touch$IFS{tmp}/p;#", "a'b", "x';touch {tmp}/r;'", "$(touch {tmp}/q)", "`id`",
           "two\nlines", "--help", 'q"$(touch {tmp}/s)"']


def _project(tmp_path, names):
    """A DVC project holding reports/dvc.yaml with ``names`` as variants of both groups."""
    from dvc.repo import Repo

    project = tmp_path / "project"
    (project / "reports").mkdir(parents=True)
    shutil.copy2(ROOT / "reports/dvc.yaml", project / "reports/dvc.yaml")
    raw = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    raw["ablations"] = {n: {} for n in names}
    raw["dataset_ablations"] = {f"{n}_data": {} for n in names}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw))
    Repo.init(project, no_scm=True).close()
    return project


def _rendered(project, monkeypatch):
    """(address, command) of each variant stage, as DVC renders reports/dvc.yaml."""
    from dvc.repo import Repo

    monkeypatch.chdir(project)
    with Repo(str(project)) as repo:
        return [(s.addressing, s.cmd) for s in repo.index.stages if "@" in s.name]


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_no_shell_reads_a_variant_name(tmp_path, monkeypatch, shell):
    """Every variant's command, run by the shell as DVC runs it (DVC_STAGE set), calls the
    stage once with the same words, none of them the name; nothing else runs."""
    names = [n.format(tmp=tmp_path) for n in HOSTILE]
    project = _project(tmp_path, names)
    stages = _rendered(project, monkeypatch)
    assert len(stages) == 2 * len(names)
    stub = tmp_path / "bin" / "python"  # records its arguments instead of running a stage
    stub.parent.mkdir()
    log = tmp_path / "argv.jsonl"
    stub.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"with open({str(log)!r}, 'a') as f:\n"
                    f"    f.write(json.dumps([os.environ['DVC_STAGE'], sys.argv[1:]]) + '\\n')\n")
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    for address, cmd in stages:
        proc = subprocess.run([shutil.which(shell), "-c", cmd], cwd=project,
                              env={**env, "DVC_STAGE": address}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [address for address, _ in calls] == [address for address, _ in stages]
    words = {(argv[0], tuple(argv[1:])) for _, argv in calls}
    assert words == {("stages/ablation.py", ("--data", "data/prepared",
                                             "--work", "data/ablations/{variant}",
                                             "--trial-work", "data/trials/{variant}",
                                             "--out", "reports/ablations/{variant}")),
                     ("stages/dataset_ablation.py", ("--work", "data/dataset_ablations/{variant}",
                                                     "--trial-work", "data/trials/{variant}",
                                                     "--partial", "data/.downloads",
                                                     "--out", "reports/ablations/{variant}"))}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.jsonl", "bin", "project"]
    # the stage takes each name from its DVC stage, intact, and refuses it
    for address, _ in stages:
        stage, _, name = address.partition(":")[2].partition("@")
        assert dvc_stage_variant(stage, address) == name and name.removesuffix("_data") in names
        monkeypatch.setenv("DVC_STAGE", address)
        group = "ablations" if stage == "ablation" else "dataset_ablations"
        with pytest.raises(ParamsError, match=f"^{group}: variant name .* must be a string starting"):
            variant_name(None, group)


def test_the_stage_run_by_the_shell_refuses_a_hostile_name_and_runs_nothing(tmp_path,
                                                                             monkeypatch):
    """The real stage, from its rendered command: one line refusing the name, no file."""
    name = HOSTILE[0].format(tmp=tmp_path)
    project = _project(tmp_path, [name])
    shutil.copytree(ROOT / "stages", project / "stages",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (address, cmd), = [s for s in _rendered(project, monkeypatch) if ":ablation@" in s[0]]
    env = {**os.environ, "DVC_STAGE": address,
           "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["/bin/sh", "-c", cmd], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    shown = repr(name) if len(name) <= 64 else f"{name[:20]!r}..."  # the temp path's length
    assert proc.stderr.strip().splitlines() == [
        f"error: ablations: variant name {shown} must be a string starting with an "
        f"ASCII letter (a-z, A-Z), then ASCII letters, digits, '_' or '-', at most 64 "
        f"characters"]
    assert not (tmp_path / "p").exists() and not (project / "data").exists()


def test_the_variant_is_the_one_given_or_the_dvc_stages():
    """By hand the name on the command line; under DVC the stage's own; both: the same."""
    assert dvc_stage_variant("ablation", "reports/dvc.yaml:ablation@softmax") == "softmax"
    assert dvc_stage_variant("ablation", "ablation@a:b@c") == "a:b@c"
    assert dvc_stage_variant("ablation", "reports/dvc.yaml:dataset_ablation@svhn") is None
    assert dvc_stage_variant("ablation", "dvc.yaml:train") is None
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}
    os_environ = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(env)
        assert variant_name("softmax", "ablations") == "softmax"
        with pytest.raises(PipelineError, match=r"no variant given: run `python "
                                                r"stages/ablation.py NAME \.\.\.`"):
            variant_name(None, "ablations")
        os.environ["DVC_STAGE"] = "reports/dvc.yaml:dataset_ablation@svhn"
        assert variant_name(None, "dataset_ablations") == "svhn"
        with pytest.raises(PipelineError, match="variant cifar given, but DVC runs the stage "
                                                "dataset_ablation@svhn"):
            variant_name("cifar", "dataset_ablations")
        with pytest.raises(ParamsError, match="variant name '--help' must be"):
            variant_name("--help", "dataset_ablations")
    finally:
        os.environ.clear()
        os.environ.update(os_environ)


@pytest.mark.e2e
def test_a_name_that_points_elsewhere_deletes_nothing_and_a_rerun_replaces_results(tmp_path):
    """DVC builds a variant's output paths from its name before any code of the project
    reads it: `../../models/NAME` points reports/ablations/NAME/metrics.json at a published
    folder's file. The variant outputs are persist, so DVC deletes none of them before the
    stage runs; the stage refuses the name, and the file is as it was. A variant rerun
    with other params replaces its own results whole."""
    from conftest import commit, dvc, set_params, tiny_project

    project = tiny_project(tmp_path, dict(train_per_batch=60, test=50, seed=2),
                           ablation={"max_steps": 4}, eval={"batch_size": 25, "every_steps": 0},
                           train={"device": "cpu", "batch_size": 16, "log_every": 2},
                           run={"checkpoint_every": 2, "summary_every": 2})
    published = project / "models/mine/metrics.json"
    published.parent.mkdir(parents=True)
    published.write_text('{"eval": {"precision_at_1": 0.8}}\n')
    set_params(project, "ablations", exercises=True, baseline={})
    raw = yaml.safe_load((project / "reports/params.yaml").read_text())
    raw["ablations"] = {"baseline": {}, "../../models/mine": {}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "dvc.yaml:preprocess")
    commit(project, "a hostile name")
    proc = subprocess.run([shutil.which("dvc") or "dvc", "repro",
                           "reports/dvc.yaml:ablation@../../models/mine"], cwd=project,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert published.read_text() == '{"eval": {"precision_at_1": 0.8}}\n'
    # an ordinary variant: run, then rerun with other params, its results replaced
    raw["ablations"] = {"baseline": {}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    dvc(project, "repro", "--single-item", "reports/dvc.yaml:ablation@baseline")
    first = json.loads((project / "reports/ablations/baseline/metrics.json").read_text())
    set_params(project, "ablation", exercises=True, max_steps=6)
    dvc(project, "repro", "--single-item", "reports/dvc.yaml:ablation@baseline")
    again = json.loads((project / "reports/ablations/baseline/metrics.json").read_text())
    assert (first["train"]["step"], again["train"]["step"]) == (4, 6)
    assert "ablation@baseline" not in dvc(project, "status", "reports/dvc.yaml").stdout


def _refused(stage: str, *args) -> str:
    """``stages/<stage>.py ARGS`` run as DVC runs it: it must stop in one line (exit 1, no
    traceback); that line."""
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / f"stages/{stage}.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args, said", [
    (["--work", "{w}/same", "--out", "{w}/same"], "--out {w}/same and --work {w}/same: the same folder"),
    (["--work", "{w}/work", "--out", "{w}/work/results"], "--out {w}/work/results and --work {w}/work: one inside the other"),
    (["--work", "{w}/work", "--out", "{w}/prepared/results"], "--out {w}/prepared/results and --data {w}/prepared: one inside the other"),
    (["--work", "{w}/work", "--out", "{w}/out", "--mirror", "{w}/out/mir"],
     "--out {w}/out and --mirror {w}/out/mir/baseline: one inside the other"),
    (["--work", "{w}/work", "--out", "{w}/out", "--mirror", "file://{w}/out"],
     "--out {w}/out and --mirror {w}/out/baseline: one inside the other"),
], ids=["work-is-out", "out-in-work", "out-in-data", "mirror-in-out", "mirror-url-on-out"])
def test_the_variant_stages_folders_are_apart(tmp_path, args, said):
    """The variant stage's --out, --work and --data are folders apart (a model among the
    committed results, results inside the prepared data): one line before anything is
    written."""
    from conftest import ROOT

    line = _refused("ablation", "baseline", "--params", ROOT / "reports/params.yaml",
                    "--data", tmp_path / "prepared", *[a.format(w=tmp_path) for a in args])
    assert said.format(w=tmp_path) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, said", [
    (["--out", "{w}/prepared/t3", "--live", "{w}/live"], "--data {w}/prepared and --out {w}/prepared/t3: one inside the other"),
    (["--out", "{w}/out", "--live", "{w}/prepared/l5"], "--data {w}/prepared and --live {w}/prepared/l5: one inside the other"),
    (["--out", "{w}/out", "--live", "{w}/live", "--mirror", "{w}/prepared/mir"],
     "--data {w}/prepared and --mirror {w}/prepared/mir/train: one inside the other"),
    (["--out", "{w}/out", "--live", "{w}/live", "--mirror", "file:{w}/prepared/mir"],
     "--data {w}/prepared and --mirror {w}/prepared/mir/train: one inside the other"),
    (["--out", "{w}/live/model", "--live", "{w}/live"],
     "--out {w}/live/model and --live {w}/live: one inside the other"),
], ids=["out-in-data", "live-in-data", "mirror-in-data", "mirror-url-one-slash",
        "out-in-live"])
def test_the_train_stage_writes_nothing_inside_its_data(tmp_path, args, said):
    """The train stage's --out, --live and mirror folder lie outside --data (the preprocess
    stage's DVC output: a folder written there would make every stage stale)."""
    (tmp_path / "prepared").mkdir()
    line = _refused("train", "--data", tmp_path / "prepared",
                    *[a.format(w=tmp_path) for a in args])
    assert said.format(w=tmp_path) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared"]
    assert list((tmp_path / "prepared").iterdir()) == []


def test_a_variant_missing_from_its_group_is_named_with_that_groups_variants(tmp_path):
    """`dataset_ablation.py svhn` with no data-set variant svhn: the line names
    `dataset_ablations:` and what it holds (none), not the ablations: the stage never runs."""
    from conftest import ROOT

    line = _refused("dataset_ablation", "svhn", "--params", ROOT / "reports/params.yaml",
                    "--work", tmp_path / "w", "--out", tmp_path / "o", "--partial", tmp_path / "p")
    assert "no variant 'svhn' under `dataset_ablations:` of" in line, line
    assert "(defined there: none); add it there, e.g. `svhn: {data: {dataset: svhn}}`" in line
    assert list(tmp_path.iterdir()) == []


def test_the_eval_stage_writes_nothing_inside_its_data(tmp_path):
    (tmp_path / "prepared").mkdir()
    line = _refused("eval", "--data", tmp_path / "prepared", "--model", tmp_path / "m.pt",
                    "--out", tmp_path / "prepared/ev")
    assert (f"--data {tmp_path}/prepared and --out {tmp_path}/prepared/ev: one inside the other"
            in line), line
    assert list((tmp_path / "prepared").iterdir()) == []
