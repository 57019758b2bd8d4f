"""Where a run writes, in one place: the train stage's folders (:class:`TrainPaths`), an
exercise variant's (:class:`VariantPaths`, a trial's apart from a full run's), the folders
a queued DVC experiment keeps past its temporary workspace, and what a run may replace in
them (anything else there is refused, never deleted).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import PipelineError
from ..files import write_text_atomic
from ..ownership import refuse_foreign
from ..params import AblationParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainPaths:
    """Where a run writes: ``out_dir`` (checkpoints/, tensorboard/, model.pt) and ``live_dir``
    (DVCLive's metrics.json and plots/). The stage gets both from dvc.yaml; a queued DVC
    experiment keeps its checkpoints and TensorBoard logs elsewhere (:func:`stage_paths`)."""

    out_dir: Path
    live_dir: Path
    checkpoints_dir: Optional[Path] = None  # None: out_dir/checkpoints
    tensorboard_dir: Optional[Path] = None  # None: out_dir/tensorboard
    speed_file: Optional[Path] = None  # the speeds and times, apart from metrics.json
    owner: Optional[str] = None  # the stage whose run the folder is (train, ablation@NAME)
    # the stage's options naming out_dir and live_dir, for its messages
    options: tuple[str, str] = ("--out", "--live")

    @property
    def checkpoints(self) -> Path:
        return self.checkpoints_dir or self.out_dir / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.tensorboard_dir or self.out_dir / "tensorboard"

    @property
    def model(self) -> Path:
        return self.out_dir / "model.pt"


def queued_workspace(cwd: Optional[Path] = None) -> Optional[Path]:
    """The repository a queued DVC experiment belongs to, when ``cwd`` is the temporary
    workspace DVC runs it in (``<repo>/.dvc/tmp/exps/<id>/``, deleted when it ends)."""
    parts = (cwd or Path.cwd()).resolve().parts
    for i in range(len(parts) - 3, 0, -1):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return None


def kept_past_workspace(folder: Path) -> Path:
    """``folder`` itself, or in a queued DVC experiment (:func:`queued_workspace`), with
    ``folder`` relative, ``<repo>/<folder>/queued/<experiment>``: what a run writes there
    that is no DVC output outlives DVC's temporary workspace, and the same experiment
    queued again finds it."""
    repo = queued_workspace()
    if repo is None or Path(folder).is_absolute():
        return Path(folder)
    return repo / folder / "queued" / queued_experiment()


def queued_experiment() -> Optional[str]:
    """The name of the queued DVC experiment this process runs in (DVC_EXP_NAME, else its
    temporary workspace's name); None outside one."""
    if queued_workspace() is None:
        return None
    return experiment_name() or Path.cwd().name


# one plain name: it becomes a folder's name, never a path ('..', '/') outside its folder
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def experiment_name() -> Optional[str]:
    """DVC_EXP_NAME (the DVC experiment this process runs) where it is one plain name, as
    DVC gives it; None where it is unset, or anything else (a path): not a folder name."""
    name = os.environ.get("DVC_EXP_NAME")
    return name if name and PLAIN_NAME.fullmatch(name) and ".." not in name else None


def stage_paths(out: Path, live: Path) -> TrainPaths:
    """The train stage's paths: the speeds and times go to ``live``/speed.json, not into
    metrics.json (DVC's metrics, which ``dvc exp show`` lists). In a queued DVC experiment
    (``dvc queue start``) the
    checkpoints and TensorBoard logs, which are not DVC outputs, would go with DVC's
    temporary workspace; they go to the repository's ``out`` instead: the logs beside the
    workspace's own (one subfolder per run), the checkpoints under ``queued/<experiment>``
    (the same experiment queued again resumes from them)."""
    speed = Path(live) / "speed.json"  # DVC's metrics keep what users compare (README)
    kept = kept_past_workspace(out)
    if kept == Path(out):
        return TrainPaths(out, live, speed_file=speed, owner="train")
    paths = TrainPaths(out, live, kept / "checkpoints", kept.parent.parent / "tensorboard", speed,
                       owner="train")
    log.info("queued experiment %s: checkpoints in %s, TensorBoard logs in %s (they outlive "
             "DVC's temporary workspace)", kept.name, paths.checkpoints, paths.tensorboard)
    return paths


@dataclass(frozen=True)
class VariantPaths:
    """Where variant results go (``out``: metrics.json, variant.json, eval/, train/, in git)
    and where its model, checkpoints, TensorBoard logs (and a data-set variant's data) stay
    (``work``, outside DVC). The stage gets both from reports/dvc.yaml."""

    work: Path
    out: Path
    owner: Optional[str] = None  # the variant's stage, ablation@NAME

    @property
    def train(self) -> TrainPaths:
        return TrainPaths(self.work, self.out / "train", owner=self.owner,
                          options=("--work", "--out"))

    @property
    def eval_dir(self) -> Path:
        return self.out / "eval"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.json"

    @property
    def variant(self) -> Path:
        return self.out / "variant.json"


def training_work(ablation: AblationParams, name: str, work: Path,
                  trial_work: Path | None) -> Path:
    """Where variant ``name`` keeps its model, checkpoints and TensorBoard logs: ``work``,
    or in a trial (``ablation.trial_steps`` set) ``trial_work``, so that a trial of a few
    steps neither replaces a full run's model nor removes a paused full run's checkpoints
    (a run of other params starts afresh and removes them). A data-set variant's data stay
    in ``work`` either way: a trial fetches and prepares nothing twice."""
    if ablation.trial_steps is None:
        return work
    if trial_work is None:
        raise PipelineError(f"{work}: a trial (ablation.trial_steps: {ablation.trial_steps}) "
                            f"would replace the full run's model and checkpoints there; give "
                            f"it a folder of its own with --trial-work (reports/dvc.yaml "
                            f"gives data/trials/{name})")
    if Path(trial_work).resolve() == Path(work).resolve():
        raise PipelineError(f"--trial-work {trial_work}: expected a folder other than --work "
                            f"{work}, found the same; a trial there would replace the full "
                            f"run's model and checkpoints")
    return trial_work


# What a run makes in its two folders (DVC adds a .gitignore beside its outs; a data-set
# variant's work folder also holds its raw/ and prepared/ data); anything else there is
# not the run's to replace or delete (DVCLive's start-up clean-up deletes a dvc.yaml or
# params.yaml in its folder), and a folder of published weights holds a card (README.md).
OUT_NAMES = {"model.pt", "checkpoints", "tensorboard", "queued", "raw", "prepared", ".gitignore"}
LIVE_NAMES = {"metrics.json", "speed.json", "plots", "provenance.json", ".gitignore"}


# of those, the files a run writes (as it finishes: a folder there is refused at its start)
OUT_FILES = frozenset({"model.pt"})
LIVE_FILES = frozenset({"metrics.json", "speed.json", "provenance.json"})


OWNER = "owner.json"  # in checkpoints/: the stage whose run the folder is


def claim_checkpoints(paths: TrainPaths) -> None:
    """A run's folder is one stage's (``paths.owner``: train, ablation@NAME), recorded in its
    checkpoints folder before the run's first write there: a run of another stage stops in
    one line, so that starting afresh never deletes another stage's model and checkpoints.
    A folder with no record (made before there was one) is claimed, where it holds no other
    run's checkpoints (:func:`.checkpoints.refuse_unknown_run`); no owner, no record."""
    if paths.owner is None:
        return
    record = paths.checkpoints / OWNER
    if record.is_symlink() or (record.exists() and not record.is_file()):
        raise PipelineError(f"{record}: not a file, where the run records whose folder this "
                            f"is; move it away, then rerun. Nothing was changed.")
    if not record.exists():
        write_text_atomic(record, json.dumps({"run": paths.owner}) + "\n")
        return
    try:
        theirs = json.loads(record.read_text()).get("run")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        theirs = None
    if theirs != paths.owner:
        whose = (f"the folder of the stage {theirs}'s run" if isinstance(theirs, str)
                 else "a folder whose run is not known (its record is not readable)")
        raise PipelineError(f"{paths.out_dir}: {whose} ({record}): its model and checkpoints, "
                            f"which this run ({paths.owner}) would resume or delete; give the "
                            f"run a folder of its own (as the pipeline gives it). Nothing was "
                            f"changed.")


def refuse_foreign_outputs(paths: TrainPaths) -> None:
    same = Path(paths.out_dir).resolve() == Path(paths.live_dir).resolve()
    stage = paths.owner or "train"
    out, live = paths.options
    refuse_foreign(paths.out_dir, OUT_NAMES | (LIVE_NAMES if same else set()), stage, out,
                   OUT_FILES)
    refuse_foreign(paths.live_dir, LIVE_NAMES | (OUT_NAMES if same else set()), stage, live,
                   LIVE_FILES)
    refuse_foreign_curves(Path(paths.live_dir) / "plots")


def refuse_foreign_curves(plots: Path) -> None:
    """A run starting afresh empties ``plots/`` and a resumed one cuts its curves back to
    its step, so everything there must be a curve a run wrote: folders (no links) holding
    ``<name>.tsv`` files whose header is ``step<TAB><name>``. Anything else (a user's notes,
    a TSV of their own) is named, and nothing is changed."""
    if not plots.exists() and not plots.is_symlink():
        return
    foreign = []
    if plots.is_symlink() or not plots.is_dir():
        foreign.append(plots)
    else:
        for entry in sorted(plots.rglob("*")):
            if entry.is_symlink():
                foreign.append(entry)
            elif entry.is_dir() and entry.suffix != ".tsv":  # a folder where a curve goes: not
                continue
            elif not (entry.is_file() and entry.suffix == ".tsv" and _curve_header(entry)):
                foreign.append(entry)
    if foreign:
        raise PipelineError(f"{foreign[0]}: not a training curve this stage wrote (expected "
                            f"<name>.tsv with the header 'step<TAB><name>' in {plots}), and a "
                            f"new run would delete or rewrite it"
                            f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}; "
                            f"move it elsewhere, then rerun. Nothing was changed.")


def _curve_header(tsv: Path) -> bool:
    """Whether ``tsv`` reads as a curve: UTF-8 text (a curve is a few hundred kB at most)
    whose header is ``step<TAB><its name>``."""
    try:
        first = tsv.read_bytes().decode("utf-8").partition("\n")[0]
    except (OSError, UnicodeDecodeError):
        return False
    return first.rstrip("\r").split("\t") in (["step", tsv.stem],
                                             ["timestamp", "step", tsv.stem])
