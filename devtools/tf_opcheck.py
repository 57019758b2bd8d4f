"""Operation-level check against the reference: the tutorial's TensorFlow network and this
project's PyTorch one, given the same weights (a checkpoint of the tutorial's own run) and
the same images, must compute the same distorted inputs, logits, loss and gradients.

Two halves, since TensorFlow and this project's torch need not share an environment:

    # 1. where TensorFlow and the tutorial's code are (needs only tensorflow and numpy)
    python devtools/tf_opcheck.py tf --tutorial TUTORIAL_DIR \\
        --checkpoint runs/tf_reference_100k/train --data-dir D --out /tmp/opcheck.npz
    # 2. in this project's environment
    python devtools/tf_opcheck.py compare /tmp/opcheck.npz --out reports/tf_reference/opcheck.json

TUTORIAL_DIR holds the tutorial's ``cifar10.py`` (tensorflow/models, tutorials/image/cifar10,
run under ``tensorflow.compat.v1`` as docs/reference.md says); D holds
``cifar-10-batches-bin/`` as the tutorial extracts it. The ``tf`` half takes 128 training
records and 128 held-out records, draws one set of distortions (crop offsets, flips,
brightness deltas, contrast factors; numpy, seed 0) and applies them with TensorFlow's
own image ops, one image at a time, in the tutorial's order; it then runs the tutorial's
``inference`` and ``loss`` (cross-entropy plus weight decay) on the distorted batch with
the checkpoint's raw weights, their gradients, and the logits of the held-out batch
(central crops, standardized) with the moving averages. ``compare`` loads the same weights
into this project's network and repeats each computation with its own code.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

LAYERS = ("conv1", "conv2", "local3", "local4", "softmax_linear")
N, CROP, SEED = 128, 24, 0  # the tutorial's batch size (its graph is built for it)


def _records(path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` records of a CIFAR-10 binary file: uint8 N x 3 x 32 x 32, labels."""
    raw = np.fromfile(path, dtype=np.uint8, count=n * 3073).reshape(n, 3073)
    return raw[:, 1:].reshape(n, 3, 32, 32), raw[:, 0].astype(np.int64)


def _draws(n: int) -> dict:
    rng = np.random.default_rng(SEED)
    return {"oy": rng.integers(0, 32 - CROP + 1, n), "ox": rng.integers(0, 32 - CROP + 1, n),
            "flip": rng.random(n) < 0.5, "delta": rng.uniform(-63, 63, n).astype(np.float32),
            "factor": rng.uniform(0.2, 1.8, n).astype(np.float32)}


