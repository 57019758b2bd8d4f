"""Devices and torchrun: the devices a job asks for checked, where a process stands in a
multi-process job, the relaunch under torchrun, and the few collectives the loop needs.

Run alone, a process is rank 0 of 1 and none of the collectives does anything. Under
torchrun (``train.num_devices`` > 1) each process trains a replica on its own batch,
DistributedDataParallel averages the gradients (NCCL on GPUs, gloo on CPUs), and rank 0
alone keeps the weight averages and writes every file.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Optional

import torch

from ..devices import pick_device, set_cpu_threads
from ..errors import PipelineError
from ..files import die_with_parent

PAUSED_EXIT = 75  # EX_TEMPFAIL: try again later; distinct from failures (1) and signals (128+N)
PAUSE_MARK_ENV = "CIFAR10_PAUSE_MARK"
JOIN_MARK_ENV = "CIFAR10_JOIN_MARK"  # a file the job's first local process touches once joined
FAIL_MARK_ENV = "CIFAR10_FAIL_MARK"  # where a job's error that every rank raised alike goes
NODES_ENV = {"count": "CIFAR10_NNODES", "endpoint": "CIFAR10_RDZV_ENDPOINT",
             "job_id": "CIFAR10_RDZV_ID"}


@dataclass(frozen=True)
class Nodes:
    """The machines of one job: how many, the rendezvous endpoint every node gives
    (``HOST:PORT``, usually on node 0) and the job's id there. One: this machine alone."""

    count: int = 1
    endpoint: Optional[str] = None
    job_id: str = "cifar10"

    def per_node(self, num_devices: int) -> int:
        """Processes on each node; checked: the nodes split ``train.num_devices`` evenly."""
        if self.count < 1:
            raise PipelineError(f"--nnodes {self.count}: give 1 or more nodes")
        if self.count > 1 and not self.endpoint:
            raise PipelineError(f"--nnodes {self.count} needs --rdzv-endpoint HOST:PORT (or "
                                f"{NODES_ENV['endpoint']}), the same on every node")
        if self.count > 1:
            _check_endpoint(self.endpoint)
        if num_devices % self.count:
            raise PipelineError(f"train.num_devices is {num_devices}, which {self.count} nodes "
                                f"cannot share evenly; set it to a multiple of --nnodes")
        return num_devices // self.count


def _check_endpoint(endpoint: str) -> None:
    """``HOST:PORT`` (a name or address, ``[v6]`` in brackets; a port 1-65535), before
    torchrun parses it into a traceback."""
    host, sep, port = endpoint.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not (sep and host and port.isdigit() and 1 <= int(port) <= 65535) \
            or any(c.isspace() or c in "/@[]" for c in host):
        raise PipelineError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT (a host name "
                            f"or address, a port from 1 to 65535), the same on every node, "
                            f"e.g. node0.cluster:29400")


