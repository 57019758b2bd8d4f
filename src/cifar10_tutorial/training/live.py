"""DVCLive's files for the train run (metrics.json, plots/metrics/*.tsv): DVCLive itself,
or where dvclive is not installed the same files through :class:`PlainLive`; and the rows a
resumed run logs again, dropped first."""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from ..errors import PipelineError
from ..files import write_text_atomic

log = logging.getLogger(__name__)


class PlainLive:
    """DVCLive's files written without DVCLive: a compute node with torch and the package's
    core but no dvc nor dvclive still trains and logs what DVC reads (docs/training.md,
    "Training without DVCLive"): the same ``plots/metrics/<name>.tsv``
    rows (``step``, then the value) and ``metrics.json`` (the summary with ``step``), and
    nothing else. Only the part of DVCLive's interface the Monitor uses; tests check that
    both write the same files."""

    def __init__(self, folder: Path):
        self.dir, self.step, self.summary = Path(folder), 0, {}

    def log_metric(self, name: str, val: float) -> None:
        if not math.isfinite(val):
            val = str(val)  # as DVCLive writes nan and inf
        path = self.dir / "plots" / "metrics" / f"{name}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with open(path, "a", encoding="utf-8", newline="") as f:
            f.write((f"step\t{name.split('/')[-1]}{os.linesep}" if new else "")
                    + f"{self.step}\t{val}{os.linesep}")
        node = self.summary
        *parents, leaf = name.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = val

    def next_step(self) -> None:
        self._dump()
        self.step += 1

    def end(self) -> None:
        self._dump()

    def _dump(self) -> None:
        self.summary["step"] = self.step
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "metrics.json").write_text(json.dumps(self.summary, indent=4) + "\n")


def open_live(folder: Path, resume: bool):
    """DVCLive logging to ``folder`` (metrics.json, plots/), no dvc.yaml of its own; where
    dvclive is not installed, the same files through :class:`PlainLive`."""
    try:
        from dvclive import Live
        from scmrepo.exceptions import SCMError
    except ImportError:
        return PlainLive(folder)

    if resume:  # a kill during DVCLive's (non-atomic) write leaves a truncated metrics.json
        summary = folder / "metrics.json"
        try:
            json.loads(summary.read_text()) if summary.exists() else None
        except ValueError:
            log.info("%s is damaged (the run was killed while writing it): rewriting it", summary)
            summary.unlink()
    class _Live(Live):
        """DVCLive, less one cost that grows with the run: at every ``next_step`` it
        re-reads every curve it has written, to find the points Studio has not yet been
        sent, even where no Studio is set up and nothing is sent (dvclive 3.49). A 100K-step
        run would re-read up to 10,000 rows of each curve at each of its 10,000 log steps.
        Where Studio is set up, DVCLive does what it always does."""

        def post_data_to_studio(self):
            if "data" not in self._studio_events_to_skip:
                super().post_data_to_studio()

        def next_step(self):
            """DVCLive's, but a failure to write its signal for DVC's VS Code extension
            (``.dvc/tmp/exps/run/DVCLIVE_STEP_COMPLETED`` of the repository the run is in)
            does not end the run: another DVC command there (an experiment ending) may
            remove that folder meanwhile. The step's own files are written before it."""
            try:
                super().next_step()
            except OSError as exc:
                if ".dvc" not in Path(str(exc.filename or "")).parts:
                    raise
                log.debug("DVCLive's signal for the VS Code extension not written: %s", exc)
                self.step += 1

    try:
        return _Live(str(folder), resume=resume, dvcyaml=None, save_dvc_exp=False, report=None)
    except SCMError as exc:  # dvclive cannot read HEAD of a repository without commits
        raise PipelineError(f"DVCLive cannot start in this git repository ({exc}): make a first "
                            f"commit (`git add -A && git commit -m init`) and rerun.") from None


def truncate_plots(live_dir: Path, step: int) -> None:
    """Drop the DVCLive plot rows logged after ``step`` (a run killed after its last
    checkpoint logged them; the resumed run logs those steps again), and a torn last row
    (``kill -9`` during a write), which the next row would otherwise be glued to."""
    for tsv in sorted((live_dir / "plots").rglob("*.tsv")):
        try:  # refuse_foreign_curves stops what is not a curve before a run starts
            lines = tsv.read_text(encoding="utf-8").splitlines(keepends=True)
        except (OSError, UnicodeDecodeError) as exc:
            raise PipelineError(f"{tsv}: expected a training curve (UTF-8 text), could not "
                                f"read it ({exc}); move it out of {live_dir / 'plots'}, then "
                                f"rerun. Nothing was changed.") from None
        if not lines:
            continue
        header = lines[0].rstrip("\n").split("\t")
        if "step" not in header:  # refuse_foreign_curves stops these before a run starts
            raise PipelineError(f"{tsv}: expected a training curve with a 'step' column, found "
                                f"the header {lines[0][:60].rstrip()!r}; move it out of "
                                f"{live_dir / 'plots'}, then rerun. Nothing was changed.")
        col = header.index("step")

        def whole(ln: str) -> bool:
            cells = ln.rstrip("\n").split("\t")
            return ln.endswith("\n") and len(cells) == len(header) and cells[col].isdigit()

        kept = [lines[0]] + [ln for ln in lines[1:]
                             if whole(ln) and int(ln.split("\t")[col]) <= step]
        if len(kept) < len(lines):
            write_text_atomic(tsv, "".join(kept))
