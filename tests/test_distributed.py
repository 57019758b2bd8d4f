"""Synchronous data-parallel training under torchrun, with gloo on the CPU."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import torch

from cifar10_tutorial.errors import PipelineError
from cifar10_tutorial.params import to_dict
from cifar10_tutorial.training.paths import TrainPaths
from cifar10_tutorial.checkpoint_files import load_checkpoint
from cifar10_tutorial.training.distributed import PAUSED_EXIT
from cifar10_tutorial.training.deadline import STOP_AT_ENV
from cifar10_tutorial.training.train import train
from conftest import ROOT, main_sections, tiny_params, write_prepared, write_train_project

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def project(tmp_path, data, **sections):
    return write_train_project(tmp_path / "proj", data, to_dict(tiny_params(**sections)))


def run(proj, timeout=300):
    return subprocess.run([sys.executable, "stages/train.py"], cwd=proj, capture_output=True,
                          text=True, timeout=timeout, env=ENV)


def start_until(proj, marker):
    """Start the train stage; return it and its torchrun workers once ``marker`` is printed."""
    proc = subprocess.Popen([sys.executable, "stages/train.py"], cwd=proj, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV)
    for line in proc.stdout:
        if marker in line:
            break
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if "stages/train.py" in " ".join(c.cmdline())
               and "torch.distributed.run" not in c.cmdline()]  # not torchrun itself
    return proc, workers


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def assert_same_weights(a_path, b_path, atol):
    a, b = load_checkpoint(a_path), load_checkpoint(b_path)
    for key in ("model", "ema"):
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=1e-4, atol=atol)


@pytest.mark.e2e
def test_two_processes_at_64_equal_one_at_128(synth_data, tmp_path):
    """The proof that gradient averaging is right: same data, draws and update.

    Float rounding differs (two half-batch means averaged vs one mean), and an
    unstable run amplifies it, so the rate is kept low enough for 30 steps to stay
    within 2e-4 (after 2 steps the weights agree to 1e-8; at lr 0.1 a loss spike
    grows the gap to about 4e-3 by step 30)."""
    steps = dict(max_steps=30, initial_lr=0.02)
    rare = {"checkpoint_every": 100, "summary_every": 100}
    one = TrainPaths(tmp_path / "one" / "train", tmp_path / "one" / "live")
    m1 = train(tiny_params(input={"shuffle": "permutation"}, train={"batch_size": 64, **steps},
                           run=rare), synth_data, one, progress=False)
    proj = project(tmp_path, synth_data, input={"shuffle": "permutation"},
                   train={"batch_size": 32, "num_devices": 2, **steps}, run=rare)
    proc = run(proj)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch.distributed.run --standalone --nproc_per_node=2" in proc.stderr
    assert_same_weights(one.model, proj / "data/train/model.pt", atol=2e-4)
    import json
    made = json.loads((proj / "reports/train/provenance.json").read_text())
    assert made["world_size"] == 2 and made["global_batch_size"] == 64
    made1 = json.loads((one.live_dir / "provenance.json").read_text())
    assert made1["world_size"] == 1 and made1["global_batch_size"] == 64 and m1["step"] == 30
    # only rank 0 logs: one line per log step, with the per-device figure
    lines = [l for l in proc.stdout.splitlines() if ": step " in l]
    assert len(lines) == 30 // 5 and "per device;" in lines[0]


@pytest.mark.e2e
def test_dropout_on_two_processes_paused_and_continued_elsewhere_equals_one_run(
        synth_data, tmp_path):
    """Each rank draws its own dropout masks from the seed, its rank and the step: paused
    in one folder and continued from the mirror in another, two processes end with the
    weights of the uninterrupted run, bit for bit."""
    params = to_dict(tiny_params(model={"dropout": 0.5}, input={"shuffle": "permutation"},
                                 train={"batch_size": 16, "num_devices": 2, "max_steps": 150,
                                        "log_every": 10},
                                 run={"checkpoint_every": 40, "summary_every": 1000}))
    whole, first, second = (write_train_project(tmp_path / n, synth_data, params)
                            for n in ("whole", "first", "second"))
    assert run(whole).returncode == 0
    mirror = str(tmp_path / "mirror")
    env = {k: v for k, v in ENV.items() if k != STOP_AT_ENV}
    paused = subprocess.run([sys.executable, "stages/train.py", "--stop-at", "3s", "--mirror",
                             mirror], cwd=first, capture_output=True, text=True, timeout=300,
                            env=env)
    assert paused.returncode == PAUSED_EXIT, paused.stderr[-3000:]
    step = int((paused.stdout + paused.stderr).split("paused at step ")[1].split()[0])
    assert 0 < step < 150
    done = subprocess.run([sys.executable, "stages/train.py", "--mirror", mirror], cwd=second,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"at step {step}" in done.stderr
    a, b = (load_checkpoint(f / "data/train/model.pt") for f in (whole, second))
    assert a["step"] == b["step"] == 150
    for key in ("model", "ema"):
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=0, atol=0)


@pytest.mark.e2e
def test_queue_input_on_two_processes_and_a_killed_rank_resumes(synth_data, tmp_path):
    proj = project(tmp_path, synth_data, input={"shuffle": "queue"},
                   train={"batch_size": 16, "num_devices": 2, "max_steps": 60, "log_every": 1}, run={"checkpoint_every": 10, "summary_every": 1000, "max_restarts": 1})
    proc, workers = start_until(proj, ": step 25,")
    assert len(workers) == 2
    workers[-1].kill()  # one rank dies; torchrun restarts the job, which resumes
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert "resuming from data/train/checkpoints/ckpt-00000020.pt at step 20" in out
    ck = load_checkpoint(proj / "data/train/checkpoints/ckpt-00000060.pt")
    assert ck["step"] == 60 and len(ck["input"]) == 2 and ck["world_size"] == 2


@pytest.mark.e2e
def test_a_rank_that_keeps_crashing_fails_the_job_promptly(synth_data, tmp_path):
    proj = project(tmp_path, synth_data, input={"shuffle": "permutation"},
                   train={"batch_size": 16, "num_devices": 2, "max_steps": 100000, "log_every": 1}, run={"checkpoint_every": 1000, "summary_every": 100000, "max_restarts": 0, "collective_timeout_s": 30})
    proc, workers = start_until(proj, ": step 5,")
    t = time.monotonic()
    workers[-1].kill()
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - t < 60, "the job must not hang on the dead rank"
    assert not (proj / "data/train/model.pt").exists()


@pytest.mark.e2e
def test_two_processes_pause_at_the_deadline_once_and_continue(synth_data, tmp_path):
    """A pause under torchrun is not a failure: torchrun must not restart the job (each
    restart would resume and pause again), and the stage exits 75 with one line; the same
    command then finishes the run in a second segment."""
    proj = project(tmp_path, synth_data, input={"shuffle": "permutation"},
                   train={"batch_size": 16, "num_devices": 2, "max_steps": 200, "log_every": 10},
                   run={"checkpoint_every": 50, "summary_every": 1000, "max_restarts": 3})
    env = {k: v for k, v in ENV.items() if k != STOP_AT_ENV}
    paused = subprocess.run([sys.executable, "stages/train.py", "--stop-at", "2s"], cwd=proj,
                            capture_output=True, text=True, timeout=300, env=env)
    out = paused.stdout + paused.stderr
    assert paused.returncode == PAUSED_EXIT, out[-3000:]
    assert out.count("paused at step ") == 1 and "run the same command to continue" in out
    assert "resuming from" not in out, "torchrun restarted the paused job"
    assert "Traceback" not in out and "ChildFailedError" not in out
    assert not (proj / "data/train/model.pt").exists()
    step = int(out.split("paused at step ")[1].split()[0])
    assert 0 < step < 200
    done = run(proj)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"at step {step}" in done.stderr  # resumed from the pause's checkpoint
    import json
    made = json.loads((proj / "reports/train/provenance.json").read_text())
    assert [(s["from_step"], s["to_step"]) for s in made["segments"]] == [(0, step), (step, 200)]


@pytest.mark.e2e
def test_two_single_process_nodes_through_c10d_rendezvous(synth_data, tmp_path):
    """Two "nodes" on 127.0.0.1, each in a folder of its own, started as docs/devices.md
    says: the stage's --nnodes and --rdzv-endpoint; rank 0's node writes the results."""
    params = to_dict(tiny_params(input={"shuffle": "permutation"},
                                 train={"batch_size": 16, "num_devices": 2, "max_steps": 10},
                                 run={"checkpoint_every": 100, "summary_every": 100}))
    folders = [write_train_project(tmp_path / f"node{i}", synth_data, params) for i in range(2)]
    cmd = [sys.executable, "stages/train.py", "--nnodes", "2", "--rdzv-endpoint",
           f"127.0.0.1:{free_port()}", "--rdzv-id", "test-nodes"]
    nodes = [subprocess.Popen(cmd, cwd=f, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=ENV) for f in folders]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert all("all 2 nodes joined at 127.0.0.1:" in o for o in outs)
    assert sum(": step 10," in o for o in outs) == 1  # only rank 0 logs
    wrote = [f for f in folders if (f / "reports/train/metrics.json").is_file()]
    assert len(wrote) == 1
    metrics = json.loads((wrote[0] / "reports/train/metrics.json").read_text())
    made = json.loads((wrote[0] / "reports/train/provenance.json").read_text())
    assert made["world_size"] == 2 and metrics["step"] == 10


@pytest.mark.e2e
def test_world_size_must_match_num_devices(synth_data, tmp_path):
    proj = project(tmp_path, synth_data, train={"num_devices": 3, "max_steps": 5})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max-restarts=0", "stages/train.py"]
    proc = subprocess.run(cmd, cwd=proj, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode != 0
    assert "torchrun started 2 processes but train.num_devices is 3" in proc.stdout + proc.stderr


@pytest.mark.e2e
def test_devices_timing_runs_both_setups_on_the_same_cores(synth_data, tmp_path):
    """Exercise 5's speed file: the real train stage at 1 x 128 and at 2 x 64 (torchrun),
    its logged examples/sec and the reference's sec/batch (step time / devices)."""
    import json

    import yaml

    from cifar10_tutorial.params import to_dict

    prep = write_prepared(synth_data, tmp_path / "prepared")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(main_sections(to_dict(tiny_params()))))
    out = tmp_path / "timing.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "devices_timing.py"), "--params",
                           str(params), "--data", str(prep), "--out", str(out), "--steps", "20",
                           "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    one, two = r["setups"]["1 x 128"], r["setups"]["2 x 64"]
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert [x["global_batch_size"] for x in (*one["runs"], *two["runs"])] == [128, 128]
    run = two["runs"][0]
    assert run["sec_per_batch"] == pytest.approx(128 / run["examples_per_sec"] / 2)
    assert r["speed_2x64_vs_1x128"] == pytest.approx(
        two["examples_per_sec_median"] / one["examples_per_sec_median"])
    assert "2 x 64 runs at" in proc.stdout and r["steps"] == 20 and r["cores"] >= 1


