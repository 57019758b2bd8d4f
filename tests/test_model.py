import math

import pytest
import torch
import torch.nn.functional as F

from cifar10_tutorial import model as model_module
from cifar10_tutorial.model import (CifarNet, LocallyConnected2d, TFLocalResponseNorm,
                                    macs_per_image, num_params, tf_same_max_pool)


def test_exact_parameter_count_and_macs():
    model = CifarNet()
    assert num_params(model) == 1_068_298
    per_layer = [sum(p.numel() for p in getattr(model, n).parameters())
                 for n in ("conv1", "conv2", "local3", "local4", "softmax_linear")]
    assert per_layer == [4_864, 102_464, 885_120, 73_920, 1_930]
    assert macs_per_image(model) == 18_470_784  # the reference: about 18.5 M


@pytest.mark.parametrize("head", ["fc", "local"])
@pytest.mark.parametrize("num_classes", [10, 100])
def test_output_shapes(head, num_classes):
    model = CifarNet(num_classes=num_classes, head=head)
    assert model(torch.randn(5, 3, 24, 24)).shape == (5, num_classes)


def test_feature_map_sizes_follow_tf_same_pooling():
    model = CifarNet()
    x = torch.randn(2, 3, 24, 24)
    a = tf_same_max_pool(F.relu(model.conv1(x)))
    assert a.shape == (2, 64, 12, 12)
    assert model.features(x).shape == (2, 64, 6, 6)


def test_same_pooling_equals_right_bottom_padding_with_minus_infinity():
    x = torch.randn(3, 4, 24, 24)
    ref = F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=-math.inf), 3, 2)
    torch.testing.assert_close(tf_same_max_pool(x), ref, rtol=0, atol=0)
    y = torch.randn(3, 4, 12, 12)
    ref = F.max_pool2d(F.pad(y, (0, 1, 0, 1), value=-math.inf), 3, 2)
    assert ref.shape[-1] == 6
    torch.testing.assert_close(tf_same_max_pool(y), ref, rtol=0, atol=0)


def tf_lrn_reference(x, depth_radius=4, bias=1.0, alpha=0.001 / 9, beta=0.75):
    """tf.nn.lrn written out: sqr_sum[c] = sum(x[c-r .. c+r]^2), out = x / (bias + alpha*sqr_sum)^beta."""
    out = torch.empty_like(x)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - depth_radius), min(channels, c + depth_radius + 1)
        sqr_sum = (x[:, lo:hi] ** 2).sum(dim=1)
        out[:, c] = x[:, c] / (bias + alpha * sqr_sum) ** beta
    return out


def test_lrn_matches_the_tf_formula_and_torch_with_alpha_times_size():
    x = torch.randn(4, 64, 6, 6, dtype=torch.float64) * 20
    lrn = TFLocalResponseNorm(64).double()
    torch.testing.assert_close(lrn(x), tf_lrn_reference(x), rtol=1e-12, atol=1e-12)
    torch_lrn = torch.nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
    torch.testing.assert_close(torch_lrn(x), tf_lrn_reference(x), rtol=1e-10, atol=1e-10)
    # the common mistake, alpha=0.001/9 given to torch, is measurably different
    wrong = torch.nn.LocalResponseNorm(9, alpha=0.001 / 9, beta=0.75, k=1.0)
    assert (wrong(x) - tf_lrn_reference(x)).abs().max() > 1e-3


def test_lrn_channels_last_and_float32():
    x = (torch.randn(2, 64, 12, 12) * 10).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(TFLocalResponseNorm(64)(x), tf_lrn_reference(x), rtol=1e-5, atol=1e-6)


def test_lrn_gradient_matches_autograd_of_the_tf_formula():
    x = (torch.randn(3, 64, 5, 5, dtype=torch.float64) * 20).requires_grad_()
    g = torch.randn(3, 64, 5, 5, dtype=torch.float64)
    (want,) = torch.autograd.grad(tf_lrn_reference(x), x, g)
    (got,) = torch.autograd.grad(TFLocalResponseNorm(64).double()(x), x, g)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    small = (torch.randn(2, 16, 3, 3, dtype=torch.float64) * 5).requires_grad_()
    assert torch.autograd.gradcheck(TFLocalResponseNorm(16).double(), (small,))
    # float32 in channels_last, as in training
    x32 = x.detach().float().contiguous(memory_format=torch.channels_last).requires_grad_()
    (got32,) = torch.autograd.grad(TFLocalResponseNorm(64)(x32), x32, g.float())
    torch.testing.assert_close(got32.double(), want, rtol=1e-4, atol=1e-6)


