"""An env that sends a reward no update can use (NaN, infinities, an integer too large for a float, 1e308, text,
None) ends that episode as ``malformed_reward``, counted and shown; it never raises out of the rollout. Before, NaN
was trained on as a return, 10**400 raised OverflowError in the stepping and 1e308 a RuntimeError in the collation,
each ending the whole run. The remote client passes a server's reward through to this same check."""

from __future__ import annotations

import json

import pytest

from mirl.cli import main
from mirl.config import RolloutConfig
from mirl.envs.registry import register, registry
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout import collate, run_episodes
from mirl.trainer.stages import rollout_metrics
from mirl.types import EnvSpec

from ..trainer.conftest import PickWordEnv

HOSTILE = [float("nan"), float("inf"), float("-inf"), 10**400, -(10**400), 1e308, "1", None]
FINE = [0.5, 1, -1e6]


class HostileReward(PickWordEnv):
    """Every step's reward is ``REWARDS[seed]``."""

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        observation, _, terminated, truncated, info = super().step(action)
        return observation, REWARDS[self.seed], terminated, truncated, info


REWARDS = HOSTILE + FINE


class OneHostileStep(PickWordEnv):
    """The first step taken in the process gets a reward of 10**400; every other step the usual reward."""

    steps = 0

    def step(self, action):
        OneHostileStep.steps += 1
        result = super().step(action)
        return (result[0], 10**400, *result[2:]) if OneHostileStep.steps == 1 else result


@pytest.fixture(scope="module", autouse=True)
def hostile_envs():
    for name, cls in (("hostile_reward", HostileReward), ("one_hostile_step", OneHostileStep)):
        if name not in registry:
            register(name)(cls)


def test_a_hostile_reward_ends_its_episode_and_nothing_escapes():
    policy = ScriptedPolicy(tiny_tokenizer(), lambda context: " ok</think><answer>Up</answer>")
    specs = [EnvSpec("hostile_reward", seed) for seed in range(len(REWARDS))]
    episodes = run_episodes(policy, specs, 1, RolloutConfig(max_turns=1, max_new_tokens=16))
    reasons = [e.end_reason for e in episodes]
    assert reasons[: len(HOSTILE)] == ["malformed_reward"] * len(HOSTILE)
    assert "malformed_reward" not in reasons[len(HOSTILE) :]
    assert [e.total_reward for e in episodes] == [0.0] * len(HOSTILE) + [0.5, 1.0, -1e6]
    batch = collate(episodes)  # 1e308 used to overflow here
    assert batch.num_rows == len(REWARDS)
    share = rollout_metrics(episodes)["rollout/env_malformed_frac"]
    assert share == pytest.approx(len(HOSTILE) / len(REWARDS))


def test_a_training_run_with_one_hostile_reward_finishes_and_counts_it(tmp_path, model_dir, cli_args, capsys):
    args = cli_args(model_dir, tmp_path, "hostile", "envs=[{name: one_hostile_step}]")
    assert main(["train", "--defaults", *args, "trainer.iterations=1"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    run = tmp_path / "hostile"
    rows = [json.loads(r) for r in (run / "rollouts" / "iteration_000001.jsonl").read_text().splitlines()]
    assert sum(r["end_reason"] == "malformed_reward" for r in rows) == 1  # the one episode that got 10**400
    line = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert line["rollout/env_malformed_frac"] == pytest.approx(1 / len(rows))
    assert "end_reason malformed_reward" in (run / "report.html").read_text()  # the verdict says so