def _same_job_rank(rank, port, facts, out):
    import torch.distributed as dist

    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.training.distributed import Dist, same_job

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        same_job(facts[rank], Dist(rank, 2, rank))
        out.put((rank, "ok"))
    except PipelineError as exc:
        out.put((rank, str(exc)))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("other, expected", [
    ({}, "ok"),
    ({"commit": "bbbb"}, "rank 1 (host node-b) has commit 'bbbb' where rank 0 (host node-a) "
                         "has 'aaaa'"),
    ({"resume step": 600}, "rank 1 (host node-b) has resume step 600 where rank 0 (host "
                           "node-a) has 0"),
])
def test_nodes_that_disagree_fail_at_once_on_every_rank_naming_the_node(other, expected):
    """The ranks compare their commit, params, data and resume step at the start, not only
    the world size: a node that differs would train another job or resume elsewhere, and
    leave the others waiting in a collective. Every rank stops alike, in one line naming
    the node and what differs."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {"host": "node-a", "commit": "aaaa", "params": "p1", "data": "d1", "resume step": 0}
    facts = [base, {**base, "host": "node-b", **other}]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_same_job_rank, args=(r, port, facts, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert got[0] == got[1]  # every rank alike: none is left waiting in a collective
    assert got[0].startswith(expected) if expected != "ok" else got[0] == "ok"


# ----------------------------------------------------------------------------- CPU threads


@pytest.mark.parametrize("files, want", [
    ({"cpu.max": "150000 100000\n"}, (2, "cgroup CPU quota")),       # --cpus=1.5: 2 threads
    ({"cpu.max": "100000 100000\n"}, (1, "cgroup CPU quota")),
    ({"cpu.max": "max 100000\n"}, None),                              # no quota: the affinity
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"},
     (1, "cgroup CPU quota")),                                        # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage"}, None),
    ({}, None)])
def test_the_cpus_granted_are_the_fewer_of_affinity_and_cgroup_quota(tmp_path, files, want):
    """The CPUs granted are the fewer of the affinity mask and the cgroup quota (rounded
    up), not cpu_count(); threads are set from them."""
    from cifar10_tutorial.devices import granted_cpus

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    affinity = len(os.sched_getaffinity(0))
    expect = want if want is not None and want[0] < affinity else (affinity, "CPU affinity")
    assert granted_cpus(tmp_path) == expect


def test_omp_num_threads_wins_and_the_granted_cpus_are_shared_among_processes(monkeypatch):
    import torch

    from cifar10_tutorial import devices

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert devices.set_cpu_threads(2) == "OMP_NUM_THREADS=1" and torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(devices, "granted_cpus", lambda: (8, "cgroup CPU quota"))
        assert devices.set_cpu_threads(2) == "8 CPUs (cgroup CPU quota) / 2 processes"
        assert torch.get_num_threads() == 4
        monkeypatch.setattr(devices, "granted_cpus", lambda: (1, "CPU affinity"))
        devices.set_cpu_threads(4)
        assert torch.get_num_threads() == 1  # never 0
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not shutil.which("taskset"), reason="needs taskset")
def test_the_train_stage_uses_the_cpus_it_is_given_and_records_why(tmp_path, synth_data):
    """One CPU by affinity (taskset, as Slurm's --cpus-per-task), no OMP_NUM_THREADS: one
    thread, and provenance says where the number came from."""
    project = write_train_project(tmp_path / "p", synth_data, to_dict(tiny_params(
        train={"max_steps": 4}, eval={"every_steps": 0})))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "stages/train.py"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    made = json.loads((project / "reports/train/provenance.json").read_text())
    assert made["cpu_threads"] == 1 and made["cpu_threads_from"] == "1 CPUs (CPU affinity)"
    assert made["device"].endswith(", 1 thread")


# ----------------------------------------------------------------------------- several nodes


@pytest.mark.e2e
def test_a_node_alone_says_what_it_waits_for_and_gives_up_at_the_join_timeout(synth_data, tmp_path):
    """One node of two started alone says what it waits for, then gives up at
    run.join_timeout_s in one line, not silently at torch's 600 s."""
    proj = project(tmp_path, synth_data, train={"num_devices": 2, "max_steps": 5},
                   run={"join_timeout_s": 6})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "stages/train.py", "--nnodes", "2", "--rdzv-endpoint",
                           f"127.0.0.1:{free_port()}", "--rdzv-id", "lonely"], cwd=proj,
                          capture_output=True, text=True, timeout=300, env=ENV)
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "waiting for all 2 nodes to join the rendezvous at 127.0.0.1:" in proc.stderr
    assert "up to 6 s (run.join_timeout_s); start the same command on every node" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "the job never formed: fewer than 2 nodes joined the rendezvous at 127.0.0.1:" in last
    assert "(job id lonely) within 6 s (run.join_timeout_s)" in last, last
    assert took < 120


