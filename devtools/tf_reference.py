"""The tutorial's own TensorFlow code on the dev split: its results and its checkpoint into
the repository (docs/reference.md, "The reference implementation on the dev split").

The code runs in a scratch folder outside the repository (it never enters it), one folder
a run: ``train/`` (its train folder), ``evals.tsv`` (step, precision @ 1 with the averaged
and the raw weights, the date: one row per evaluation), ``segments.tsv`` (each
continuation: the step it reached, start, end, host, CPU), the training logs (``train.log``
of a run from step 0, or ``logs/train-from-N.log``, one per continuation from step N: the
script counts its steps from 0 in each) and ``losses.tsv`` (step, loss, examples/sec every
100 steps, from the logs of earlier machines). This reads them:

    python devtools/tf_reference.py collect RUN_FOLDER NAME --tensorflow 2.21.0 --archive A.tar.gz \
        --steps-planned 10000
        # -> reports/tf_reference/NAME.json (figures and provenance)
    python devtools/tf_reference.py keep RUN_FOLDER runs/tf_reference_100k
        # the newest checkpoint and the run's records, to continue on another machine
    python devtools/tf_reference.py restore runs/tf_reference_100k RUN_FOLDER
        # and back, on the next machine (then train on from it)
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

from cifar10_tutorial.cli import given_path
from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.files import folder_held, hold_folder, md5_of, write_text_atomic
from cifar10_tutorial.ownership import refuse_foreign_file, refuse_foreign_place

UPSTREAM = {"repository": "tensorflow/models", "path": "tutorials/image/cifar10",
            "files": {"cifar10.py": "05a434d67506f31dc8a83399ae3291b4aef75c34",
                      "cifar10_train.py": "00e6186d761188f26b30637d06da680d64d50166",
                      "cifar10_eval.py": "00e6186d761188f26b30637d06da680d64d50166",
                      "cifar10_input.py": "b1054c5a6a471221083dab6618d3ac668322f42b"},
            "changes": "docs/reference.md, 'The reference implementation on the dev split'"}
RECORDS = ("evals.tsv", "segments.tsv", "losses.tsv")
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")  # a record's name: its file's, no path
STEP_LINE = re.compile(r"step (\d+), loss = ([\d.naninf]+) \(([\d.]+) examples/sec")


def _refuse_special(path: Path) -> None:
    """A record in place that is not a regular file (a FIFO, which would hang its read, a
    folder, a device, a link to none of a file): one line naming it, never read as absent."""
    if os.path.lexists(path) and not path.is_file():
        raise PipelineError(f"{path}: not a regular file (a folder, FIFO, device or a broken "
                            f"link), where the run keeps its record; {DAMAGED}")


def _rows(path: Path) -> list[list[str]]:
    _refuse_special(path)
    if not path.is_file():
        return []
    try:
        return [r for r in csv.reader(path.read_text().splitlines(), delimiter="\t") if r]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PipelineError(f"{path}: cannot be read as the run's tab-separated record "
                            f"({type(exc).__name__}: {str(exc)[:80]}); {DAMAGED}") from None


# a run's records are written by its own scripts: a row that does not parse is a damaged
# or hand-edited record, named, never a traceback
DAMAGED = ("the run's record is damaged or was edited: mend that row (or remove it) and "
           "collect again. Nothing was written.")


def _parsed(path: Path, columns: str, rows: list[list[str]], parse) -> list:
    """Each row of ``path`` through ``parse`` (a row -> its value), in order; a row of
    other columns or values is one line naming the file, the row and ``columns``."""
    out = []
    for i, row in enumerate(rows, 1):
        try:
            out.append(parse(row))
        except (ValueError, IndexError):
            raise PipelineError(f"{path}: row {i}: expected {columns}, found "
                                f"{chr(9).join(row)[:60]!r}; {DAMAGED}") from None
    return out


def _step(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def collect(run: Path, name: str, tensorflow: str, archive: Path, steps_planned: int) -> dict:
    evals = _parsed(run / "evals.tsv", "step<TAB>precision<TAB>raw precision<TAB>date",
                    _rows(run / "evals.tsv"),
                    lambda r: {"step": _step(r[0]), "precision_at_1": _fraction(r[1]),
                               "precision_at_1_raw": _fraction(r[2]), "date": r[3]})
    checkpoint = newest_checkpoint(run / "train")
    try:
        reached = _step(checkpoint.rsplit("-", 1)[1])
    except (ValueError, IndexError):
        raise PipelineError(f"{run / 'train' / 'checkpoint'}: names {checkpoint!r}, expected "
                            f"the reference's model.ckpt-STEP; {DAMAGED}") from None
    if not evals and steps_planned <= reached:
        raise PipelineError(f"{run / 'evals.tsv'}: no evaluation of the finished run")
    # the reference evaluates each checkpoint once as it is written: rising steps, none past
    # the newest checkpoint (the run's reached step)
    for i, (before, now) in enumerate(zip(evals, evals[1:]), 2):
        if now["step"] <= before["step"]:
            raise PipelineError(f"{run / 'evals.tsv'}: row {i}: step {now['step']:,} after "
                                f"step {before['step']:,}, expected the evaluations at rising "
                                f"steps, as the run makes them; {DAMAGED}")
    past = next((i for i, e in enumerate(evals, 1) if e["step"] > reached), None)
    if past is not None:
        raise PipelineError(f"{run / 'evals.tsv'}: row {past}: step {evals[past - 1]['step']:,}, "
                            f"past the run's newest checkpoint (step {reached:,}): not one of "
                            f"its evaluations; {DAMAGED}")
    segments = _parsed(run / "segments.tsv", "step<TAB>start<TAB>end<TAB>host<TAB>cpu",
                       _rows(run / "segments.tsv"),
                       lambda r: {"to_step": _step(r[0]), "start": r[1], "end": r[2],
                                  "host": r[3], "cpu": r[4]})
    rows = losses(run)
    speeds = [v for _, _, v in rows if v is not None]
    return {"run": name, "steps_planned": steps_planned, "reached_step": reached,
            "upstream": UPSTREAM,
            "tensorflow": tensorflow,
            "data": {"archive_md5": archive_md5(archive), "train_images": 40000,
                     "held_out_images": 10000, "evaluated_images": 10112},
            "evaluations": evals, "segments": segments,
            "loss_every_1000": [{"step": s, "loss": v} for s, v, _ in rows if s % 1000 == 0],
            "examples_per_sec_median": statistics.median(speeds) if speeds else None,
            "speed_note": "the machine's 2 cores shared with other runs: not a benchmark"}


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # nan too
        raise ValueError(text)
    return value


def archive_md5(archive: Path) -> str:
    """The md5 of the dev split's archive the run trained on: a regular file (a FIFO would
    be read for ever, a folder cannot be)."""
    if not archive.is_file():
        what = ("not found" if not os.path.lexists(archive) else "a folder" if archive.is_dir()
                else "not a regular file (a FIFO, socket, device or link to nothing)")
        raise PipelineError(f"--archive {archive}: {what}, where the dev split's archive the "
                            f"run trained on is expected (its md5 is recorded); give that "
                            f"file. Nothing was written.")
    return md5_of(archive)


def losses(run: Path) -> list[tuple[int, float, Optional[float]]]:
    """(step, loss, examples/sec) every 100 steps, from ``losses.tsv`` and the logs here;
    no speed for a log's first line (it times the queue fill and the start-up)."""
    rows = dict(_parsed(run / "losses.tsv", "step<TAB>loss<TAB>examples/sec (or empty)",
                        _rows(run / "losses.tsv"),
                        lambda r: (_step(r[0]), (float(r[1]), float(r[2]) if r[2] else None))))
    if os.path.lexists(run / "logs") and not (run / "logs").is_dir():
        raise PipelineError(f"{run / 'logs'}: not a folder (a file, FIFO or device), where "
                            f"the run keeps the logs of its continued sessions; {DAMAGED}")
    logs = [(0, run / "train.log")] + [(int(p.stem.rsplit("-", 1)[1]), p)
                                        for p in sorted((run / "logs").glob("train-from-*.log"))
                                        if re.fullmatch(r"train-from-\d+", p.stem)]
    for start, log in logs:
        _refuse_special(log)
        if not log.is_file():
            continue
        for m in STEP_LINE.finditer(log.read_text(errors="replace")):
            local = int(m.group(1))
            if local % 100 == 0:
                try:
                    rows[start + local] = (float(m.group(2)),
                                           float(m.group(3)) if local else None)
                except ValueError:  # the pattern's characters, not a number ("1.2.3")
                    raise PipelineError(f"{log}: {m.group(0)[:80]!r}: expected the loss and "
                                        f"speed the reference logs; {DAMAGED}") from None
    return [(s, loss, v) for s, (loss, v) in sorted(rows.items())]


