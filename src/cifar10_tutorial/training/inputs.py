"""The input pipeline: from the prepared tensors to the batches of each step.

:func:`make_batches` builds the batch source the run asks for (``input.shuffle``):

* ``queue`` (the tutorial): examples are read in file order (the record files
  shuffled each epoch, as ``string_input_producer`` does), distorted in chunks
  (:mod:`.distortions`) and put into a :class:`ShuffleQueue` that holds
  ``min_fraction_of_examples_in_queue x examples`` before the first batch
  (capacity = that + 3 x batch) and hands out random elements. By default
  (``run.queue_threads: 0``) the queue is topped up inline, between steps;
  with ``queue_threads`` > 0 background workers fill it. Lowering the fraction
  makes the first step come sooner and the batches less mixed.
* ``permutation``: a fresh random permutation each epoch, distorted batch by
  batch (prefetched one batch ahead). No fill time.

Under torchrun each rank gets its part: its slice of every global batch
(permutation), or a queue over its own disjoint shard of the records (queue).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from ..data.prepared import train_file_counts
from ..params import queue_capacity, queue_sizes, shard_file_counts
from .distortions import (COLUMNS, Draws, cpu_generator, crop_windows, derive_seed,
                          distort_batch, draw_distortions, pack_draws, to_device)

if TYPE_CHECKING:
    from ..params import Params
    from ..data.prepared import Prepared

# --------------------------------------------------------------------------- the run's shape


@dataclass(frozen=True)
class RunShape:
    """The run's sizes, derived once (:func:`run_shape`) and passed down: each process's
    batch and the global one, the training images, and this process's share of the
    records (its shard) with its shuffle queue's sizes."""

    batch_size: int  # each process's
    world: int  # processes
    num_train: int
    shard: int  # the records this process's queue reads (all of them in one process)
    min_after_dequeue: int  # the queue's fill before the first batch, of the shard
    queue_capacity: int

    @property
    def global_batch(self) -> int:  # the steps in an epoch: the schedule's (num_train / this)
        return self.batch_size * self.world


def run_shape(params: "Params", num_train: int, file_counts: Optional[list[int]] = None,
              rank: int = 0, world: int = 1) -> RunShape:
    """The :class:`RunShape` of rank ``rank`` of ``world`` processes, training on
    ``num_train`` images (``file_counts``: the records of each file; a rank's shard is
    every ``world``-th record of each)."""
    counts = file_counts or [num_train]
    shard = sum(shard_file_counts(counts, rank, world))
    bs = params.train.batch_size
    return RunShape(bs, world, num_train, shard,
                    *queue_sizes(params.input.min_fraction_of_examples_in_queue, shard, bs))


# --------------------------------------------------------------------------- example order


