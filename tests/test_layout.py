"""The shape of the code and the docs: one concern per module (no import cycle, modules and
functions of readable length), one home for paths (dvc.yaml), docs that point only at
files of the repository, and figures generated from the committed reports."""
import ast
import re
from pathlib import Path

import yaml

from cifar10_tutorial.cli import stage_command, stage_output
from conftest import ROOT

PACKAGE = ROOT / "src" / "cifar10_tutorial"
# A module is one concern, read in one sitting; past this, split it at its seams (the GPU
# run's parts, the benchmark's baselines, the download's transfer, the report's exercise 5
# were split so).
MAX_MODULE_LINES = 350
# The one module above it: the typed params, one dataclass per section of params.yaml and
# the variants built from them, kept whole so that every param is found in one file.
PARAMS = ("params.py", 375)
MAX_FUNCTION_LINES = 60  # a function read on one screen
# The one exception: the training loop, kept whole so that one batch can be followed from
# the prepared tensors to the logged loss in one place (the nanoGPT way), within this.
LOOP = ("training/train.py", "_train", 95)


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


# The package's folders in the order of the pipeline; the modules at the top of the package
# are the shared ground below them all. A module imports the ground, its own folder and the
# folders before its own, never one after it.
FOLDERS = ("data", "training", "evaluation", "exercises", "speed")
# ci.py, the CI gates' driver, is at the top of the package (as `python -m cifar10_tutorial.ci`,
# the command the code-equivalence check runs at old commits too) and builds the synthetic
# archive of the synthetic gate: the one module of the ground that imports a folder.
GROUND_IMPORTS_A_FOLDER = {("ci", "data.synthetic")}


def layer(module: str) -> int:
    top = module.split(".")[0]
    return FOLDERS.index(top) + 1 if top in FOLDERS else 0


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps
                  if layer(b) > layer(a) and (a, b) not in GROUND_IMPORTS_A_FOLDER)


def test_no_folder_imports_one_after_it_in_the_pipeline():
    graph = import_graph()
    assert {m.split(".")[0] for m in graph if "." in m} == set(FOLDERS)
    assert upward_imports(graph) == []


def test_the_layer_check_finds_an_upward_import(tmp_path):
    for folder, text in (("training", "from ..evaluation.evaluate import x\n"),
                         ("evaluation", "from ..training import train\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        (tmp_path / folder / ("train.py" if folder == "training" else "evaluate.py")).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["evaluation.evaluate"] == {"training.train"}
    assert upward_imports(graph) == ["training.train imports evaluation.evaluate"]


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


def test_modules_and_functions_are_of_readable_length():
    long_modules, long_functions = [], []
    for f in sorted(PACKAGE.rglob("*.py")):
        text, name = f.read_text(), f.relative_to(PACKAGE).as_posix()
        limit = PARAMS[1] if name == PARAMS[0] else MAX_MODULE_LINES
        if len(text.splitlines()) > limit:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                limit = LOOP[2] if (name, node.name) == LOOP[:2] else MAX_FUNCTION_LINES
                if n > limit:
                    long_functions.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    assert long_modules == [] and long_functions == []


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
    for f in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "stages").glob("*.py")]):
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


def test_readme_is_short_and_links_every_doc():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
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
             *PACKAGE.rglob("*.py"), *(ROOT / "stages").glob("*.py"), *(ROOT / "tests").glob("*.py")]
    citing = [str(p.relative_to(ROOT)) for p in texts
              if p.name != "test_layout.py" and "SPEC" + ".md" in p.read_text()]
    assert citing == []


def test_the_results_page_is_generated_from_the_committed_reports():
    from cifar10_tutorial.exercises.results_page import render

    assert (ROOT / "docs/results.md").read_text() == render(ROOT), \
        "docs/results.md is stale: run `python -m cifar10_tutorial.exercises.results_page`"


def test_the_results_page_without_schedule_results(tmp_path):
    """A partial report (the schedule variants not run yet) has no time-to-accuracy table:
    the page says so instead of failing; with the table it quotes it and its plot."""
    from cifar10_tutorial.exercises.results_page import _time_to_accuracy

    rep = Path("reports")
    text = "\n".join(_time_to_accuracy(tmp_path, rep))
    assert "No results yet: the schedule variants have not run" in text and "|" not in text
    (tmp_path / rep / "tables").mkdir(parents=True)
    (tmp_path / rep / "tables" / "time_to_accuracy.csv").write_text("variant,epochs\nfast,25\n")
    text = "\n".join(_time_to_accuracy(tmp_path, rep))
    assert "| fast | 25 |" in text and "time_to_accuracy.png" not in text


def test_the_results_page_lists_published_weights_from_their_records(tmp_path):
    from cifar10_tutorial.exercises.results_page import _published

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


def test_readme_and_docs_quote_no_hand_typed_measurements():
    """Measured figures live in the committed reports and reach the docs only through the
    generated results page (docs/results.md); docs/reference.md holds the reference's own
    figures, each with its source."""
    typed = [f"{doc.relative_to(ROOT)}: {m.group(0)!r}" for doc in DOCS
             if doc.name not in ("results.md", "reference.md")
             for m in MEASURED.finditer(doc.read_text())]
    assert typed == []
    assert MEASURED.search("reaches 80.2% at 1,672.2 examples/sec, 0.077 s per batch, 3.33x")


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
             *sorted((root / "src").rglob("*.py")), *sorted((root / "stages").glob("*.py"))]
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
    # and the check is real: the pointers this project once had are found
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