def newest_checkpoint(train: Path) -> str:
    _refuse_special(train / "checkpoint")
    if not (train / "checkpoint").is_file():
        raise PipelineError(f"{train / 'checkpoint'}: not found, where a run of the reference "
                            f"code names its newest checkpoint; give the folder of such a run "
                            f"(its train/ holds checkpoint)")
    text = (train / "checkpoint").read_text(errors="replace")
    m = re.search(r'^model_checkpoint_path: "(.+)"$', text, flags=re.M)
    if not m:
        raise PipelineError(f"{train / 'checkpoint'}: names no checkpoint")
    name = Path(m.group(1)).name
    # keep globs its files by it, and collect reads the run's step from it: a step only
    if not re.fullmatch(r"model\.ckpt-\d+", name):
        raise PipelineError(f"{train / 'checkpoint'}: names {name[:60]!r}, expected the "
                            f"reference's model.ckpt-STEP; {DAMAGED}")
    # the step a run reached is that of a checkpoint it holds: named, its files beside (the
    # index, every shard of the weights, the graph): keep replaces a kept run with them
    if not ((train / f"{name}.index").is_file() and (train / f"{name}.meta").is_file()
            and _shards(train, name)):
        raise PipelineError(f"{train / 'checkpoint'}: names {name[:60]!r}, whose files "
                            f"({name[:60]}.index, every .data-*-of-* shard, .meta) are not all in {train}; the "
                            f"run's newest checkpoint is missing: restore it, or mend the "
                            f"file to name one it holds. Nothing was written.")
    return name


