"""Checkpoints and the resume policy.

A checkpoint holds everything the run needs to go on exactly: weights, optimizer, weight
averages, every rank's input state, the smoothed loss, the time spent and the targets
reached. Resuming is a cache, and a cache must not change results: a checkpoint is
resumed only by an unfinished run with the same *signature* (the prepared data's content
hash, every param the train stage reads except those that cannot change its outputs, the
kind of device and the number of processes). Anything else starts afresh and removes
the old run's outputs first.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Optional

import torch

from .distributed import Dist, barrier
from .paths import OWNER, TrainPaths, claim_checkpoints, refuse_foreign_outputs
from ..checkpoint_files import DROP_IT, list_checkpoints, load_checkpoint, run_defining, run_params
from ..errors import TrainingError
from ..files import torch_save_atomic
from ..ownership import ensure_writable
from ..params import Params

log = logging.getLogger(__name__)

KEEP_CHECKPOINTS = 2


def resume_problem(ckpt: dict, world: int) -> Optional[str]:
    """What a resume takes beyond :func:`load_checkpoint`'s fields, checked."""
    number = (int, float)
    checks = [("optimizer", isinstance(ckpt.get("optimizer"), dict), "a dict"),
              ("input", isinstance(ckpt.get("input"), list) and len(ckpt["input"]) == world,
               f"a list of {world} input state(s), one per process"),
              ("loss_avg", ckpt.get("loss_avg") is None or isinstance(ckpt.get("loss_avg"), number),
               "a number"),
              ("elapsed", isinstance(ckpt.get("elapsed"), number), "a number of seconds"),
              ("segments", isinstance(ckpt.get("segments"), str), "the run's segments (JSON)")]
    bad = next(((k, want) for k, ok, want in checks if not ok), None)
    return f"{bad[0]}: expected {bad[1]}, found {str(ckpt.get(bad[0]))[:40]!r}" if bad else None


def save_checkpoint(state: dict, folder: Path) -> Path:
    """``state`` as ``ckpt-<step>.pt`` (returned); only the newest ``KEEP_CHECKPOINTS`` are kept."""
    path = folder / f"ckpt-{state['step']:08d}.pt"
    torch_save_atomic(state, path)
    for old in list_checkpoints(folder)[:-KEEP_CHECKPOINTS]:
        old.unlink()
    return path


def run_signature(params: Params, data_hash: str, device: torch.device, world: int) -> dict:
    """What defines a run: a checkpoint made under anything else is not resumed. The prepared
    data's content, every param the stage reads except those that cannot change its outputs
    (``NOT_RUN_DEFINING``), the kind of device and the number of processes."""
    return {"data": data_hash, "params": run_defining(run_params(params)),
            "device": device.type, "world_size": world}


def refuse_unknown_run(paths: TrainPaths, signature: dict) -> None:
    """A folder from before runs recorded their stage (no checkpoints/owner.json) is
    claimed only where it holds no checkpoint, or one this run would resume (its
    signature): another run's would be deleted by a run starting afresh, and whose it is
    (the main run's, a variant's) is not known. One line naming it; nothing changed."""
    if paths.owner is None or (paths.checkpoints / OWNER).exists() \
            or (paths.checkpoints / OWNER).is_symlink():
        return  # no record kept; or a record, which claim_checkpoints checks
    ckpts = list_checkpoints(paths.checkpoints)
    if not ckpts:
        return
    try:
        theirs = load_checkpoint(ckpts[-1], "cpu").get("signature")
    except TrainingError:
        theirs = None
    if theirs != signature:
        raise TrainingError(f"{paths.checkpoints}: checkpoints of a run of other params or "
                            f"data ({ckpts[-1].name}), from before runs recorded whose folder "
                            f"is theirs ({OWNER}): which stage's run they are is not known, "
                            f"and starting afresh here would delete them and its model; move "
                            f"{paths.checkpoints} and {paths.model.name} away (or delete them, "
                            f"if they are this stage's), then rerun. This run changed nothing "
                            f"there.")