@pytest.mark.e2e
def test_nodes_whose_params_differ_fail_once_in_one_line_without_restarts(synth_data, tmp_path):
    """A params mismatch between nodes is the same at every attempt, so torchrun does not
    restart on it: one line per node, no torchrun traceback."""
    base = tiny_params(train={"batch_size": 16, "num_devices": 2, "max_steps": 10},
                       run={"max_restarts": 3})
    other = to_dict(base)
    other["train"]["initial_lr"] = 0.05
    folders = [write_train_project(tmp_path / "node0", synth_data, to_dict(base)),
               write_train_project(tmp_path / "node1", synth_data, other)]
    cmd = [sys.executable, "stages/train.py", "--nnodes", "2", "--rdzv-endpoint",
           f"127.0.0.1:{free_port()}", "--rdzv-id", "mismatch"]
    nodes = [subprocess.Popen(cmd, cwd=f, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV) for f in folders]
    errs = [n.communicate(timeout=300)[1] for n in nodes]
    for n, err in zip(nodes, errs):
        assert n.returncode == 1, err[-3000:]
        assert "Traceback" not in err and "ChildFailedError" not in err, err[-3000:]
        assert err.count("where rank 0") == 1, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: rank 1 (host ") and " has params " in last, last


@pytest.mark.e2e
def test_a_lost_node_takes_its_workers_with_it(synth_data, tmp_path):
    """``kill -9`` of one node's stage and torchrun (their process group) ends that node's
    workers too, though they run in a session of their own: none trains on with the
    other node's."""
    params = to_dict(tiny_params(train={"batch_size": 16, "num_devices": 2, "max_steps": 5000,
                                        "log_every": 10},
                                 run={"checkpoint_every": 100000, "summary_every": 100000,
                                      "collective_timeout_s": 10, "join_timeout_s": 10,
                                      "max_restarts": 0}))
    folders = [write_train_project(tmp_path / f"node{i}", synth_data, params) for i in range(2)]
    cmd = [sys.executable, "stages/train.py", "--nnodes", "2", "--rdzv-endpoint",
           f"127.0.0.1:{free_port()}", "--rdzv-id", "lost"]
    nodes = [subprocess.Popen(cmd, cwd=f, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True,
                              # the killed launcher's temporary folder stays in here
                              env={**ENV, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)})
             for f in folders]
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not any(  # rank 0's node logs the first steps
                (f / "reports/train/plots/metrics/train/loss.tsv").is_file() for f in folders):
            time.sleep(0.5)

        def workers(node):  # the node's processes: the stage's tree and torchrun's workers
            return [p for p in psutil.process_iter(["cmdline", "cwd"])
                    if p.info["cwd"] == str(folders[node]) and p.pid != nodes[node].pid
                    and any("train.py" in a for a in p.info["cmdline"] or [])]

        assert workers(0), "no worker of node 0 found"
        os.killpg(nodes[0].pid, signal.SIGKILL)
        nodes[0].wait(timeout=60)
        gone = time.time() + 20
        while workers(0) and time.time() < gone:
            time.sleep(0.5)
        assert not workers(0), [p.info["cmdline"] for p in workers(0)]
        out = nodes[1].communicate(timeout=300)[0]
        assert nodes[1].returncode not in (0, None), out[-3000:]
    finally:
        for n in nodes:
            if n.poll() is None:
                os.killpg(n.pid, signal.SIGKILL)
        for f in folders:
            for p in psutil.process_iter(["cwd"]):
                if p.info["cwd"] == str(f):
                    p.kill()