def _shards(train: Path, name: str) -> list[str]:
    """The weights' shards of checkpoint ``name`` in ``train``: 0 to N-1 of one N, each once
    (a count alone passes 00000 and 00007 of 00002); [] where they are not all there. A
    name with more after it (a save's leftover ``.tempstate`` file) is no shard."""
    shards = sorted(p.name for p in train.glob(f"{glob.escape(name)}.data-*")
                    if re.fullmatch(re.escape(name) + r"\.data-\d{5}-of-\d{5}", p.name))
    counts = {n[-5:] for n in shards}
    if len(counts) != 1:
        return []
    n = next(iter(counts))
    return shards if shards == [f"{name}.data-{i:05d}-of-{n}" for i in range(int(n))] else []


def checkpoint_files(train: Path, name: str) -> list[Path]:
    """The files of checkpoint ``name`` that keep copies: its index, its graph and its
    shards, nothing else that shares the name."""
    return [train / f"{name}.index", train / f"{name}.meta",
            *(train / n for n in _shards(train, name))]


# what keep writes in its folder: the checkpoint's files and the run's records, nothing else
KEPT = re.compile(r"train/checkpoint|train/model\.ckpt-\d+\.[A-Za-z0-9_-]+|"
                  + "|".join(map(re.escape, RECORDS)))


def _not_kept(dest: Path) -> Optional[str]:
    """The first entry of ``dest`` that keep does not write there (None: a kept run's)."""
    if dest.is_symlink() or not dest.is_dir():
        if not os.path.lexists(dest):
            return None
        kind = ("a link" if dest.is_symlink() else "a file" if dest.is_file()
                else "not a folder")
        raise PipelineError(f"{dest}: {kind}, where keep writes a folder of its own (replaced "
                            f"whole); give DEST a folder's path. Nothing was changed.")
    for path in sorted(dest.rglob("*")):
        name = path.relative_to(dest).as_posix()
        if path.is_symlink() or (path.is_dir() and name != "train") or \
                (not path.is_dir() and not KEPT.fullmatch(name)):
            return name
    return None


