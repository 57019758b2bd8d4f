"""DVC stage `train`: train the tutorial's CNN on the prepared data (--data) into --out
(model.pt; checkpoints/ and tensorboard/ beside it, outside DVC: a queued experiment's
go to the repository's --out) and --live (DVCLive's metrics.json and plots/). It resumes
from the newest matching checkpoint.

--stop-at pauses it at a deadline (exit status 75; the same command continues), and
--mirror keeps its newest checkpoint where another machine can continue it (in
<mirror>/train); both also from the environment (docs/continuing.md).

With train.num_devices > 1 it runs itself under torchrun, one process per device; with
--nnodes N and --rdzv-endpoint HOST:PORT, the same command on each of N machines runs
num_devices / N of them there (docs/devices.md).
"""
import _tree  # noqa: F401  (first: this tree's src/ is the code that runs)
import socket
import sys
from pathlib import Path

from cifar10_tutorial.training.paths import stage_paths
from cifar10_tutorial.cli import (add_continuation, add_nodes, add_paths, parse_stage_args,
                                  run_stage, stage_parser)
from cifar10_tutorial.training.deadline import from_stage
from cifar10_tutorial.training.mirror import run_ended
from cifar10_tutorial.ownership import (folders_apart, hold_run_lock, local_folder,
                                        refuse_foreign_place)
from cifar10_tutorial.training.distributed import (launched_by_torchrun, nodes_from_stage,
                                                   relaunch_on_devices)
from cifar10_tutorial.params import MAIN, load_params
from cifar10_tutorial.data.prepared import load_prepared
from cifar10_tutorial.training.train import train


def main() -> None:
    ap = stage_parser(__doc__)
    add_paths(ap, data="the prepared data", out="model.pt, checkpoints/, tensorboard/",
              live="DVCLive's metrics.json and plots/")
    add_continuation(ap)
    add_nodes(ap)
    args = parse_stage_args(ap, __file__)
    params = load_params(args.params, MAIN)
    cont = from_stage(args.stop_at, args.mirror, "train")
    # nothing written inside the prepared data (a DVC output: every stage would go stale),
    # nor a mirror among the outputs; --out and --live may be one folder, not one in the other
    same = args.out.resolve() == args.live.resolve()
    folders_apart([("--data", args.data), ("--out", args.out),
                   ("--live", None if same else args.live),
                   ("--mirror", local_folder(cont.mirror))],
                  "the prepared data; the run's outputs; the checkpoint mirror")
    if same:
        folders_apart([("--data", args.data), ("--live", args.live)],
                      "the prepared data; the run's outputs")
    # nor another stage's output (a variant's model and results), git's or the code's folders
    for option, folder in (("--out", args.out), ("--live", args.live),
                           ("--mirror", local_folder(cont.mirror))):
        if folder is not None:
            refuse_foreign_place(Path(folder), option, "as dvc.yaml gives them", ("train",))
    nodes = nodes_from_stage(args.nnodes, args.rdzv_endpoint, args.rdzv_id)
    if not launched_by_torchrun():  # the launching process holds them for its ranks
        # one lock per folder the run writes: two runs of other --out must not share --live
        command = " ".join(["stages/train.py", *sys.argv[1:]])
        for folder in (args.out, args.live):
            hold_run_lock(folder, command, socket.gethostname() if nodes.count > 1 else None)
    relaunch_on_devices(params.train, params.run, __file__, sys.argv[1:], nodes)
    train(params, load_prepared(args.data), stage_paths(args.out, args.live), continuation=cont)
    run_ended(cont)


if __name__ == "__main__":
    run_stage(main)
