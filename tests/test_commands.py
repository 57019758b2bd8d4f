"""The `cifar10` console command (cifar10_tutorial.commands)."""
import shutil
import subprocess
import sys

import pytest

from cifar10_tutorial.commands import COMMANDS, main, stage_argv
from cifar10_tutorial.errors import PipelineError
from conftest import ROOT


def test_the_help_lists_every_command_with_an_example(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for name, (what, example, _) in COMMANDS.items():
        assert f"  {name} " in out and f"e.g. `{example}`" in out and example.startswith(f"cifar10 {name}")


def test_an_unknown_command_is_one_line():
    with pytest.raises(PipelineError, match=r"cifar10 trian: no such command; the commands are train, "):
        main(["trian"])


def test_a_stage_command_runs_the_stage_script_with_its_pipeline_arguments(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert stage_argv("train")[1:] == ["--data", "data/prepared", "--out", "data/train",
                                       "--live", "reports/train"]
    assert stage_argv("report")[0].endswith("stages/report.py")
    assert "--ablations" in stage_argv("report")  # reports/dvc.yaml's command


def test_a_module_command_shows_its_options_and_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "e.g. `cifar10 predict cat.jpg --top 3`" in out and "--top TOP" in out


@pytest.mark.skipif(shutil.which("cifar10") is None, reason="the package is not installed")
def test_the_console_script_is_installed_and_runs_a_stage_help():
    proc = subprocess.run(["cifar10", "eval", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "e.g. `cifar10 eval --model other/model.pt`" in proc.stdout and "--model" in proc.stdout
