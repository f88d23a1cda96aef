"""`mirl sweep` end to end with the tiny model: parallel runs, kill and restart, a crashing run, dry run."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

VOLATILE = ("time", "time/", "perf/")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from mirl.policy.tiny import tiny_policy

    path = tmp_path_factory.mktemp("model") / "tiny"
    policy = tiny_policy()
    policy.model.save_pretrained(path)
    policy.tokenizer.save_pretrained(path)
    return path


def spec(tmp_path, tiny_dir, name, *, cases="", iterations=3, strategies="none, top_p", seeds="1, 2"):
    text = f"""
name: {name}
output_dir: {tmp_path / "out"}
overrides:
  - model.name={tiny_dir}
  - "envs=[{{name: bandit}}]"
  - rollout.prompts_per_iteration=2
  - rollout.group_size=2
  - rollout.max_turns=1
  - rollout.max_new_tokens=8
  - trainer.iterations={iterations}
  - diagnostics.every=1
  - diagnostics.num_pairs=4
  - validation.every=-1
  - logging.progress=false
  - logging.tensorboard=false
{cases}
grid:
  filter.strategy: [{strategies}]
seeds: [{seeds}]
"""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def mirl(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "mirl.cli", *args], capture_output=True, text=True, **kwargs)


def metrics(sweep_dir):
    out = {}
    for run in sorted((sweep_dir / "runs").iterdir()):
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        out[run.name] = [{k: v for k, v in m.items() if not k.startswith(VOLATILE)} for m in lines]
    return out


def lines_done(sweep_dir):
    runs = sweep_dir / "runs"
    if not runs.is_dir():
        return 0
    return sum(
        (r / "metrics.jsonl").read_bytes().count(b"\n") for r in runs.iterdir() if (r / "metrics.jsonl").exists()
    )


def test_a_killed_sweep_restarts_where_it_stopped_and_matches_an_uninterrupted_one(tmp_path, tiny_dir):
    whole = mirl("sweep", str(spec(tmp_path, tiny_dir, "whole")), "--jobs", "2", timeout=600)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "4 runs, 0 finished" in whole.stdout
    reference = metrics(tmp_path / "out" / "whole")
    assert len(reference) == 4 and all(len(lines) == 3 for lines in reference.values())

    path = spec(tmp_path, tiny_dir, "killed")
    sweep_dir = tmp_path / "out" / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "mirl.cli", "sweep", str(path), "--jobs", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while lines_done(sweep_dir) < 2 and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)  # the sweep dies; its runs die with it (PR_SET_PDEATHSIG)
    process.wait()
    before = lines_done(sweep_dir)
    assert 2 <= before < 12, before
    status = json.loads((sweep_dir / "status.json").read_text())
    assert any(s["state"] != "done" for s in status.values())

    again = mirl("sweep", str(path), "--jobs", "2", timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert metrics(sweep_dir) == reference  # every iteration once, equal to the uninterrupted sweep's
    third = mirl("sweep", str(path), "--jobs", "2", timeout=600)
    assert "4 finished, 0 to resume, 0 to start" in third.stdout.replace("\n", " ")


def test_a_crashing_run_is_reported_and_the_others_finish(tmp_path, tiny_dir):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    cases = f"cases:\n  - {{name: ok}}\n  - {{name: broken, overrides: [model.name={broken}]}}"
    path = spec(tmp_path, tiny_dir, "crash", cases=cases, iterations=1, strategies="none", seeds="1")
    out = mirl("sweep", str(path), "--jobs", "2", timeout=600)
    assert out.returncode == 1
    status = json.loads((tmp_path / "out" / "crash" / "status.json").read_text())
    assert {n: s["state"] for n, s in status.items()} == {
        "ok_strategy-none_s1": "done",
        "broken_strategy-none_s1": "failed",
    }
    assert "run broken_strategy-none_s1 failed" in out.stdout.replace("\n", " ")
    log = (tmp_path / "out" / "crash" / "logs" / "broken_strategy-none_s1.log").read_text()
    assert "config.json" in log or "broken-model" in log


def test_dry_run_lists_runs_and_starts_nothing(tmp_path, tiny_dir):
    out = mirl("sweep", str(spec(tmp_path, tiny_dir, "dry")), "--dry-run", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "strategy-top_p_s2" in out.stdout and "new" in out.stdout
    assert not (tmp_path / "out" / "dry").exists()


@pytest.mark.slow  # starting a local Ray takes a minute or more on a busy 2-core machine
def test_the_ray_launcher_runs_a_sweep_on_a_local_ray(tmp_path, tiny_dir):
    pytest.importorskip("ray")
    path = spec(tmp_path, tiny_dir, "ray", iterations=1, seeds="1")
    out = mirl("sweep", str(path), "--jobs", "2", "--launcher", "ray", "--ray-address", "local", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    status = json.loads((tmp_path / "out" / "ray" / "status.json").read_text())
    assert {s["state"] for s in status.values()} == {"done"} and len(status) == 2
    assert all(len(lines) == 1 for lines in metrics(tmp_path / "out" / "ray").values())
