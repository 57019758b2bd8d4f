"""The tutorial's network ("inference" in cifar10.py), TF-equivalent, in PyTorch.

conv1 5x5x64 -> ReLU -> pool1 3/2 SAME -> norm1 (LRN) -> conv2 5x5x64 -> ReLU
-> norm2 (LRN, before pooling) -> pool2 3/2 SAME -> local3 384 -> local4 192
-> softmax_linear (logits). 1,068,298 parameters with the fully connected top.

TF equivalences, each tested against the TF formula in tests/test_model.py:

* "SAME" max-pooling 3/2 pads on the right/bottom only (24 -> 12 -> 6): the
  same windows as PyTorch's ``ceil_mode=True`` without padding.
* TF's LRN divides by ``(bias + alpha * sum(x^2 over 9 channels))^beta`` with
  ``alpha = 0.001/9`` on the raw sum; :class:`TFLocalResponseNorm` computes the
  windowed sum as a banded 1x1 convolution (a matrix product, much faster on
  CPU than ``nn.LocalResponseNorm``, which is the same up to float rounding
  when given ``alpha=0.001``, ``size=9``).
* conv1's ReLU runs after pool1 (the same values and gradients, a quarter
  of the work).
* Weights are truncated-normal (cut at two standard deviations, as TF's
  ``truncated_normal_initializer``) with the table's stddevs.

Not equivalent on purpose: PyTorch's NCHW flatten orders local3's inputs as
(channel, row, column) where TF's NHWC reshape gives (row, column, channel);
this only matters for importing TF weights, which this project does not do.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

# docs/reference.md: LRN depth_radius 4, bias 1.0, alpha 0.001/9 (on the raw sum), beta 0.75
LRN_DEPTH_RADIUS = 4
LRN_BIAS = 1.0
LRN_ALPHA = 0.001 / 9.0
LRN_BETA = 0.75


def trunc_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """TF's truncated normal: N(0, std) redrawn outside two standard deviations."""
    return nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-2 * std, b=2 * std)


def _inverse_power(d: torch.Tensor, beta: float) -> torch.Tensor:
    """d^-beta. In bf16 (and fp16) with the tutorial's beta 0.75 as rsqrt(d sqrt(d)): on
    the CPU, bf16 ``pow`` converts element by element and is several times slower than
    these two. float32 keeps ``pow``, so the fp32 results stay bit for bit those of the
    committed runs."""
    if beta == 0.75 and d.dtype in (torch.bfloat16, torch.float16):
        return torch.rsqrt(d * d.sqrt())
    return d.pow(-beta)


