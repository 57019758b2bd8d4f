import dataclasses
import os
import re
import typing
from pathlib import Path

import pytest
import yaml

from cifar10_tutorial.param_types import field_range
from cifar10_tutorial.params import Params, ParamsError, load_params, params_from_dict
from conftest import ROOT, copy_project, run_stage, set_params


def test_project_params_files_are_valid_and_the_default_source_is_the_official_one():
    """Both params files load (whatever a user has set in them, e.g. a local data.url as
    docs/data.md says), and ``official`` resolves to CIFAR-10's official archive."""
    from cifar10_tutorial.data.datasets import sources
    from cifar10_tutorial.params import DataParams

    load_params(ROOT / "params.yaml")
    load_params(ROOT / "reports/params.yaml")
    assert DataParams().url == "official" and DataParams().md5 == "official"
    assert sources(DataParams()) == [("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
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
    # read for one data set only: set for another, a variant of it would change nothing
    ({"label": "coarse"}, r"data.label: 'coarse' is read only for data.dataset: cifar100, and "
                          r"the data set is cifar10: it would change nothing"),
    ({"dataset": "svhn", "label": "coarse", "md5": None}, r"data.label: .* the data set is svhn"),
    ({"dataset": "cifar100", "svhn_extra": True}, r"data.svhn_extra: True is read only for "
                                                  r"data.dataset: svhn"),
    ({"url": ["a"]}, r"data.url: expected a string"),
    ("x", r"data: expected a mapping"),
])
def test_wrong_types_are_errors(data, expected):
    with pytest.raises(ParamsError, match=expected):
        params_from_dict({"data": data})


@pytest.mark.parametrize("section, key, value, expected", [
    ("train", "weight_decay", -1000.0, r"train.weight_decay: expected a number in \[0, 10\], "
                                       r"found -1000.0"),
    ("train", "lr_decay_factor", -3.0, r"train.lr_decay_factor: expected a number in \(0, 1\]"),
    ("train", "lr_decay_factor", 0.0, r"train.lr_decay_factor: expected a number in \(0, 1\]"),
    ("eval", "interval_secs", 0, r"eval.interval_secs: expected a number in \(0, 86400\], "
                                 r"found 0.0"),
    ("eval", "interval_secs", -1, r"eval.interval_secs: expected a number in \(0, 86400\], "
                                  r"found -1.0"),
    # a tolerance keyed by a number: no metric is named so
    ("regression", "tolerances", {1: {"max_drop": 0.02}},
     r"regression.tolerances.1: expected a metric named train.<key> or eval.<key>"),
])
def test_numbers_that_would_misbehave_later_name_their_key(section, key, value, expected):
    """A value that would fail or mislead only later (a negative weight decay diverges, a
    negative decay factor turns the learning rate negative, an eval interval of 0 spins a
    core) is refused when the params are read, naming its own key."""
    with pytest.raises(ParamsError, match=expected):
        params_from_dict({section: {key: value}})


def test_null_md5_is_allowed():
    assert params_from_dict({"data": {"md5": None}}).data.md5 is None


def test_missing_file_and_bad_yaml(tmp_path, monkeypatch):
    with pytest.raises(ParamsError, match="no such file"):
        load_params(tmp_path / "nope.yaml")
    # a mistyped path is said as such, with the folder it was read from
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParamsError, match=rf"^reprts/params.yaml: no such file, where a params "
                                          rf"file is expected \(read from "
                                          rf"{re.escape(str(tmp_path))}\); check the path"):
        load_params(Path("reprts/params.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)


def test_trial_steps_cap_every_variant_of_the_project():
    """ablation.trial_steps: the whole exercise pipeline in minutes, variants of their own
    budget (in steps, in epochs) included; null leaves every budget alone. On the
    project's variants as they are in this checkout, and two of a budget of their own."""
    from cifar10_tutorial.params import variant_params

    raw = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    raw["ablation"]["trial_steps"] = None
    raw["ablations"] = {**raw["ablations"], "own_steps": {"train": {"max_steps": 60000}},
                        "own_epochs": {"train": {"max_epochs": 80}}}
    full = params_from_dict(raw)
    assert variant_params(full, "own_steps").train.max_steps == 60000
    assert variant_params(full, "own_epochs").train.max_epochs == 80
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
    with pytest.raises(ParamsError, match="ablation.trial_steps: expected an integer from 1 to "
                                          "1000000000 or null, found 0"):
        params_from_dict(raw)
    raw["ablation"]["trial_steps"] = 200
    raw["ablation"]["trial_eval_images"] = 0
    with pytest.raises(ParamsError, match="ablation.trial_eval_images: expected an integer from "
                                          "1 to 1000000000 or null, found 0"):
        params_from_dict(raw)


@pytest.mark.parametrize("text, message", [
    ("train: {initial_lr: .nan}", "train.initial_lr: expected a finite number, found nan"),
    ("train: {initial_lr: .inf}", "train.initial_lr: expected a finite number, found inf"),
    ("train: {seed: -1}", "train.seed: expected an integer from 0 to 9223372036854775807, "
                          "found -1"),
    ("train: {seed: 18446744073709551616}", "train.seed: expected an integer from 0 to "
                                            "9223372036854775807"),
    ("train: {max_steps: 1e6}", "train.max_steps: expected an integer, found 1000000.0"),
    # text YAML 1.2 (and DVC) reads as text, though float() would take it
    ("train: {initial_lr: .5e1}", "train.initial_lr: expected a number, found '.5e1' (YAML "
                                  "reads .5e1 as text: write .5e+1, with a dot and a signed "
                                  "exponent)"),
    ("model: {lrn: yes}", "model.lrn: expected true or false, found 'yes'"),
])
def test_numbers_yaml_reads_oddly_or_out_of_range_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, key, value", [
    ("train: {epochs_per_decay: 0350}", "epochs_per_decay", 350.0),  # YAML 1.1: octal 232
    ("train: {max_steps: 010000}", "max_steps", 10000),  # YAML 1.1: 4096
    ("train: {initial_lr: 5e-2}", "initial_lr", 0.05),  # YAML 1.1: text
    ("train: {seed: 0o17}", "seed", 15),  # YAML 1.1: text
    ("train: {max_steps: 1_000}", "max_steps", 1000),
])
def test_numbers_are_read_as_dvc_reads_them(tmp_path, text, key, value):
    """DVC hashes params as YAML 1.2 reads them: the stages read the same values, so that
    a value DVC calls unchanged is never another one in the run."""
    path = tmp_path / "params.yaml"
    path.write_text(text + "\n")
    got = getattr(load_params(path).train, key)
    assert got == value and type(got) is type(value)