def tf_half(tutorial: Path, checkpoint: Path, data_dir: Path, out: Path) -> None:
    import tensorflow.compat.v1 as tf

    tf.disable_v2_behavior()
    sys.argv = sys.argv[:1]  # the tutorial's module parses its flags at import
    sys.path.insert(0, str(tutorial))
    import cifar10  # the tutorial's own network

    bins = data_dir / "cifar-10-batches-bin"
    train_u8, train_y = _records(bins / "data_batch_1.bin", N)
    test_u8, test_y = _records(bins / "test_batch.bin", N)
    d = _draws(N)
    reader = tf.train.load_checkpoint(str(checkpoint))
    step = int(reader.get_tensor("global_step"))
    with tf.Graph().as_default(), tf.Session() as sess:
        # the tutorial's distortions (cifar10_input.distorted_inputs) with the draws fixed:
        # random_crop, random_flip_left_right, random_brightness, random_contrast call these
        img = tf.placeholder(tf.float32, [32, 32, 3])
        oy, ox, flip = tf.placeholder(tf.int32, []), tf.placeholder(tf.int32, []), tf.placeholder(tf.bool, [])
        delta, factor = tf.placeholder(tf.float32, []), tf.placeholder(tf.float32, [])
        x = tf.slice(img, [oy, ox, 0], [CROP, CROP, 3])
        x = tf.cond(flip, lambda: tf.image.flip_left_right(x), lambda: x)
        x = tf.image.adjust_contrast(tf.image.adjust_brightness(x, delta), factor)
        distorted = tf.image.per_image_standardization(x)
        central = tf.image.per_image_standardization(  # cifar10_input.inputs
            tf.image.resize_image_with_crop_or_pad(img, CROP, CROP))
        hwc = lambda u8, i: u8[i].transpose(1, 2, 0).astype(np.float32)  # noqa: E731
        train_x = np.stack([sess.run(distorted, {img: hwc(train_u8, i), oy: d["oy"][i],
                                                 ox: d["ox"][i], flip: d["flip"][i],
                                                 delta: d["delta"][i], factor: d["factor"][i]})
                            for i in range(N)])
        test_x = np.stack([sess.run(central, {img: hwc(test_u8, i)}) for i in range(N)])
        images, labels = tf.placeholder(tf.float32, [N, CROP, CROP, 3]), tf.placeholder(tf.int32, [N])
        logits = cifar10.inference(images)
        total = cifar10.loss(logits, labels)
        ce = tf.get_default_graph().get_tensor_by_name("cross_entropy:0")
        variables = tf.trainable_variables()
        grads = tf.gradients(total, variables)
        res = {"step": step, "train_images": train_u8, "train_labels": train_y,
               "test_images": test_u8, "test_labels": test_y, "tf_train_inputs": train_x,
               "tf_test_inputs": test_x, **{f"draw_{k}": v for k, v in d.items()}}
        for suffix in ("", "/ExponentialMovingAverage"):  # raw weights, then the averages
            for v in variables:
                name = v.op.name
                value = reader.get_tensor(name + suffix)
                v.load(value, sess)
                res[("ema:" if suffix else "w:") + name] = value
            if suffix:
                res["tf_test_logits_ema"] = sess.run(logits, {images: test_x})
            else:
                out_ = sess.run([logits, ce, total, *grads], {images: train_x, labels: train_y})
                res.update({"tf_train_logits": out_[0], "tf_ce": out_[1], "tf_total": out_[2]})
                res.update({"g:" + v.op.name: g for v, g in zip(variables, out_[3:])})
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, tensorflow=tf.__version__, **res)
    print(f"wrote {out}: checkpoint of step {step}, {len(variables)} variables, TensorFlow "
          f"{tf.__version__}")


def to_torch_layout(name: str, value: np.ndarray) -> np.ndarray:
    """A TF variable of the tutorial (``conv1/weights`` ...) in the layout of this
    project's parameter: conv HWIO -> OIHW; dense in x out -> out x in, local3's inputs
    reordered from TF's H, W, C flattening to torch's C, H, W."""
    layer, kind = name.split("/")
    if kind == "biases":
        return value
    if layer.startswith("conv"):
        return value.transpose(3, 2, 0, 1)
    if layer == "local3":
        side = int(round((value.shape[0] / 64) ** 0.5))
        return value.reshape(side, side, 64, -1).transpose(3, 2, 0, 1).reshape(value.shape[1], -1)
    return value.T


def _diff(ours, theirs, what: str, tol: float) -> dict:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape:
        raise SystemExit(f"{what}: shape {ours.shape} here, {theirs.shape} in TensorFlow")
    gap = float(np.abs(ours - theirs).max())
    scale = float(np.abs(theirs).max()) or 1.0
    return {"what": what, "max_abs_diff": gap, "max_rel_diff": gap / scale, "tolerance": tol,
            "ok": gap / scale <= tol}