def resume_point(paths: TrainPaths, signature: dict, max_steps: int, d: Dist,
                 device: torch.device, mirror=None) -> Optional[dict]:
    """The newest checkpoint when it holds an unfinished run of this signature; else None,
    and rank 0 removes the old run's checkpoints and outputs (every rank decides alike).
    With no checkpoint here, rank 0 first fetches the ``mirror``'s (and its curves), which
    then goes through the same checks: a damaged one is not resumed, and the run says so;
    one of another run stops this one (:meth:`.mirror.Mirror.fetch_for`)."""
    if d.main:  # first: a run that cannot write its outputs must not remove the old ones
        refuse_foreign_outputs(paths)
        ensure_writable(paths.out_dir, paths.checkpoints, paths.tensorboard, paths.live_dir,
                        paths.live_dir / "plots")
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        refuse_unknown_run(paths, signature)
        claim_checkpoints(paths)  # another stage's run is neither resumed nor removed
        for tmp in paths.checkpoints.glob("*.tmp"):
            tmp.unlink()
        if mirror is not None:
            mirror.fetch_for(paths, signature)
    barrier(d)
    ckpts = list_checkpoints(paths.checkpoints)
    newest, data = newest_of_all_ranks(ckpts[-1] if ckpts else None, d, device)
    if d.main and data is not None and newest.parent != paths.checkpoints:
        log.info("resuming from %s, newer than any checkpoint here: kept in %s", newest,
                 paths.checkpoints)
        (paths.checkpoints / newest.name).write_bytes(data)
        ckpts = list_checkpoints(paths.checkpoints)
    ckpt = load_checkpoint(newest, device, data) if newest else None
    if ckpt is not None and ckpt.get("signature") != signature:
        if d.main:
            log.info("checkpoints in %s were made with other data or params: starting afresh",
                     paths.checkpoints)
        ckpt = None
    elif ckpt is not None and int(ckpt["step"]) >= max_steps:
        if d.main:  # a finished run is run again, from step 0
            log.info("the newest checkpoint holds the finished run (step %d of %d): training "
                     "again from step 0", int(ckpt["step"]), max_steps)
        ckpt = None
    if ckpt is not None and (problem := resume_problem(ckpt, signature["world_size"])):
        raise TrainingError(f"{newest}: not a checkpoint this run can resume ({problem}); "
                            f"{DROP_IT}")
    barrier(d)
    if d.main and ckpt is None:
        _remove_run(paths, ckpts)
    elif d.main:
        log.info("resuming from %s at step %d", newest, int(ckpt["step"]))
    return ckpt


def signature_differences(theirs, ours: dict, most: int = 3) -> list[str]:
    """What differs between another run's signature and this one's, as
    ``"train.initial_lr: 0.1 there, 0.05 here"`` (at most ``most``; empty when they are the
    same). Both as JSON sees them (mirror.json holds lists where params hold tuples)."""
    def flat(value, key=""):
        if isinstance(value, dict):
            return {k: v for name, sub in value.items()
                    for k, v in flat(sub, f"{key}.{name}" if key else str(name)).items()}
        return {key or "signature": value}
    a, b = (flat(json.loads(json.dumps(x, default=str))) for x in (theirs, ours))
    keys = [k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    rows = [f"{k}: {json.dumps(a.get(k))} there, {json.dumps(b.get(k))} here" for k in keys]
    return rows[:most] + ([f"{len(rows) - most} more"] if len(rows) > most else [])


def newest_of_all_ranks(mine: Optional[Path], d: Dist, device: torch.device
                        ) -> tuple[Optional[Path], Optional[bytes]]:
    """The newest checkpoint any rank of the job holds (by step; on a tie, the lowest
    rank's), the same on every rank: its path on the rank that has it, and (in a job of
    several processes) its bytes, sent from that rank. Nodes with folders of their own
    thus resume alike, whichever node the rendezvous made rank 0."""
    if not d.active:
        return mine, None
    import torch.distributed as dist

    dev = device if device.type == "cuda" else torch.device("cpu")
    step = int(mine.name[5:-3]) if mine is not None and mine.name[5:-3].isdigit() else -1
    steps = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(d.world)]
    dist.all_gather(steps, torch.tensor([step], dtype=torch.int64, device=dev))
    steps = [int(t.item()) for t in steps]
    src = steps.index(max(steps))
    if steps[src] < 0:
        return None, None
    data = mine.read_bytes() if d.rank == src else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=dev)
    dist.broadcast(size, src)
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev) if d.rank == src
           else torch.empty(int(size.item()), dtype=torch.uint8, device=dev))
    dist.broadcast(buf, src)
    path = mine if d.rank == src else Path(f"(rank {src})") / f"ckpt-{steps[src]:08d}.pt"
    return path, data if d.rank == src else buf.cpu().numpy().tobytes()


def _remove_run(paths: TrainPaths, ckpts: list[Path]) -> None:
    for old in ckpts:
        old.unlink()
    for f in (paths.live_dir / "metrics.json", paths.model):
        f.unlink(missing_ok=True)
    if (paths.live_dir / "plots").exists():  # TensorBoard keeps every run, a folder each
        shutil.rmtree(paths.live_dir / "plots")


def restore(ckpt: dict, model, optimizer, ema) -> dict:
    """Load ``ckpt`` into the model, optimizer and (on rank 0) the weight averages; the
    loop's counters: step, loss_avg, elapsed, reached."""
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if ema is not None:
            ema.load_state_dict(ckpt["ema"])
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), str(exc))
        raise TrainingError(f"the newest checkpoint does not fit this network ({detail[:160]}); "
                            f"{DROP_IT}") from None
    return {"step": int(ckpt["step"]), "loss_avg": ckpt["loss_avg"],
            "elapsed": float(ckpt["elapsed"]),
            "reached": json.loads(ckpt.get("targets_reached", "{}"))}
