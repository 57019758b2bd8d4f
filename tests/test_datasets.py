"""CIFAR-100 and SVHN: layouts, round trips, defaults and bad inputs."""
import numpy as np
import pytest
import scipy.io
import torch

from cifar10_tutorial.data.datasets import CIFAR100, SVHN, get_dataset, sources
from cifar10_tutorial.data.download import DownloadError, DownloadOptions, check_mat, fetch
from cifar10_tutorial.params import params_from_dict
from cifar10_tutorial.data.preprocess import prepare, prepare_dataset, prepare_svhn
from cifar10_tutorial.data.prepared import PrepareError, load_prepared
from cifar10_tutorial.data.synthetic import make_cifar100_archive, make_svhn_files, write_tar_gz
from cifar10_tutorial.training.inputs import input_options, make_batches

FAST = DownloadOptions(timeout=5, retries=1, backoff=0.01, progress=False)


def test_registry_sources_follow_the_dataset():
    svhn = params_from_dict({"data": {"dataset": "svhn"}}).data
    assert [s[2] for s in sources(svhn)] == ["train_32x32.mat", "test_32x32.mat"]
    assert sources(svhn)[0][:2] == ("http://ufldl.stanford.edu/housenumbers/train_32x32.mat",
                                    "e26dedcc434d2e4c54c9b2d4a06d8373")
    extra = params_from_dict({"data": {"dataset": "svhn", "svhn_extra": True, "md5": None,
                                       "url": "/mirror/svhn"}}).data
    assert sources(extra)[2] == ("/mirror/svhn/extra_32x32.mat", None, "extra_32x32.mat")
    c100 = params_from_dict({"data": {"dataset": "cifar100"}}).data
    assert sources(c100) == [("https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                              "03b5dce01913d631647c71ecec9e9cb8", "cifar-100-binary.tar.gz")]
    assert get_dataset("svhn").flip is False and get_dataset("cifar100").flip is True


@pytest.mark.parametrize("label, classes", [("fine", 100), ("coarse", 20)])
def test_cifar100_round_trip(tmp_path, label, classes):
    info = make_cifar100_archive(tmp_path / "c100.tar.gz", train=50, test=20, seed=1)
    meta = prepare(tmp_path / "c100.tar.gz", tmp_path / "out", CIFAR100, label)
    data = load_prepared(tmp_path / "out")
    np.testing.assert_array_equal(data.train_images, info["train_images"])
    np.testing.assert_array_equal(data.test_labels, info[f"test_{label}"])
    assert meta["num_classes"] == classes and len(data.classes) == classes
    assert data.classes[3] == ("class_3" if label == "fine" else "superclass_3")
    assert sum(meta["class_counts"]["train"]) == 50 and len(meta["class_counts"]["train"]) == classes


NAMES100 = "".join(f"c{i}\n" for i in range(100)).encode()


def test_cifar100_bad_inputs(tmp_path):
    make_cifar100_archive(tmp_path / "ok.tar.gz", train=4, test=2)
    bad = tmp_path / "bad.tar.gz"
    write_tar_gz(bad, {"cifar-100-binary/train.bin": bytes(3074 * 2 - 5),
                       "cifar-100-binary/test.bin": bytes(3074),
                       "cifar-100-binary/fine_label_names.txt": NAMES100})
    with pytest.raises(PrepareError, match=r"train.bin: size 6143 bytes is not a positive multiple "
                                           r"of the record length 3074"):
        prepare(bad, tmp_path / "out", CIFAR100, "fine")
    write_tar_gz(bad, {"cifar-100-binary/test.bin": bytes(3074),
                       "cifar-100-binary/fine_label_names.txt": NAMES100})
    with pytest.raises(PrepareError, match=r"missing cifar-100-binary/train.bin"):
        prepare(bad, tmp_path / "out", CIFAR100, "fine")
    rec = bytes([0, 150]) + bytes(3072)  # fine label 150
    write_tar_gz(bad, {"cifar-100-binary/train.bin": rec, "cifar-100-binary/test.bin": rec,
                       "cifar-100-binary/fine_label_names.txt": NAMES100})
    with pytest.raises(PrepareError, match=r"record 0 has label 150; expected 0..99"):
        prepare(bad, tmp_path / "out", CIFAR100, "fine")
    assert not (tmp_path / "out").exists()


def test_svhn_round_trip_axis_order_and_zero_digit(tmp_path):
    files = make_svhn_files(tmp_path / "raw", train=40, test=25, seed=2)
    meta = prepare_svhn(tmp_path / "raw", tmp_path / "out", SVHN, chunk=16)
    data = load_prepared(tmp_path / "out")
    images, digits = files["train_32x32.mat"]
    np.testing.assert_array_equal(data.train_images, images)
    np.testing.assert_array_equal(data.train_labels, digits)
    assert 0 in data.train_labels.tolist()  # stored as 10 in the file
    raw = scipy.io.loadmat(tmp_path / "raw" / "train_32x32.mat")
    assert raw["y"].max() == 10 and raw["y"].min() >= 1
    # X is rows x cols x channels x N: pixel (row 3, col 7, green) of image 5
    assert data.train_images[5, 1, 3, 7] == raw["X"][3, 7, 1, 5]
    assert meta["classes"] == [str(d) for d in range(10)] and meta["flip"] is False
    assert meta["counts"] == {"train": 40, "test": 25}
    assert meta["class_counts"]["test"] == np.bincount(files["test_32x32.mat"][1], minlength=10).tolist()


def test_svhn_extra_joins_training(tmp_path):
    files = make_svhn_files(tmp_path / "raw", train=30, test=10, extra=50, seed=3)
    data_params = params_from_dict({"data": {"dataset": "svhn", "svhn_extra": True}}).data
    meta = prepare_dataset(tmp_path / "raw", tmp_path / "out", data_params)
    data = load_prepared(tmp_path / "out")
    assert meta["counts"]["train"] == 80 and meta["file_counts"]["train"] == [30, 50]
    np.testing.assert_array_equal(data.train_images[30:], files["extra_32x32.mat"][0])


def test_svhn_is_not_flipped_by_default(tmp_path):
    make_svhn_files(tmp_path / "raw", train=40, test=10)
    prepare_svhn(tmp_path / "raw", tmp_path / "out", SVHN)
    data = load_prepared(tmp_path / "out")
    images, labels = torch.from_numpy(data.train_images), torch.from_numpy(data.train_labels)
    for shuffle in ("permutation", "queue"):
        params = params_from_dict({"input": {"shuffle": shuffle,                                              "min_fraction_of_examples_in_queue": 0.1},
                                   "train": {"batch_size": 8}})
        batches = make_batches(images, labels, **input_options(params, data))
        assert batches.flip is False
        batches.close()
    forced = params_from_dict({"input": {"shuffle": "permutation", "flip": True}})
    batches = make_batches(images, labels, **input_options(forced, data))
    assert batches.flip is True
    batches.close()


def test_svhn_bad_inputs(tmp_path):
    make_svhn_files(tmp_path / "raw", train=10, test=5)
    out = tmp_path / "out"
    (tmp_path / "raw" / "test_32x32.mat").unlink()
    with pytest.raises(PrepareError, match=r"test_32x32.mat: no such file; run the download stage"):
        prepare_svhn(tmp_path / "raw", out, SVHN)
    scipy.io.savemat(tmp_path / "raw" / "test_32x32.mat",
                     {"X": np.zeros((28, 28, 3, 5), np.uint8), "y": np.ones((5, 1), np.uint8)})
    with pytest.raises(PrepareError, match=r"expected X of 32 x 32 x 3 x N uint8, found uint8 28 x 28 x 3 x 5"):
        prepare_svhn(tmp_path / "raw", out, SVHN)
    scipy.io.savemat(tmp_path / "raw" / "test_32x32.mat",
                     {"X": np.zeros((32, 32, 3, 5), np.uint8), "y": np.full((5, 1), 11, np.uint8)})
    with pytest.raises(PrepareError, match=r"label 11 at index 0; expected 1..10"):
        prepare_svhn(tmp_path / "raw", out, SVHN)
    (tmp_path / "raw" / "test_32x32.mat").write_bytes(b"<html>not found</html>")
    with pytest.raises(PrepareError, match=r"test_32x32.mat: not a readable MATLAB file"):
        prepare_svhn(tmp_path / "raw", out, SVHN)
    assert not out.exists() and not out.with_name("out.tmp").exists()


def test_svhn_download_checks(tmp_path):
    make_svhn_files(tmp_path / "mirror", train=10, test=5)
    data = params_from_dict({"data": {"dataset": "svhn", "url": str(tmp_path / "mirror")}}).data
    url, md5, name = sources(data)[0]
    with pytest.raises(DownloadError, match=r"md5 mismatch .*expected e26dedcc434d2e4c54c9b2d4a06d8373"):
        fetch(url, md5, tmp_path / "raw" / name, tmp_path / "part", FAST, check_mat)
    fetch(url, None, tmp_path / "raw" / name, tmp_path / "part", FAST, check_mat)
    page = tmp_path / "page.mat"
    page.write_bytes(b"<!DOCTYPE html><title>moved</title>")
    with pytest.raises(DownloadError, match=r"not a MATLAB 5.0 MAT-file.*HTML page"):
        fetch(str(page), None, tmp_path / "raw" / "x.mat", tmp_path / "part", FAST, check_mat)
    assert not (tmp_path / "raw" / "x.mat").exists()


@pytest.mark.e2e
def test_svhn_end_to_end_through_dvc_and_as_a_dataset_variant(tmp_path):
    import yaml
    from conftest import commit, dvc, tiny_project

    make_svhn_files(tmp_path / "svhn", train=200, test=60, seed=6)
    project = tiny_project(
        tmp_path, dict(train_per_batch=40, test=40, seed=5), ablation={"max_steps": 6},
        train=dict(max_steps=6, batch_size=16, log_every=3, device="cpu"), run=dict(checkpoint_every=100, summary_every=100),
        input=dict(min_fraction_of_examples_in_queue=0.1))
    raw = yaml.safe_load((project / "reports/params.yaml").read_text())
    raw["ablations"] = {"baseline": {}}
    # opt-in: the variant brings its whole data section; another seed than the baseline's,
    # which trains on the same SVHN files below (the report refuses a twin across groups)
    raw["dataset_ablations"] = {"svhn": {"data": {"dataset": "svhn", "url": str(tmp_path / "svhn"),
                                                  "md5": None}, "train": {"seed": 7}}}
    (project / "reports/params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    commit(project, "tiny")
    # the main pipeline on SVHN, only data.dataset (and the local files) changed
    out = dvc(project, "exp", "run", "-S", "data.dataset=svhn", "-S", f"data.url={tmp_path / 'svhn'}",
              "-S", "data.md5=null").stdout
    assert "Running stage 'preprocess'" in out and "Running stage 'eval'" in out
    meta = load_prepared(project / "data/prepared").meta
    assert meta["dataset"] == "svhn" and meta["flip"] is False and meta["counts"]["test"] == 60
    per_class = (project / "reports/eval/per_class.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in per_class[1:]] == [str(d) for d in range(10)]
    # exercise 6: the dataset variant fetches its own data; the report gains its table
    out = dvc(project, "repro", "reports/dvc.yaml:dataset_ablation@svhn", "reports/dvc.yaml:report").stdout
    assert "Running stage 'reports/dvc.yaml:dataset_ablation@svhn'" in out
    result = project / "reports/ablations/svhn"
    m, v = (__import__("json").loads((result / f).read_text()) for f in ("metrics.json", "variant.json"))
    assert v["dataset"] == "svhn" and m["eval"]["num_examples"] == 60 and v["num_train"] == 200
    text = (project / "reports/report.md").read_text()
    assert "Not run here" not in text
    assert f"{100 * m['eval']['precision_at_1']:.1f}%" in (project / "reports/tables/exercise6_svhn.csv").read_text()
