"""A user's checkout is not the project's: the checks of the committed state (params
files, published weights, the exercises' lock) still pass after the edits the docs
themselves suggest: a local data.url (docs/data.md), a registered model version (a GTO
tag, docs/training.md) and a variant of one's own (docs/exercises.md)."""
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

STATE_CHECKS = [
    "tests/test_params.py::test_project_params_files_are_valid_and_the_default_source_is_the_official_one",
    "tests/test_publish.py::test_the_published_weights_are_what_their_card_says",
    "tests/test_exercises_lock.py::test_a_clone_lacks_only_the_data_to_be_up_to_date",
]


@pytest.mark.e2e
def test_the_state_checks_pass_in_a_checkout_edited_as_the_docs_say(tmp_path):
    clone = tmp_path / "mine"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    git = ["git", "-C", str(clone), "-c", "user.name=me", "-c", "user.email=me@localhost"]
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["data"].update(url=str(tmp_path / "cifar-10-binary.tar.gz"), md5=None)
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    exercises = yaml.safe_load((clone / "reports/params.yaml").read_text())
    exercises["ablations"]["dropout_05"] = {"model": {"dropout": 0.5}}
    (clone / "reports/params.yaml").write_text(yaml.safe_dump(exercises, sort_keys=False))
    subprocess.run([*git, "commit", "-qam", "my data, my variant"], check=True)
    subprocess.run([*git, "tag", "-a", "cifar10-cnn-100k@v1.0.0", "-m", "Registering artifact "
                    "cifar10-cnn-100k version v1.0.0"], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "0", *STATE_CHECKS], cwd=clone, capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout, proc.stdout[-2000:]