def test_the_params_reader_and_dvcs_agree_on_every_plain_scalar():
    """Plain scalars of numbers, signs, dots, exponents, prefixes, underscores and the
    words YAML 1.1 takes for booleans: the project's reader and DVC's give the same value
    of the same type (or both refuse)."""
    import math
    import random

    from dvc.utils.serialize._yaml import parse_yaml

    from cifar10_tutorial.param_types import load_yaml12

    words = ["yes", "No", "ON", "off", "y", "n", "true", "False", "TRUE", "null", "Null", "~",
             "1:30", "190:20:30", ".NaN", "-.inf", "+.inf", ".Inf", "0X1a", "2001-12-14", "NaN"]
    rng = random.Random(0)
    scalars = words + ["".join(rng.choice("0123456789_+-.eExXoObB") for _ in
                               range(rng.randint(1, 6))) for _ in range(3000)]

    def read(parse, text):
        try:
            return "ok", parse(f"a: {text}\n")["a"]
        except Exception:  # noqa: BLE001 (either refusing is agreement)
            return "refused", None

    for text in scalars:
        ours, theirs = read(load_yaml12, text), read(lambda t: parse_yaml(t, "p.yaml"), text)
        same = ours == theirs or (ours[0] == theirs[0] == "ok" and isinstance(ours[1], float)
                                  and math.isnan(ours[1]) and math.isnan(theirs[1]))
        assert same and type(ours[1]) is type(theirs[1]), (text, ours, theirs)


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
    """An empty file (which would run all defaults), duplicate keys (YAML keeps the last
    silently), bad bytes, deep nesting, huge integers and alias bombs: each is one line
    naming the file, never a traceback or a hang."""
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(ParamsError, match=rf"^{path}: ({expected})") as err:
        load_params(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ParamsError, match=rf"^{tmp_path}: a folder; give --params a YAML file"):
        load_params(tmp_path)


# -------------------------------------------------------------------------- ranges


def _number_fields():
    """(key, annotation) of every number in params: int and float fields and lists of them,
    in every section (the regression tolerances are checked with their direction)."""
    for section in dataclasses.fields(Params):
        cls = section.type if isinstance(section.type, type) else None
        hints = typing.get_type_hints(Params)
        cls = hints[section.name]
        if not dataclasses.is_dataclass(cls):
            continue
        for name, tp in typing.get_type_hints(cls, include_extras=True).items():
            if name.startswith("_"):
                continue
            text = repr(tp)
            if re.search(r"\b(int|float)\b", text) and "Literal" not in text:
                yield f"{section.name}.{name}", tp


def test_every_number_in_params_has_a_range_and_docs_params_md_states_it():
    """Every number has a range beside its field, checked when the params are read (an
    unbounded one fails late: a thread per unit, a timeout overflowing C's int), and
    docs/params.md gives that range."""
    docs = (ROOT / "docs" / "params.md").read_text()
    keys = dict(_number_fields())
    assert {"run.queue_threads", "run.collective_timeout_s", "train.num_devices",
            "eval.interval_secs", "eval.targets"} <= set(keys)
    for key, tp in keys.items():
        found = field_range(tp)
        assert found is not None, f"{key} has no Range"
        rng, integer = found
        row = re.search(rf"^\| `{re.escape(key)}` \|.*$", docs, re.M)
        assert row, f"docs/params.md has no row for {key}"
        assert rng.text(integer) in row.group(0), (key, rng.text(integer), row.group(0))


@pytest.mark.parametrize("key, inside, outside", [
    ("run.queue_threads", 64, 65),
    ("run.collective_timeout_s", 86400.0, 86400.5),
    ("run.join_timeout_s", 1.0, 0.0),
    ("train.num_devices", 1024, 1025),
    ("eval.interval_secs", 86400.0, 1e300),
    ("train.max_steps", 10**9, 10**9 + 1),
    ("fast.momentum", 0.0, 1.0),
])
def test_a_range_holds_its_ends_and_refuses_past_them(key, inside, outside):
    section, name = key.split(".")
    assert getattr(getattr(params_from_dict({section: {name: inside}}), section), name) == inside
    with pytest.raises(ParamsError, match=rf"^{re.escape(key)}: expected .*, found "
                                          rf"{re.escape(repr(outside))}.*; set it within"):
        params_from_dict({section: {name: outside}})