def _clear_killed_keeps(dest: Path) -> None:
    """What a keep into ``dest`` stopped before its end left beside it, a folder that no
    running keep holds: ``.DEST.keeping-*`` (the copy it was building) or
    ``.DEST.replaced-*`` (the copy it replaced, moved aside to be deleted, in a folder
    ``DEST`` of its own): removed with a note where it holds only what keep writes; else
    kept, and named."""
    escaped = glob.escape(dest.name)
    for left in sorted([*dest.parent.glob(f".{escaped}.keeping-*"),
                        *dest.parent.glob(f".{escaped}.replaced-*")]):
        if left.is_symlink() or not left.is_dir() or folder_held(left):
            continue  # not a folder keep made, or one a running keep is using
        if ".replaced-" in left.name[len(dest.name) + 1:]:
            inside, copy = sorted(p.name for p in left.iterdir()), left / dest.name
            other = (None if not inside else inside[0] if inside != [dest.name]
                     or copy.is_symlink() or not copy.is_dir() else _not_kept(copy))
        else:
            other = _not_kept(left)
        if other is None and ".replaced-" in left.name[len(dest.name) + 1:] \
                and not os.path.lexists(dest) \
                and (left / dest.name / "train" / "checkpoint").is_file():
            # stopped between its two renames: the whole copy it moved aside is the only
            # one (one it was deleting after the swap has DEST beside it, or is cut short)
            (left / dest.name).rename(dest)
            left.rmdir()
            print(f"note: restored {dest} from {left}, where a keep into it that was "
                  f"stopped had moved it", file=sys.stderr)
        elif other is None:
            shutil.rmtree(left)
            print(f"note: removed {left}, left by a keep into {dest} that was stopped",
                  file=sys.stderr)
        else:
            print(f"note: {left}: left by a keep that was stopped, and holds {other}, which "
                  f"keep does not write: left as it is; move it away once you have looked",
                  file=sys.stderr)


def keep(run: Path, dest: Path) -> str:
    """The newest checkpoint (index, data, meta) and the records into ``dest``, replacing
    a run kept there before (a folder of only what keep writes); anything else there is
    refused, naming it. Built aside, then swapped in."""
    ckpt = newest_checkpoint(run / "train")
    refuse_foreign_place(dest, "DEST", "a folder of its own, outside the project's code and "
                                       "outputs")
    other = _not_kept(dest)
    if other is not None:
        raise PipelineError(f"{dest}: holds {other}, which keep did not write there (it writes "
                            f"train/checkpoint, the checkpoint's files and {', '.join(RECORDS)}) "
                            f"and would delete; give another folder, or move it away. Nothing "
                            f"was changed.")
    files = checkpoint_files(run / "train", ckpt)
    for path in [*files, *(run / name for name in RECORDS)]:
        _refuse_special(path)  # a folder or FIFO where a file goes: named, never skipped
    dest.parent.mkdir(parents=True, exist_ok=True)
    _clear_killed_keeps(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.keeping-", dir=dest.parent))
    hold_folder(tmp)  # in use while this process lives: another keep leaves it alone
    try:
        (tmp / "train").mkdir()
        for f in files:
            shutil.copy2(f, tmp / "train" / f.name)
        (tmp / "train" / "checkpoint").write_text(
            f'model_checkpoint_path: "{ckpt}"\nall_model_checkpoint_paths: "{ckpt}"\n')
        write_text_atomic(run / "losses.tsv", "".join(
            f"{s}\t{loss}\t{'' if v is None else v}\n" for s, loss, v in losses(run)))
        for name in RECORDS:
            if (run / name).is_file():
                shutil.copy2(run / name, tmp / name)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.replaced-", dir=dest.parent))
            hold_folder(old)  # deleted below; a keep killed before that leaves it to the next
            dest.rename(old / dest.name)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old)
    return ckpt


