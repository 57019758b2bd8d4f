import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cifar10_tutorial.synthetic import make_cifar10_archive

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture
def archive(tmp_path):
    """A small learnable archive in the official layout, with the arrays that went into it."""
    path = tmp_path / "cifar-10-binary.tar.gz"
    info = make_cifar10_archive(path, train_per_batch=12, test=15, seed=1)
    info["path"] = path
    return info


def copy_project(dest: Path) -> Path:
    """A copy of the project's pipeline files (no data, no venv) for stage-level tests."""
    for name in ("stages", "src", "dvc.yaml", "params.yaml", ".dvcignore"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def run_stage(project: Path, stage: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"stages/{stage}.py", *args], cwd=project,
                          capture_output=True, text=True, timeout=600)