def test_the_nodes_must_share_the_devices_evenly_and_name_an_endpoint():
    from cifar10_tutorial.training.distributed import Nodes, torchrun_command

    with pytest.raises(PipelineError, match="needs --rdzv-endpoint HOST:PORT"):
        Nodes(2).per_node(4)
    with pytest.raises(PipelineError, match="train.num_devices is 3, which 2 nodes cannot share"):
        Nodes(2, "h:1").per_node(3)
    cmd = torchrun_command(4, 3, "stages/train.py", ["--nnodes", "2"], Nodes(2, "h:29400", "j7"), 90)
    assert cmd[3:] == ["--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                       "--rdzv_endpoint=h:29400", "--rdzv_id=j7", "--rdzv_conf=join_timeout=90",
                       "--max-restarts=3", "stages/train.py", "--nnodes", "2"]


@pytest.mark.e2e
def test_a_lost_node_of_two_with_separate_folders_resumes_to_the_uninterrupted_weights(
        synth_data, tmp_path):
    """Kill the node that is rank 0 (it holds every checkpoint) and restart
    both; the rendezvous may make the other node, whose folder holds none, rank 0. Every
    rank resumes from the newest checkpoint any node holds, sent from that node, and the
    run ends with the weights of a run never interrupted."""
    params = to_dict(tiny_params(input={"shuffle": "permutation"},
                                 train={"batch_size": 16, "num_devices": 2, "max_steps": 120,
                                        "log_every": 10},
                                 run={"checkpoint_every": 20, "summary_every": 1000,
                                      "collective_timeout_s": 10, "max_restarts": 0}))
    # TMPDIR: the launchers' temporary folders, which a SIGKILL leaves behind, stay in here
    env = {**ENV, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}

    def start(folder, port, rdzv):
        return subprocess.Popen([sys.executable, "stages/train.py", "--nnodes", "2",
                                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", rdzv],
                                cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)

    ref = [write_train_project(tmp_path / f"ref{i}", synth_data, params) for i in range(2)]
    port = free_port()
    runs = [start(f, port, "ref") for f in ref]
    assert [r.wait(timeout=300) for r in runs] == [0, 0]
    ref_model = next(f / "data/train/model.pt" for f in ref if (f / "data/train/model.pt").exists())

    folders = [write_train_project(tmp_path / f"node{i}", synth_data, params) for i in range(2)]
    port = free_port()
    nodes = [start(f, port, "first") for f in folders]
    rank0 = None
    import selectors
    sel = selectors.DefaultSelector()
    for i, n in enumerate(nodes):
        sel.register(n.stdout, selectors.EVENT_READ, i)
    deadline = time.time() + 300
    while rank0 is None and time.time() < deadline:
        for key, _ in sel.select(timeout=5):
            line = key.fileobj.readline()
            if ": step 60," in line:
                rank0 = key.data
    assert rank0 is not None, "no step 60 logged"
    for n in nodes:  # the node that was rank 0 is lost; then the other is stopped too
        os.killpg(n.pid, signal.SIGKILL)
        n.wait(timeout=60)
    held = [sorted(p.name for p in (f / "data/train/checkpoints").glob("ckpt-*.pt"))
            if (f / "data/train/checkpoints").exists() else [] for f in folders]
    assert held[rank0] and not held[1 - rank0]
    port = free_port()
    again = [start(folders[1 - rank0], port, "second")]
    time.sleep(3)  # the node without checkpoints first: it tends to become rank 0
    again.insert(rank0, start(folders[rank0], port, "second"))
    outs = [n.communicate(timeout=300)[0] for n in again]
    assert [n.returncode for n in again] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert any("resuming from" in o for o in outs), outs
    new_rank0 = next(i for i, f in enumerate(folders) if (f / "data/train/model.pt").exists())
    print(f"rank 0 was node {rank0}, then node {new_rank0}")
    if new_rank0 != rank0:  # the node that held no checkpoint received the other's
        assert "newer than any checkpoint here: kept in" in outs[new_rank0], outs[new_rank0]
    a = load_checkpoint(ref_model)
    b = load_checkpoint(folders[new_rank0] / "data/train/model.pt")
    assert a["step"] == b["step"] == 120
    for key in ("model", "ema"):
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=0, atol=0)


