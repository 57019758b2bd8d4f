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
import re
import sys
from pathlib import Path

# the import walk is the one `cifar10 check-code` makes before it records a stage
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from stage_imports import import_closure  # noqa: E402

PIPELINES = ("dvc.yaml", "reports/dvc.yaml")


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
