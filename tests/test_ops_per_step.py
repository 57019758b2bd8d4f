"""The host work around a train step: on a CPU, the train stage's own loop with the default
params dispatches at most 150 PyTorch operators a step, forward and backward included, and
no copy (``aten._to_copy``, ``aten.copy_``): on a GPU each is a launch or a transfer that
the step waits on. Counted as benchmarks/ops_per_step.py counts them (N and 2N steps from
afresh, the difference over N; N one bulk of the shuffle queue's picks)."""
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e

MOST_OPS = 150


def test_a_train_step_dispatches_few_operators_and_no_copies(synth_data):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ops_per_step import counted
    from cifar10_tutorial.params import params_from_dict, to_dict, load_params

    raw = to_dict(load_params(ROOT / "params.yaml"))  # the defaults a user trains with
    raw["train"]["device"] = "cpu"
    params = params_from_dict(raw)
    n = 64
    a, b = counted(params, synth_data, n), counted(params, synth_data, 2 * n)
    per = {k: (b[k] - a[k]) / n for k in b if b[k] != a[k]}
    assert sum(per.values()) <= MOST_OPS, sorted(per.items(), key=lambda kv: -kv[1])
    assert not {"_to_copy", "copy_"} & set(per), per
