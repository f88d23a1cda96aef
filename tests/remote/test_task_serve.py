"""A ``mirl.Task`` served over OpenEnv (``Task.serving`` in-process, ``mirl serve-env file.py:task`` as a process)
plays the same episodes as the local env; a bad ``MODULE:NAME`` is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.cli import main
from mirl.envs import registry
from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

from .helpers import assert_same_episodes, rollout_config, served, skip_without_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_task.py"
SEEDS = (0, 4, 6)  # prompts 10 + 16, 12 + 11, 13 + 17: two even and one odd first number


def answers_sums(tok) -> ScriptedPolicy:
    """Answers ``What is A + B?`` right when A is even, else one too many: rewards 1 and 0 both occur."""

    def script(context: str) -> str:
        a, b = (int(word.rstrip("?")) for word in context.rsplit("What is ", 1)[1].split()[:3:2])
        return f"add</think><answer>{a + b + a % 2}</answer>"

    return ScriptedPolicy(tok, script)


def play_both(tok, task, url: str):
    config = rollout_config()
    remote = run_episodes(answers_sums(tok), [EnvSpec("openenv", s, {"url": url}) for s in SEEDS], 2, config)
    with task.registered():
        local = run_episodes(answers_sums(tok), [EnvSpec(task.name, s, {}) for s in SEEDS], 2, config)
    return remote, local


def load_example():
    from mirl.cli.serve import load_task

    return load_task(f"{EXAMPLE}:task")


def test_a_task_served_in_process_plays_like_the_local_env(tok):
    skip_without_server()
    task = load_example()
    with task.serving() as url:
        assert task.name in registry  # registered while it is served ...
        remote, local = play_both(tok, task, url)
    assert task.name not in registry  # ... and only then
    assert_same_episodes(remote, local)
    assert {e.total_reward for e in local} == {0.0, 1.0}


def test_a_task_served_by_the_command_line_plays_like_the_local_env(tok):
    skip_without_server()
    with served(f"{EXAMPLE}:task") as (url, _):
        remote, local = play_both(tok, load_example(), url)
    assert_same_episodes(remote, local)


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_such_module_xyz:task", "cannot import 'no_such_module_xyz'"),
        ("nowhere/tasks.py:task", "nowhere/tasks.py is not a file"),
        (f"{EXAMPLE}:reward", "is a function, not a mirl Task; Tasks in"),
        (f"{EXAMPLE}:missing", "is missing, not a mirl Task"),
        (f"{EXAMPLE}:1task", "is not MODULE:NAME"),
    ],
)
def test_a_bad_task_reference_is_one_line(capsys, reference, message):
    assert main(["serve-env", reference]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl serve-env: ") and message in err and err.count("\n") == 1


def test_a_failing_reward_function_on_the_server_ends_the_episode_as_remote_server(tok):
    """Served, the TaskError answers the step with an error: the client records an infrastructure failure (counted,
    and an error when a whole batch fails so), never a reward 0 of the model's."""
    skip_without_server()
    from mirl.envs.task import Task

    task = Task(["What is 1 + 1?", "What is 2 + 2?"], reward=lambda prompt, answer: 1 / 0, validation=["x"])
    policy = ScriptedPolicy(tok, lambda context: "add</think><answer>2</answer>")
    with task.serving() as url:
        episodes = run_episodes(policy, [EnvSpec("openenv", 0, {"url": url})], 1, rollout_config())
    assert [e.end_reason for e in episodes] == ["remote_server"]


def test_a_task_served_from_python_serves_both_splits():
    """task.serving() serves train and validation (the trainer's resets pick one); split= pins one."""
    skip_without_server()
    from mirl.envs import make
    from mirl.envs.task import Task

    task = Task(["What is 1 + 1?"], reward=lambda prompt, answer: 0.0, validation=["What is 5 + 5?"])
    with task.serving() as url:
        for split, seed in (("train", 0), ("validation", 1)):
            env = make("openenv", url=url, split=split)
            observation = env.reset(seed=seed)[0]
            env.close()
            assert observation == make(task.name, split=split).reset(seed=seed)[0]
    assert "5 + 5" in observation