@pytest.mark.parametrize("stage, args, values, expected", [
    ("train", [], {"run": {"queue_threads": 1000000}},
     "run.queue_threads: expected an integer from 0 to 64, found 1000000"),
    ("train", [], {"train": {"num_devices": 2, "device": "cpu"},
                   "run": {"collective_timeout_s": 1.0e+300}},
     "run.collective_timeout_s: expected a number in (0, 86400], found 1e+300"),
    ("train", [], {"train": {"num_devices": 10**18, "device": "cpu"}},
     "train.num_devices: expected an integer from 1 to 1024, found 1000000000000000000"),
    ("eval", ["--watch"], {"eval": {"interval_secs": 1.0e+300}},
     "eval.interval_secs: expected a number in (0, 86400], found 1e+300"),
    ("download", [], {"data": {"url": "http://[::1"}},
     "data.url: expected a URL, found 'http://[::1', which does not parse (Invalid IPv6 URL)"),
    ("download", [], {"data": {"url": "http://user:s3cret@127.0.0.1:9/x"}},
     "data.url: credentials in URLs are not supported"),
    ("download", [], {"data": {"url": "https://user:s3cret/x@example.org/x"}},
     "data.url: expected a URL, found 'https://...@example.org/x', which does not parse;"),
])
def test_a_param_out_of_range_stops_the_stage_in_one_line(tmp_path, stage, args, values,
                                                          expected):
    """A million queue threads, a collective timeout of 1e300 s (it would overflow in every
    process of every torchrun restart), 10**18 processes, a watch interval past time_t, a
    URL that does not parse and one with a password: each is one `error:` line naming
    params.yaml and the key, exit 1, no traceback, and the password is never shown."""
    project = copy_project(tmp_path / "p")
    for section, kv in values.items():
        set_params(project, section, **kv)
    proc = run_stage(project, stage, *args)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: params.yaml: {expected}"), \
        proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr


def test_more_cpu_processes_than_the_machine_has_cpus_stop_before_torchrun(tmp_path):
    """Each CPU process of a job needs a CPU: more than the machine has is one line before
    torchrun starts any (10**18 of them would hang the launch)."""
    cpus = os.cpu_count()
    project = copy_project(tmp_path / "p")
    set_params(project, "train", num_devices=cpus + 1, device="cpu")
    proc = run_stage(project, "train")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "launching:" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: train.num_devices is {cpus + 1}: {cpus + 1} CPU processes, but "
                      f"this machine has {cpus} CPUs; set train.num_devices to at most {cpus} "
                      f"per node (each process needs a CPU of its own)."], proc.stderr


@pytest.mark.parametrize("url", ["ssh://git@example.org/data/cifar.tar.gz",
                                 "https://example.org/a@b/cifar.tar.gz", "/data/user@host/x.tar.gz"])
def test_urls_without_a_password_are_taken(url):
    assert params_from_dict({"data": {"url": url}}).data.url == url


@pytest.mark.parametrize("kind", ["fifo", "device", "loop", "huge"])
def test_a_params_file_that_is_no_file_is_one_line(tmp_path, kind):
    """A FIFO (it would block the stage), /dev/zero (it would fill the memory), a loop of
    links or a file over 1 MB as the params file: one line naming it."""
    import os

    path = tmp_path / "params.yaml"
    if kind == "fifo":
        os.mkfifo(path)
        expected = "not a regular file"
    elif kind == "device":
        path = "/dev/zero"
        expected = "not a regular file"
    elif kind == "loop":
        os.symlink(tmp_path / "b", path)
        os.symlink(path, tmp_path / "b")
        expected = "a loop of symbolic links"
    else:
        path.write_text("# " + "x" * (2 << 20) + "\n")
        expected = "larger than 1,048,576 bytes"
    with pytest.raises(ParamsError, match=rf"^{path}: {expected}.*give --params a YAML file"):
        load_params(path)


def test_a_params_file_that_is_a_link_is_read_with_a_warning(tmp_path, caplog):
    """A params.yaml linked to a shared file is read, with a warning: `dvc exp run -S`
    rewrites the file the link names, shared with whatever else reads it."""
    shared = tmp_path / "shared.yaml"
    shared.write_text("train: {seed: 3}\n")
    (tmp_path / "params.yaml").symlink_to(shared)
    caplog.set_level("WARNING")
    assert load_params(tmp_path / "params.yaml").train.seed == 3
    assert f"is a link to {shared}: `dvc exp run -S`" in caplog.text


# -------------------------------------------------------------------------- two files


def _file(tmp_path, name, raw):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw) if isinstance(raw, dict) else raw)
    return path


@pytest.mark.parametrize("name, section, value, expected", [
    ("reports/params.yaml", "data", {"dataset": "svhn"},
     r"data: lives in params\.yaml, not in reports/params\.yaml \(the variants train on the "
     r"main pipeline's prepared data; a variant on another data set goes under "
     r"dataset_ablations: here\); remove it here$"),
    ("reports/params.yaml", "regression", {"baseline": None},
     r"regression: lives in params\.yaml, not in reports/params\.yaml \(the main pipeline's "
     r"gate\); remove it here$"),
    ("params.yaml", "ablations", {"x": {}},
     r"ablations: lives in reports/params\.yaml, not in params\.yaml; move it there$"),
    ("params.yaml", "ablation", {"max_steps": 3},
     r"ablation: lives in reports/params\.yaml, not in params\.yaml; move it there$"),
    ("params.yaml", "dataset_ablations", {},
     r"dataset_ablations: lives in reports/params\.yaml, not in params\.yaml; move it there$"),
])
def test_a_section_of_the_other_params_file_is_refused_naming_where_it_belongs(
        tmp_path, name, section, value, expected):
    """Each params file holds its own sections: one of the other file's, which nothing
    would read there, is one line naming the file, the section and its file."""
    raw = yaml.safe_load((ROOT / name).read_text())
    path = _file(tmp_path, name, {**raw, section: value})
    with pytest.raises(ParamsError, match=rf"^{path}: {expected}"):
        load_params(path)
    assert load_params(_file(tmp_path, name, raw))  # the project's own: fine


