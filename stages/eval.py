"""DVC stage `eval`: precision @ 1 of the trained model (--model) on the test split of
--data, with the averaged and the raw weights, into --out (metrics.json, per_class.csv,
predictions.csv, confusion.png).

With --watch (outside DVC): re-evaluate the newest checkpoint (checkpoints/ beside the
model) every eval.interval_secs while training runs, logging to TensorBoard
(tensorboard/eval beside the model), like cifar10_eval.py.
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)

from cifar10_tutorial.cli import add_paths, parse_stage_args, run_stage, stage_parser
from cifar10_tutorial.evaluation.evaluate import (evaluate, refuse_another_models_evaluation,
                                                  watch)
from cifar10_tutorial.ownership import (ensure_writable, folders_apart, refuse_foreign_place,
                                        stages_at)
from cifar10_tutorial.params import MAIN, load_params
from cifar10_tutorial.data.prepared import load_prepared


def _refuse_evaluation_on_other_data(out, data_hash: str) -> None:
    """--out holding an evaluation made on other data (its provenance.json's data_hash;
    another checkout's, say, of a model of the same path and params): it is not this
    evaluation's to replace, whatever model it names (DVC clears the stage's own --out
    before it runs it); one line naming both. A record without one (edited, or not an
    evaluation's) is not known to be of this data either."""
    import json
    from pathlib import Path

    from cifar10_tutorial.errors import PipelineError

    record = Path(out) / "provenance.json"
    if not record.is_file():  # none, or a FIFO (a read would wait for ever): evaluate() names it
        return
    try:
        theirs = json.loads(record.read_text(encoding="utf-8")).get("data_hash", None)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return  # none, or not a record: evaluate()'s own checks name it
    if not isinstance(theirs, str):  # every evaluation records its data: not known as this
        raise PipelineError(f"{record}: names no data_hash (the data every evaluation "
                            f"records), so it may be of other data, and this one would "
                            f"replace it; give --out a folder of its own (or delete that "
                            f"folder if you mean to replace it). Nothing was changed.")
    if theirs != data_hash:
        raise PipelineError(f"{record}: holds an evaluation on other data (data_hash "
                            f"{theirs[:12]}, where --data is {data_hash[:12]}), and this one "
                            f"would replace it; give --out a folder of its own (or delete "
                            f"that folder if you mean to replace it). Nothing was changed.")


def _args_from_the_checkout(ap, script: str):
    """The arguments as the stage takes them where DVC runs it, the checkout's folder: run
    by hand from a folder inside the checkout (its data/, its reports/), the paths given
    are taken from there, then the command works from the checkout's folder, so that the
    model path it records is the one the stage's own record gives (a path from that
    folder), and the paths left out come from dvc.yaml as there."""
    import os
    import sys
    from pathlib import Path

    from cifar10_tutorial.ownership import repository_at

    here = Path.cwd().resolve()
    root = repository_at(here)
    if root is None or root.resolve() == here:
        return parse_stage_args(ap, script)
    root = root.resolve()
    default_params = ap.get_default("params")
    ap.set_defaults(params=None)  # None: not given (taken as from the checkout's folder)
    given = ap.parse_args(sys.argv[1:])
    ap.set_defaults(params=default_params)
    rebased = []
    for name in ("params", *getattr(given, "_path_options", [])):
        value = getattr(given, name, None)
        if value is None:
            continue
        where = os.path.abspath(value)  # from here; links left as they are
        inside = where == str(root) or where.startswith(str(root) + os.sep)
        rebased.append((name, type(value)(os.path.relpath(where, root) if inside else where)))
    os.chdir(root)
    # the same command from there: the paths given (rebased), the rest as given
    argv = [f"--{name.replace('_', '-')}={value}" for name, value in rebased]
    argv += ["--watch"] if given.watch else []
    argv += [f"--max-evals={given.max_evals}"] if given.max_evals is not None else []
    return parse_stage_args(ap, script, argv=argv)


def main() -> None:
    ap = stage_parser(__doc__)
    add_paths(ap, data="the prepared data", model="the train stage's model.pt",
              out="the folder of the results")
    ap.add_argument("--watch", action="store_true", help="keep evaluating new checkpoints")
    ap.add_argument("--max-evals", type=int, default=None, help="with --watch: stop after N")
    args = _args_from_the_checkout(ap, __file__)
    if args.max_evals is not None and args.max_evals < 1:  # fewer would evaluate nothing and exit 0
        ap.error(f"--max-evals: expected a whole number >= 1, found {args.max_evals}")
    if args.max_evals is not None and not args.watch:  # one evaluation: it would bound nothing
        ap.error("--max-evals: bounds the evaluations of --watch; give --watch too, or leave "
                 "--max-evals out (without --watch the model is evaluated once)")
    if not args.watch:  # results inside the prepared data would change that DVC output
        folders_apart([("--data", args.data), ("--out", args.out)],
                      "the prepared data; the evaluation's results")
        # nor another stage's (a variant's evaluation), git's or the code's folders; the
        # eval stage's own folder only for the model it evaluates: another model's figures
        # there would be read as the pipeline's (dvc metrics show, the regression gate)
        own = ("eval",) if "eval" in stages_at(args.model, "deps") else ()
        refuse_foreign_place(args.out, "--out", "as dvc.yaml gives it" if own else
                             f"{args.model} is not the eval stage's model: its figures go "
                             f"elsewhere", own)
        ensure_writable(args.out)  # a file in the way: now, not after the evaluation
        # a variant's, one you kept; True: maybe another checkout's (its figures tell)
        same_figures_only = refuse_another_models_evaluation(args.out, args.model)
    else:  # its events go beside the run's checkpoints (a stage's run's: the train
        # stage's model, a variant's run folder; or one's of yours): never into the code,
        # another stage's results or published weights, nor into a run's outputs (curves)
        run = stages_at(args.model, "outs") + stages_at(args.model.parent, "works")
        refuse_foreign_place(args.model.parent / "tensorboard" / "eval", "--watch --model",
                             "beside a run's model.pt", run, own_outputs=False)
    ev = load_params(args.params, MAIN).eval
    data = load_prepared(args.data)
    if not args.watch:
        _refuse_evaluation_on_other_data(args.out, data.content_hash)
    if args.watch:
        run_dir = args.model.parent
        watch(data, run_dir / "checkpoints", run_dir / "tensorboard", ev.interval_secs,
              ev.batch_size, ev.device, args.max_evals)
    else:
        evaluate(data, args.model, args.out, ev.batch_size, ev.device, ev.flip_tta,
                 speed_in_metrics=False, same_figures_only=same_figures_only)


if __name__ == "__main__":
    run_stage(main)
