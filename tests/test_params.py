import pytest
import yaml

from cifar10_tutorial.params import ParamsError, load_params, params_from_dict
from conftest import ROOT


def test_project_params_file_is_valid():
    params = load_params(ROOT / "params.yaml")
    assert params.data.dataset == "cifar10"
    assert params.data.url == "official" and params.data.md5 == "official"
    from cifar10_tutorial.data.datasets import sources
    assert sources(params.data) == [("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                                     "c32a1d4ab5d03f1284b67883e8d87530", "cifar-10-binary.tar.gz")]


def test_defaults_when_sections_are_absent():
    assert params_from_dict(None).data.url == "official"


def test_unknown_key_names_key_and_valid_keys(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["data"]["urll"] = "x"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError) as exc:
        load_params(path)
    msg = str(exc.value)
    assert str(path) in msg and "data.urll" in msg
    assert "dataset" in msg and "url" in msg and "md5" in msg


def test_unknown_section_is_an_error():
    with pytest.raises(ParamsError, match=r"unknown key trian .*valid keys in the top level: data"):
        params_from_dict({"trian": {"batch_size": 64}})


@pytest.mark.parametrize("data, expected", [
    ({"md5": 123}, r"data.md5: expected str or null, found 123"),
    ({"md5": "abc"}, r"data.md5: expected official, 32 hexadecimal digits or null"),
    ({"dataset": "mnist"}, r"data.dataset: expected one of 'cifar10' \| 'cifar100' \| 'svhn', found 'mnist'"),
    ({"dataset": "svhn", "md5": "0" * 32}, r"SVHN has several files"),
    ({"label": "medium"}, r"data.label: expected one of 'fine' \| 'coarse'"),
    ({"url": ["a"]}, r"data.url: expected a string"),
    ("x", r"data: expected a mapping"),
])
def test_wrong_types_are_errors(data, expected):
    with pytest.raises(ParamsError, match=expected):
        params_from_dict({"data": data})


@pytest.mark.parametrize("section, key, value, expected", [
    ("train", "weight_decay", -1000.0, r"train.weight_decay: expected >= 0, found -1000.0"),
    ("train", "lr_decay_factor", -3.0, r"train.lr_decay_factor: expected a number in \(0, 1\]"),
    ("train", "lr_decay_factor", 0.0, r"train.lr_decay_factor: expected a number in \(0, 1\]"),
    ("eval", "interval_secs", 0, r"eval.interval_secs: expected > 0, found 0"),
    ("eval", "interval_secs", -1, r"eval.interval_secs: expected > 0, found -1"),
    # B16: a tolerance keyed by a number was a TypeError from re
    ("regression", "tolerances", {1: {"max_drop": 0.02}},
     r"regression.tolerances.1: expected a metric named train.<key> or eval.<key>"),
])
def test_numbers_that_would_misbehave_later_name_their_key(section, key, value, expected):
    """Hostile cases W11, W12, B49, B50: a negative weight decay diverged naming the wrong
    key, a negative decay factor turned the learning rate negative, an eval interval of 0
    spun a core and one below 0 was a traceback."""
    with pytest.raises(ParamsError, match=expected):
        params_from_dict({section: {key: value}})


def test_null_md5_is_allowed():
    assert params_from_dict({"data": {"md5": None}}).data.md5 is None


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ParamsError, match="no such file"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)


def test_trial_steps_cap_every_variant_of_the_project():
    """ablation.trial_steps: the whole exercise pipeline in minutes, variants of their own
    budget (tutorial_100k, schedule_* in epochs) included; null leaves every budget alone."""
    from cifar10_tutorial.params import variant_params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    full = params_from_dict(raw)
    assert full.ablation.trial_steps is None
    assert variant_params(full, "tutorial_100k").train.max_steps == 100000
    assert variant_params(full, "schedule_fast_80").train.max_epochs == 80
    raw["ablation"]["trial_steps"] = 200
    trial = params_from_dict(raw)
    for name in raw["ablations"]:
        tr = variant_params(trial, name).train
        assert tr.max_steps == 200 and tr.max_epochs is None, name
    raw["ablation"]["trial_steps"] = 50_000  # above a budget: that budget stays
    loose = params_from_dict(raw)
    assert variant_params(loose, "baseline").train.max_steps == 10000
    assert variant_params(loose, "tutorial_100k").train.max_steps == 50000
    raw["ablation"]["trial_steps"] = 0
    with pytest.raises(ParamsError, match="ablation.trial_steps: expected >= 1 or null, found 0"):
        params_from_dict(raw)
    raw["ablation"]["trial_steps"] = 200
    raw["ablation"]["trial_eval_images"] = 0
    with pytest.raises(ParamsError, match="ablation.trial_eval_images: expected >= 1 or null, "
                                          "found 0"):
        params_from_dict(raw)


@pytest.mark.parametrize("text, message", [
    ("train: {initial_lr: .nan}", "train.initial_lr: expected a finite number, found nan"),
    ("train: {initial_lr: .inf}", "train.initial_lr: expected a finite number, found inf"),
    ("train: {seed: -1}", "train.seed: expected an integer from 0 to 2**63 - 1, found -1"),
    ("train: {seed: 18446744073709551616}", "train.seed: expected an integer from 0 to 2**63 - 1"),
    ("train: {max_steps: 1e6}", "train.max_steps: expected an integer, found '1e6' (YAML reads "
                                "1e6 as text: write 1.0e+6, with a dot and a signed exponent)"),
    ("train: {initial_lr: 5e-2}", "write 5.0e-2, with a dot"),
])
def test_numbers_yaml_reads_oddly_or_out_of_range_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("content, expected", [
    (b"", r"empty \(or comments only\): it would run every default"),
    (b"# only a comment\n", r"empty \(or comments only\)"),
    (b"train: {seed: 0, seed: 5}\n", r"not valid YAML: the key 'seed' appears twice \(line 1\)"),
    (b"\xff\xfe\x00garbage", r"not UTF-8 text"),
    (b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n", r"nested too deeply|not valid YAML"),
    (b"a: &a [x, x]\nb: &b [*a, *a]\nablations: {zz: *b}\n", r"not valid YAML: an alias \(\*a\) on line 2: aliases are not allowed"),
    (b"train: {seed: " + b"9" * 5000 + b"}\n", r"a value YAML cannot read|train.seed"),
])
def test_a_params_file_yaml_would_read_silently_or_not_at_all_is_one_line(tmp_path, content,
                                                                          expected):
    """Hostile cases W8-W10, B13-B15, B17: empty files ran all defaults, duplicate keys kept
    the last silently, and bad bytes, deep nesting, huge integers and alias bombs were
    tracebacks or hangs."""
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(ParamsError, match=rf"^{path}: ({expected})") as err:
        load_params(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ParamsError, match=rf"^{tmp_path}: a folder; give --params a YAML file"):
        load_params(tmp_path)