@pytest.mark.parametrize("key", ["max_steps", "max_epochs"])
def test_a_main_run_budget_in_the_exercise_params_is_refused(tmp_path, key):
    """The variants train ablation.max_steps (or their own budget): a train.max_steps or
    max_epochs in reports/params.yaml's baseline would be read by nothing."""
    raw = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    path = _file(tmp_path, "reports/params.yaml",
                 {**raw, "train": {**(raw.get("train") or {}), key: 500}})
    with pytest.raises(ParamsError, match=rf"^{path}: train\.{key}: the variants' budget is "
                                          rf"ablation\.max_steps .* remove it from the train: "
                                          rf"section here$"):
        load_params(path)
    raw["ablations"] = {"mine": {"train": {key: 5}}}  # a variant's own: fine
    assert load_params(_file(tmp_path, "reports/params.yaml", raw))


def test_the_exercise_params_need_both_groups_of_variants(tmp_path):
    """reports/dvc.yaml expands `ablations:` and `dataset_ablations:`: a file without one,
    or an empty one, is refused by its own name; `{}` runs no variant."""
    raw = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    for group in ("ablations", "dataset_ablations"):
        path = _file(tmp_path, "reports/params.yaml", {k: v for k, v in raw.items() if k != group})
        with pytest.raises(ParamsError, match=rf"^{path}: has no {group}: section, which "
                                              rf"reports/dvc.yaml reads; add it \(`{group}: "
                                              rf"{{}}` for no variant\)$"):
            load_params(path)
    path = _file(tmp_path, "reports/params.yaml", "# nothing\n")
    with pytest.raises(ParamsError, match=rf"^{path}: empty \(or comments only\): the exercise "
                                          rf"pipeline's baseline and variants are set in it; copy "
                                          rf"the repository's reports/params.yaml"):
        load_params(path)
    params = load_params(_file(tmp_path, "reports/params.yaml",
                               {**raw, "ablations": {}, "dataset_ablations": {}}))
    assert params.ablations == {} and params.dataset_ablations == {}


def test_a_params_file_not_a_mapping_is_named_by_its_type_not_its_content(tmp_path):
    """A file of something else (a link to /etc/passwd) is refused by what YAML read, its
    content never quoted."""
    other = _file(tmp_path, "passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1\n")
    path = tmp_path / "reports" / "params.yaml"
    path.parent.mkdir()
    path.symlink_to(other)
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert str(err.value) == (f"{path}: expected a mapping at the top level of params, found "
                              f"a string")
    with pytest.raises(ParamsError, match=r"found a list$"):
        load_params(_file(tmp_path, "params.yaml", "- a\n- b\n"))


def test_under_dvc_the_undo_names_the_params_file(tmp_path, monkeypatch):
    """A failed `dvc exp run -S` leaves its change in the file (the exercise stages'
    results are persist outputs, which DVC leaves in place): the message says the
    `git checkout` of the file."""
    raw = yaml.safe_load((ROOT / "reports/params.yaml").read_text())
    raw["ablation"]["max_steps"] = "abc"
    path = _file(tmp_path, "reports/params.yaml", raw)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert str(err.value).endswith(
        f"ablation.max_steps: expected an integer, found 'abc' (a failed `dvc exp run -S` "
        f"leaves its change in {path}: `git checkout {path}` undoes it)")


@pytest.mark.parametrize("group, overrides, said", [
    ("ablations", {"train.seed": 5}, r"ablations\.x: 'train\.seed' is not a section a variant "
     r"may set \(those are model, input, train, run, fast, eval\); write it nested: "
     r"train: \{seed: 5\}$"),
    ("ablations", {"bogus": {}}, r"ablations\.x: 'bogus' is not a section a variant may set "
     r"\(those are model, input, train, run, fast, eval\)$"),
    ("dataset_ablations", {"train.seed": 5}, r"those are data, model, input, train, run, fast, "
     r"eval\); write it nested"),
], ids=["dotted", "unknown", "dotted-dataset-variant"])
def test_a_variants_key_that_is_no_section_it_may_set_is_named_with_those_it_may(
        group, overrides, said):
    """Not the whole file's sections (data, ablation, regression...), each of which a
    variant is then refused."""
    from cifar10_tutorial.params import params_from_dict

    with pytest.raises(ParamsError, match=said):
        params_from_dict({group: {"x": overrides}})


@pytest.mark.parametrize("name", ["train", "trials"])
def test_a_variant_cannot_take_the_name_of_another_run_in_the_mirror(name):
    """The checkpoint mirror keeps the main run as train/ and the trials under trials/: a
    variant of that name would resume (and then clear) another run's copy."""
    from cifar10_tutorial.params import ParamsError, check_variant_name

    with pytest.raises(ParamsError, match=rf"variant name '{name}' is the "):
        check_variant_name(name)
    assert check_variant_name("train2") == "train2"


