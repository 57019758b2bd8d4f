"""The record of commits checked to train bit-identically (``reports/code_equivalence.json``,
written by the code-equivalence check), as the report reads it: results made at commits
joined by identical checks count as made by one training code."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import PipelineError
from ..files import restore_from_git


def load_record(path: Path) -> list[dict]:
    """The checks recorded in ``path`` ([] when there is none)."""
    if not path.is_file():
        return []
    try:
        rec = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); give the record "
                            f"(as reports/dvc.yaml names it){restore_from_git(path)}") from None
    if not isinstance(rec, list) or not all(isinstance(r, dict) and len(r.get("commits", [])) == 2
                                            and isinstance(r.get("identical"), bool) for r in rec):
        raise PipelineError(f"{path}: expected a list of checks, each with two commits and "
                            f"identical: true | false; give the record (as reports/dvc.yaml "
                            f"names it){restore_from_git(path)}")
    return rec


def same_training(commits: set, record: list[dict]) -> bool:
    """Whether ``commits`` are all joined by identical checks (a prefix of a full commit,
    as provenance may shorten, names it)."""
    def full(c):
        return next((k for r in record for k in r["commits"] if k.startswith(c)), c)

    groups = {full(c): {full(c)} for c in commits}
    for r in record:
        if r["identical"]:
            a, b = r["commits"]
            ga, gb = groups.setdefault(a, {a}), groups.setdefault(b, {b})
            if ga is not gb:
                ga |= gb
                for c in gb:
                    groups[c] = ga
    return len({id(groups[full(c)]) for c in commits}) <= 1