def compare(npz: Path, tol: float = 1e-4) -> dict:
    """This project's computations on the weights and images of the ``tf`` half's file."""
    import torch

    from cifar10_tutorial import provenance
    from cifar10_tutorial.model import build_model
    from cifar10_tutorial.scoring import eval_images
    from cifar10_tutorial.training.distortions import Draws, apply_distortions
    from cifar10_tutorial.training.optimization import loss_terms
    from tf_reference import UPSTREAM

    f = np.load(npz)  # numbers only: no pickles (allow_pickle stays False)
    model = build_model(10)
    torch_name = {f"{layer}/{kind}": f"{layer}.{'weight' if kind == 'weights' else 'bias'}"
                  for layer in LAYERS for kind in ("weights", "biases")}

    def load(prefix: str) -> None:
        model.load_state_dict({torch_name[k]: torch.from_numpy(to_torch_layout(k, f[prefix + k]))
                               for k in torch_name})

    nchw = lambda a: torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))  # noqa: E731
    draws = Draws(*(torch.from_numpy(f["draw_" + k]) for k in ("oy", "ox", "flip", "delta", "factor")))
    ours_in = apply_distortions(torch.from_numpy(f["train_images"]), draws)
    rows = [_diff(ours_in, nchw(f["tf_train_inputs"]), "distorted training inputs", tol),
            _diff(eval_images(torch.from_numpy(f["test_images"])), nchw(f["tf_test_inputs"]),
                  "evaluation inputs (central crop, standardized)", tol)]
    load("w:")
    labels = torch.from_numpy(f["train_labels"])
    logits = model.logits(nchw(f["tf_train_inputs"]))
    ce, wd = loss_terms(model, logits, labels, 0.004)
    (ce + wd).backward()
    rows += [_diff(logits.detach(), f["tf_train_logits"], "logits, raw weights", tol),
             _diff(ce.item(), f["tf_ce"], "cross-entropy", tol),
             _diff((ce + wd).item(), f["tf_total"], "total loss (with weight decay)", tol)]
    params = dict(model.named_parameters())
    rows += [_diff(params[torch_name[k]].grad, to_torch_layout(k, f["g:" + k]), f"gradient of {k}",
                   tol) for k in torch_name]
    with torch.no_grad():
        rows.append(_diff(model.logits(ours_in), f["tf_train_logits"],
                          "logits from this project's own distorted inputs", tol))
        load("ema:")
        ema = model.logits(nchw(f["tf_test_inputs"]))
    rows.append(_diff(ema, f["tf_test_logits_ema"], "logits, moving averages (held-out)", tol))
    same = float((ema.argmax(1).numpy() == f["tf_test_logits_ema"].argmax(1)).mean())
    return {"checkpoint_step": int(f["step"]), "tensorflow": str(f["tensorflow"]),
            "upstream": UPSTREAM, "images": {"train": N, "held_out": N}, "draw_seed": SEED,
            "same_predictions_held_out": same, "checks": rows, "all_ok": all(r["ok"] for r in rows),
            "provenance": {**provenance.code_version(), "torch": torch.__version__,
                           "cpu": provenance.cpu_model()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tf", help="the reference's side (needs tensorflow)")
    t.add_argument("--tutorial", type=Path, required=True, help="the folder of its cifar10.py")
    t.add_argument("--checkpoint", type=Path, required=True,
                   help="a train folder (its newest checkpoint) or a checkpoint prefix")
    t.add_argument("--data-dir", type=Path, required=True, help="holds cifar-10-batches-bin/")
    t.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare", help="this project's side (needs this project's torch)")
    c.add_argument("npz", type=Path)
    c.add_argument("--out", type=Path, help="a JSON of the result (e.g. reports/tf_reference/opcheck.json)")
    a = ap.parse_args(argv)
    if a.cmd == "tf":
        tf_half(a.tutorial, a.checkpoint, a.data_dir, a.out)
        return
    if not a.npz.is_file():
        sys.exit(f"error: {a.npz}: {'a folder' if a.npz.is_dir() else 'no such file'}; expected "
                 f"the .npz the tf half writes (`python devtools/tf_opcheck.py tf ... --out "
                 f"{a.npz}`, in a Python with TensorFlow)")
    try:
        r = compare(a.npz)
    except (OSError, ValueError, KeyError) as exc:  # a damaged or foreign .npz
        sys.exit(f"error: {a.npz}: not the tf half's arrays ({type(exc).__name__}: "
                 f"{str(exc)[:120]}); make it again with `python devtools/tf_opcheck.py tf ...`")
    for row in r["checks"]:
        print(f"{'ok  ' if row['ok'] else 'FAIL'} {row['what']:<52} max |diff| {row['max_abs_diff']:.2e}"
              f"  relative {row['max_rel_diff']:.2e}")
    print(f"checkpoint of step {r['checkpoint_step']}; the same held-out predictions for "
          f"{r['same_predictions_held_out']:.1%} of {N} images")
    if a.out:
        a.out.write_text(json.dumps(r, indent=2) + "\n")
        print(f"wrote {a.out}")
    sys.exit(0 if r["all_ok"] else 1)


if __name__ == "__main__":
    main()
