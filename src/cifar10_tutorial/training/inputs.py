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

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from .distortions import (Draws, apply_distortions, cpu_generator, derive_seed,
                          draw_distortions, to_device)

if TYPE_CHECKING:
    from ..params import Params
    from ..data.prepared import Prepared

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
        self._pool = ThreadPoolExecutor(1) if prefetch else None
        self._pending: Optional[tuple[int, object]] = None

    def _make(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gb = self.batch_size * self.world
        idx = self.order.take(step * gb, gb)
        draws = draw_distortions(gb, cpu_generator(self.seed, 2, step), flip=self.flip)
        sl = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        idx = to_device(idx[sl], self.images.device)
        return apply_distortions(self.images[idx], draws[sl]), self.labels[idx]

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


class ShuffleQueue:
    """The tutorial's RandomShuffleQueue.

    The example stream (file order) enters the queue in chunks of ``chunk_size``, in
    stream order: inline, just before a dequeue needs it (``num_threads=0``, the default
    of ``run.queue_threads``), or by ``num_threads`` background workers that keep it
    topped up ahead of training. A dequeue waits until the queue is full
    (``capacity = min_after_dequeue + 3 x batch``): at the start that is the fill the
    tutorial waits for. Waiting for a full queue also makes the batches independent of
    thread timing, so a run is reproducible and resumes exactly: the state is the stream
    positions of the queued examples, the count enqueued and the dequeue generator.

    The queue holds what each queued example is, not its pixels: its example index and
    its distortion draws (drawn per chunk of the stream, a pure function of the stream
    position), in small tensors on the images' device. A dequeue gathers the picked
    ones and distorts the batch in one batched pass there: each image's distortion
    depends on its own pixels and draws only, so the batch is what distorting each
    example as it entered would have given, bit for bit.
    """

    FIELDS = ("idx", "oy", "ox", "flip", "delta", "factor")  # a slot: example and draws

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int,
                 min_after_dequeue: int, file_counts: Optional[list[int]] = None,
                 num_threads: int = 2, chunk_size: int = 256, flip: bool = True,
                 state: Optional[dict] = None, rank: int = 0):
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.flip = batch_size, seed, flip
        self.rank = rank
        self.min_after_dequeue = min_after_dequeue
        self.capacity = min_after_dequeue + 3 * batch_size
        self.chunk_size = chunk_size
        self.order = ExampleOrder(len(labels), derive_seed(seed, rank), "files", file_counts)
        dev = images.device
        kinds = {"idx": torch.long, "oy": torch.long, "ox": torch.long, "flip": torch.bool,
                 "delta": torch.float32, "factor": torch.float32}
        self.slots = {f: torch.empty(self.capacity, dtype=kinds[f], device=dev)
                      for f in self.FIELDS}
        self.buf_ids = torch.empty(self.capacity, dtype=torch.long)  # stream positions
        self.count = 0
        self.dequeue_gen = cpu_generator(seed, 3, rank)
        self.enqueued = 0  # stream positions [0, enqueued) have entered the queue
        if state:
            self._restore(state)
        self._next_chunk = self.enqueued // chunk_size
        self._skip_first = self.enqueued % chunk_size
        self._cond = threading.Condition()
        self._next_claim = self._next_chunk
        self._stop = False
        self._error: Optional[BaseException] = None
        self._threads = [threading.Thread(target=self._worker, daemon=True, name=f"queue-{i}")
                         for i in range(num_threads)]  # none: filled inline by get()
        for t in self._threads:
            t.start()

    # -- producing
    def _chunk_draws(self, chunk: int) -> Draws:
        return draw_distortions(self.chunk_size, cpu_generator(self.seed, 4, self.rank, chunk),
                                flip=self.flip)

    def _slots_at(self, positions: torch.Tensor) -> dict:
        """What the examples at stream positions are: their example indices and distortion
        draws, on the images' device (a pure function of the positions)."""
        chunks = positions // self.chunk_size
        rows = positions % self.chunk_size
        parts = {c: self._chunk_draws(c) for c in chunks.unique().tolist()}
        if len(parts) == 1:
            draws = next(iter(parts.values()))[rows]
        else:
            fields = []
            for name in ("oy", "ox", "flip", "delta", "factor"):
                col = torch.stack([getattr(parts[c], name) for c in parts])  # chunks x K
                where = torch.searchsorted(torch.tensor(list(parts)), chunks)
                fields.append(col[where, rows])
            draws = Draws(*fields)
        dev = self.images.device
        draws = draws.to(dev)
        return {"idx": to_device(self.order.at(positions), dev), "oy": draws.oy,
                "ox": draws.ox, "flip": draws.flip, "delta": draws.delta,
                "factor": draws.factor}

    def _examples(self, slots: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The distorted images and labels of queued examples (``slots``: theirs)."""
        draws = Draws(slots["oy"], slots["ox"], slots["flip"], slots["delta"], slots["factor"])
        return apply_distortions(self.images[slots["idx"]], draws), self.labels[slots["idx"]]

    def _worker(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stop:
                        return
                    chunk = self._next_claim
                    self._next_claim += 1
                start = chunk * self.chunk_size
                rows = torch.arange(self.chunk_size)
                if chunk == self._next_chunk and self._skip_first:
                    rows = rows[self._skip_first:]
                with self._cond:  # bound the work done ahead to about one queue's worth
                    self._cond.wait_for(lambda: self._stop or start - self.enqueued <= self.capacity)
                    if self._stop:
                        return
                positions = start + rows
                slots = self._slots_at(positions)
                done = 0
                with self._cond:
                    self._cond.wait_for(lambda: self._stop or self.enqueued == int(positions[0]))
                    while done < len(rows):
                        self._cond.wait_for(lambda: self._stop or self.count < self.capacity)
                        if self._stop:
                            return
                        k = min(self.capacity - self.count, len(rows) - done)
                        self._put({f: v[done:done + k] for f, v in slots.items()},
                                  positions[done:done + k])
                        done += k
                        self._cond.notify_all()
        except BaseException as exc:  # surfaced by the next dequeue
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _put(self, slots: dict, positions: torch.Tensor) -> None:
        """Append examples (the next stream positions, in order) after the queued ones."""
        sl = slice(self.count, self.count + len(positions))
        for f in self.FIELDS:
            self.slots[f][sl] = slots[f]
        self.buf_ids[sl] = positions
        self.count += len(positions)
        self.enqueued += len(positions)

    def _fill_inline(self) -> None:
        """Top the queue up in the calling thread (``num_threads=0``): the same stream
        and the same examples as the workers would enqueue, without threads that
        compete with the training step for the cores."""
        while self.count < self.capacity:
            start = self.enqueued
            end = min((start // self.chunk_size + 1) * self.chunk_size,
                      start + self.capacity - self.count)
            positions = torch.arange(start, end)
            self._put(self._slots_at(positions), positions)

    # -- consuming
    def get(self, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.batch_size
        if not self._threads:
            self._fill_inline()
        with self._cond:
            self._cond.wait_for(lambda: self._error is not None or self.count == self.capacity)
            if self._error is not None:
                raise RuntimeError("the shuffle queue's worker failed") from self._error
            n = self.count
            pick = torch.randperm(n, generator=self.dequeue_gen)[:b]
            pick_dev = to_device(pick, self.images.device)
            picked = {f: v[pick_dev] for f, v in self.slots.items()}
            # fill the holes below n - b with the survivors from the top b slots
            taken = torch.zeros(n, dtype=torch.bool)
            taken[pick] = True
            holes = pick[pick < n - b].sort().values
            movers = torch.arange(n - b, n)[~taken[n - b:]]
            if len(holes):
                h = to_device(holes, self.images.device)
                m = to_device(movers, self.images.device)
                for v in self.slots.values():
                    v[h] = v[m]
                self.buf_ids[holes] = self.buf_ids[movers]
            self.count = n - b
            self._cond.notify_all()
        return self._examples(picked)

    # -- checkpointing
    def state(self) -> dict:
        with self._cond:
            return {"ids": self.buf_ids[:self.count].clone(), "enqueued": self.enqueued,
                    "dequeue_gen": self.dequeue_gen.get_state()}

    def _restore(self, state: dict) -> None:
        ids = state["ids"].long()
        self.enqueued = int(state["enqueued"])
        self.dequeue_gen.set_state(state["dequeue_gen"])
        if len(ids) > self.capacity:
            raise ValueError(f"queue state holds {len(ids)} examples, capacity is {self.capacity}")
        if len(ids):
            for f, v in self._slots_at(ids).items():
                self.slots[f][:len(ids)] = v
        self.buf_ids[:len(ids)] = ids
        self.count = len(ids)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=10)


def shard_file_counts(file_counts: list[int], rank: int, world: int) -> list[int]:
    """Records per file that rank ``rank`` gets when it takes every ``world``-th record."""
    return [len(range(rank, c, world)) for c in file_counts]


def input_options(params: "Params", data: "Prepared") -> dict:
    """:func:`make_batches`'s settings from ``input`` and ``train`` (flips: the data set's
    default unless ``input.flip`` says)."""
    inp = params.input
    return {"shuffle": inp.shuffle, "batch_size": params.train.batch_size,
            "seed": params.train.seed,
            "flip": inp.flip if inp.flip is not None else bool(data.meta.get("flip", True)),
            "min_fraction_in_queue": inp.min_fraction_of_examples_in_queue,
            "queue_threads": params.run.queue_threads,
            "file_counts": data.meta.get("file_counts", {}).get("train")}


def make_batches(images: torch.Tensor, labels: torch.Tensor, *, shuffle: str, batch_size: int,
                 seed: int, flip: bool, min_fraction_in_queue: float, queue_threads: int,
                 file_counts: Optional[list] = None, state: Optional[dict] = None,
                 rank: int = 0, world: int = 1):
    """The batch source of rank ``rank`` of ``world``: its slice of each global batch
    (``shuffle: permutation``), or a shuffle queue over its own disjoint shard of the
    records (``queue``: ``file_counts``, the records of each file in order), resumed from
    ``state`` (a checkpoint's) when given."""
    if shuffle == "permutation":
        return PermutationBatches(images, labels, batch_size, seed, flip=flip,
                                  rank=rank, world=world)
    file_counts = file_counts or [len(labels)]
    if world > 1:  # every world-th record of each file
        starts = [0, *torch.tensor(file_counts).cumsum(0).tolist()[:-1]]
        idx = torch.cat([torch.arange(s + rank, s + c, world, device=images.device)
                         for s, c in zip(starts, file_counts)])
        images, labels = images[idx], labels[idx]
        file_counts = shard_file_counts(file_counts, rank, world)
    min_after = int(min_fraction_in_queue * len(labels))
    return ShuffleQueue(images, labels, batch_size, seed, min_after_dequeue=min_after,
                        file_counts=file_counts, num_threads=queue_threads, flip=flip,
                        state=state or None, rank=rank)
