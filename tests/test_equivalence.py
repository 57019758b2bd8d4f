"""Commits that train bit-identically (devtools/equivalence.py, and the record as the report
reads it, cifar10_tutorial.report.equivalence): the digest of a model's tensors, the record
of checks, and which commits it joins."""
import importlib.util
import json

import pytest
import torch

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.report.equivalence import load_record, same_training
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("equivalence", ROOT / "devtools" / "equivalence.py")
_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tool)
tensor_digest = _tool.tensor_digest


def _model_file(path, weight=1.0, step=10, extra=None):
    obj = {"model": {"w": torch.full((3, 2), weight), "b": torch.zeros(2)},
           "ema": {"w": torch.full((3, 2), weight / 2)}, "step": step,
           "params": {"train": extra or {}}}
    torch.save(obj, path)
    return path


def test_the_digest_covers_weights_and_averages_and_nothing_else(tmp_path):
    a = tensor_digest(_model_file(tmp_path / "a.pt"))
    # the same tensors in a file that records other params and step: the same digest
    assert tensor_digest(_model_file(tmp_path / "b.pt", step=11, extra={"run_key": 5})) == a
    assert tensor_digest(_model_file(tmp_path / "c.pt", weight=1.0 + 1e-7)) != a
    obj = torch.load(tmp_path / "a.pt", weights_only=True)
    obj["ema"]["w"][0, 0] += 1e-3  # the averages alone differ
    torch.save(obj, tmp_path / "d.pt")
    assert tensor_digest(tmp_path / "d.pt") != a


def test_commits_joined_by_identical_checks_count_as_one_training():
    rec = [{"commits": ["aaaa1111", "bbbb2222"], "identical": True},
           {"commits": ["bbbb2222", "cccc3333"], "identical": True},
           {"commits": ["cccc3333", "dddd4444"], "identical": False}]
    assert same_training({"aaaa1111"}, rec)
    assert same_training({"aaaa", "cccc3333"}, rec)  # through b; a prefix names a commit
    assert not same_training({"aaaa1111", "dddd4444"}, rec)  # that check found a difference
    assert not same_training({"aaaa1111", "eeee5555"}, rec)  # never checked
    assert not same_training({"aaaa1111", "bbbb2222"}, [])


def test_a_damaged_record_is_one_clear_line(tmp_path):
    assert load_record(tmp_path / "none.json") == []
    bad = tmp_path / "r.json"
    bad.write_text("{")
    # outside a git checkout, no `git checkout` advice (it cannot work there); inside one,
    # the restore
    with pytest.raises(PipelineError, match=r"r.json: not valid JSON .*give the record "
                                            r"\(as reports/dvc.yaml names it\)$"):
        load_record(bad)
    (tmp_path / ".git").mkdir()
    with pytest.raises(PipelineError, match=r"r.json: not valid JSON .*, or restore it "
                                            r"\(`git checkout -- .*r.json`\)$"):
        load_record(bad)
    bad.write_text(json.dumps([{"commits": ["a"], "identical": "yes"}]))
    with pytest.raises(PipelineError, match=r"expected a list of checks, each with two commits"):
        load_record(bad)
    # a check its own runs contradict, or without them: it states what nothing ran
    runs = [{"digest": "a" * 64}, {"digest": "b" * 64}]
    for check, said in (({"runs": runs}, r"says identical: true, where its runs' digests differ"),
                        ({}, r"records no two runs with their digests"),
                        ({"runs": runs[:1]}, r"records no two runs with their digests"),
                        # one digest is one set of weights: they score alike, from 0 to 1
                        ({"runs": [{"digest": "a" * 64, "precision_at_1": 0.554},
                                   {"digest": "a" * 64, "precision_at_1": 0.9}]},
                         r"records precision_at_1 0.554 and 0.9 for one digest: the same "
                         r"weights on the same images score alike"),
                        ({"runs": [{"digest": "a" * 64, "precision_at_1_raw": 1.5},
                                   {"digest": "a" * 64, "precision_at_1_raw": 1.5}]},
                         r"records precision_at_1_raw 1.5, 1.5, where each run records a "
                         r"fraction of its test images from 0 to 1")):
        bad.write_text(json.dumps([{"commits": ["1" * 40, "2" * 40], "identical": True,
                                    **check}]))
        with pytest.raises(PipelineError, match=r"r.json: check 1 \(1111111111..2222222222\) "
                                                + said):
            load_record(bad)
    bad.write_text('[{"commits": ["%s", "%s"], "identical": false, "identical": true, '
                   '"runs": [{"digest": "%s"}, {"digest": "%s"}]}]'
                   % ("1" * 40, "2" * 40, "a" * 64, "a" * 64))
    with pytest.raises(PipelineError, match=r"r.json: not valid JSON \(the key 'identical' "
                                            r"twice\)"):
        load_record(bad)
