"""The shape of the code and the docs: imports that run one way (each folder imports only
what it has a reason for, no cycle), one home for paths (dvc.yaml), docs that point only at
files of the repository, and figures generated from the committed reports. Modules are
split at their seams, not at a line count: no test caps their length."""
import ast
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial.cli import stage_command, stage_output
from conftest import ROOT

PACKAGE = ROOT / "src" / "cifar10_tutorial"
# The scripts users run beside the package (`cifar10 publish`, `check-code`, `benchmark`,
# `trial`), held to the package's rules; the GPU run (benchmarks/gpu_*) measures this
# project on its own machines.
USER_SCRIPTS = sorted(f for f in [*(ROOT / "tools").glob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
                      if not f.name.startswith("gpu_"))


def module_name(f: Path, package: Path) -> str:
    """``training.train`` for src/cifar10_tutorial/training/train.py; a folder's
    __init__.py is the folder's name."""
    parts = f.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (relative imports, lazy ones too), by
    dotted name below the package (``ci``, ``training.train``)."""
    files = {module_name(f, package): f for f in sorted(package.rglob("*.py"))}
    graph = {}
    for name, f in files.items():
        here = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:  # a module of a folder, or a name in a module
                    sub = f"{target}.{alias.name}" if target else alias.name
                    deps.add(sub if sub in files else target)
        graph[name] = deps - {name, ""}
    return graph


# The package's folders, and for each the folders (or single modules) it may import, with
# the reason a reader sees; the modules at the top of the package are the shared ground below
# them all, and import no folder (except repro.py: `cifar10 repro` hands dvc repro the
# training stages' deadline). The tools around the pipeline (benchmarks/, tools/, .ci/,
# devtools/) are scripts beside the package and import it, never the other way.
FOLDERS = {
    "data": {},
    "training": {"data": "it trains on the prepared tensors"},
    "evaluation": {"data": "it evaluates on the prepared tensors"},
    "exercises": {"data": "a trial variant prepares its own data",
                  "training": "a variant is a training run",
                  "evaluation": "a variant is evaluated as the eval stage evaluates"},
    "report": {"data.datasets": "a data-set variant's default flips, to compare it with "
                                "the ablations as their runs computed (the twin rule)"},
}
GROUND_IMPORTS_A_FOLDER = {("repro", "training.deadline"), ("repro", "training.mirror"),
                           ("repro", "training.distributed")}
# Within data/: the HTTP code (download, transfer) is the download stage's alone, so that
# the preprocess stage's hash does not cover it.
DOWNLOAD_ONLY = {"data.download", "data.transfer"}


def wrong_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports the table above does not allow."""
    out = []
    for a, deps in graph.items():
        fa = a.split(".")[0] if "." in a or a in FOLDERS else None
        for b in deps:
            fb = b.split(".")[0] if "." in b or b in FOLDERS else None
            if fb is None or fb == fa:
                if fa == "data" and b in DOWNLOAD_ONLY and a not in DOWNLOAD_ONLY:
                    out.append(f"{a} imports {b}")
                continue
            if (a, b) in GROUND_IMPORTS_A_FOLDER:
                continue
            allowed = FOLDERS.get(fa, {}) if fa else {}
            if fb not in allowed and b not in allowed:
                out.append(f"{a} imports {b}")
    return sorted(out)


def test_each_folder_imports_only_the_folders_it_has_a_reason_for():
    graph = import_graph()
    assert {m.split(".")[0] for m in graph if "." in m} == set(FOLDERS)
    assert wrong_imports(graph) == []


def test_the_import_check_finds_each_kind_of_wrong_import():
    """Planted imports of each kind the table forbids: the download stage's HTTP code in
    preprocess, evaluation/ or the loop reaching into the other, the report reading
    training/, the ground importing a folder: each is found."""
    graph = {"data.preprocess": {"data.download", "files"}, "report.results": {"training.paths"},
             "evaluation.evaluate": {"training.checkpoints", "training.distributed"},
             "training.train": {"evaluation.evaluate"}, "files": {"data.prepared"}}
    assert wrong_imports(graph) == ["data.preprocess imports data.download",
                                    "evaluation.evaluate imports training.checkpoints",
                                    "evaluation.evaluate imports training.distributed",
                                    "files imports data.prepared",
                                    "report.results imports training.paths",
                                    "training.train imports evaluation.evaluate"]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, seen = [], set()

    def walk(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cyc = path[path.index(nxt):]
                if frozenset(cyc) not in seen:
                    seen.add(frozenset(cyc))
                    found.append(cyc + [nxt])
            else:
                walk(nxt, path + [nxt])
    for start in graph:
        walk(start, [start])
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    assert cycles(import_graph(tmp_path)) == [["a", "b", "a"]]


def pipeline_paths() -> set[str]:
    """Every output path of both pipelines (foreach stages: the part before ${key})."""
    paths = set()
    for yml in (ROOT / "dvc.yaml", ROOT / "reports/dvc.yaml"):
        for stage in yaml.safe_load(yml.read_text())["stages"].values():
            stage = stage.get("do", stage)
            for kind in ("outs", "metrics", "plots"):
                for entry in stage.get(kind, []):
                    path = entry if isinstance(entry, str) else next(iter(entry))
                    path = path.split("${")[0].rstrip("/")
                    paths.add(path)
                    if path.count("/") >= 2:  # and its folder: reports/eval, data/train
                        paths.add(path.rsplit("/", 1)[0])
    return paths


def code_strings(path: Path) -> list[str]:
    """String constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings]


def test_paths_live_in_dvc_yaml_only():
    """No stage script or library module writes a pipeline path itself: dvc.yaml passes
    them (error messages may name `dvc repro` targets, which are not paths of outputs)."""
    paths = pipeline_paths()
    assert {"data/raw", "data/prepared", "data/train/model.pt", "reports/eval",
            "reports/ablations"} <= paths
    found = []
    for f in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "stages").glob("*.py"), *USER_SCRIPTS]):
        for s in code_strings(f):
            found += [f"{f.relative_to(ROOT)}: {p!r} in {s[:60]!r}" for p in paths
                      if re.search(rf"(^|[^\w/.]){re.escape(p)}($|[^\w])", s)]
    assert found == []


def test_stage_scripts_run_by_hand_take_their_paths_from_dvc_yaml():
    args = stage_command("train.py", ROOT / "dvc.yaml")
    assert args == ["--data", "data/prepared", "--out", "data/train", "--live", "reports/train"]
    assert stage_output("train", "model.pt", ROOT / "dvc.yaml") == Path("data/train/model.pt")
    assert stage_output("preprocess", dvc_yaml=ROOT / "dvc.yaml") == Path("data/prepared")


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_links_every_doc():
    readme = (ROOT / "README.md").read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in readme, f"README does not link docs/{doc.name}"


def test_docs_point_only_at_files_of_the_repository():
    """Relative links resolve, and no text cites a file users do not have."""
    broken = []
    for doc in DOCS:
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []
    texts = [*DOCS, ROOT / "params.yaml", ROOT / "dvc.yaml", ROOT / "reports/dvc.yaml",
             *PACKAGE.rglob("*.py"), *(ROOT / "stages").glob("*.py"), *(ROOT / "tests").glob("*.py"),
             *USER_SCRIPTS]
    citing = [str(p.relative_to(ROOT)) for p in texts
              if p.name != "test_layout.py" and "SPEC" + ".md" in p.read_text()]
    assert citing == []


def missing_modules(files, root: Path = ROOT) -> list[str]:
    """The package's dotted names (``cifar10_tutorial.X.Y``: a module, or a name in one)
    that ``files`` cite and that do not exist: what a user told to run ``python -m`` one
    would find gone."""
    import importlib
    import importlib.util

    def exists(name: str) -> bool:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ModuleNotFoundError:
            pass
        parent, _, attr = name.rpartition(".")
        try:
            return importlib.util.find_spec(parent) is not None and hasattr(
                importlib.import_module(parent), attr)
        except ModuleNotFoundError:
            return False

    return sorted({f"{f.relative_to(root)}: {name}" for f in files
                   for name in re.findall(r"\bcifar10_tutorial(?:\.\w+)+", f.read_text())
                   if not exists(name)})


def test_every_module_the_project_names_exists(tmp_path):
    """Every module (or name in one) of the package that the docs, the card, the code and
    the scripts beside it cite exists; a planted stale one is found."""
    files = [*DOCS, ROOT / "models" / "tutorial_100k" / "README.md", *PACKAGE.rglob("*.py"),
             *(ROOT / "stages").glob("*.py"), *(ROOT / ".ci").glob("*.py"), *USER_SCRIPTS]
    assert missing_modules(files) == []
    planted = tmp_path / "x.py"
    planted.write_text('cmd = ["-m", "cifar10_tutorial.speed.tf_baseline"]  # cifar10_tutorial.model.CifarNet\n')
    assert missing_modules([planted], tmp_path) == ["x.py: cifar10_tutorial.speed.tf_baseline"]


def test_the_results_page_is_generated_from_the_committed_reports(tmp_path):
    """The page and the reports of one commit agree: both read from HEAD, so that a
    user's own runs in the workspace (a trial, a benchmark) leave the test as it is."""
    import subprocess

    from results_page import render

    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        pytest.skip(f"not a git checkout with a commit: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    assert (tmp_path / "docs/results.md").read_text() == render(tmp_path), \
        "docs/results.md is stale: run `python devtools/results_page.py`, then commit it"


@pytest.mark.parametrize("path, text", [
    ("reports/trial_benchmark.json", "{bad"),
    ("reports/trial_benchmark.json", "[]"),
    ("reports/trial_benchmark.json", None),  # "wall_s": "slow"
    ("reports/benchmark.json", "{}"),
], ids=["not-json", "a-list", "a-word-for-a-number", "no-keys"])
def test_a_damaged_report_file_is_one_line_from_the_results_page(tmp_path, path, text):
    """`cifar10 results-page` reads many committed files: one damaged is one line naming
    it and the fix, not a traceback."""
    import subprocess

    from cifar10_tutorial.errors import PipelineError
    from results_page import render

    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        pytest.skip(f"not a git checkout with a commit: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    target = tmp_path / path
    if text is None:
        data = json.loads(target.read_text())
        data["wall_s"] = "slow"
        text = json.dumps(data)
    target.write_text(text)
    # a time that is no number is named by the trial's own check
    with pytest.raises(PipelineError, match=rf"^{re.escape(path)}: (not what the results page "
                                            rf"reads \(\w+: .*\)|wall_s is \"slow\", "
                                            rf"expected seconds from 0 \(at most "
                                            rf"10,000,000: about 116 days\)); restore it .*then "
                                            rf"rerun this. Nothing was written.$"):
        render(tmp_path)


@pytest.mark.parametrize("part, key", [("median_examples_per_sec", "project"),
                                       ("ratios", "project_vs_typical")])
def test_a_benchmark_figure_its_windows_contradict_is_refused(tmp_path, part, key):
    """The benchmark's medians and ratios are its windows' (the benchmark's own code
    computes them again): one edited alone is one line naming it, never stated."""
    import subprocess

    from cifar10_tutorial.errors import PipelineError
    from results_page import render

    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        pytest.skip(f"not a git checkout with a commit: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    path = tmp_path / "reports/benchmark.json"
    record = json.loads(path.read_text())
    record[part][key] = 9999.0
    path.write_text(json.dumps(record))
    with pytest.raises(PipelineError, match=rf"^reports/benchmark.json: {part}.{key} is 9999.0, "
                                            rf"where its windows give "):
        render(tmp_path)


@pytest.mark.parametrize("edit, said", [
    (lambda t: t.update(wall_s=60.0), r"its stages and the 4.7 s before the first add up to "
                                      r"138.4 s, where wall_s is 60"),
    (lambda t: t["stages"].update({"reports/dvc.yaml:report": -3.6}),
     r"stages.reports/dvc.yaml:report is -3.6, expected seconds from 0"),
    (lambda t: t.update(before_first_stage_s=40.0), r"its stages and the 40 s before the "
                                                    r"first add up to 173.7 s, where wall_s "
                                                    r"is 138.4"),
    (lambda t: t["stages"].update({"x|y</td><script>": 0.0}),
     r"a stage named 'x\|y</td><script>', where the trial records DVC's stage names"),
    (lambda t: t.update(steps="$(id)"), r"steps is \"\$\(id\)\", where the trial records its "
                                        r"budget"),
    (lambda t: t.update(command="dvc exp run `id`"), r"command 'dvc exp run `id`', where the "
                                                     r"trial records the dvc command"),
    (lambda t: t["provenance"].update(cpu="AMD\n# heading"),
     r"provenance.cpu is \"AMD\\n# heading\", where the trial records one line of plain "
     r"text"),
    (lambda t: t["provenance"].update(cpus="many"), r"provenance.cpus is \"many\""),
    (lambda t: t["provenance"]["code"].update(commit="<script>"),
     r"provenance.code.commit is \"<script>\""),
    (lambda t: t.update(command="dvc exp run -S ablation.trial_steps=500 reports/dvc.yaml:report"),
     r"command asks for trial_steps=500, where steps is 5"),
    (lambda t: t.update(stages={}, before_first_stage_s=138.4), r"no stage timed"),
    # each field as the trial writes it
    (lambda t: t.update(command="dvc repro reports/dvc.yaml"),
     r"command 'dvc repro reports/dvc.yaml', where the trial records the one it runs"),
    (lambda t: t.update(command="dvc exp run -S ablation.trial_steps=5 -S ablation.trial_steps"
                                "=500 reports/dvc.yaml:report"), r"command 'dvc exp run -S "
                                                                  r"ablation.trial_steps=5 -S"),
    (lambda t: t.update(stages={"dvc.yaml:train": 130.1, "reports/dvc.yaml:report": 3.6}),
     r"a stage named 'dvc.yaml:train', where the trial records DVC's stage names"),
    (lambda t: t.update(stages={"reports/dvc.yaml:report": 3.6,
                                "reports/dvc.yaml:ablation@baseline": 130.1}),
     r"its last stage is 'reports/dvc.yaml:ablation@baseline'"),
    (lambda t: t["provenance"].update(date="yesterday"), r"provenance.date is \"yesterday\""),
    (lambda t: t["provenance"].update(data="whatever data"),
     r"provenance.data is \"whatever data\", where the trial records the prepared data's hash"),
    (lambda t: t["provenance"]["code"].update(commit="not-a-commit"),
     r"provenance.code.commit is \"not-a-commit\", where the trial records a git commit"),
    (lambda t: t["provenance"]["code"].update(dirty="lots"), r"provenance.code.dirty is "
                                                             r"\"lots\""),
    (lambda t: t["provenance"].update(cpus=10 ** 9), r"provenance.cpus is 1000000000"),
    (lambda t: t.update(note="mine"), r"holds 'note', which the trial does not write"),
    (lambda t: t.update(wall_s=1e300, before_first_stage_s=1e300),
     r"wall_s is 1e\+300, expected seconds from 0 \(at most 10,000,000"),
    (lambda t: t["provenance"].update(date="2026-13-45T25:61:99Z"),
     r"provenance.date is \"2026-13-45T25:61:99Z\", which is no UTC time"),
    (lambda t: t["provenance"].update(date="2999-01-01T00:00:00Z"),
     r"provenance.date is 2999-01-01T00:00:00Z, a time still to come"),
    (lambda t: t.update(stages={"reports/dvc.yaml:ablation@no_such_variant": 130.1,
                                "reports/dvc.yaml:report": 3.6}),
     r"a stage ablation@no_such_variant, where reports/params.yaml defines no variant "
     r"'no_such_variant' under ablations:"),
    # a variant's stage in the other group: reports/dvc.yaml defines no such stage
    (lambda t: t.update(stages={"reports/dvc.yaml:dataset_ablation@baseline": 130.1,
                                "reports/dvc.yaml:report": 3.6}),
     r"a stage dataset_ablation@baseline, where reports/params.yaml defines no variant "
     r"'baseline' under dataset_ablations:"),
    (lambda t: t["provenance"].update(date=(__import__("datetime").datetime.now(
        __import__("datetime").timezone.utc) + __import__("datetime").timedelta(hours=20))
        .strftime("%Y-%m-%dT%H:%M:%SZ")), r"provenance.date is \S+, a time still to come"),
    (lambda t: t["provenance"].update(cpu="[" * 5000), r"provenance.cpu is \"\[+, where the "
                                                       r"trial records one line of plain text"),
    (lambda t: t.update(stages={"reports/dvc.yaml:ablation@baseline": 0.0,
                                "reports/dvc.yaml:report": 0.0}, wall_s=0, before_first_stage_s=0),
     r"stages.reports/dvc.yaml:ablation@baseline is 0.0, where a stage DVC ran takes time"),
    (None, None),
], ids=["wall-edited", "negative-stage", "before-edited", "stage-name-markup", "steps-a-word",
        "command-backticks", "cpu-newline", "cpus-a-word", "commit-markup",
        "command-other-steps", "no-stages", "command-other", "command-two-budgets",
        "stage-of-the-main-run", "report-not-last", "date-a-word", "data-a-word",
        "commit-a-word", "dirty-a-word", "cpus-a-billion", "extra-key", "times-huge",
        "date-no-time", "date-to-come", "stage-of-no-variant", "stage-of-the-other-group",
        "date-hours-ahead", "cpu-5000-characters", "times-zero", "record-a-fifo"])
def test_a_trial_time_its_stages_contradict_is_refused(tmp_path, edit, said):
    """The trial's wall time is the time before the first stage plus each stage's (from
    its start to the next one's): one edited alone is one line naming it, never stated."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import _trial

    record = {"command": "dvc exp run -S ablation.trial_steps=5 reports/dvc.yaml:report",
              "steps": 5, "wall_s": 138.4, "before_first_stage_s": 4.7,
              "stages": {"reports/dvc.yaml:ablation@baseline": 130.1,
                         "reports/dvc.yaml:report": 3.6},
              "provenance": {"code": {"commit": "b06a93cd09"}, "cpu": "CPU", "cpus": 2,
                             "date": "2026-12-03T13:10:22Z", "data": "1092641114d0"}}
    path = tmp_path / "reports/trial_benchmark.json"
    path.parent.mkdir()
    path.write_text(json.dumps(record))
    (tmp_path / "reports/params.yaml").write_text("ablations:\n  baseline: {}\n")
    assert "**138 s** in all" in "\n".join(_trial(tmp_path))
    if edit is None:  # the record a FIFO: named, never read as absent (nor waited on)
        path.unlink()
        __import__("os").mkfifo(path)
        with pytest.raises(PipelineError, match=r"^reports/trial_benchmark.json: not a regular "
                                                r"file"):
            _trial(tmp_path)
        return
    edit(record)
    path.write_text(json.dumps(record))
    with pytest.raises(PipelineError, match=r"^reports/trial_benchmark.json: " + said):
        _trial(tmp_path)


def test_a_trial_before_its_commit_or_of_other_data_is_refused(tmp_path):
    """The trial ran in a clone of the commit it names, on the data the variants' results
    beside it were made on: a date before that commit was made (where this checkout's git
    knows it), or other data, is one line; the record as the trial wrote it is shown."""
    import subprocess

    from cifar10_tutorial.errors import PipelineError
    from results_page import _trial

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True,
                   env={**__import__("os").environ, "GIT_COMMITTER_DATE": "2026-12-01T10:00:00Z"})
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    record = {"command": "dvc exp run -S ablation.trial_steps=5 reports/dvc.yaml:report",
              "steps": 5, "wall_s": 138.4, "before_first_stage_s": 4.7,
              "stages": {"reports/dvc.yaml:ablation@baseline": 130.1,
                         "reports/dvc.yaml:report": 3.6},
              "provenance": {"code": {"commit": commit}, "cpu": "CPU", "cpus": 2,
                             "date": "2026-12-03T13:10:22Z", "data": "1092641114d0"}}
    path = tmp_path / "reports/trial_benchmark.json"
    (tmp_path / "reports/ablations/baseline/eval").mkdir(parents=True)
    (tmp_path / "reports/params.yaml").write_text("ablations:\n  baseline: {}\n"
                                                  "dataset_ablations:\n  svhn: {}\n")
    (tmp_path / "reports/ablations/baseline/eval/provenance.json").write_text(
        json.dumps({"data_hash": "1092641114d06102981bde28f159bfb5"}))
    path.write_text(json.dumps(record))
    assert "data 1092641114d0" in "\n".join(_trial(tmp_path))
    assert "does not hold" not in "\n".join(_trial(tmp_path))
    # a commit this whole history does not hold: said beside it
    path.write_text(json.dumps({**record, "provenance": {**record["provenance"],
                                                         "code": {"commit": "0000000"}}}))
    assert "in a clone of commit 0000000 (a commit this repository does not hold), " in \
        "\n".join(_trial(tmp_path))
    for key, value, said in (
            ("date", "1970-01-01T00:00:00Z", rf"provenance.date is 1970-01-01T00:00:00Z, before "
                                             rf"commit {commit[:10]} it ran in a clone of was "
                                             rf"made \(2026-12-01T10:00:00Z\)"),
            ("data", "0123456789ab", r"provenance.data is 0123456789ab, where the variants' "
                                     r"results beside it were made on data 1092641114d0")):
        path.write_text(json.dumps({**record, "provenance": {**record["provenance"],
                                                             key: value}}))
        with pytest.raises(PipelineError, match=r"^reports/trial_benchmark.json: " + said):
            _trial(tmp_path)


def test_a_trial_record_with_a_key_twice_is_one_line_from_the_results_page(tmp_path):
    """A key written twice in the trial's record: which one the page states would be the
    parser's accident; one line naming the file and the key."""
    import subprocess

    from cifar10_tutorial.errors import PipelineError
    from results_page import render

    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        pytest.skip(f"not a git checkout with a commit: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    path = tmp_path / "reports/trial_benchmark.json"
    path.write_text(path.read_text().replace('"wall_s": ', '"wall_s": 1.0, "wall_s": ', 1))
    with pytest.raises(PipelineError, match=r"^reports/trial_benchmark.json: not what the "
                                            r"results page reads \(ValueError: the key "
                                            r"'wall_s' twice\)"):
        render(tmp_path)


def test_the_results_page_without_schedule_results(tmp_path):
    """A partial report (the schedule variants not run yet) has no time-to-accuracy table:
    the page says so instead of failing; with the table it quotes it and its plot."""
    from results_page import _time_to_accuracy

    rep = Path("reports")
    text = "\n".join(_time_to_accuracy(tmp_path, rep))
    assert "No results yet: the schedule variants have not run" in text and "|" not in text
    (tmp_path / rep / "tables").mkdir(parents=True)
    (tmp_path / rep / "tables" / "time_to_accuracy.csv").write_text("variant,epochs\nfast,25\n")
    text = "\n".join(_time_to_accuracy(tmp_path, rep))
    assert "| fast | 25 |" in text and "time_to_accuracy.png" not in text


def test_the_results_page_lists_published_weights_from_their_records(tmp_path):
    from results_page import _published

    (tmp_path / "dvc.yaml").write_text(
        "artifacts:\n  w:\n    path: models/w/model.pt\n    type: model\n"
        "  mine:\n    path: data/train/model.pt\n    type: model\n")
    assert _published(tmp_path) == []  # declared, not committed: no section
    (tmp_path / "models/w").mkdir(parents=True)
    (tmp_path / "models/w/metrics.json").write_text(
        '{"eval": {"precision_at_1": 0.82451, "precision_at_1_raw": 0.7931}}')
    (tmp_path / "models/w/provenance.json").write_text(
        '{"steps": 100000, "segments": [{}, {}, {}]}')
    text = "\n".join(_published(tmp_path))
    assert "| `w` ([card](../models/w/README.md)) | 100,000 | 82.45% | 79.31% | 3 |" in text
    assert "mine" not in text


# a measured figure as the docs would quote one: a precision with decimals, a speed, a
# time or a ratio with decimals
MEASURED = re.compile(r"\d+\.\d+ ?%|\d[\d,.]* examples/sec|\d+\.\d+ ?(?:s|h|ms|min)\b|\d+\.\d+x\b")


def typed_measurements(docs: list[Path]) -> list[str]:
    return [f"{doc.name}: {m.group(0)!r}" for doc in docs
            if doc.name not in ("results.md", "reference.md")
            for m in MEASURED.finditer(doc.read_text())]


def test_readme_and_docs_quote_no_hand_typed_measurements(tmp_path):
    """Measured figures live in the committed reports and reach the docs only through the
    generated results page (docs/results.md); docs/reference.md holds the reference's own
    figures, each with its source."""
    assert typed_measurements(DOCS) == []
    doc = tmp_path / "speed.md"
    doc.write_text("It reaches 80.2% at 1,672.2 examples/sec, 0.077 s per batch, 3.33x the "
                   "baseline, in 12 steps of 128 images.\n")
    assert typed_measurements([doc]) == ["speed.md: '80.2%'", "speed.md: '1,672.2 examples/sec'",
                                         "speed.md: '0.077 s'", "speed.md: '3.33x'"]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not the code blocks' '#'
    return re.findall(r"^#+ (.+?)\s*$", text, flags=re.M)


def dangling_pointers(root: Path) -> list[str]:
    """Links to a section (`file.md#anchor`) whose heading does not exist, and citations of
    a section by name (`docs/training.md, "Checkpoints and resume"`, `README, "CI"`) in the
    docs, the code and the configuration, where that file has no such heading."""
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    texts = [*docs, root / "params.yaml", root / "dvc.yaml", root / "reports/dvc.yaml",
             root / ".ci/run", *sorted((root / ".github").rglob("*.yml")),
             *sorted((root / "src").rglob("*.py")), *sorted((root / "stages").glob("*.py")),
             *sorted((root / "tools").glob("*.py")), *sorted((root / "benchmarks").rglob("*.py"))]
    problems = []
    for doc in docs:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text()):
            path = (doc.parent / target) if target else doc
            if path.suffix == ".md" and path.is_file() and anchor not in map(_slug, _headings(path)):
                problems.append(f"{doc.relative_to(root)}: no section #{anchor} in {target or doc.name}")
    cite = re.compile(r"(README|docs/[\w-]+\.md|README\.md)[,:]? ['\"]([^'\"]+)['\"]")
    for f in texts:
        if not f.is_file():
            continue
        for name, section in cite.findall(f.read_text()):
            path = root / ("README.md" if name.startswith("README") else name)
            if section.lower() not in (h.lower() for h in _headings(path)):
                problems.append(f"{f.relative_to(root)}: cites section {section!r} of {name}, "
                                f"which has none")
    return problems


def test_links_and_cited_sections_exist(tmp_path):
    assert dangling_pointers(ROOT) == []
    # and the check is real: a planted pointer of each kind is found
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Project\n\n## Run\n\nSee [CI](docs/ci.md#the-gate).\n")
    (tmp_path / "docs" / "ci.md").write_text("# CI\n\n## The regression gate\n")
    (tmp_path / "params.yaml").write_text('fast:  # tuned (README: "Time to accuracy")\n')
    assert dangling_pointers(tmp_path) == [
        "README.md: no section #the-gate in docs/ci.md",
        "params.yaml: cites section 'Time to accuracy' of README, which has none"]


def test_the_files_that_share_the_exercise_run_go_to_one_worker():
    """conftest's scheduler sends the files of SHARES_EXERCISE_RUN to one worker, so that the
    costliest fixture is made once: a file that takes `exercise_run` and is not named
    there would make it again, on another worker."""
    from conftest import SHARES_EXERCISE_RUN

    def takes_it(path: Path) -> bool:
        return any(isinstance(node, ast.FunctionDef) and "exercise_run" in
                   [a.arg for a in node.args.args]
                   for node in ast.walk(ast.parse(path.read_text())))

    users = {f"tests/{f.name}" for f in sorted((ROOT / "tests").glob("test_*.py")) if takes_it(f)}
    assert users == set(SHARES_EXERCISE_RUN)


def listed_modules(package: Path = PACKAGE) -> list[str]:
    """Modules a folder's ``__init__`` docstring does not name (``name``, in double
    backquotes), and names it gives that are not modules of the folder; the top package's
    docstring lists the folders and the ground."""
    problems = []
    for init in sorted(package.rglob("__init__.py")):
        folder = init.parent
        named = set(re.findall(r"``(\w+)``", ast.get_docstring(ast.parse(init.read_text())) or ""))
        # (__main__.py is the folder's `python -m` hook, no module anything imports)
        have = {f.stem for f in folder.glob("*.py") if f.name not in ("__init__.py",
                                                                      "__main__.py")}
        if folder == package:
            have |= {d.name for d in folder.iterdir() if (d / "__init__.py").is_file()}
        where = init.relative_to(package).as_posix()
        problems += [f"{where} does not name {m}" for m in sorted(have - named)]
        problems += [f"{where} names {m}, which is not there" for m in sorted(named - have)]
    return problems


def test_each_folder_lists_its_modules_in_one_place(tmp_path):
    assert listed_modules() == []
    (tmp_path / "__init__.py").write_text('"""``a`` and ``gone``."""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    assert listed_modules(tmp_path) == ["__init__.py does not name b",
                                        "__init__.py names gone, which is not there"]


# What this project's own development machines need is in devtools/ (and the tests), never
# in the package: users have no ../shared, no lent GPU machine and its command limit.
WORKSHOP = re.compile(r"\.\./shared|shared/tools|shared/data|\.carry\b|\blent\b|"
                      r"GPU machine this project|make_dev_archive|10-minute|10 minutes",
                      re.IGNORECASE)


def workshop_lines(package: Path, files=None) -> list[str]:
    """Lines of the package (or of ``files`` below it) that speak of this project's own
    development machines."""
    return [f"{f.relative_to(package)}:{i}: {line.strip()[:80]}"
            for f in (files if files is not None else sorted(package.rglob("*.py")))
            for i, line in enumerate(f.read_text().splitlines(), 1) if WORKSHOP.search(line)]


def test_the_package_speaks_of_users_machines_only(tmp_path):
    assert workshop_lines(PACKAGE) == []
    assert workshop_lines(ROOT, USER_SCRIPTS) == []
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "tool.py").write_text(
        'x = 1\nDEV_ARCHIVE_TOOL = Path("../shared/tools/make_dev_archive.py")\n')
    assert workshop_lines(tmp_path) == [
        'sub/tool.py:2: DEV_ARCHIVE_TOOL = Path("../shared/tools/make_dev_archive.py")']


# A comment or docstring says why the code is as it is today, or what a test holds the code
# to: an internal case id or the story of a past bug tells a reader neither. The git history
# keeps the stories.
TICKETS = re.compile(r"\b[WB]\d{1,3}\b|hostile case|\bused to\b|\bonce (?:did|was|were|read|"
                     r"left|ran|reran|replaced|passed|depended|deleted|took)\b|\b(?:was|were) "
                     r"(?:an? )?(?:\w+Error|tracebacks?)\b|\bhung\b", re.IGNORECASE)


def ticket_lines(root: Path, folders=("src", "stages", "tools", "benchmarks", "tests")) -> list[str]:
    """Comments and docstrings under ``folders`` that cite a case id or tell a past bug."""
    import io
    import tokenize

    found = []
    for f in sorted(p for d in folders for p in (root / d).rglob("*.py")):
        text = f.read_text()
        notes = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                 if t.type == tokenize.COMMENT and "noqa" not in t.string]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    notes.append((node.body[0].lineno, " ".join(doc.split())))
        found += [f"{f.relative_to(root)}:{line}: {hit.group(0)}"
                  for line, note in sorted(notes) if (hit := TICKETS.search(note))]
    return found


def test_comments_and_docstrings_state_rules_not_tickets(tmp_path):
    assert ticket_lines(ROOT) == []
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'def test_a():\n    """-1 once did nothing."""\n    x = 1  # noqa: B018\n'
        '    # a bad file was a KeyError traceback\n    y = 2  # see W25\n'
        '    z = 3  # hostile case of another kind\n')
    assert ticket_lines(tmp_path) == ["tests/test_x.py:2: once did",
                                      "tests/test_x.py:4: was a KeyError",
                                      "tests/test_x.py:5: W25", "tests/test_x.py:6: hostile case"]


def _committed_reports(tmp_path: Path) -> Path:
    """The checkout's files, linked into a folder with no .dvc/: what the page reads, where
    DVC has no record to judge them by (the workspace's code may be mid-change)."""
    folder = tmp_path / "checkout"
    folder.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".dvc", ".venv"):
            (folder / entry.name).symlink_to(entry)
    return folder


def test_the_results_page_of_another_checkout_is_not_replaced(tmp_path, monkeypatch):
    """Another checkout's docs/results.md (a page this command wrote there, from that
    checkout's reports): not replaced by this checkout's figures; one line naming it."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import main

    monkeypatch.chdir(_committed_reports(tmp_path))
    other = tmp_path / "other"
    (other / ".dvc").mkdir(parents=True)
    (other / "dvc.yaml").write_text("stages: {}\n")
    (other / "docs").mkdir()
    page = other / "docs/results.md"
    page.write_text((ROOT / "docs/results.md").read_text().replace("78.", "77."))
    before = page.read_text()
    with pytest.raises(PipelineError, match=rf"^--out {re.escape(str(page))}: inside "
                                            rf"{re.escape(str(other))}, another checkout than "
                                            rf"the one whose reports this reads"):
        main(["--out", str(page)])
    assert page.read_text() == before
    (tmp_path / "free").mkdir()  # run from no checkout: said as such, not called one
    monkeypatch.chdir(tmp_path / "free")
    with pytest.raises(PipelineError, match=rf"^--out {re.escape(str(page))}: inside "
                                            rf"{re.escape(str(other))}, and this runs in no "
                                            rf"checkout \({re.escape(str(tmp_path / 'free'))}\)"):
        main(["--out", str(page)])
    assert page.read_text() == before


@pytest.mark.parametrize("what", ["folder", "users-file", "readme"])
def test_the_results_page_replaces_only_a_page_it_wrote(tmp_path, monkeypatch, what):
    """`cifar10 results-page --out PATH`: a folder there, or a file it did not write (a
    user's notes, the README), is one line and stays as it was; its own page is replaced."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import GENERATED, main

    monkeypatch.chdir(_committed_reports(tmp_path))
    out = tmp_path / "page.md"
    if what == "folder":
        out.mkdir()
    else:
        out.write_text("my notes\n" if what == "users-file" else (ROOT / "README.md").read_text())
    before = None if what == "folder" else out.read_text()
    with pytest.raises(PipelineError, match=r"^--out .*page\.md: (a folder|holds a file that is not a results "
                                            r"page)"):
        main(["--out", str(out)])
    assert what == "folder" or out.read_text() == before
    if what == "users-file":
        from results_page import _sealed  # an older page of its own, unedited

        out.write_text(_sealed(f"{GENERATED} from the files in reports/; do not edit by hand "
                               f"-->\nold\n"))
        main(["--out", str(out)])
        assert out.read_text() == (ROOT / "docs/results.md").read_text()


def test_the_results_page_edited_by_hand_is_not_replaced(tmp_path, monkeypatch):
    """The page records the sha256 of its lines in its top line: notes added to a page this
    wrote are refused (they would be lost), the page as it was; its own page is replaced."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import main

    monkeypatch.chdir(_committed_reports(tmp_path))
    out = tmp_path / "page.md"
    main(["--out", str(out)])
    main(["--out", str(out)])  # its own, unedited: replaced
    page = out.read_text()
    for edited in (page + "\nMY NOTES\n", page.replace("# Results", "# Results: MY NOTES"),
                   __import__("re").sub(r" \(sha256 \w+ of this page\)", "", page) + "notes"):
        out.write_text(edited)
        # a page without its seal may be an older version's, unedited: said as such
        said = (r"edited by hand since this command wrote it" if "sha256" in edited else
                r"a results page without its seal .*: one an older version of this command "
                r"wrote, or one whose seal went with an edit")
        with pytest.raises(PipelineError, match=said):
            main(["--out", str(out)])
        assert out.read_text() == edited


def test_the_results_page_is_never_written_through_a_link(tmp_path, monkeypatch):
    """--out a link, even to a page this wrote: refused in one line; the link and the page
    it points at stay as they were."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import main

    monkeypatch.chdir(_committed_reports(tmp_path))
    page, link = tmp_path / "page.md", tmp_path / "link.md"
    main(["--out", str(page)])
    before = page.read_text()
    link.symlink_to(page)
    with pytest.raises(PipelineError, match=r"^--out .*link\.md: a link, where this writes a "
                                            r"results page of its own"):
        main(["--out", str(link)])
    assert link.is_symlink() and page.read_text() == before


@pytest.mark.parametrize("name", ["dvc.lock", "notes/dvc.yaml", "data.dvc", ".gitignore",
                                  ".gitmodules/results.md", "notes/dvc.yaml/results.md"])
def test_the_results_page_is_never_written_under_a_name_git_or_dvc_reads(tmp_path,
                                                                         monkeypatch, name):
    """--out dvc.lock (in a checkout without one), notes/dvc.yaml, NAME.dvc, .gitignore: a
    page there would break every DVC (git) command of the repository: one line, nothing
    written."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import main

    root = _committed_reports(tmp_path)
    monkeypatch.chdir(root)
    before = sorted(p for p in root.rglob("*") if ".git" not in p.parts)
    with pytest.raises(PipelineError, match=rf"^--out {name}: (inside a folder \S+, )?named "
                                            rf"as .*, which git or DVC reads wherever it lies"):
        main(["--out", name])
    assert sorted(p for p in root.rglob("*") if ".git" not in p.parts) == before


def test_every_downloaded_folder_persists_across_reruns():
    """A stage's `raw` folder (what it downloaded) persists in both pipelines: DVC removes a
    non-persistent output before the stage runs, so a url naming the stage's own copy would
    lose it before the stage's guard could refuse it."""
    import yaml

    raws = {}
    for pipeline in ("dvc.yaml", "reports/dvc.yaml"):
        for name, stage in yaml.safe_load((ROOT / pipeline).read_text())["stages"].items():
            body = stage.get("do", stage)
            for out in body.get("outs", []):
                path, spec = (out, {}) if isinstance(out, str) else next(iter(out.items()))
                if path.rstrip("/").endswith("raw"):
                    raws[f"{pipeline}:{name}"] = (spec or {}).get("persist")
    assert set(raws) == {"dvc.yaml:download", "reports/dvc.yaml:dataset_ablation"}, raws
    assert all(raws.values()), raws


def test_the_results_page_names_a_variant_it_cannot_read_as_the_report_does(tmp_path,
                                                                             monkeypatch):
    """A variant's name the stages refuse (a shell command in it): the results page names
    it, as the report does, rather than advise a `dvc repro` that fails on it."""
    import yaml
    from cifar10_tutorial.errors import PipelineError
    from results_page import main

    folder = _committed_reports(tmp_path)
    (folder / "reports").unlink()
    (folder / "reports").mkdir()
    for entry in (ROOT / "reports").iterdir():
        if entry.name != "params.yaml":
            (folder / "reports" / entry.name).symlink_to(entry)
    params = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    params["ablations"]["x$(touch y)"] = {}
    (folder / "reports/params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(folder)
    with pytest.raises(PipelineError, match=r"^reports/params.yaml: ablations: variant name "
                                            r"'x\$\(touch y\)' must be a string starting"):
        main(["--out", str(tmp_path / "page.md")])
    assert not (tmp_path / "page.md").exists()


@pytest.mark.parametrize("where", ["reports/tables/bf16.csv", "reports/report.md"])
def test_a_fifo_among_the_reports_outputs_is_one_line_from_the_results_page(tmp_path, where):
    """DVC hashes the report stage's outputs too before it says whether they are current:
    a FIFO among them (its tables, report.md) would hold `dvc status` until its time-out;
    the results page names it at once, as it does one among the stage's inputs."""
    import os
    import subprocess

    from cifar10_tutorial.errors import PipelineError
    from results_page import _refuse_special_files

    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        pytest.skip(f"not a git checkout with a commit: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    _refuse_special_files(tmp_path, Path("reports/dvc.yaml"))
    (tmp_path / where).unlink()
    os.mkfifo(tmp_path / where)
    with pytest.raises(PipelineError, match=rf"{re.escape(where)}: expected a file the report "
                                            rf"wrote, found a FIFO"):
        _refuse_special_files(tmp_path, Path("reports/dvc.yaml"))


@pytest.mark.parametrize("kind, said", [
    ("beyond", r"eval.precision_at_1 is 1.5, expected a fraction from 0 to 1"),
    ("negative-loss", r"train.loss_avg is -3, expected a number from 0"),
    ("twice", r"a file that is not a baseline \(the key 'eval.precision_at_1' twice\)"),
    ("fifo", r"a folder or special file, not a baseline file"),
])
def test_the_results_page_states_only_baselines_a_run_can_give(tmp_path, kind, said):
    """The page states the CI's baselines as the gate reads them: a precision of 1.5, a
    loss below 0, a key twice (the gate refuses each) or a FIFO (read, it would wait
    forever) is one line naming the file, at once."""
    from cifar10_tutorial.errors import PipelineError
    from results_page import _baselines

    folder = tmp_path / "reports" / "baseline"
    folder.mkdir(parents=True)
    path = folder / "ci-real.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text({"beyond": '{"eval.precision_at_1": 1.5}',
                         "negative-loss": '{"train.loss_avg": -3}',
                         "twice": '{"eval.precision_at_1": 0.5, "eval.precision_at_1": 0.6}'
                         }[kind])
    with pytest.raises(PipelineError, match=r"^reports/baseline/ci-real.json: " + said +
                                            r".*, where the results page states the CI's "
                                            r"baselines"):
        _baselines(tmp_path)
