import math

import numpy as np
import pytest
import torch

from cifar10_tutorial.training.distortions import (CONTRAST_RANGE, Draws, apply_distortions, cpu_generator,
                                          draw_distortions)
from cifar10_tutorial.scoring import eval_images, per_image_standardization
from cifar10_tutorial.training.inputs import ExampleOrder, PermutationBatches, ShuffleQueue


def reference_distort(img: np.ndarray, oy, ox, flip, delta, factor) -> np.ndarray:
    """The tutorial's distortions for one image, written out plainly (HWC like TF, then back)."""
    x = img.transpose(1, 2, 0).astype(np.float64)  # H, W, C
    x = x[oy:oy + 24, ox:ox + 24, :]  # random_crop
    if flip:
        x = x[:, ::-1, :]  # random_flip_left_right
    x = x + delta  # random_brightness
    mean = x.mean(axis=(0, 1), keepdims=True)  # random_contrast: per channel mean
    x = (x - mean) * factor + mean
    adjusted_std = max(x.std(), 1.0 / math.sqrt(x.size))  # per_image_standardization
    x = (x - x.mean()) / adjusted_std
    return x.transpose(2, 0, 1)


def test_distortions_match_the_per_image_reference():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(64, 3, 32, 32), dtype=np.uint8)
    draws = draw_distortions(64, cpu_generator(0, 1))
    assert draws.flip.any() and not draws.flip.all()
    out = apply_distortions(torch.from_numpy(images), draws).numpy()
    assert out.shape == (64, 3, 24, 24) and out.dtype == np.float32
    for i in range(64):
        ref = reference_distort(images[i], int(draws.oy[i]), int(draws.ox[i]), bool(draws.flip[i]),
                                float(draws.delta[i]), float(draws.factor[i]))
        np.testing.assert_allclose(out[i], ref, rtol=1e-4, atol=1e-4)


def test_each_distortion_alone():
    img = torch.arange(3 * 32 * 32, dtype=torch.float32).reshape(1, 3, 32, 32) % 251
    u8 = img.to(torch.uint8)
    base = dict(oy=torch.tensor([3]), ox=torch.tensor([5]), flip=torch.tensor([False]),
                delta=torch.tensor([0.0]), factor=torch.tensor([1.0]))
    plain = apply_distortions(u8, Draws(**base))
    torch.testing.assert_close(plain, per_image_standardization(u8[:, :, 3:27, 5:29].float()))
    flipped = apply_distortions(u8, Draws(**{**base, "flip": torch.tensor([True])}))
    torch.testing.assert_close(flipped, plain.flip(-1))
    # brightness alone is undone by standardization; with contrast it is not
    bright = apply_distortions(u8, Draws(**{**base, "delta": torch.tensor([40.0])}))
    torch.testing.assert_close(bright, plain, rtol=1e-5, atol=1e-5)


def test_draw_ranges_and_no_flip_option():
    d = draw_distortions(20000, cpu_generator(5))
    assert d.oy.min() == 0 and d.oy.max() == 8 and d.ox.min() == 0 and d.ox.max() == 8
    assert -63 <= d.delta.min() < -60 and 60 < d.delta.max() <= 63
    lo, hi = CONTRAST_RANGE
    assert lo <= d.factor.min() < lo + 0.01 and hi - 0.01 < d.factor.max() <= hi
    assert 0.48 < d.flip.float().mean() < 0.52
    assert not draw_distortions(100, cpu_generator(5), flip=False).flip.any()


def test_standardization_statistics_and_constant_images():
    x = torch.rand(8, 3, 24, 24) * 255
    y = per_image_standardization(x)
    torch.testing.assert_close(y.mean(dim=(1, 2, 3)), torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(dim=(1, 2, 3), correction=0), torch.ones(8), atol=1e-4, rtol=0)
    const = per_image_standardization(torch.full((2, 3, 24, 24), 77.0))
    assert torch.all(const == 0)  # std clamped at 1/sqrt(N): no division by zero


