"""Operations the train stage dispatches per step, counted with a TorchDispatchMode over
the train stage's own loop (:func:`cifar10_tutorial.training.train.train`): two runs of
``--steps`` and ``2 x --steps`` steps from afresh, their difference divided by ``--steps``,
so that the set-up and the first fill of the shuffle queue cancel out. The default N is
the shuffle queue's bulk (its picks are made that many steps at a time), so that the
difference holds one bulk's work, as many steps share it. On a GPU, each op is a kernel
launch or a copy: the host work around the step.

    python benchmarks/ops_per_step.py [--data PREPARED] [--steps 64] [--device cpu]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cifar10_tutorial.cli import stage_output  # noqa: E402
from cifar10_tutorial.data.prepared import load_prepared  # noqa: E402
from cifar10_tutorial.params import load_params, params_from_dict, to_dict  # noqa: E402
from cifar10_tutorial.training.paths import TrainPaths  # noqa: E402
from cifar10_tutorial.training.train import train  # noqa: E402


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def counted(params, data, steps: int) -> collections.Counter:
    raw = to_dict(params)
    raw["train"].update(max_steps=steps, log_every=10 ** 6, max_epochs=None)
    raw["run"].update(checkpoint_every=10 ** 6, summary_every=10 ** 6)
    raw["eval"].update(every_steps=0)
    with tempfile.TemporaryDirectory() as tmp, Count() as mode:
        train(params_from_dict(raw), data, TrainPaths(Path(tmp) / "o", Path(tmp) / "l"),
              progress=False)
    return mode.ops


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="prepared data (default: the preprocess stage's "
                    "output in dvc.yaml)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, help="write the counts here too")
    args = ap.parse_args(argv)
    raw = to_dict(load_params(args.params))
    raw["train"]["device"] = args.device
    params = params_from_dict(raw)
    data = load_prepared(args.data or stage_output("preprocess"))
    a, b = counted(params, data, args.steps), counted(params, data, 2 * args.steps)
    per = {k: (b[k] - a[k]) / args.steps for k in b if b[k] != a[k]}
    total = sum(per.values())
    print(f"{total:.1f} ops per step (batch {params.train.batch_size}, "
          f"{params.input.shuffle} input, {args.device})")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {v:7.2f}  {k}")
    if args.json:
        from cifar10_tutorial import provenance
        import torch

        record = {"ops_per_step": round(total, 2), "steps": [args.steps, 2 * args.steps],
                  "batch_size": params.train.batch_size, "input": params.input.shuffle,
                  **provenance.code_version(), "torch": torch.__version__,
                  "device": provenance.device_description(torch.device(args.device)),
                  "by_op": {k: round(v, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}}
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
