"""An env that returns a value the rollout cannot use ends that episode with a named reason, counted and shown; it
never raises out of the rollout (:mod:`mirl.rollout.env_boundary`).

Rewards: NaN, infinities, an integer too large for a float, 1e308, text, None. Before, NaN was trained on as a
return, 10**400 raised OverflowError in the stepping and 1e308 a RuntimeError in the collation, each ending the
whole run. Text: lone surrogates (a TypeError in the tokenizer), huge or non-string observations. Images: strings
where images belong, placeholder and image counts that disagree (each a ValueError out of the rollout), too many
or too large images for one observation or one rollout. Prompt settings: an empty action-word list (an IndexError in
the system prompt). Info: missing or non-boolean flags, an end reason that is not a word. The remote client passes a
server's values through to these same checks."""

from __future__ import annotations

import json
import warnings

import pytest
from PIL import Image

from mirl.cli import main
from mirl.config import RolloutConfig
from mirl.envs.registry import register, registry
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout import collate, run_episodes
from mirl.rollout.env_boundary import MAX_OBSERVATION_CHARS, MAX_ROLLOUT_PIXELS, Boundary
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
    assert "end_reason malformed_* or oversized_*" in (run / "report.html").read_text()  # the verdict says so


def _image(side=8, mode="RGB"):
    return Image.new(mode, (side, side), 0 if mode != "RGB" else (1, 2, 3))


OK_INFO = {"success": False, "action_valid": True}
BIG = _image(2048)
# each case: what step returns, and the end reason the episode must get
STEP_CASES = [
    (("lone \ud800 surrogate", 0.0, False, False, OK_INFO), "malformed_text"),
    ((b"bytes", 0.0, False, False, OK_INFO), "malformed_text"),
    (("_" * (MAX_OBSERVATION_CHARS + 1), 0.0, False, False, OK_INFO), "oversized_text"),
    (("fine", 0.0, False, False, None), "malformed_info"),
    (("fine", 0.0, False, False, {}), "malformed_info"),
    (("fine", 0.0, False, False, {"success": "yes", "action_valid": True}), "malformed_info"),
    (("fine", 0.0, False, False, {**OK_INFO, "end_reason": "x" * 10_000}), "malformed_info"),
    (("fine", 0.0, False, False, {**OK_INFO, "end_reason": 7}), "malformed_info"),
    (("fine", 0.0, "no", False, OK_INFO), "malformed_info"),
    (("fine", 0.0, False), "malformed_result"),
    (("<image>", 0.0, False, False, {**OK_INFO, "images": ["a string"]}), "malformed_images"),
    (("<image>", 0.0, False, False, {**OK_INFO, "images": "a string"}), "malformed_images"),
    (("<image>", 0.0, False, False, OK_INFO), "malformed_images"),  # 1 placeholder, 0 images
    (("none", 0.0, False, False, {**OK_INFO, "images": [_image()] * 3}), "malformed_images"),  # 0 vs 3
    (("<image><image>", 0.0, False, False, {**OK_INFO, "images": [_image()]}), "malformed_images"),  # 2 vs 1
    (("<image>", 0.0, False, False, {**OK_INFO, "images": [_image(mode="1")]}), "malformed_images"),
    (("<image>" * 17, 0.0, False, False, {**OK_INFO, "images": [_image()] * 17}), "oversized_images"),
    (("<image>" * 5, 0.0, False, False, {**OK_INFO, "images": [BIG] * 5}), "oversized_images"),  # 21 Mpixels
    (("<image>", 0.0, False, False, {**OK_INFO, "images": [_image(2049)]}), "oversized_images"),
]
RESET_CASES = [
    ("a list", "malformed_result"),
    (("<image>", {}), "malformed_images"),
    (("\udfff", {}), "malformed_text"),
    (("fine", []), "malformed_info"),
]


class HostileValues(PickWordEnv):
    """Seed s < len(RESET_CASES): reset returns RESET_CASES[s]; else step returns STEP_CASES[s - len(RESET_CASES)]."""

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        if seed < len(RESET_CASES):
            return RESET_CASES[seed][0]
        return super().reset(seed=seed, options=options)

    def step(self, action):
        return STEP_CASES[self.seed - len(RESET_CASES)][0]