def test_lrn_in_bf16_matches_the_formula_to_bf16_rounding():
    """bf16 takes rsqrt(d sqrt(d)) for d^-0.75: the values and gradients of the float64
    formula, to bf16's 8 bits of mantissa; float32 keeps pow, bit for bit."""
    x = (torch.randn(4, 64, 6, 6, dtype=torch.float64) * 20).requires_grad_()
    g = torch.randn(4, 64, 6, 6, dtype=torch.float64)
    want = tf_lrn_reference(x)
    (want_grad,) = torch.autograd.grad(want, x, g)
    xb = x.detach().bfloat16().contiguous(memory_format=torch.channels_last).requires_grad_()
    got = TFLocalResponseNorm(64)(xb)
    assert got.dtype == torch.bfloat16
    (got_grad,) = torch.autograd.grad(got, xb, g.bfloat16())
    torch.testing.assert_close(got.double(), want.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got_grad.double(), want_grad, rtol=5e-2, atol=5e-2)
    d = torch.rand(1000, dtype=torch.float64) * 5 + 1
    torch.testing.assert_close(model_module._inverse_power(d.bfloat16(), 0.75).double(),
                               d.pow(-0.75), rtol=1e-2, atol=0)
    d32 = d.float()
    assert torch.equal(model_module._inverse_power(d32, 0.75), d32.pow(-0.75))


def test_lrn_takes_the_dtype_mix_of_cuda_autocast(monkeypatch):
    """CUDA autocast runs the band's conv2d in bf16 but rsqrt and pow in float32: a bf16 x
    and band, a float32 p, output and gradient. The LRN gives the formula's values and
    gradients to bf16 rounding (here ``_inverse_power`` returns float32, as on CUDA)."""
    inverse_power = model_module._inverse_power
    monkeypatch.setattr(model_module, "_inverse_power",
                        lambda d, beta: inverse_power(d.float(), beta))
    x = (torch.randn(4, 64, 6, 6, dtype=torch.float64) * 20).requires_grad_()
    g = torch.randn(4, 64, 6, 6, dtype=torch.float64)
    want = tf_lrn_reference(x)
    (want_grad,) = torch.autograd.grad(want, x, g)
    xb = x.detach().bfloat16().contiguous(memory_format=torch.channels_last).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = TFLocalResponseNorm(64)(xb)
    assert got.dtype == torch.float32
    (got_grad,) = torch.autograd.grad(got, xb, g.float())  # outside autocast, as in training
    torch.testing.assert_close(got.double(), want.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got_grad.double(), want_grad, rtol=5e-2, atol=5e-2)