@pytest.mark.parametrize("variants, said", [
    ({"ablations": {"baseline": {}, "Baseline": {"train": {"seed": 1}}}},
     r"ablations.Baseline: differs from ablations.baseline only in case"),
    ({"ablations": {"TRAIN": {"train": {"seed": 1}}}},
     r"ablations.TRAIN: differs from the reserved name 'train' \(the main pipeline's run in "
     r"the checkpoint mirror\) only in case"),
    ({"ablations": {"a": {}}, "dataset_ablations": {"A": {"data": {"dataset": "svhn"}}}},
     r"dataset_ablations.A: differs from ablations.a only in case, and a variant's name is "
     r"its folders' name: one folder on a file system that ignores case"),
], ids=["baseline", "reserved", "across-groups"])
def test_variant_names_differing_only_in_case_are_refused(variants, said):
    """On a file system that ignores case (macOS's, Windows'), names in other cases are
    one folder: two variants would write one results folder, a name in another case of
    the mirror's train/ another run's copy. One line naming both."""
    with pytest.raises(ParamsError, match=said):
        params_from_dict(variants)
    params_from_dict({"ablations": {"baseline": {}, "Baseline2": {"train": {"seed": 1}}}})


@pytest.mark.parametrize("value, expected", [
    ("exp-1a2b", "exp-1a2b"), ("../../../tmp/x", None), ("a/b", None), ("..", None),
    ("x" * 200, None), (None, None)])
def test_an_experiment_name_is_used_only_as_one_plain_folder_name(monkeypatch, value, expected):
    """DVC_EXP_NAME names the TensorBoard run folder and a queued experiment's folder: a
    path in it (set by hand) is not used, so nothing is made outside those folders."""
    from cifar10_tutorial.training.paths import experiment_name

    if value is None:
        monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    else:
        monkeypatch.setenv("DVC_EXP_NAME", value)
    assert experiment_name() == expected


def test_a_params_file_of_the_other_kind_is_named_as_such(tmp_path):
    """reports/params.yaml given to a main stage (it trained 100,000 steps and rotated the
    main run's checkpoints away), params.yaml given to a variant's stage: one line saying
    which kind of file it is, before any section is called misplaced."""
    from cifar10_tutorial.params import EXERCISES, MAIN, ParamsError, load_params
    from conftest import ROOT

    with pytest.raises(ParamsError, match=r"reports/params.yaml: the kind of file "
                                          r"reports/params.yaml is \(it holds ablation:\), but "
                                          r"this reads params.yaml's"):
        load_params(ROOT / "reports/params.yaml", MAIN)
    with pytest.raises(ParamsError, match=r"params.yaml: the kind of file params.yaml is \(it "
                                          r"holds data:\), but this reads reports/params.yaml's"):
        load_params(ROOT / "params.yaml", EXERCISES)
    # a params.yaml holding a stray exercise section is still told where the section goes
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text() + "ablations: {}\n")
    with pytest.raises(ParamsError, match=r"ablations: lives in reports/params.yaml, not in "
                                          r"params.yaml; move it there"):
        load_params(tmp_path / "params.yaml", MAIN)


@pytest.mark.parametrize("overrides, said", [
    ({"fast": {"peak_lr": 5.0}},
     r"ablations.v: fast.peak_lr is read only under train.schedule: fast, and the variant "
     r"trains under train.schedule: tutorial: it would change nothing"),
    ({"train": {"schedule": "fast", "initial_lr": 0.5}},
     r"ablations.v: train.initial_lr is read only under train.schedule: tutorial"),
    ({"train": {"schedule": "fast", "moving_average_decay": 0.99}},
     r"ablations.v: train.moving_average_decay is read only under train.schedule: tutorial"),
])
def test_a_variants_override_its_schedule_never_reads_is_refused(overrides, said):
    """A variant overriding what its own schedule never reads (the fast schedule's peak rate
    under the tutorial's) would train as its baseline does, and its results be read as
    the override's effect: one line naming the key and the schedule that reads it."""
    with pytest.raises(ParamsError, match=said):
        params_from_dict({"ablations": {"v": overrides}})
    # the same key under the schedule that reads it is a variant
    schedule = "fast" if "fast" in overrides else "tutorial"
    train = {**overrides.get("train", {}), "schedule": schedule}
    params_from_dict({"ablations": {"v": {**overrides, "train": train}}})


@pytest.mark.parametrize("base, overrides, said", [
    ({}, {"input": {"shuffle": "permutation", "min_fraction_of_examples_in_queue": 0.1}},
     r"ablations.v: input.min_fraction_of_examples_in_queue is read only under "
     r"input.shuffle: queue, and the variant trains under input.shuffle: permutation"),
    ({"input": {"shuffle": "permutation"}},
     {"input": {"min_fraction_of_examples_in_queue": 0.01}},
     r"ablations.v: input.min_fraction_of_examples_in_queue is read only under input.shuffle"),
    ({}, {"train": {"max_steps": 500, "max_epochs": 2}},
     r"ablations.v: train.max_steps and train.max_epochs both set, and train.max_epochs "
     r"replaces train.max_steps"),
    ({"eval": {"every_steps": 0}}, {"eval": {"targets": [0.5]}},
     r"ablations.v: eval.targets is read only under eval.every_steps above 0, and the "
     r"variant trains under eval.every_steps: 0: it would change nothing; set "
     r"eval.every_steps above 0 in the variant too, or drop eval.targets"),
], ids=["queue-fill-under-permutation", "inherited-permutation", "two-budgets",
        "targets-without-curve"])
