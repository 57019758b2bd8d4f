"""The record of commits checked to train bit-identically (``reports/code_equivalence.json``,
written by the code-equivalence check), as the report reads it: results made at commits
joined by identical checks count as made by one training code."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from ..errors import PipelineError
from ..eval_files import loads_once
from ..files import restore_from_git


def load_record(path: Path) -> list[dict]:
    """The checks recorded in ``path`` ([] when there is none)."""
    if not path.is_file():
        return []
    try:
        rec = loads_once(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # a key twice too
        raise PipelineError(f"{path}: not valid JSON ({exc}); give the record "
                            f"(as reports/dvc.yaml names it){restore_from_git(path)}") from None
    if not isinstance(rec, list) or not all(isinstance(r, dict) and len(r.get("commits", [])) == 2
                                            and isinstance(r.get("identical"), bool) for r in rec):
        raise PipelineError(f"{path}: expected a list of checks, each with two commits and "
                            f"identical: true | false; give the record (as reports/dvc.yaml "
                            f"names it){restore_from_git(path)}")
    for i, check in enumerate(rec):
        wrong = _unheld(check)
        if wrong:
            a, b = (str(c)[:10] for c in check["commits"])
            raise PipelineError(f"{path}: check {i + 1} ({a}..{b}) {wrong}; give the record "
                                f"as the code-equivalence check wrote it (as reports/dvc.yaml "
                                f"names it){restore_from_git(path)}")
    return rec


def _unheld(check: dict) -> Optional[str]:
    """What in one check its own runs do not give: the check trains the fixed-seed pair
    once at each commit and records each run's digest of the weights and averages, and
    ``identical`` is whether the two agree (devtools/equivalence.py); a check without
    them, or whose ``identical`` its digests contradict, states what nothing ran."""
    runs = check.get("runs")
    if not (isinstance(runs, list) and len(runs) == 2 and all(
            isinstance(r, dict) and isinstance(r.get("digest"), str)
            and re.fullmatch(r"[0-9a-f]{64}", r["digest"]) for r in runs)):
        return ("records no two runs with their digests (a sha256 each), which say whether "
                "it held")
    same = runs[0]["digest"] == runs[1]["digest"]
    if check["identical"] != same:
        return (f"says identical: {str(check['identical']).lower()}, where its runs' digests "
                f"{'agree' if same else 'differ'}")
    for key in PRECISIONS:  # where recorded: each run's evaluation of its weights
        said = [r[key] for r in runs if key in r]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
                   for v in said):
            return (f"records {key} {', '.join(str(v)[:20] for v in said)}, where each run "
                    f"records a fraction of its test images from 0 to 1")
        if same and len(said) == 2 and said[0] != said[1]:
            return (f"records {key} {said[0]} and {said[1]} for one digest: the same weights "
                    f"on the same images score alike")
    return None


# what each run of a check records of its evaluation beside its digest
PRECISIONS = ("precision_at_1", "precision_at_1_raw")


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
