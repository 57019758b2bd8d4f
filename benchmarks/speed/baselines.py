"""The pipelines the project's step is measured against (:mod:`.benchmark`): the typical
PyTorch one (PIL images, per-sample torchvision transforms of the same distortions, a
DataLoader, the stock LocalResponseNorm, NCHW) and TensorFlow's (:mod:`.tf_baseline`, run
by a Python that has TensorFlow)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import torch

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.model import build_model
from cifar10_tutorial.params import Params
from cifar10_tutorial.data.prepared import Prepared
from cifar10_tutorial.training.distortions import CONTRAST_RANGE, MAX_BRIGHTNESS_DELTA
from cifar10_tutorial.training.optimization import WeightAverage


def tensorflow_figures(tf_python: str, data_dir: Path, batch: int, warmup: int, windows: int,
                       steps: int) -> dict:
    """Run :mod:`.tf_baseline` in ``tf_python`` (a Python with TensorFlow); its JSON."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}  # the script imports numpy and TF only
    cmd = [tf_python, str(Path(__file__).with_name("tf_baseline.py")), "--data", str(data_dir),
           "--batch-size", str(batch), "--warmup", str(warmup), "--windows", str(windows),
           "--steps", str(steps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise PipelineError(f"the TensorFlow baseline failed ({' '.join(cmd)}), exit "
                            f"{proc.returncode}:\n{tail}\nGive --tf-python a Python with "
                            f"TensorFlow installed (pip install tensorflow-cpu), or leave it out.")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class TutorialJitter:
    """Per-image brightness, contrast and standardization of a uint8 CHW tensor
    (the tutorial's distortions written as a typical per-sample transform)."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        x = img.float() + float(np.random.uniform(-MAX_BRIGHTNESS_DELTA, MAX_BRIGHTNESS_DELTA))
        mean = x.mean(dim=(1, 2), keepdim=True)
        x = (x - mean) * float(np.random.uniform(*CONTRAST_RANGE)) + mean
        return (x - x.mean()) / x.std(correction=0).clamp_min(1.0 / x.numel() ** 0.5)


class PILImages(torch.utils.data.Dataset):
    """CIFAR images as PIL images, transformed one at a time, as in most tutorials."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        from PIL import Image

        self.images = [Image.fromarray(im.transpose(1, 2, 0)) for im in images]
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), int(self.labels[i])


def typical_model(num_classes: int) -> torch.nn.Module:
    """The same network with torch's stock LocalResponseNorm (alpha*size convention), NCHW."""
    model = build_model(num_classes)
    model.norm1 = torch.nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
    model.norm2 = torch.nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
    return model


def typical_step(params: Params, data: Prepared, device: torch.device, workers: int = 2):
    """(step, close): the typical pipeline's train step, as most tutorials write it: PIL
    images with per-sample transforms of the same distortions, a DataLoader with ``workers``
    processes, the same network with torch's LocalResponseNorm, NCHW, plain SGD."""
    import torchvision.transforms as T

    tr = params.train
    transform = T.Compose([T.RandomCrop(24), T.RandomHorizontalFlip(), T.PILToTensor(),
                           TutorialJitter()])
    loader = torch.utils.data.DataLoader(
        PILImages(data.train_images, data.train_labels, transform), batch_size=tr.batch_size,
        shuffle=True, num_workers=workers, drop_last=True,
        persistent_workers=workers > 0, pin_memory=device.type == "cuda")
    torch.manual_seed(tr.seed)
    tmodel = typical_model(data.num_classes).to(device)
    topt = torch.optim.SGD(tmodel.parameters(), lr=tr.initial_lr)
    tema = WeightAverage(tmodel, tr.moving_average_decay)
    state = {"n": 0, "it": iter(loader)}

    def step():
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(tmodel(x), y) + tr.weight_decay * sum(
            w.pow(2).sum() for w in tmodel.decayed_weights()) / 2
        topt.zero_grad(set_to_none=True)
        loss.backward()
        topt.step()
        state["n"] += 1
        tema.update(tmodel, state["n"])

    def close():
        state["it"] = None
    return step, close