def test_the_network_under_cpu_bf16_autocast_has_float32s_gradients_to_rounding():
    torch.manual_seed(0)
    model = CifarNet().to(memory_format=torch.channels_last)
    x, y = torch.randn(8, 3, 24, 24), torch.randint(0, 10, (8,))

    def loss_and_grads(bf16: bool):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        return loss, torch.autograd.grad(loss, list(model.parameters()))
    loss32, grads32 = loss_and_grads(False)
    loss16, grads16 = loss_and_grads(True)
    assert loss16.item() == pytest.approx(loss32.item(), rel=1e-3)
    for (name, _), a, b in zip(model.named_parameters(), grads32, grads16):
        assert b.dtype == torch.float32 and torch.isfinite(b).all(), name
        # bf16 keeps 8 bits of mantissa: the direction of each gradient, to a few percent
        assert F.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.97, name
        assert (a - b).norm() < 0.3 * a.norm(), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_bf16_train_step_on_cuda_has_a_finite_loss():
    """The train stage's own step under CUDA autocast, where conv2d runs in bf16 and the
    LRN's rsqrt in float32."""
    from cifar10_tutorial.training.optimization import (make_optimizer, make_step,
                                                       step_options, training_model)
    from conftest import tiny_params

    cuda = torch.device("cuda")
    params = tiny_params(train={"precision": "bf16", "device": "cuda"})
    torch.manual_seed(0)
    model = training_model(params, 10, cuda)
    step = make_step(model, model, make_optimizer(model, params), cuda, **step_options(params))
    x, y = torch.randn(32, 3, 24, 24, device=cuda), torch.randint(0, 10, (32,), device=cuda)
    losses = [step(x, y)[0].item() for _ in range(3)]
    assert all(math.isfinite(v) for v in losses), losses
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_relu_after_pool1_gives_the_reference_values_and_gradients():
    """features() applies conv1's ReLU after the pool; the reference order gives the same."""
    torch.manual_seed(0)
    model = CifarNet().double()
    x = torch.randn(4, 3, 24, 24, dtype=torch.float64)

    def reference_features(m, x):
        x = m.norm1(tf_same_max_pool(F.relu(m.conv1(x))))
        return tf_same_max_pool(m.norm2(F.relu(m.conv2(x))))
    g = torch.randn(4, 64, 6, 6, dtype=torch.float64)
    want = torch.autograd.grad(reference_features(model, x), list(model.parameters())[:4], g)
    got = torch.autograd.grad(model.features(x), list(model.parameters())[:4], g)
    torch.testing.assert_close(model.features(x), reference_features(model, x), rtol=0, atol=0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_truncated_normal_initialisation_and_biases():
    torch.manual_seed(0)
    model = CifarNet()
    trunc_factor = 0.8796  # std of a normal truncated at +-2 sigma, relative to sigma
    for name, std in (("conv1", 5e-2), ("conv2", 5e-2), ("local3", 0.04), ("local4", 0.04),
                      ("softmax_linear", 1 / 192)):
        w = getattr(model, name).weight
        assert w.abs().max() <= 2 * std + 1e-7
        assert w.std().item() == pytest.approx(std * trunc_factor, rel=0.1 if w.numel() > 5000 else 0.25)
    for name, bias in (("conv1", 0.0), ("conv2", 0.1), ("local3", 0.1), ("local4", 0.1),
                       ("softmax_linear", 0.0)):
        assert torch.all(getattr(model, name).bias == bias)


def test_softmax_output_returns_probabilities_from_the_same_logits():
    torch.manual_seed(0)
    a = CifarNet(output="logits")
    b = CifarNet(output="softmax")
    b.load_state_dict(a.state_dict())
    x = torch.randn(6, 3, 24, 24)
    probs = b(x)
    torch.testing.assert_close(probs.sum(1), torch.ones(6))
    torch.testing.assert_close(probs, a(x).softmax(1))
    torch.testing.assert_close(b.logits(x), a(x))


def test_locally_connected_matches_a_loop_over_positions():
    torch.manual_seed(0)
    layer = LocallyConnected2d(5, 4, in_size=6)
    x = torch.randn(3, 5, 6, 6)
    out = layer(x)
    padded = F.pad(x, (1, 1, 1, 1))
    ref = torch.empty_like(out)
    for i in range(6):
        for j in range(6):
            patch = padded[:, :, i:i + 3, j:j + 3].reshape(3, -1)  # C*k*k in unfold's order
            ref[:, :, i, j] = patch @ layer.weight[i * 6 + j] + layer.bias[:, i, j]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # unshared: different positions have different weights
    assert not torch.equal(layer.weight[0], layer.weight[1])


def test_without_lrn():
    model = CifarNet(lrn=False)
    assert isinstance(model.norm1, torch.nn.Identity) and isinstance(model.norm2, torch.nn.Identity)
    assert num_params(model) == 1_068_298


def test_decayed_weights_are_local3_and_local4():
    model = CifarNet()
    assert [w.shape for w in model.decayed_weights()] == [(384, 2304), (192, 384)]


def test_every_model_param_is_an_argument_of_the_network():
    """The network is built from the `model` section passed whole: a key added to
    ModelParams must be an argument of CifarNet of the same name, or building fails."""
    from cifar10_tutorial.model import build_model
    from cifar10_tutorial.params import ModelParams, to_dict

    net = build_model(10, **to_dict(ModelParams()))
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    with_bn = build_model(10, **{**to_dict(ModelParams()), "batch_norm": True})
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in with_bn.modules()) == 2


def test_a_model_file_with_integer_buffers_is_saved_and_loaded(tmp_path):
    """BatchNorm's num_batches_tracked (int64) and running statistics travel in model.pt
    and come back in the rebuilt network (eval, predict and publish read it so); a float
    weight stored as an integer, a complex tensor or a NaN is still refused."""
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.model import build_model
    from cifar10_tutorial.model_files import load_trained
    from cifar10_tutorial.params import params_from_dict, to_dict

    params = to_dict(params_from_dict({"model": {"lrn": False, "batch_norm": True}}))
    net = build_model(10, **params["model"])
    net.train()
    net(torch.randn(8, 3, 24, 24))  # running statistics and the counter move
    state = net.state_dict()
    assert state["bn1.num_batches_tracked"].dtype == torch.int64
    assert state["bn1.num_batches_tracked"].item() == 1
    obj = {"model": state, "ema": state, "params": params, "num_classes": 10,
           "classes": [f"c{i}" for i in range(10)], "step": 1}
    torch.save(obj, tmp_path / "model.pt")
    loaded, _ = load_trained(tmp_path / "model.pt")
    x = torch.randn(4, 3, 24, 24)
    assert torch.equal(loaded(x), net.eval()(x))
    assert loaded.state_dict()["bn2.num_batches_tracked"].item() == 1
    for name, ema in {
        "an integer copy of a weight": {**state, "conv1.weight": state["conv1.weight"].long()},
        "a complex tensor": {**state, "conv1.bias": state["conv1.bias"].to(torch.complex64)},
        "a float counter": {**state, "bn1.num_batches_tracked": torch.tensor(1.0)},
        "NaN": {**state, "bn1.running_var": torch.full_like(state["bn1.running_var"],
                                                            float("nan"))},
    }.items():
        torch.save({**obj, "ema": ema}, tmp_path / "bad.pt")
        with pytest.raises(PipelineError, match="damaged or was edited") as exc:
            load_trained(tmp_path / "bad.pt")
        assert "bad.pt" in str(exc.value), name