class ExampleOrder:
    """The infinite stream of example indices, epoch after epoch.

    ``permutation``: a random permutation per epoch. ``files``: the record files
    in a random order per epoch, the records of each in file order (what the
    tutorial's reader feeds its shuffle queue).
    """

    def __init__(self, num_examples: int, seed: int, mode: str = "permutation",
                 file_counts: Optional[list[int]] = None):
        self.n, self.seed, self.mode = num_examples, seed, mode
        self.file_counts = file_counts or [num_examples]
        if sum(self.file_counts) != num_examples:
            raise ValueError(f"file counts {self.file_counts} do not add up to {num_examples}")
        self._cache: dict[int, torch.Tensor] = {}

    def epoch(self, e: int) -> torch.Tensor:
        if e not in self._cache:
            gen = cpu_generator(self.seed, 1, e)
            if self.mode == "permutation":
                order = torch.randperm(self.n, generator=gen)
            else:
                starts = np.cumsum([0] + self.file_counts[:-1])
                files = torch.randperm(len(self.file_counts), generator=gen).tolist()
                order = torch.cat([torch.arange(starts[f], starts[f] + self.file_counts[f])
                                   for f in files])
            if len(self._cache) > 2:
                self._cache.pop(min(self._cache))
            self._cache[e] = order
        return self._cache[e]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Example indices at arbitrary stream positions."""
        epochs, offsets = positions // self.n, positions % self.n
        out = torch.empty_like(positions)
        for e in epochs.unique().tolist():
            mask = epochs == e
            out[mask] = self.epoch(e)[offsets[mask]]
        return out

    def take(self, start: int, count: int) -> torch.Tensor:
        """Example indices at stream positions [start, start + count)."""
        parts, pos = [], start
        while pos < start + count:
            e, off = divmod(pos, self.n)
            k = min(self.n - off, start + count - pos)
            parts.append(self.epoch(e)[off:off + k])
            pos += k
        return torch.cat(parts)


# --------------------------------------------------------------------------- batch sources


class PermutationBatches:
    """Batch ``step`` of a per-epoch permutation, distorted; the next one prefetched.

    For ``world`` processes, the global batch of ``batch_size x world`` examples
    and its draws are the same as in one process; rank ``r`` takes slice ``r``.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int,
                 flip: bool = True, rank: int = 0, world: int = 1, prefetch: bool = True):
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.flip = batch_size, seed, flip
        self.rank, self.world = rank, world
        self.order = ExampleOrder(len(labels), seed, "permutation")
        self.windows = crop_windows(images, flip)
        self._pool = ThreadPoolExecutor(1) if prefetch else None
        self._pending: Optional[tuple[int, object]] = None

    def _make(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gb = self.batch_size * self.world
        idx = self.order.take(step * gb, gb)
        draws = draw_distortions(gb, cpu_generator(self.seed, 2, step), flip=self.flip)
        mine = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        rows = pack_draws(draws[mine], idx[mine])  # the global batch's draws, this rank's part
        return distort_batch(self.windows, self.labels,
                             to_device(torch.from_numpy(rows), self.images.device))

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._pending is not None and self._pending[0] == step:
            batch = self._pending[1].result()
        else:
            batch = self._make(step)
        self._pending = (step + 1, self._pool.submit(self._make, step + 1)) if self._pool else None
        return batch

    def state(self) -> dict:
        return {}

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _QueueState:
    """The queue's bookkeeping, on the CPU: the stream positions of the queued examples
    (``ids[:count]``), how many have entered it, and the generator of its picks."""

    def __init__(self, capacity: int, gen: torch.Generator):
        self.ids = np.zeros(capacity, dtype=np.int64)
        self.count = self.enqueued = 0
        self.gen = gen

    @classmethod
    def from_state(cls, capacity: int, state: dict) -> "_QueueState":
        """The bookkeeping a :meth:`ShuffleQueue.state` (a checkpoint's) describes."""
        ids = state["ids"].long().numpy()
        if len(ids) > capacity:
            raise ValueError(f"queue state holds {len(ids)} examples, capacity is {capacity}")
        new = cls(capacity, torch.Generator())
        new.gen.set_state(state["dequeue_gen"])
        new.ids[:len(ids)], new.count, new.enqueued = ids, len(ids), int(state["enqueued"])
        return new

    def copy(self) -> "_QueueState":
        gen = torch.Generator()
        gen.set_state(self.gen.get_state())
        new = _QueueState(len(self.ids), gen)
        new.ids[:], new.count, new.enqueued = self.ids, self.count, self.enqueued
        return new

    def dequeue(self, batch: int) -> np.ndarray:
        """Fill to capacity from the stream, then pick ``batch`` at random: their stream
        positions. The hole each leaves below the top ``batch`` slots is filled by a
        survivor from the top, in order, so the slots stay ``ids[:count]``."""
        cap = len(self.ids)
        self.ids[self.count:] = np.arange(self.enqueued, self.enqueued + cap - self.count)
        self.enqueued += cap - self.count
        pick = torch.randperm(cap, generator=self.gen)[:batch].numpy()
        picked = self.ids[pick]
        taken = np.zeros(cap, dtype=bool)
        taken[pick] = True
        holes = np.sort(pick[pick < cap - batch])
        movers = np.arange(cap - batch, cap)[~taken[cap - batch:]]
        self.ids[holes] = self.ids[movers]
        self.count = cap - batch
        return picked


class ShuffleQueue:
    """The tutorial's RandomShuffleQueue.

    The example stream (file order) enters the queue in stream order, and a dequeue
    waits until the queue is full (``capacity = min_after_dequeue + 3 x batch``): at
    the start that is the fill the tutorial waits for, and waiting for a full queue
    makes the batches independent of timing, so a run is reproducible and resumes
    exactly. What the queue holds is a list of stream positions (:class:`_QueueState`);
    each position's example is the stream's (:class:`ExampleOrder`) and its distortion
    draws are those of its chunk of ``chunk_size`` positions (a generator per chunk): a
    pure function of the position. The state in a checkpoint is those positions, the
    count enqueued and the picks' generator.

    Work per step on the device is one gather and one batched distortion
    (:func:`.distortions.distort_batch`): the picks of ``steps_per_bulk`` steps are
    made ahead on the CPU, their examples and draws packed into one tensor and copied
    to the device at once. With ``num_threads`` > 0 the next bulk is made in a
    background thread while these steps train. Distorting each image from its own
    pixels and draws makes the batch what distorting each example as it entered the
    queue would have given, bit for bit.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int,
                 min_after_dequeue: int, file_counts: Optional[list[int]] = None,
                 num_threads: int = 0, chunk_size: int = 256, flip: bool = True,
                 state: Optional[dict] = None, rank: int = 0, steps_per_bulk: int = 64):
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.flip = batch_size, seed, flip
        self.rank = rank
        self.min_after_dequeue = min_after_dequeue
        self.capacity = queue_capacity(min_after_dequeue, batch_size)
        self.chunk_size, self.steps_per_bulk = chunk_size, steps_per_bulk
        self.order = ExampleOrder(len(labels), derive_seed(seed, rank), "files", file_counts)
        self.windows = crop_windows(images, flip)
        self.queue = (_QueueState.from_state(self.capacity, state) if state
                      else _QueueState(self.capacity, cpu_generator(seed, 3, rank)))
        self._draws: dict[int, np.ndarray] = {}  # chunk -> its packed draws
        self._bulk_start = self.queue.copy()  # the queue before the bulk's first pick
        self._bulk: Optional[torch.Tensor] = None  # steps x batch x COLUMNS, on the device
        self._used = 0  # of the bulk's steps
        self._pool = ThreadPoolExecutor(1) if num_threads else None
        self._next = None  # the next bulk being made: (its start state, future)

    # -- the picks, in bulk
    def _chunk_draws(self, chunk: int) -> Draws:
        return draw_distortions(self.chunk_size, cpu_generator(self.seed, 4, self.rank, chunk),
                                flip=self.flip, brightness=False)

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        """The packed rows (:func:`.distortions.pack_draws`) of the examples at stream
        ``positions``; each chunk's draws made once, and dropped once no queued or
        future position is in it."""
        chunks = positions // self.chunk_size
        out = np.empty((len(positions), len(COLUMNS)), dtype=np.int64)
        for c in np.unique(chunks).tolist():
            if c not in self._draws:
                draws = self._chunk_draws(c)
                start = c * self.chunk_size
                self._draws[c] = pack_draws(draws, self.order.take(start, self.chunk_size))
            mask = chunks == c
            out[mask] = self._draws[c][positions[mask] % self.chunk_size]
        return out

    def _make_bulk(self, queue: _QueueState) -> torch.Tensor:
        picked = np.stack([queue.dequeue(self.batch_size) for _ in range(self.steps_per_bulk)])
        rows = self._rows(picked.reshape(-1)).reshape(*picked.shape, len(COLUMNS))
        low = int(queue.ids[:queue.count].min()) if queue.count else queue.enqueued
        for c in [c for c in self._draws if c < low // self.chunk_size]:
            del self._draws[c]
        return to_device(torch.from_numpy(rows), self.images.device)

    def _next_bulk(self) -> None:
        if self._next is None and self._pool is not None:  # the first: made there too
            self._next = (self.queue.copy(), self._pool.submit(self._make_bulk, self.queue))
        if self._next is not None:
            self._bulk_start, future = self._next
            try:
                self._bulk = future.result()
            except Exception as exc:  # in the background thread: said where it happened
                raise RuntimeError("the shuffle queue's worker failed") from exc
        else:
            self._bulk_start = self.queue.copy()
            self._bulk = self._make_bulk(self.queue)
        self._used = 0
        if self._pool is not None:  # the queue is now where the next bulk starts
            self._next = (self.queue.copy(), self._pool.submit(self._make_bulk, self.queue))

    # -- consuming
    def get(self, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if self._bulk is None or self._used == len(self._bulk):
            self._next_bulk()
        rows = self._bulk[self._used]
        self._used += 1
        return distort_batch(self.windows, self.labels, rows)

    # -- checkpointing
    def state(self) -> dict:
        """The queue as it is after the batches handed out so far (the bulk's picks
        replayed from its start: the bulk itself may reach further ahead)."""
        q = self._bulk_start.copy()
        for _ in range(self._used if self._bulk is not None else 0):
            q.dequeue(self.batch_size)
        return {"ids": torch.from_numpy(q.ids[:q.count].copy()), "enqueued": q.enqueued,
                "dequeue_gen": q.gen.get_state()}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def input_options(params: "Params", data: "Prepared", shape: Optional[RunShape] = None) -> dict:
    """:func:`make_batches`'s settings from ``input``, ``train`` and the run's ``shape``
    (by default one process's; flips: the data set's default unless ``input.flip`` says)."""
    inp = params.input
    file_counts = train_file_counts(data)
    return {"shuffle": inp.shuffle, "seed": params.train.seed,
            "shape": shape or run_shape(params, len(data.train_labels), file_counts),
            "flip": inp.flip if inp.flip is not None else bool(data.meta.get("flip", True)),
            "queue_threads": params.run.queue_threads, "file_counts": file_counts}


def make_batches(images: torch.Tensor, labels: torch.Tensor, *, shuffle: str, shape: RunShape,
                 seed: int, flip: bool, queue_threads: int,
                 file_counts: Optional[list] = None, state: Optional[dict] = None,
                 rank: int = 0):
    """The batch source of rank ``rank`` of ``shape.world``: its slice of each global batch
    (``shuffle: permutation``), or a shuffle queue over its own disjoint shard of the
    records (``queue``: ``file_counts``, the records of each file in order), resumed from
    ``state`` (a checkpoint's) when given."""
    world = shape.world
    if shuffle == "permutation":
        return PermutationBatches(images, labels, shape.batch_size, seed, flip=flip,
                                  rank=rank, world=world)
    file_counts = file_counts or [len(labels)]
    if world > 1:  # every world-th record of each file
        starts = [0, *torch.tensor(file_counts).cumsum(0).tolist()[:-1]]
        idx = torch.cat([torch.arange(s + rank, s + c, world, device=images.device)
                         for s, c in zip(starts, file_counts)])
        images, labels = images[idx], labels[idx]
        file_counts = shard_file_counts(file_counts, rank, world)
    return ShuffleQueue(images, labels, shape.batch_size, seed,
                        min_after_dequeue=shape.min_after_dequeue,
                        file_counts=file_counts, num_threads=queue_threads, flip=flip,
                        state=state or None, rank=rank)