def test_torchrun_is_told_by_its_own_marker_not_by_leftover_variables(monkeypatch, tmp_path):
    """LOCAL_RANK and WORLD_SIZE left in an environment (a notebook) do not make a process
    one of torchrun's: it keeps its run lock and its deadline. Nor does torchrun's marker
    under a parent that is not torchrun (this test's); a process torchrun starts is one."""
    from cifar10_tutorial.training.distributed import launched_by_torchrun

    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not launched_by_torchrun()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "left-over")
    assert not launched_by_torchrun()
    monkeypatch.undo()
    probe = tmp_path / "probe.py"
    probe.write_text("from cifar10_tutorial.training.distributed import launched_by_torchrun\n"
                     "print(launched_by_torchrun())\n")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=1", str(probe)],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr[-2000:]


@pytest.mark.e2e
def test_killing_the_stage_stops_torchrun_and_its_workers(synth_data, tmp_path):
    """kill -9 of the stage (its lock goes with it) must not leave torchrun and its workers
    writing the run's folder beside the next run."""
    proj = project(tmp_path, synth_data, input={"shuffle": "permutation"},
                   train={"batch_size": 16, "num_devices": 2, "max_steps": 100000,
                          "log_every": 1},
                   run={"checkpoint_every": 1000, "summary_every": 100000})
    proc, workers = start_until(proj, ": step 3,")
    everyone = psutil.Process(proc.pid).children(recursive=True)
    assert len(workers) == 2 and len(everyone) >= 3  # torchrun and its two workers
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(everyone, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]


@pytest.mark.parametrize("endpoint", ["not a host", "127.0.0.1:99999", "h:", ":29400",
                                      "h:0", "h/x:1"])
def test_an_endpoint_that_is_not_host_port_is_one_line_before_torchrun(endpoint):
    """A malformed --rdzv-endpoint is one line before torchrun starts, not torchrun's
    traceback followed by a wait for the join timeout."""
    from cifar10_tutorial.training.distributed import Nodes

    with pytest.raises(PipelineError, match=r"expected HOST:PORT \(a host name or address, a "
                                            r"port from 1 to 65535\)"):
        Nodes(2, endpoint).per_node(2)
    for fine in ("node0.cluster:29400", "127.0.0.1:1", "[::1]:29400"):
        assert Nodes(2, fine).per_node(2) == 1