def _band_sum(t: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
    """The sum over each channel's window: a 1x1 convolution with the 0/1 band in ``t``'s
    dtype, whatever mix of dtypes autocast hands the LRN."""
    return F.conv2d(t, band.to(t.dtype))


class _BandedLRN(torch.autograd.Function):
    """TF's LRN with a hand-written backward: fewer passes over memory than
    autograd's chain of elementwise ops (tested against autograd of the formula).

    With d = bias + alpha * band(x^2), p = d^-beta and y = x p:
    dL/dx = g p - 2 alpha beta x band(g y / d)   (the band is symmetric).
    """

    @staticmethod
    def forward(ctx, x, band, bias: float, alpha: float, beta: float):
        d = _band_sum(x * x, band).mul_(alpha).add_(bias)
        p = _inverse_power(d, beta)
        y = x * p
        ctx.save_for_backward(x, p, d, band)
        ctx.scale = -2.0 * alpha * beta
        return y

    @staticmethod
    def backward(ctx, g):
        x, p, d, band = ctx.saved_tensors
        gp = g * p
        u = _band_sum((gp * x).div_(d), band)
        return torch.addcmul(gp, x, u, value=ctx.scale), None, None, None, None


class TFLocalResponseNorm(nn.Module):
    """TF ``tf.nn.lrn``: x / (bias + alpha * sum_{|c'-c| <= r} x_{c'}^2)^beta.

    The windowed sum over channels is a 1x1 convolution with a fixed banded
    0/1 matrix (a buffer, not a parameter); forward and backward are written
    out in :class:`_BandedLRN`.
    """

    def __init__(self, channels: int, depth_radius: int = LRN_DEPTH_RADIUS,
                 bias: float = LRN_BIAS, alpha: float = LRN_ALPHA, beta: float = LRN_BETA):
        super().__init__()
        self.depth_radius, self.bias, self.alpha, self.beta = depth_radius, bias, alpha, beta
        idx = torch.arange(channels)
        band = ((idx[:, None] - idx[None, :]).abs() <= depth_radius).float()
        self.register_buffer("band", band[:, :, None, None], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # under bf16 autocast x arrives in bf16. On the CPU the LRN runs in bf16 too (casting
        # to float32 and back measured 25% slower, for differences of bf16's size); CUDA
        # autocast runs rsqrt and pow in float32, so there p, y and the gradient are float32
        return _BandedLRN.apply(x, self.band, self.bias, self.alpha, self.beta)

    def extra_repr(self) -> str:
        return (f"depth_radius={self.depth_radius}, bias={self.bias}, alpha={self.alpha:.6g}, "
                f"beta={self.beta}")


def tf_same_max_pool(x: torch.Tensor) -> torch.Tensor:
    """3x3/2 max-pool with TF "SAME" padding (extra padding on the right/bottom only)."""
    return F.max_pool2d(x, kernel_size=3, stride=2, ceil_mode=True)


class LocallyConnected2d(nn.Module):
    """A convolution whose weights are not shared across positions (cuda-convnet "local").

    Implemented with ``unfold`` and one batched matrix product over positions,
    never a Python loop over positions. Biases are per filter and position.
    """

    def __init__(self, in_channels: int, out_channels: int, in_size: int,
                 kernel_size: int = 3, padding: int = 1, std: float = 0.04, bias: float = 0.1):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.padding = kernel_size, padding
        self.out_size = in_size + 2 * padding - kernel_size + 1
        positions = self.out_size ** 2
        self.weight = nn.Parameter(torch.empty(positions, in_channels * kernel_size ** 2, out_channels))
        self.bias = nn.Parameter(torch.full((out_channels, self.out_size, self.out_size), bias))
        trunc_normal_(self.weight, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = F.unfold(x, self.kernel_size, padding=self.padding)  # N, C*k*k, P
        out = torch.bmm(cols.permute(2, 0, 1), self.weight)  # P, N, O
        out = out.permute(1, 2, 0).reshape(x.shape[0], self.out_channels, self.out_size, self.out_size)
        return out + self.bias


class CifarNet(nn.Module):
    """The tutorial's CNN on 24x24x3 crops.

    head: ``fc`` (the tutorial's local3/local4, fully connected) or ``local``
    (exercise 2: cuda-convnet's locally connected 64@3x3 and 32@3x3 layers).
    output: ``logits`` (the tutorial) or ``softmax`` (exercise 1: ``forward``
    returns probabilities; training always uses :meth:`logits`, so the loss is
    computed from log-softmax of the logits and stays numerically stable).
    lrn: False drops both normalization layers (an ablation).
    dropout: the probability of zeroing each of local3's and local4's outputs while
    training (not in the tutorial: 0, no layer, is its network).
    batch_norm: batch normalization after conv1 and conv2, before their ReLUs (not in the
    tutorial: False, no layer, is its network); the worked example of extending the
    network with a layer that has parameters and buffers (docs/extending.md).
    """

    def __init__(self, num_classes: int = 10, head: Literal["fc", "local"] = "fc",
                 output: Literal["logits", "softmax"] = "logits", lrn: bool = True,
                 image_size: int = 24, dropout: float = 0.0, batch_norm: bool = False):
        super().__init__()
        if head not in ("fc", "local") or output not in ("logits", "softmax"):
            raise ValueError(f"head must be fc|local and output logits|softmax, got {head}, {output}")
        self.head, self.output, self.use_lrn = head, output, lrn
        # no module at 0: the tutorial's network, its draws and state_dict, unchanged
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.num_classes = num_classes
        self.conv1 = nn.Conv2d(3, 64, 5, padding=2)
        self.bn1 = nn.BatchNorm2d(64) if batch_norm else nn.Identity()
        self.norm1 = TFLocalResponseNorm(64) if lrn else nn.Identity()
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.bn2 = nn.BatchNorm2d(64) if batch_norm else nn.Identity()
        self.norm2 = TFLocalResponseNorm(64) if lrn else nn.Identity()
        side = -(-(-(-image_size // 2)) // 2)  # two SAME pools: ceil(ceil(s/2)/2)
        self.feature_size = side
        if head == "fc":
            self.local3 = nn.Linear(64 * side * side, 384)
            self.local4 = nn.Linear(384, 192)
            self.softmax_linear = nn.Linear(192, num_classes)
        else:
            self.local3 = LocallyConnected2d(64, 64, side)
            self.local4 = LocallyConnected2d(64, 32, side)
            self.softmax_linear = nn.Linear(32 * side * side, num_classes)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The layer table of docs/reference.md: truncated-normal weights and constant biases."""
        for conv, bias in ((self.conv1, 0.0), (self.conv2, 0.1)):
            trunc_normal_(conv.weight, 5e-2)
            conv.bias.fill_(bias)
        if self.head == "fc":
            for layer in (self.local3, self.local4):
                trunc_normal_(layer.weight, 0.04)
                layer.bias.fill_(0.1)
            trunc_normal_(self.softmax_linear.weight, 1 / 192.0)
        else:  # cuda-convnet layers-conv-local-11pct: initW 0.04 local, 0.01 for fc10
            for layer in (self.local3, self.local4):
                trunc_normal_(layer.weight, 0.04)
                layer.bias.fill_(0.1)
            trunc_normal_(self.softmax_linear.weight, 0.01)
        self.softmax_linear.bias.fill_(0.0)

    def decayed_weights(self) -> list[torch.Tensor]:
        """The weights under L2 decay: local3's and local4's (the reference: wd 0.004 on those only)."""
        return [self.local3.weight, self.local4.weight]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        # relu(pool(x)) == pool(relu(x)) exactly, values and gradients (ReLU is monotonic and
        # the pool's argmax is the same element): the ReLU runs on the 4x smaller map
        x = self.norm1(F.relu(tf_same_max_pool(self.bn1(self.conv1(x)))))
        return tf_same_max_pool(self.norm2(F.relu(self.bn2(self.conv2(x)))))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        if self.head == "fc":
            x = self.drop(F.relu(self.local3(x.flatten(1))))
            x = self.drop(F.relu(self.local4(x)))
        else:
            x = self.drop(F.relu(self.local4(self.drop(F.relu(self.local3(x))))))
            x = x.flatten(1)
        return self.softmax_linear(x)

    def forward(self, x: torch.Tensor, return_logits: bool = False) -> torch.Tensor:
        """Logits, or probabilities with ``output: softmax`` unless ``return_logits``
        (training asks for logits, through DistributedDataParallel's forward)."""
        logits = self.logits(x)
        if self.output == "softmax" and not return_logits:
            return logits.softmax(dim=1)
        return logits


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def macs_per_image(model: CifarNet, image_size: int = 24) -> int:
    """Multiply-adds of one forward pass through the convolutions and the top layers."""
    s1 = image_size
    s2 = -(-s1 // 2)
    side = model.feature_size
    macs = s1 * s1 * 5 * 5 * 3 * 64 + s2 * s2 * 5 * 5 * 64 * 64
    if model.head == "fc":
        macs += 64 * side * side * 384 + 384 * 192 + 192 * model.num_classes
    else:
        pos = side * side
        macs += pos * 9 * 64 * 64 + pos * 9 * 64 * 32 + 32 * pos * model.num_classes
    return macs


def train_flops_per_image(model: CifarNet, image_size: int = 24) -> int:
    """Floating-point operations of one training example through the convolutions and the
    top layers: 2 per multiply-add, forward once and backward twice (the gradients of the
    inputs and of the weights of every layer), less conv1's input gradient, which nothing
    needs. LRN, pooling, ReLU, the loss and the update are not counted (they are
    elementwise and bound by memory, not by arithmetic)."""
    conv1 = image_size * image_size * 5 * 5 * 3 * 64
    return 2 * (3 * macs_per_image(model, image_size) - conv1)


def build_model(num_classes: int, **model) -> CifarNet:
    """The network of a ``model`` params section, passed whole (``**to_dict(params.model)``):
    each of its keys is an argument of :class:`CifarNet` of the same name, so a key added
    to the section acts wherever a network is built (training, eval, predict, publish)."""
    return CifarNet(num_classes=num_classes, **model)