def test_eval_input_is_the_central_crop_standardized():
    u8 = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(eval_images(u8), per_image_standardization(u8[:, :, 4:28, 4:28].float()))


def test_example_orders():
    perm = ExampleOrder(100, seed=1, mode="permutation")
    assert sorted(perm.epoch(0).tolist()) == list(range(100))
    assert not torch.equal(perm.epoch(0), perm.epoch(1))
    assert torch.equal(perm.take(95, 10), torch.cat([perm.epoch(0)[95:], perm.epoch(1)[:5]]))
    assert torch.equal(perm.at(torch.tensor([3, 150])), torch.stack([perm.epoch(0)[3], perm.epoch(1)[50]]))
    files = ExampleOrder(100, seed=1, mode="files", file_counts=[20] * 5)
    order = files.epoch(0).tolist()
    blocks = [order[i:i + 20] for i in range(0, 100, 20)]
    assert all(b == list(range(b[0], b[0] + 20)) and b[0] % 20 == 0 for b in blocks)


def toy_data(n=600):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (n,), generator=g))


def test_permutation_batches_are_reproducible_and_prefetch_changes_nothing():
    images, labels = toy_data()
    a = PermutationBatches(images, labels, 32, seed=7)
    b = PermutationBatches(images, labels, 32, seed=7, prefetch=False)
    for step in (0, 1, 2, 40):
        xa, ya = a.get(step)
        xb, yb = b.get(step)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    a.close()
    c = PermutationBatches(images, labels, 32, seed=8, prefetch=False)
    assert not torch.equal(c.get(0)[0], b.get(0)[0])


def test_permutation_batches_of_two_ranks_are_the_halves_of_one():
    images, labels = toy_data()
    one = PermutationBatches(images, labels, 64, seed=3, prefetch=False)
    halves = [PermutationBatches(images, labels, 32, seed=3, rank=r, world=2, prefetch=False)
              for r in range(2)]
    x, y = one.get(5)
    parts = [h.get(5) for h in halves]
    assert torch.equal(x, torch.cat([p[0] for p in parts])) and torch.equal(y, torch.cat([p[1] for p in parts]))


def test_shuffle_queue_fills_before_the_first_batch_and_keeps_invariants():
    images, labels = toy_data()
    q = ShuffleQueue(images, labels, batch_size=16, seed=0, min_after_dequeue=100,
                     file_counts=[120] * 5, num_threads=2, chunk_size=32, steps_per_bulk=7)
    assert q.capacity == 100 + 3 * 16
    try:
        x, y = q.get()
        assert x.shape == (16, 3, 24, 24) and y.shape == (16,)
        assert q.state()["enqueued"] == q.capacity  # the whole capacity was filled first
        for _ in range(60):  # more than an epoch
            q.get()
            st = q.state()
            ids = st["ids"]
            assert len(ids) == q.capacity - 16 == len(set(ids.tolist()))  # nothing twice
            assert ids.max() < st["enqueued"]
    finally:
        q.close()


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_shuffle_queue_is_reproducible_and_resumes_exactly(threads):
    images, labels = toy_data()
    kw = dict(batch_size=16, seed=0, min_after_dequeue=100, file_counts=[120] * 5, chunk_size=32)
    q1 = ShuffleQueue(images, labels, num_threads=threads, **kw)
    first = [q1.get() for _ in range(10)]
    state = q1.state()
    rest = [q1.get() for _ in range(10)]
    q1.close()
    q2 = ShuffleQueue(images, labels, num_threads=1, **kw)
    again = [q2.get() for _ in range(20)]
    q2.close()
    for (a, b), (c, d) in zip(first + rest, again):
        assert torch.equal(a, c) and torch.equal(b, d)
    q3 = ShuffleQueue(images, labels, num_threads=threads, state=state, **kw)
    resumed = [q3.get() for _ in range(10)]
    q3.close()
    for (a, b), (c, d) in zip(rest, resumed):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_shuffle_queue_with_no_minimum_gives_less_mixed_batches():
    """min_after_dequeue=0: batches come from about 3 batches of file-ordered records."""
    n = 600
    images = torch.zeros((n, 3, 32, 32), dtype=torch.uint8)
    labels = torch.arange(n) // 60  # file order groups the labels
    spread = {}
    for min_after in (0, 500):
        q = ShuffleQueue(images, labels, batch_size=20, seed=0, min_after_dequeue=min_after,
                         file_counts=[n], num_threads=1, chunk_size=20)
        spread[min_after] = np.mean([len(q.get()[1].unique()) for _ in range(10)])
        q.close()
    assert spread[0] < spread[500]


