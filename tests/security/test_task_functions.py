"""Your own task cannot crash or hang training. A reward too large for a float (``10**400``,
``Fraction(10**400, 3)``) used to escape ``mirl.Task`` as an ``OverflowError``; a reward that called ``sys.exit()``
ended the process (exit 3, no message); a reward or step function that never returned held the rollout, and under
``mirl serve-env`` its session's env, forever. Now the first two are a :class:`TaskError` naming the prompt, and a
function past its deadline (``Task(timeout_s=...)``, 5 s by default) ends its episode as ``task_timeout``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import warnings
from fractions import Fraction

import pytest

from mirl.config import RolloutConfig
from mirl.envs.registry import registered
from mirl.envs.task import Task, TaskError
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

PROMPTS = ["What is 2 + 2?", "What is 3 + 4?"]
HELD_OUT = ["What is 1 + 1?"]
TIMEOUT_REASON = "task_timeout"  # the end reason docs/your-task.md names
MAX_OVERDUE = 4  # calls of one task that may run on past their deadline (mirl.envs.task.deadline)


@pytest.fixture
def release():
    """An event the hanging functions wait on; set when the test ends, so no thread outlives the module long."""
    event = threading.Event()
    yield event
    event.set()


def _single(reward, **settings) -> Task:
    return Task(PROMPTS, reward=reward, validation=HELD_OUT, **settings)


@pytest.mark.parametrize("value", [10**400, -(10**400), Fraction(10**400, 3)], ids=["int", "-int", "fraction"])
def test_a_reward_too_large_for_a_float_is_a_task_error_naming_the_prompt(value):
    env = _single(lambda prompt, answer: value).make()
    prompt, _ = env.reset(seed=1)
    with pytest.raises(TaskError, match="reward function returned") as caught:
        env.step("4")
    assert prompt in str(caught.value) and "finite float" in str(caught.value)


def test_a_step_reward_too_large_for_a_float_is_a_task_error_naming_the_prompt():
    env = Task(PROMPTS, step=lambda conversation, answer: ("ok", 10**400, True), validation=HELD_OUT).make()
    prompt, _ = env.reset(seed=1)
    with pytest.raises(TaskError, match="step function returned") as caught:
        env.step("4")
    assert prompt in str(caught.value)


@pytest.mark.parametrize("timeout_s", [5.0, None], ids=["deadline", "no-deadline"])
def test_a_reward_that_calls_sys_exit_is_a_task_error_not_the_end_of_the_process(timeout_s):
    def exiting(prompt, answer):
        sys.exit(3)

    env = _single(exiting, timeout_s=timeout_s).make()
    prompt, _ = env.reset(seed=1)
    with pytest.raises(TaskError, match="raised SystemExit") as caught:
        env.step("4")
    assert prompt in str(caught.value)


def test_a_reward_that_never_returns_ends_the_episode_at_its_deadline(release):
    env = _single(lambda prompt, answer: release.wait(60), timeout_s=0.3).make()
    prompt, _ = env.reset(seed=1)
    started = time.monotonic()
    with pytest.warns(UserWarning, match="0.3 s deadline") as caught:
        observation, reward, terminated, truncated, info = env.step("4")
    took = time.monotonic() - started
    assert 0.3 <= took < 1.5, took
    assert (observation, reward, terminated, truncated) == (prompt, 0.0, False, True)
    assert info == {"success": False, "action_valid": True, "action_effective": False, "end_reason": TIMEOUT_REASON}
    assert prompt in str(caught[0].message)
    assert env.step("4")[4]["action_valid"] is False  # the episode is over


def test_the_default_deadline_is_five_seconds(release):
    env = _single(lambda prompt, answer: release.wait(30)).make()
    env.reset(seed=1)
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = env.step("4")[4]
    took = time.monotonic() - started
    assert info["end_reason"] == TIMEOUT_REASON and 5.0 <= took < 7.0, took


def test_a_step_function_that_never_returns_ends_the_episode_and_the_rollout_goes_on(release):
    def step(conversation, answer):
        if "3 + 4" in conversation.prompt:
            release.wait(60)
        return "Right.", 1.0, True

    task = Task(PROMPTS, step=step, validation=HELD_OUT, timeout_s=0.3, name="hangs_on_one")
    policy = ScriptedPolicy(tiny_tokenizer(), lambda context: " ok</think><answer>7</answer>")
    seeds = {}
    for seed in range(40):  # a training seed of each prompt (the seed picks the example by a hash)
        seeds.setdefault(task.make().reset(seed=2 * seed)[0], 2 * seed)
    with registered(task.name, task.env_class), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        episodes = run_episodes(
            policy,
            [EnvSpec(task.name, seeds[prompt]) for prompt in PROMPTS],
            1,
            RolloutConfig(max_turns=2, max_new_tokens=16),
        )
    reasons = {episode.spec.seed: episode.end_reason for episode in episodes}
    assert sorted(reasons.values()) == ["success", TIMEOUT_REASON]


def test_a_function_that_keeps_hanging_stops_the_run_after_a_few_overdue_calls(release):
    task = _single(lambda prompt, answer: release.wait(60), timeout_s=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(MAX_OVERDUE):
            env = task.make()
            env.reset(seed=1)
            assert env.step("4")[4]["end_reason"] == TIMEOUT_REASON
    env = task.make()
    prompt, _ = env.reset(seed=1)
    with pytest.raises(TaskError, match=f"{MAX_OVERDUE} calls of the reward function of task 'task'") as caught:
        env.step("4")
    assert prompt in str(caught.value)
    release.set()  # the hung calls return: the task may be called again
    deadline = time.monotonic() + 5
    while task.overdue_calls and time.monotonic() < deadline:
        time.sleep(0.01)
    env = task.make()
    env.reset(seed=1)
    assert env.step("4")[1] == 1.0


SCRIPT = """
import sys, time
import mirl

def spins(prompt, answer):
    while True:
        time.sleep(0.01)

def exits(prompt, answer):
    sys.exit(3)

for reward in (spins, exits):
    env = mirl.Task(["What is 2 + 2?", "b"], reward=reward, validation=1, timeout_s=0.5).make()
    env.reset(seed=1)
    try:
        print(env.step("4")[4].get("end_reason"))
    except mirl.envs.task.TaskError as error:
        print("TaskError", str(error)[:60])
print("done")
"""


def test_a_process_with_a_hung_reward_still_ends_with_its_own_exit_code():
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == TIMEOUT_REASON and lines[1].startswith("TaskError the reward function raised SystemExit")
    assert lines[2] == "done" and took < 30, took