class EmptyWords(PickWordEnv):
    """A served env's prompt settings as a hostile server sends them: no action words at all."""

    action_words = ()


class BadWord(PickWordEnv):
    action_words = ("Left", 5)


def test_every_hostile_value_ends_its_episode_with_its_reason_and_nothing_escapes():
    for name, cls in (("hostile_values", HostileValues), ("empty_words", EmptyWords), ("bad_word", BadWord)):
        if name not in registry:
            register(name)(cls)
    policy = ScriptedPolicy(tiny_tokenizer(), lambda context: " ok</think><answer>Up</answer>")
    cases = RESET_CASES + STEP_CASES
    specs = [EnvSpec("hostile_values", seed) for seed in range(len(cases))]
    specs += [EnvSpec("empty_words", 0), EnvSpec("bad_word", 0)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        episodes = run_episodes(policy, specs, 2, RolloutConfig(max_turns=1, max_new_tokens=16))
    reasons = [e.end_reason for e in episodes[::2]]
    assert reasons == [reason for _, reason in cases] + ["malformed_prompt", "malformed_prompt"]
    assert [e.end_reason for e in episodes[1::2]] == reasons  # both samples of every group
    assert all(e.num_turns == 0 for e in episodes[: 2 * len(RESET_CASES)])
    assert all(e.num_turns == 0 for e in episodes[-4:])  # no system prompt could be written
    share = rollout_metrics(episodes)["rollout/env_malformed_frac"]
    assert share == 1.0
    assert collate(episodes).num_rows == 2 * len(STEP_CASES)  # the refused steps' turns still train on the reply
    # one warning per env class and reason, naming the env
    said = [str(w.message) for w in caught if "the rollout refuses" in str(w.message)]
    assert len(said) == len({(m.split()[1], m.rsplit("ends as ", 1)[1].split(",")[0]) for m in said})
    assert any("HostileValues" in m and "lone surrogate" in m for m in said)


def test_the_rollout_pixel_budget_is_shared_by_all_episodes_of_a_rollout():
    boundary = Boundary()
    env = HostileValues()

    def big_board(*, seed=None, options=None):
        return "<image>", {"images": [BIG]}

    env.reset = big_board
    outcomes = [boundary.reset(env, 0).problem for _ in range(72)]
    fit = MAX_ROLLOUT_PIXELS // (2048 * 2048)  # 64 boards of 2048 x 2048: about 0.8 GB as RGB
    assert outcomes == [None] * fit + ["oversized_images"] * (72 - fit)
    assert boundary.pixels <= MAX_ROLLOUT_PIXELS


def test_a_vision_rollout_past_its_pixel_budget_ends_episodes_and_keeps_the_rest(monkeypatch):
    from mirl.policy.tiny_vl import tiny_vl_policy
    from mirl.rollout import env_boundary

    policy = tiny_vl_policy()
    side = 16 * 6  # a 6 x 6 sokoban room of 16-pixel cells
    monkeypatch.setattr(env_boundary, "MAX_ROLLOUT_PIXELS", 4 * side * side)
    specs = [EnvSpec("sokoban", seed, {"render": "image", "cell_size": 16}) for seed in range(2)]
    episodes = run_episodes(policy, specs, 3, RolloutConfig(max_turns=3, max_new_tokens=8), sampling_seed=0)
    reasons = [e.end_reason for e in episodes]
    # six boards at reset, room for four: the last two episodes end before their first turn, the others play
    assert reasons[4:] == ["oversized_images"] * 2 and "oversized_images" not in reasons[:4]
    assert [e.num_turns > 0 for e in episodes] == [True] * 4 + [False] * 2


def test_validation_counts_refused_values_too(run_config):
    from mirl.trainer.validation import validate

    OneHostileStep.steps = 0  # the next step taken in this process gets 10**400
    config = run_config("v", "envs=[{name: one_hostile_step}]", "validation.num_instances=4")
    policy = ScriptedPolicy(tiny_tokenizer(), lambda context: " ok</think><answer>Left</answer>")
    metrics = validate(policy, config)
    assert metrics["val/env_malformed_frac"] == pytest.approx(1 / 4)