def test_a_variants_override_its_own_params_never_read_is_refused(base, overrides, said):
    """The queue's fill under a permutation (no queue), or a budget in steps beside one in
    epochs (which replaces it): the variant would train as if it were not set, its results
    read as its effect; one line. The same variant where it is read is one."""
    with pytest.raises(ParamsError, match=said):
        params_from_dict({**base, "ablations": {"v": overrides}})
    if "input" in overrides:
        params_from_dict({"ablations": {"v": {"input": {
            **overrides["input"], "shuffle": "queue"}}}})
    if "eval" in overrides:
        params_from_dict({**base, "ablations": {"v": {"eval": {
            **overrides["eval"], "every_steps": 100}}}})
    params_from_dict({**base, "ablations": {"v": {"train": {"max_epochs": 2}}}})


@pytest.mark.parametrize("twin, said", [
    ({}, r"ablations.v trains and scores exactly as ablations.baseline \(the same params\)"),
    ({"train": {"seed": 0}}, r"ablations.v .* as ablations.baseline \(the same params\)"),
    ({"run": {"checkpoint_every": 5, "capture_step": "never"}},
     r"ablations.v .* as ablations.baseline \(it differs only in run.capture_step, "
     r"run.checkpoint_every: how a run is carried out, not what it computes\): its results "
     r"would be ablations.baseline's, read as an effect; drop the variant"),
    ({"eval": {"batch_size": 100}}, r"differs only in eval.batch_size:"),
    ({"train": {"device": "cpu"}, "eval": {"device": "cpu", "interval_secs": 5}},
     r"differs only in eval.device, eval.interval_secs, train.device:"),
    ({"train": {"log_every": 20}}, r"differs only in train.log_every: how a run is carried"),
    ({"eval": {"targets": [0.86, 0.85, 0.84, 0.8]}},
     r"differs only in eval.targets: the same targets \(the curve times them as a set\)"),
    ({"train": {"moving_average_decay": 0.99999}},
     r"differs only in train.moving_average_decay: above the step term \(1 \+ n\) / "
     r"\(10 \+ n\) of all 10,000 steps, which sets it"),
    ({"eval": {"every_steps": 20000}}, r"differs only in eval.every_steps: past the 10,000 "
                                       r"steps: the last step's evaluation only"),
], ids=["empty", "baseline-value", "run-section", "eval-batch", "where-it-runs", "logging",
        "targets-order", "decay-unreached", "curve-past-budget"])
def test_a_variant_that_computes_what_another_does_is_refused(twin, said):
    """A variant that changes nothing, or only how a run is carried out (the run section,
    the device, the evaluation's batch), would train and score exactly as the baseline:
    its figures, read as its overrides' effect, would be the baseline's. One line naming
    both; a variant changing any setting that computes is one, and the check compares the
    full budgets (a trial cuts every budget to one length and is no twin)."""
    baseline = {"eval": {"every_steps": 10000}} if "every_steps" in str(twin) else {}
    with pytest.raises(ParamsError, match=said):
        params_from_dict({"ablations": {"baseline": baseline, "v": twin}})
    # the twin of a variant other than the baseline, in the other group too
    with pytest.raises(ParamsError, match=r"dataset_ablations.w trains and scores exactly as "
                                          r"dataset_ablations.v"):
        params_from_dict({"dataset_ablations": {"v": {"data": {"dataset": "svhn"}, **baseline},
                                                "w": {"data": {"dataset": "svhn"}, **twin}}})
    params_from_dict({"ablations": {"baseline": {}, "v": {**twin, "train": {
        **twin.get("train", {}), "seed": 1}}}})
    params_from_dict({"ablation": {"trial_steps": 50},
                      "ablations": {"baseline": {"eval": {"every_steps": 100}},
                                    "long": {"train": {"max_steps": 100000},
                                             "eval": {"every_steps": 100}}}})


@pytest.mark.parametrize("twin, num_train, flip, said", [
    ({"train": {"max_epochs": 32}}, 40000, True,
     r"differs only in train.max_epochs: the same 10,000 steps of 40,000 training images"),
    ({"train": {"epochs_per_decay": 100}}, 40000, True,
     r"differs only in train.epochs_per_decay: its first decay falls past the 10,000 steps"),
    ({"train": {"lr_decay_factor": 0.5}}, 40000, True, r"differs only in train.lr_decay_factor"),
    ({"input": {"flip": True}}, 40000, True, r"differs only in input.flip: null is true on "
                                             r"this data set"),
    ({"input": {"flip": False}}, 40000, False, r"differs only in input.flip: null is false"),
    # the queue holds whole records: int(0.40001 x 40,000) = int(0.4 x 40,000) = 16,000
    ({"input": {"min_fraction_of_examples_in_queue": 0.40001}}, 40000, True,
     r"differs only in input.min_fraction_of_examples_in_queue: the same queue of 16,000 "
     r"records of 40,000"),
], ids=["epochs-as-steps", "decay-past-budget", "factor-never-applied", "flip-cifar", "flip-svhn",
        "queue-of-one-size"])