def restore(src: Path, run: Path) -> None:
    """A run kept by :func:`keep` (``src``: a folder of only what keep writes, with its
    train/checkpoint) copied into ``run``, a new folder (never into the code, git's or
    DVC's folders or a stage's outputs); anything else one line, nothing written. A keep
    into ``src`` stopped between its renames left the only copy aside: put back first."""
    if not os.path.lexists(src) and src.parent.is_dir():
        _clear_killed_keeps(src)
    if src.is_symlink() or not src.is_dir():
        what = ("not found" if not os.path.lexists(src) else "a link" if src.is_symlink()
                else "a file" if src.is_file() else "not a folder")
        raise PipelineError(f"{src}: {what}, where restore reads a run kept by `keep` (a "
                            f"folder with train/checkpoint); give that folder. Nothing was "
                            f"changed.")
    other = _not_kept(src)
    if other is None and not (src / "train" / "checkpoint").is_file():
        other = "no train/checkpoint"
    if other is not None:
        raise PipelineError(f"{src}: holds {other}, so it is no run kept by `keep` (it holds "
                            f"train/checkpoint, the checkpoint's files and "
                            f"{', '.join(RECORDS)}); give such a folder. Nothing was changed.")
    if os.path.lexists(run):
        raise PipelineError(f"{run}: already there; restore into a new folder. Nothing was "
                            f"changed.")
    if run.resolve().is_relative_to(src.resolve()):
        # a copy into the kept folder would make it hold what keep never writes there
        raise PipelineError(f"{run}: inside {src}, the kept run it would copy; restore into "
                            f"a folder outside it. Nothing was changed.")
    refuse_foreign_place(run, "RUN", "a folder of its own, outside the project's code and "
                                     "outputs")
    try:
        shutil.copytree(src, run)
    except BaseException:  # a copy cut short: RUN was not there before, so it is restore's
        shutil.rmtree(run, ignore_errors=True)
        raise


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("run", type=Path)
    c.add_argument("name")
    c.add_argument("--tensorflow", required=True)
    c.add_argument("--archive", type=Path, required=True)
    c.add_argument("--steps-planned", type=int, required=True, help="10000 or 100000")
    c.add_argument("--out", type=given_path, default=Path("reports/tf_reference"))
    k = sub.add_parser("keep")
    k.add_argument("run", type=Path)
    k.add_argument("dest", type=Path)
    r = sub.add_parser("restore")
    r.add_argument("src", type=Path)
    r.add_argument("run", type=Path)
    a = ap.parse_args(argv)
    try:
        _main(a)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    except OSError as exc:  # a place that cannot be read or written (a file where a folder
        # goes, a read-only or full disk): what the system said, on the path it named
        raise SystemExit(f"error: {exc.filename or a.cmd}: {exc.strerror or exc}; give a "
                         f"path that can be written (or read). What {a.cmd} was building "
                         f"was removed.") from None


def _is_record(text: str) -> bool:
    """Whether ``text`` is a reference run's record (what collect writes)."""
    rec = json.loads(text)
    return isinstance(rec, dict) and rec.get("upstream") == UPSTREAM and "run" in rec


def _main(a) -> None:
    if a.cmd == "collect":
        if not re.fullmatch(r"\d+(\.\d+){1,3}[A-Za-z0-9.+-]{0,20}", a.tensorflow):
            # the report quotes it: a version as `pip show tensorflow` gives it, one line
            raise PipelineError(f"--tensorflow {a.tensorflow[:40]!r}: expected the version "
                                f"the run used (2.21.0, say, as `pip show tensorflow` says). "
                                f"Nothing was written.")
        if not NAME.fullmatch(a.name):  # it names the record's file in --out
            raise PipelineError(f"NAME {a.name!r}: expected a run's name (a letter, then "
                                f"letters, digits, '_' or '-', at most 64), not a path")
        # the report stage reads the records there (reports/tf_reference): its input
        refuse_foreign_file(a.out / f"{a.name}.json", "NAME", "a reference run's record",
                            _is_record, feeds=(("report", "--tf-reference"),))
        rec = collect(a.run, a.name, a.tensorflow, a.archive, a.steps_planned)
        if not 1 <= a.steps_planned or rec["reached_step"] > a.steps_planned:
            raise PipelineError(f"--steps-planned {a.steps_planned}: the run's budget, where "
                                f"{a.run} reached step {rec['reached_step']:,}, within it; give "
                                f"the budget the run was started with (10000 or 100000). "
                                f"Nothing was written.")
        write_text_atomic(a.out / f"{a.name}.json", json.dumps(rec, indent=2) + "\n")
        last = (rec["evaluations"] or [None])[-1]
        print(f"{a.name}: reached step {rec['reached_step']}" + (
            f"; at step {last['step']}: precision @ 1 {last['precision_at_1']:.3f} (raw "
            f"{last['precision_at_1_raw']:.3f})" if last else "; no evaluation yet")
            + f" -> {a.out / (a.name + '.json')}")
    elif a.cmd == "keep":
        print(f"kept {keep(a.run, a.dest)} in {a.dest}")
    else:
        restore(a.src, a.run)


if __name__ == "__main__":
    main()
