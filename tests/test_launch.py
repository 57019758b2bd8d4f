"""The launcher recipes in launch/ (Slurm, Kubernetes), checked as far as one machine
allows: their syntax, the commands and options they call, and the Slurm script's pause and
requeue driven by a fake scheduler (scontrol, squeue and srun as small scripts)."""
import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, tiny_params, write_train_project
from cifar10_tutorial.params import to_dict

SBATCH = ROOT / "launch/slurm/train.sbatch"
K8S = ROOT / "launch/kubernetes/train-indexed-job.yaml"

FAKE = {
    # scontrol show hostnames LIST: one line a node; scontrol requeue ID: noted
    "scontrol": '#!/bin/bash\nif [ "$1" = show ]; then for i in $(seq "$SLURM_JOB_NUM_NODES"); '
                'do echo 127.0.0.1; done; else echo "$*" >> "$FAKE_LOG"; fi\n',
    # squeue -h -j ID -o %e: the job's end, local time
    "squeue": '#!/bin/bash\necho "$FAKE_END"\n',
    # srun [--options] CMD: the command, as one task on this one node
    "srun": '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n',
}


def fake_scheduler(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for name, text in FAKE.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def job_env(bin_dir: Path, tmp_path: Path, end: datetime, restart: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIFAR10_")}
    env.update(PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}",
               SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="node[1]", SLURM_JOB_NUM_NODES="1",
               SLURM_RESTART_COUNT=str(restart), CIFAR10_MARGIN_S="0",
               CIFAR10_CHECKPOINT_MIRROR=str(tmp_path / "mirror"),
               FAKE_LOG=str(tmp_path / "scheduler.log"), FAKE_END=end.strftime("%Y-%m-%dT%H:%M:%S"),
               PYTHONUNBUFFERED="1")
    return env


def test_the_recipes_parse_and_call_the_stage_with_options_it_has():
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    text = SBATCH.read_text()
    assert "srun --kill-on-bad-exit=1 python stages/train.py" in text
    docs = list(yaml.safe_load_all(K8S.read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Service", "Job"]
    job = docs[1]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
    container = job["template"]["spec"]["containers"][0]
    script = container["command"][-1]
    assert "python stages/train.py" in script and "JOB_COMPLETION_INDEX" in script
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CIFAR10_NNODES"] == str(job["completions"])
    assert env["CIFAR10_RDZV_ENDPOINT"].startswith(docs[1]["metadata"]["name"] + "-0.")
    assert docs[0]["spec"]["clusterIP"] == "None"  # headless: a DNS name per pod
    # the environment they set is what the stage reads
    from cifar10_tutorial.training.mirror import MIRROR_ENV
    from cifar10_tutorial.training.deadline import STOP_AT_ENV
    from cifar10_tutorial.training.distributed import NODES_ENV

    for name in [*NODES_ENV.values(), MIRROR_ENV, STOP_AT_ENV]:
        assert name in text, name
    for name in NODES_ENV.values():
        assert name in env, name
    help_text = subprocess.run([sys.executable, "stages/train.py", "--help"], cwd=ROOT,
                               capture_output=True, text=True).stdout
    assert "--nnodes" in help_text and "--rdzv-endpoint" in help_text


@pytest.mark.e2e
def test_the_slurm_job_pauses_before_its_wall_time_requeues_and_finishes(synth_data, tmp_path):
    proj = write_train_project(tmp_path / "repo", synth_data, to_dict(tiny_params(
        train={"max_steps": 400, "log_every": 50}, run={"checkpoint_every": 20},
        eval={"every_steps": 0})))
    bin_dir = fake_scheduler(tmp_path)
    soon = datetime.now() + timedelta(seconds=4)
    first = subprocess.run(["bash", str(SBATCH)], cwd=proj, capture_output=True, text=True,
                           timeout=300, env=job_env(bin_dir, tmp_path, soon, 0))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "paused at the deadline; requeueing job 4242" in first.stdout, first.stdout
    assert (tmp_path / "scheduler.log").read_text() == "requeue 4242\n"
    assert not (proj / "data/train/model.pt").exists()
    later = datetime.now() + timedelta(hours=1)
    again = subprocess.run(["bash", str(SBATCH)], cwd=proj, capture_output=True, text=True,
                           timeout=300, env=job_env(bin_dir, tmp_path, later, 1))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the run has finished" in again.stdout
    assert (tmp_path / "scheduler.log").read_text() == "requeue 4242\n"  # not again
    made = json.loads((proj / "reports/train/provenance.json").read_text())
    assert [s["to_step"] for s in made["segments"]][-1] == 400 and len(made["segments"]) == 2


@pytest.mark.e2e
def test_the_slurm_jobs_signal_stops_the_run_and_requeues(synth_data, tmp_path):
    proj = write_train_project(tmp_path / "repo", synth_data, to_dict(tiny_params(
        train={"max_steps": 100000, "log_every": 10}, run={"checkpoint_every": 50},
        eval={"every_steps": 0})))
    bin_dir = fake_scheduler(tmp_path)
    env = job_env(bin_dir, tmp_path, datetime.now() + timedelta(hours=1), 0)
    job = subprocess.Popen(["bash", str(SBATCH)], cwd=proj, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
    for line in job.stdout:
        if ": step 20," in line:
            break
    job.send_signal(signal.SIGUSR1)  # Slurm's --signal=B:USR1@300
    out = job.communicate(timeout=120)[0]
    assert job.returncode == 0, out
    assert "stopped by a signal" in out and "requeueing job 4242" in out, out
    assert (tmp_path / "scheduler.log").read_text() == "requeue 4242\n"
    assert sorted((proj / "data/train/checkpoints").glob("ckpt-*.pt"))  # kept to continue


@pytest.mark.e2e
@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_the_kubernetes_pods_command_runs_a_two_node_job_here(synth_data, tmp_path):
    """The Indexed Job's container command, run as its two pods would run it (each in a
    folder of its own, JOB_COMPLETION_INDEX 0 and 1, the endpoint on 127.0.0.1)."""
    docs = list(yaml.safe_load_all(K8S.read_text()))
    container = docs[1]["spec"]["template"]["spec"]["containers"][0]
    params = to_dict(tiny_params(train={"batch_size": 16, "num_devices": 2, "max_steps": 10},
                                 input={"shuffle": "permutation"},
                                 run={"checkpoint_every": 100, "summary_every": 100}))
    from test_distributed import free_port

    port = free_port()
    pods = []
    for index in range(2):
        folder = write_train_project(tmp_path / f"pod{index}", synth_data, params)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CIFAR10_")}
        env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
        env.update(JOB_COMPLETION_INDEX=str(index), PYTHONUNBUFFERED="1",
                   CIFAR10_RDZV_ENDPOINT=f"127.0.0.1:{port}",
                   CIFAR10_CHECKPOINT_MIRROR=str(tmp_path / "mirror"),
                   PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        pods.append(subprocess.Popen(container["command"], cwd=folder, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=300)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert sum((tmp_path / f"pod{i}/data/train/model.pt").is_file() for i in range(2)) == 1


@pytest.mark.parametrize("margin", ["10m", "end", "x[$(touch pwned)]", "",
                                    "99999999999999999999"])
def test_a_margin_that_is_not_whole_seconds_stops_the_job_in_one_line(tmp_path, margin):
    """CIFAR10_MARGIN_S is read as whole seconds before bash arithmetic sees it: a word
    (`end`, a variable of the script) would silently set the deadline to 0."""
    bin_dir = fake_scheduler(tmp_path)
    env = {**job_env(bin_dir, tmp_path, datetime.now() + timedelta(hours=1), 0),
           "CIFAR10_MARGIN_S": margin}
    proc = subprocess.run(["bash", str(SBATCH)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=env)
    if margin == "":  # empty: the default, 600 s (then no project here: the stage's error)
        assert "CIFAR10_MARGIN_S" not in proc.stderr
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"error: CIFAR10_MARGIN_S: expected whole seconds (600), "
                                   f"found '{margin}'")
    assert not (tmp_path / "pwned").exists()


def test_a_margin_with_a_leading_zero_is_read_as_decimal(tmp_path):
    """08 is eight seconds, not an octal error: the job goes on to the stage."""
    bin_dir = fake_scheduler(tmp_path)
    env = {**job_env(bin_dir, tmp_path, datetime.now() + timedelta(hours=1), 0),
           "CIFAR10_MARGIN_S": "08"}
    proc = subprocess.run(["bash", str(SBATCH)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=env)
    assert "CIFAR10_MARGIN_S" not in proc.stderr and "value too great" not in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("end", ["past", "within-the-margin", "unreadable", "", "   "])
def test_a_job_end_already_past_stops_the_job_and_an_unknown_one_does_not_pause(tmp_path,
                                                                               end):
    """A deadline already past (the job's end within the margin) would pause the run after
    one step, and the job requeue itself for ever: one line, no requeue. An end squeue
    cannot give (no time limit) sets no deadline: the job goes on to the stage."""
    bin_dir = fake_scheduler(tmp_path)
    when = {"past": datetime.now() - timedelta(minutes=10),
            "within-the-margin": datetime.now() + timedelta(seconds=30)}.get(end, datetime.now())
    env = {**job_env(bin_dir, tmp_path, when, 0), "CIFAR10_MARGIN_S": "60"}
    if end not in ("past", "within-the-margin"):  # squeue's "Unknown", or nothing at all
        env["FAKE_END"] = end or ""
        end = "unreadable"
    proc = subprocess.run(["bash", str(SBATCH)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    requeued = (tmp_path / "scheduler.log").is_file() and \
        "requeue" in (tmp_path / "scheduler.log").read_text()
    assert not requeued, proc.stdout + proc.stderr
    if end == "unreadable":  # on to the stage (no project here: its own error)
        assert "note: squeue gives no end time date can read (" in proc.stderr, proc.stderr
        assert "CIFAR10_STOP_AT" not in proc.stderr
        return
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error: the job ends at "), \
        proc.stderr
    assert "the run would pause at once and requeue" in proc.stderr