def test_a_variant_that_computes_what_another_does_on_its_data_is_refused(twin, num_train, flip,
                                                                          said):
    """What a variant computes may depend on its training data: a budget in epochs comes to
    steps, a decay interval in epochs to steps, and flips written as null to the data set's
    default. The loader cannot know them; the variant's stage compares with them, naming
    the variant it copies, and a variant before its twin, or computing otherwise on other
    data, is one."""
    from cifar10_tutorial.params import refuse_twin_on_data

    params = params_from_dict({"ablations": {"baseline": {}, "v": twin}})
    with pytest.raises(ParamsError, match=r"ablations.v trains and scores exactly as "
                                          r"ablations.baseline \(it " + said):
        refuse_twin_on_data(params, "v", num_train, flip)
    refuse_twin_on_data(params, "baseline", num_train, flip)  # the first of two is the one
    if "flip" in twin.get("input", {}):  # the other default: a variant that flips otherwise
        refuse_twin_on_data(params, "v", num_train, not flip)
    else:  # 3,000 images: 750 steps in 32 epochs, a decay within 10,000 steps; 100,000: a
        # queue of 40,001 records, not 40,000
        refuse_twin_on_data(params, "v", 3000 if "train" in twin else 100_000, flip)
    # data-set variants compare with those of the same data only (their stage's)
    name = "svhn" if not flip else "cifar100"
    params = params_from_dict({"dataset_ablations": {
        "a": {"data": {"dataset": name}}, "b": {**twin, "data": {"dataset": name}},
        "c": {**twin, "data": {"dataset": "svhn", "svhn_extra": True}}}})
    with pytest.raises(ParamsError, match=r"dataset_ablations.b trains and scores exactly as "
                                          r"dataset_ablations.a \(it " + said):
        refuse_twin_on_data(params, "b", num_train, flip)
    refuse_twin_on_data(params, "c", num_train, flip)


def test_a_queue_fill_that_comes_to_the_same_queues_on_several_devices_is_a_twin():
    """On two devices each process fills its queue from its share of the records (every
    second record of each training file): fills that come to the same whole records in
    every process are one queue, named with each process's records; the shares follow the
    files a run reads."""
    from cifar10_tutorial.params import refuse_twin_on_data, twins

    two = {"train": {"num_devices": 2, "batch_size": 64}}
    params = params_from_dict({"ablations": {
        "devices": two, "fill": {**two, "input": {"min_fraction_of_examples_in_queue": 0.40001}},
        "apart": {**two, "input": {"min_fraction_of_examples_in_queue": 0.45}}}})
    with pytest.raises(ParamsError, match=r"ablations.fill trains and scores exactly as "
                                          r"ablations.devices \(it differs only in "
                                          r"input.min_fraction_of_examples_in_queue: the same "
                                          r"queues of 8,000, 8,000 records of the 20,000, "
                                          r"20,000 each of the 2 processes trains on\)"):
        refuse_twin_on_data(params, "fill", 40000, True, [8000] * 5)
    refuse_twin_on_data(params, "apart", 40000, True, [8000] * 5)
    # five files of 101 records: the first process takes 51 of each (255), the second 50
    # (250); as one file of 505, 253 and 252. A fill of 0.3 holds 76 and 75 records (75
    # and 75 of one file), 0.2985 holds 76 and 74 (75 and 75), 0.3001 76 and 75 (75 and 75)
    fills = {"a": 0.3, "b": 0.2985, "c": 0.3001}
    raw = {"ablations": {k: {**two, "input": {"min_fraction_of_examples_in_queue": v}}
                         for k, v in fills.items()}}
    assert twins(raw, 505, True, [101] * 5) == {"c": "a"}
    assert twins(raw, 505, True) == {"b": "a", "c": "a"}


@pytest.mark.parametrize("a, b, said", [
    ({"url": "/data/syn.tar.gz", "md5": None}, {"url": "file:///data/syn.tar.gz", "md5": None},
     r"data.url: the same file, as a file:// URL or its path"),
    ({"url": "/data/syn.tar.gz", "md5": "d4effccd37c83496e8a393e25644a9b2"},
     {"url": "https://mirror.example/syn.tar.gz", "md5": "D4EFFCCD37C83496E8A393E25644A9B2"},
     r"data.md5, data.url: the same archive: data.md5 fixes its bytes, wherever it comes "
     r"from"),
    ({"url": "/data/syn.tar.gz", "md5": None}, {"url": "/data//./syn.tar.gz", "md5": None},
     r"data.url: the same file: a path with its '//' and '/./' taken out"),
], ids=["file-url", "mirror-same-md5", "slashes-and-dots"])
def test_data_set_variants_of_one_archive_spelled_two_ways_are_twins(a, b, said):
    """A data-set variant fetches its archive from data.url: the same file written as a
    file:// URL or a path, or any source of an archive whose md5 data.md5 fixes, gives the
    same bytes, and the variant would train exactly as the other. Refused by the loader,
    naming why; another md5, or another file without one, is another data set."""
    raw = {"dataset_ablations": {"a": {"data": a}, "b": {"data": b}}}
    with pytest.raises(ParamsError, match=r"dataset_ablations.b trains and scores exactly as "
                                          r"dataset_ablations.a \(it differs only in " + said):
        params_from_dict(raw)
    other = ({**b, "md5": "0" * 32} if b.get("md5", "official")
             else {**b, "url": "file:///data/other.tar.gz"})
    params_from_dict({"dataset_ablations": {"a": {"data": a}, "b": {"data": other}}})


@pytest.mark.parametrize("trial", [None, 3])
def test_a_variant_section_that_is_not_a_mapping_is_one_line(trial):
    """A variant's section is merged into the baseline's as a mapping of its settings: a
    list or a number in its place is one line naming it (with a trial's budget too, which
    is applied to the merged sections)."""
    raw = {"ablations": {"x": {"train": [1]}}}
    if trial:
        raw["ablation"] = {"trial_steps": trial}
    with pytest.raises(ParamsError, match=r"^ablations.x.train: expected a mapping of "
                                          r"train's settings \(e.g. train: \{...\}\), found "
                                          r"a list"):
        params_from_dict(raw)


