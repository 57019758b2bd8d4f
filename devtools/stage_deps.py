"""The code each DVC stage runs, as its ``deps:`` list it: the stage script, the stage
folder's modules it imports (``_tree``), and every module of the package reached from them
(imports inside functions included), file by file. A stage then reruns when a module it
runs changes, and for nothing else: not for a new module it does not import, nor for a
module moved between folders it never reads.

    python devtools/stage_deps.py          # list what differs from dvc.yaml and reports/dvc.yaml
    python devtools/stage_deps.py --write  # rewrite the code part of each stage's deps

``tests/test_cache.py`` checks every stage against :func:`import_closure`. Only the code
lines of a ``deps:`` block (``stages/...`` and ``src/...``) are rewritten; data deps and
comments stay where they are.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

PACKAGE = "cifar10_tutorial"
PIPELINES = ("dvc.yaml", "reports/dvc.yaml")


def _module_file(root: Path, module: str):
    base = root / "src" / Path(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def import_closure(root: Path, script: Path) -> set[str]:
    """Files of this tree a stage script can import: the script, stage-folder modules
    (``_tree``), and every module of the package reached from them, imports inside
    functions included. Paths relative to ``root``."""
    files, todo = {script}, [script]
    while todo:
        path = todo.pop()
        in_package = (root / "src" / PACKAGE) in path.parents
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: inside the package, from the module's own folder
                    assert in_package, f"{path}: relative import outside the package"
                    here = path.parent.relative_to(root / "src").parts
                    base = here[:len(here) - (node.level - 1)]
                    mod = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    mod = node.module
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] == PACKAGE:  # the module and every package above it
                    parts = name.split(".")
                    found = [_module_file(root, name)] + [
                        root / "src" / Path(*parts[:i]) / "__init__.py"
                        for i in range(1, len(parts))
                        if (root / "src" / Path(*parts[:i]) / "__init__.py").is_file()]
                elif (root / "stages" / f"{name}.py").is_file():
                    found = [root / "stages" / f"{name}.py"]
                else:
                    continue
                for f in found:
                    if f is not None and f not in files:
                        files.add(f)
                        todo.append(f)
    return {str(f.relative_to(root)) for f in files}


def code_deps(root: Path, script: str) -> list[str]:
    """The deps lines of a stage whose command runs ``script``: the script first, then the
    stage folder's modules, then the package's, each group sorted."""
    found = import_closure(root, root / script)
    stages = sorted(f for f in found if f.startswith("stages/") and f != script)
    return [script, *stages, *sorted(f for f in found if f.startswith("src/"))]


_CMD = re.compile(r"python (stages/\w+\.py)")
_DEP = re.compile(r"^(\s*)- ((?:stages|src)/\S+)\s*$")


def rewrite(root: Path, pipeline: str) -> tuple[str, str]:
    """The pipeline file's text before and after its stages' code deps are rewritten."""
    text = (root / pipeline).read_text()
    out, script, i, lines = [], None, 0, text.splitlines(keepends=True)
    while i < len(lines):
        line = lines[i]
        if (m := _CMD.search(line)):
            script = m.group(1)
        if script and (m := _DEP.match(line)):
            indent = m.group(1)
            while i < len(lines) and _DEP.match(lines[i]):
                i += 1
            out += [f"{indent}- {dep}\n" for dep in code_deps(root, script)]
            script = None
            continue
        out.append(line)
        i += 1
    return text, "".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite the pipeline files")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    stale = []
    for pipeline in PIPELINES:
        before, after = rewrite(root, pipeline)
        if before != after:
            stale.append(pipeline)
            if args.write:
                (root / pipeline).write_text(after)
    verb = "rewrote" if args.write else "differ from the imports"
    print(f"{verb}: {', '.join(stale)}" if stale else "every stage's code deps are its imports")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
