"""What the measuring scripts share: a throwaway folder where the real train stage runs,
and the environment in which it runs this checkout's package."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC_DIR, STAGES_DIR = ROOT / "src", ROOT / "stages"


def scratch_train_project(proj: Path, data_dir: Path, params: dict) -> Path:
    """A throwaway folder where ``stages/train.py --data prepared --out run --live live``
    runs: the stage scripts copied, ``data_dir`` (prepared data) linked as ``prepared`` and
    ``params`` written as params.yaml. Run it with :func:`package_env`: the copy has no
    src/ beside its stages (where the package is not installed it runs from the checkout)."""
    proj.mkdir(parents=True, exist_ok=True)
    shutil.copytree(STAGES_DIR, proj / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(Path(data_dir).resolve(), proj / "prepared")
    (proj / "params.yaml").write_text(json.dumps(params))  # JSON is YAML
    return proj


def package_env(env: dict) -> dict:
    """``env`` with this package's folder first on PYTHONPATH, for a stage run elsewhere."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC_DIR),
                                                                env.get("PYTHONPATH")]))}
