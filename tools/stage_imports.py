"""The code a DVC stage runs: its script, the stage folder's modules it imports (``_tree``)
and every module of the package reached from them, imports inside functions included.
``cifar10 check-code`` refuses to record a stage whose deps leave one out (DVC would not
see it change); ``python devtools/stage_deps.py --write`` makes the deps lists of it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "cifar10_tutorial"


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
