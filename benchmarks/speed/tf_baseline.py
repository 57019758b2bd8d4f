"""The TensorFlow comparison of the throughput benchmark: the same network and
distortions written the way a TensorFlow 2 user would (Keras, tf.data with
AUTOTUNE and prefetch, ``model.fit``), timed in windows of training steps.

Runs in a Python that has TensorFlow (this project does not depend on it);
imports only numpy and tensorflow, and prints one JSON object:

    python benchmarks/speed/tf_baseline.py --data data/prepared [--batch-size 128]

``python benchmarks/benchmark.py --tf-python /path/to/python`` runs it as part of
the benchmark. Figures of a run on this project's machine are in the README.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def build_dataset(tf, images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int):
    """tf.data with the tutorial's distortions, as cifar10_input.py does them, per image."""
    nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    ds = tf.data.Dataset.from_tensor_slices((nhwc, labels.astype(np.int32)))
    ds = ds.shuffle(int(0.4 * len(labels)), seed=seed).repeat()

    def distort(img, label):
        x = tf.image.random_crop(tf.cast(img, tf.float32), [24, 24, 3])
        x = tf.image.random_flip_left_right(x)
        x = tf.image.random_brightness(x, max_delta=63)
        x = tf.image.random_contrast(x, lower=0.2, upper=1.8)
        return tf.image.per_image_standardization(x), label

    ds = ds.map(distort, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build_model(tf, num_classes: int):
    """The tutorial's layer table in Keras (SAME padding, tf.nn.lrn, L2 on local3/local4)."""
    keras = tf.keras
    layers = keras.layers

    def lrn(t):
        return tf.nn.local_response_normalization(t, depth_radius=4, bias=1.0,
                                                  alpha=0.001 / 9.0, beta=0.75)

    l2 = keras.regularizers.L2(0.004 / 2)  # wd x sum(W^2)/2
    inp = keras.Input((24, 24, 3))
    x = layers.Conv2D(64, 5, padding="same", activation="relu")(inp)
    x = layers.MaxPool2D(3, 2, padding="same")(x)
    x = layers.Lambda(lrn)(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu")(x)
    x = layers.Lambda(lrn)(x)
    x = layers.MaxPool2D(3, 2, padding="same")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(384, activation="relu", kernel_regularizer=l2)(x)
    x = layers.Dense(192, activation="relu", kernel_regularizer=l2)(x)
    out = layers.Dense(num_classes)(x)
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def run(tf, data: Path, batch_size: int, warmup: int, windows: int, steps: int,
        seed: int = 0) -> dict:
    tf.keras.utils.set_random_seed(seed)
    images = np.load(data / "train_images.npy", mmap_mode="r")
    labels = np.load(data / "train_labels.npy")
    num_classes = int(json.loads((data / "meta.json").read_text())["num_classes"])
    ds = build_dataset(tf, np.asarray(images), labels, batch_size, seed)
    model = build_model(tf, num_classes)

    marks: list[float] = []

    class Timer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 >= warmup and (batch + 1 - warmup) % steps == 0:
                marks.append(time.perf_counter())

    model.fit(ds, epochs=1, steps_per_epoch=warmup + windows * steps, callbacks=[Timer()],
              verbose=0)
    rates = [batch_size * steps / (b - a) for a, b in zip(marks, marks[1:])]
    return {"tensorflow": tf.__version__, "examples_per_sec": rates,
            "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                        "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="the prepared data")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    # one line for what a user gets wrong, as the package's commands do (this script does not
    # import the package: it runs in a Python that may have TensorFlow alone)
    missing = [n for n in ("train_images.npy", "train_labels.npy", "meta.json")
               if not (args.data / n).is_file()]
    if missing:
        sys.exit(f"error: {args.data}: no {', '.join(missing)}; give --data the prepared data "
                 f"(the preprocess stage's output folder)")
    try:
        import tensorflow as tf
    except ImportError as exc:
        sys.exit(f"error: {sys.executable} cannot import tensorflow ({exc}); run this script "
                 f"with a Python that has TensorFlow (pip install tensorflow-cpu)")
    print(json.dumps(run(tf, args.data, args.batch_size, args.warmup, args.windows, args.steps)))


if __name__ == "__main__":
    main()