def test_shuffle_queue_surfaces_worker_errors(monkeypatch):
    import cifar10_tutorial.training.inputs as inputs

    def broken(*args, **kwargs):
        raise MemoryError("no room for the chunk")

    monkeypatch.setattr(inputs, "draw_distortions", broken)
    images, labels = toy_data(100)
    q = ShuffleQueue(images, labels, batch_size=8, seed=0, min_after_dequeue=10, num_threads=1)
    with pytest.raises(RuntimeError, match="worker failed") as exc:
        q.get()
    assert isinstance(exc.value.__cause__, MemoryError)
    q.close()


def test_a_queued_batch_is_each_example_distorted_alone_bit_for_bit():
    """The queue keeps stream positions, and distorts a batch when it is handed out:
    every image of it equals its example distorted alone from its stream position (its
    chunk's draws), as distorting each on entry would give; also across a bulk's end."""
    from cifar10_tutorial.training.distortions import apply_distortions
    from cifar10_tutorial.training.inputs import _QueueState

    images, labels = toy_data(600)
    q = ShuffleQueue(images, labels, batch_size=24, seed=5, min_after_dequeue=120,
                     file_counts=[120] * 5, num_threads=0, chunk_size=32, steps_per_bulk=5)
    try:
        for step in range(12):
            st = q.state()  # the queue as the next pick finds it
            ahead = _QueueState.from_state(q.capacity, st)
            positions = ahead.dequeue(24)
            x, y = q.get(step)
            for i, pos in enumerate(positions.tolist()):
                draws = q._chunk_draws(pos // 32)[pos % 32:pos % 32 + 1]
                example = q.order.at(torch.tensor([pos]))
                alone = apply_distortions(images[example], draws)
                assert torch.equal(x[i:i + 1], alone) and y[i] == labels[example[0]]
    finally:
        q.close()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_runs_shape_is_what_its_queues_and_schedule_use(world):
    """The run's sizes are derived once (run_shape) and passed down: each rank's queue is
    over the shard the shape counts, with the fill and capacity it gives; the global
    batch is the schedule's; the report's queue table reads the same capacity."""
    from cifar10_tutorial.params import params_from_dict, queue_sizes
    from cifar10_tutorial.training.inputs import make_batches, run_shape
    from cifar10_tutorial.training.optimization import schedule

    images, labels = toy_data(301)
    counts = [100, 101, 100]
    params = params_from_dict({"train": {"batch_size": 8, "max_steps": 5},
                               "input": {"min_fraction_of_examples_in_queue": 0.3}})
    for rank in range(world):
        shape = run_shape(params, 301, counts, rank, world)
        q = make_batches(images, labels, shuffle="queue", shape=shape, seed=0, flip=True,
                         queue_threads=0, file_counts=counts, rank=rank)
        try:
            assert shape.shard == len(q.labels)
            assert (q.min_after_dequeue, q.capacity) == (shape.min_after_dequeue,
                                                        shape.queue_capacity)
            assert shape.queue_capacity == queue_sizes(0.3, len(q.labels), 8)[1]
        finally:
            q.close()
        assert shape.global_batch == 8 * world
        assert schedule(params, 301, shape.global_batch).steps_per_epoch == 301 / (8 * world)