@dataclass(frozen=True)
class Dist:
    """Where this process stands in a torchrun job (rank 0 of 1 when run alone)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


ALONE = Dist()


def nodes_from_stage(count: Optional[int], endpoint: Optional[str],
                     job_id: Optional[str]) -> Nodes:
    """The stage's ``--nnodes``, ``--rdzv-endpoint`` and ``--rdzv-id``, each defaulting to
    its environment variable (:data:`NODES_ENV`): how a run is carried out, not a param."""
    text = str(count) if count is not None else os.environ.get(NODES_ENV["count"], "1")
    if not text.strip().isdigit():
        raise PipelineError(f"{NODES_ENV['count']}={text!r}: give a whole number of nodes")
    return Nodes(int(text), endpoint or os.environ.get(NODES_ENV["endpoint"]) or None,
                 job_id or os.environ.get(NODES_ENV["job_id"]) or "cifar10")


def launched_by_torchrun() -> bool:
    """Whether torchrun's agent started this process: told by the agent's own marker
    (``TORCHELASTIC_RUN_ID``, set for each process it starts) and, where /proc shows it, by
    a parent process that is torchrun. ``LOCAL_RANK`` and ``WORLD_SIZE`` alone, left in an
    environment (a notebook, a shell profile), would skip the run lock and the deadline."""
    if not all(k in os.environ for k in ("LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")):
        return False
    try:
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:  # no /proc (macOS): the marker alone
        return True
    return b"torch.distributed.run" in parent or b"torchrun" in parent


def this_process() -> Dist:
    """This process's place in the torchrun job that started it (read from torchrun's
    environment), or :data:`ALONE`."""
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return ALONE
    return Dist(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


def check_devices(tr, per_node: Optional[int] = None) -> None:
    """Fail before anything starts when this node's share of ``train.num_devices`` asks for
    more GPUs than exist (or for any GPU where there is none), or, on the CPU, for more
    processes than the machine has CPUs: before torchrun, whose restarts would repeat it,
    and which would otherwise try to start them all (10**18 processes would hang the launch)."""
    if tr.device == "cuda":
        pick_device("cuda")
    want = tr.num_devices if per_node is None else per_node
    if want > 1 and tr.device != "cpu" and torch.cuda.is_available():
        have = torch.cuda.device_count()
        if want > have:
            raise PipelineError(
                f"train.num_devices is {tr.num_devices} but {have} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); set "
                f"train.num_devices={have}, or train.device=cpu to run {tr.num_devices} CPU "
                f"processes.")
        return
    # the machine's CPUs, not this process's share of them: nodes on one machine each
    # pinned to their own CPUs (taskset, docs/devices.md) still run their processes
    cpus = os.cpu_count() or 1
    if want > cpus:
        node = "" if per_node is None or per_node == tr.num_devices else " on each node"
        raise PipelineError(
            f"train.num_devices is {tr.num_devices}: {want} CPU processes{node}, but this "
            f"machine has {cpus} CPUs; set train.num_devices to at most {cpus} per node "
            f"(each process needs a CPU of its own).")


def torchrun_command(num_devices: int, max_restarts: int, script: str, args: list[str],
                     nodes: Nodes = Nodes(), join_timeout_s: float = 600.0) -> list[str]:
    """The command that runs ``script`` as ``num_devices`` processes: on this machine, or
    shared among ``nodes`` that meet at their rendezvous endpoint (c10d), each waiting up to
    ``join_timeout_s`` for the others."""
    if nodes.count <= 1:
        where = ["--standalone", f"--nproc_per_node={num_devices}"]
    else:
        where = [f"--nnodes={nodes.count}", f"--nproc_per_node={nodes.per_node(num_devices)}",
                 "--rdzv_backend=c10d", f"--rdzv_endpoint={nodes.endpoint}",
                 f"--rdzv_id={nodes.job_id}", f"--rdzv_conf=join_timeout={join_timeout_s:g}"]
    return [sys.executable, "-m", "torch.distributed.run", *where,
            f"--max-restarts={max_restarts}", script, *args]


def _say_while_joining(job, joined: Path, nodes: Nodes, timeout: float) -> None:
    """Until the job forms: what this node waits for, then every 30 s how long it has."""
    import socket
    import time

    print(f"node {socket.gethostname()}: waiting for all {nodes.count} nodes to join the "
          f"rendezvous at {nodes.endpoint} (job id {nodes.job_id}), up to {timeout:g} s "
          f"(run.join_timeout_s); start the same command on every node", file=sys.stderr,
          flush=True)
    start, note = time.monotonic(), 30.0
    while job.poll() is None and not joined.exists():
        time.sleep(0.5)
        if time.monotonic() - start >= note:
            print(f"still waiting for the other nodes at {nodes.endpoint} ({note:.0f} of "
                  f"{timeout:g} s)", file=sys.stderr, flush=True)
            note += 30.0
    if joined.exists():
        print(f"all {nodes.count} nodes joined at {nodes.endpoint}", file=sys.stderr, flush=True)


def relaunch_on_devices(tr, run, script: str, argv: list[str], nodes: Nodes = Nodes()) -> None:
    """With ``train.num_devices`` > 1, outside torchrun: run ``script`` under torchrun as one
    process per device (this function then returns in each of them; torchrun restarts a
    failed job ``run.max_restarts`` times), wait for it here, and exit with its status, or
    with :data:`PAUSED_EXIT` when the job paused at its deadline (its processes
    end with 0 then, so that torchrun does not take the pause for a failure).

    SIGTERM and SIGHUP sent to this process are passed on to torchrun, which passes them
    to its processes (they checkpoint and stop); Ctrl-C reaches them all from the terminal.
    With several ``nodes`` it says what it waits for until they have all joined, and a job
    that never formed is one line (:class:`PipelineError`)."""
    if tr.num_devices <= 1 or launched_by_torchrun():
        return
    import signal
    import subprocess
    import tempfile
    import threading

    check_devices(tr, nodes.per_node(tr.num_devices))
    if run.capture_step == "always":  # refused here, once, not in every process torchrun starts
        from .optimization import refused_capture

        raise refused_capture(f"{tr.num_devices} processes average their gradients between "
                              f"backward and update")
    cmd = torchrun_command(tr.num_devices, run.max_restarts, script, argv, nodes,
                           run.join_timeout_s)
    print("launching:", " ".join(cmd), file=sys.stderr, flush=True)
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="cifar10-launch-") as tmp:
        mark, joined, failed = Path(tmp) / "paused", Path(tmp) / "joined", Path(tmp) / "failed"
        job = subprocess.Popen(cmd, env={**os.environ, PAUSE_MARK_ENV: str(mark),
                                         JOIN_MARK_ENV: str(joined), FAIL_MARK_ENV: str(failed)},
                               preexec_fn=die_with_parent)

        def pass_on(signum, _frame):
            job.send_signal(signum)

        signal.signal(signal.SIGTERM, pass_on)
        signal.signal(signal.SIGHUP, pass_on)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if nodes.count > 1:
            threading.Thread(target=_say_while_joining, daemon=True,
                             args=(job, joined, nodes, run.join_timeout_s)).start()
        status = job.wait()
        paused = status == 0 and mark.exists()  # only a pause writes it
        formed = joined.exists()
        error = failed.read_text().strip() if status == 0 and failed.exists() else None
    if error:
        raise PipelineError(error)
    if status and nodes.count > 1 and not formed:
        raise PipelineError(f"the job never formed: fewer than {nodes.count} nodes joined the "
                            f"rendezvous at {nodes.endpoint} (job id {nodes.job_id}) within "
                            f"{run.join_timeout_s:g} s (run.join_timeout_s); start the same "
                            f"command on every node, with the same endpoint and job id")
    raise SystemExit(PAUSED_EXIT if paused else (status if status >= 0 else 128 - status))


def exit_paused(main: bool) -> None:
    """End a process paused at its deadline: with :data:`PAUSED_EXIT` alone, with 0 under
    torchrun (where any other status is a failure its agent restarts the job for, each
    restart resuming only to pause again), rank 0 first marking the pause in the file
    ``CIFAR10_PAUSE_MARK`` names for the stage that waits on torchrun."""
    if not launched_by_torchrun():
        raise SystemExit(PAUSED_EXIT)
    mark = os.environ.get(PAUSE_MARK_ENV)
    if main and mark:
        Path(mark).touch()
    raise SystemExit(0)


def fail_alike(message: str) -> None:
    """Fail the job with ``message``, an error every rank raises alike (a params mismatch
    between nodes, a world size that is not train.num_devices). Under the stage's torchrun
    the ranks end with 0 and the first local process leaves ``message`` for the stage, which
    prints it once: any other status is a failure torchrun's agent restarts the job for, and
    each restart would only repeat it. Elsewhere a :class:`PipelineError`."""
    mark = os.environ.get(FAIL_MARK_ENV)
    if not (launched_by_torchrun() and mark):
        raise PipelineError(message)
    if os.environ.get("LOCAL_RANK") == "0":
        Path(mark).write_text(message + "\n")
    raise SystemExit(0)


def _die_with_agent() -> None:
    """A watchdog thread: this process ends when torchrun's agent, its parent, is gone (a
    ``kill -9`` of the stage's process group reaches the agent, not the workers, which run
    in a session of their own). Otherwise the lost node's workers would go on training with
    the other nodes' and leave them waiting at torchrun's exit barrier."""
    import signal
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="die-with-agent").start()


def init_distributed(tr, run) -> tuple[Dist, torch.device]:
    """Join the torchrun job if there is one: NCCL on GPUs, gloo on CPU; a rank silent for
    ``run.collective_timeout_s`` fails the job."""
    d = this_process()
    if not d.active:
        device = pick_device(tr.device)
        if device.type == "cpu":
            set_cpu_threads()
        return d, device
    import torch.distributed as dist

    _die_with_agent()
    check_devices(tr, int(os.environ.get("LOCAL_WORLD_SIZE", d.world)))  # this node's share
    if d.world != tr.num_devices:
        fail_alike(f"torchrun started {d.world} processes but train.num_devices is "
                            f"{tr.num_devices}; set train.num_devices={d.world} (the global batch "
                            f"and the checkpoints depend on it).")
    device = pick_device(tr.device, d.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # share the granted CPUs among the processes of this node
        set_cpu_threads(int(os.environ.get("LOCAL_WORLD_SIZE", d.world)))
    # The store outlives a torchrun restart; without a fresh prefix per attempt, the
    # restarted ranks can read the dead ranks' addresses and fail to connect.
    timeout = timedelta(seconds=run.collective_timeout_s)
    store, _, _ = next(dist.rendezvous("env://", timeout=timeout))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            store=dist.PrefixStore(f"cifar10-attempt-{attempt}", store),
                            rank=d.rank, world_size=d.world, timeout=timeout)
    if d.local_rank == 0 and os.environ.get(JOIN_MARK_ENV):
        Path(os.environ[JOIN_MARK_ENV]).touch()  # the launcher stops waiting aloud
    return d, device


def shut_down(d: Dist) -> None:
    if d.active:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


def replicate(model: torch.nn.Module, device: torch.device, d: Dist) -> torch.nn.Module:
    """The module the step runs: ``model`` itself, or its DistributedDataParallel wrapper
    (which averages the gradients over the processes in ``backward``)."""
    if not d.active:
        return model
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def barrier(d: Dist) -> None:
    if d.active:
        import torch.distributed as dist
        dist.barrier()


def gather_on_main(obj, d: Dist) -> list | None:
    """``obj`` of every rank, in rank order, on rank 0 (None elsewhere)."""
    if not d.active:
        return [obj]
    import torch.distributed as dist

    out = [None] * d.world if d.main else None
    dist.gather_object(obj, out, dst=0)
    return out


def same_job(facts: dict, d: Dist) -> None:
    """Every rank's ``facts`` (its host, commit, params and data hashes, the step it resumes
    at) compared at start: a node that differs fails the whole job at once, on every rank
    alike, in one line naming it, instead of ranks that sleep in mismatched collectives."""
    if not d.active:
        return
    import torch.distributed as dist

    every = [None] * d.world
    dist.all_gather_object(every, facts)
    for rank, theirs in enumerate(every):
        for key in facts:
            if key != "host" and theirs[key] != every[0][key]:
                fail_alike(
                    f"rank {rank} (host {theirs['host']}) has {key} {theirs[key]!r} where rank 0 "
                    f"(host {every[0]['host']}) has {every[0][key]!r}: every node must run the "
                    f"same commit, params and prepared data, and resume from the same checkpoint "
                    f"(a shared folder, or --mirror); fix that node, then restart the job")


def agree(loss: torch.Tensor, stop: bool, d: Dist, device: torch.device,
          *more: torch.Tensor) -> tuple[float, bool, list[float]]:
    """One collective and one read-back at log steps: (the loss averaged over the ranks,
    whether any rank was asked to stop, this rank's values of ``more``), all read in one
    transfer from the device."""
    status = torch.stack([loss.float(), torch.tensor(float(stop), device=device),
                          *(m.float() for m in more)])
    if d.active:
        import torch.distributed as dist
        head = status[:2]  # the loss and the stop flag; ``more`` stays this rank's own
        dist.all_reduce(head)
        head[0] /= d.world
    values = status.tolist()
    return values[0], bool(values[1]), values[2:]