def test_a_held_out_target_given_twice_is_refused():
    """eval.targets times each target once: one given twice (a slip for another) is one
    line naming it, in params.yaml and in a variant."""
    with pytest.raises(ParamsError, match=r"^eval.targets: expected each precision once, "
                                          r"found 0.8 more than once in \[0.8, 0.8, 0.84\]"):
        params_from_dict({"eval": {"targets": [0.8, 0.8, 0.84]}})
    with pytest.raises(ParamsError, match=r"eval.targets: expected each precision once"):
        params_from_dict({"ablations": {"v": {"eval": {"targets": [0.5, 0.5]}}}})
    params_from_dict({"eval": {"targets": [0.8, 0.84]}})


def test_paths_through_a_link_are_not_one_file_without_an_md5(tmp_path):
    """Without an md5, two paths are one archive only as written (or as a file:// URL):
    ``link/../x`` is not ``x`` where ``link`` points into another folder, whose ``x`` is
    another file. Both variants are kept, and each fetches its own bytes."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "a" / "syn.tar.gz").write_bytes(b"first")
    (tmp_path / "syn.tar.gz").write_bytes(b"second")
    one = str(tmp_path / "syn.tar.gz")
    other = str(tmp_path / "link" / ".." / "syn.tar.gz")
    assert Path(one).read_bytes() != Path(other).read_bytes()
    params = params_from_dict({"dataset_ablations": {"a": {"data": {"url": one, "md5": None}},
                                                     "b": {"data": {"url": other,
                                                                    "md5": None}}}})
    assert sorted(params.dataset_ablations) == ["a", "b"]


def test_the_two_groups_are_compared_each_within_itself():
    """The ablations train on the data the pipeline prepared, which reports/params.yaml
    does not name; a data-set variant on what it fetches. A data-set variant with the
    baseline's settings is not the baseline's twin to the loader (nor to params.twins):
    the report compares the groups on the data their runs recorded."""
    from cifar10_tutorial.params import twins

    raw = {"ablations": {"baseline": {}},
           "dataset_ablations": {"cifar": {"data": {"dataset": "cifar10"}}}}
    params = params_from_dict(raw)
    assert list(params.ablations) == ["baseline"] and list(params.dataset_ablations) == ["cifar"]
    assert twins(raw) == {}
    assert twins(raw, 3200, True) == {}
    # within a group, as before
    raw["dataset_ablations"]["again"] = {"data": {"dataset": "cifar10"}}
    with pytest.raises(ParamsError, match=r"dataset_ablations.again trains and scores exactly "
                                          r"as dataset_ablations.cifar"):
        params_from_dict(raw)
    assert twins(raw) == {"again": "cifar"}


def test_twins_are_named_for_a_tool_that_cuts_every_budget_to_one():
    """params.twins: what tools/check_code.py leaves out of a pass where its one short
    budget makes a variant of a budget of its own its baseline's twin; none at budgets
    that set them apart, and none (the stage's error to give) in a file refused for
    anything else; with the pass's data, those its stages would refuse there too."""
    from cifar10_tutorial.params import twins

    raw = {"ablation": {"max_steps": 100},
           "ablations": {"baseline": {}, "long": {"train": {"max_steps": 100}},
                         "other": {"train": {"seed": 3}},
                         "longer": {"train": {"max_steps": 100}, "run": {"summary_every": 5}}}}
    assert twins(raw) == {"long": "baseline", "longer": "baseline"}
    raw["ablation"]["max_steps"] = 50  # the baseline apart; the two long ones twins still
    assert twins(raw) == {"longer": "long"}
    del raw["ablations"]["longer"]
    assert twins(raw) == {}
    raw["ablations"]["other"] = {"train": {"seed": -1}}
    assert twins(raw) == {}
    # on the data its stages train on (as they refuse): 2 epochs of 3,200 images are 50 steps
    raw = {"ablation": {"max_steps": 50}, "train": {"batch_size": 128},
           "ablations": {"baseline": {}, "epochs": {"train": {"max_epochs": 2}},
                         "flips": {"input": {"flip": True}}}}
    assert twins(raw) == {}
    assert twins(raw, 3200, True) == {"epochs": "baseline", "flips": "baseline"}
    assert twins(raw, 3300, False) == {}


def test_the_variants_a_file_defines_are_named_as_dvc_reads_them(tmp_path):
    """reports/params.yaml's variant names by group, read as DVC and the stages read the
    file (YAML 1.2): `on:` and `no:` are the names "on" and "no" (PyYAML's YAML 1.1 would
    read True and False); a file that is none, or no file, is None and never read."""
    import os

    from cifar10_tutorial.params import defined_variants

    path = tmp_path / "params.yaml"
    path.write_text("ablations:\n  on: {model: {dropout: 0.3}}\n  baseline: {}\n"
                    "dataset_ablations:\n  no: {data: {dataset: svhn}}\n")
    assert defined_variants(path) == {"ablations": {"on", "baseline"},
                                      "dataset_ablations": {"no"}}
    path.write_text("ablations: [\n")
    assert defined_variants(path) is None
    path.unlink()
    assert defined_variants(path) is None
    os.mkfifo(path)
    assert defined_variants(path) is None
