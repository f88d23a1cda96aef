"""The contract over every registered env (check_env, determinism, seeds), the registry and the checker itself."""

from __future__ import annotations

import random

import gymnasium
import pytest
from PIL import Image

from mirl.envs import ContractError, TextEnv, check_env, env_options, make, register, registry
from mirl.envs.checker import transcript
from mirl.envs.images import IMAGE_PLACEHOLDER

ENV_NAMES = sorted(name for name in registry if name != "openenv")  # openenv needs a server: tests/remote


def test_builtin_envs_are_registered():
    assert {"sokoban", "frozenlake", "bandit", "countdown", "metamath", "deepcoder"} <= set(ENV_NAMES)
    assert {"sudoku", "game2048", "rubiks2x2"} <= set(ENV_NAMES)


@pytest.mark.parametrize("name", ["sokoban", "frozenlake", "sudoku", "game2048", "rubiks2x2"])
def test_envs_whose_states_repeat_key_them(name):
    # the base contract: such envs put state_key in reset's info (check_env then checks every step's)
    env = make(name)
    key = env.reset(seed=3)[1]["state_key"]
    assert isinstance(key, str) and key == make(name).reset(seed=3)[1]["state_key"]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_check_env(name):
    env = make(name)
    assert isinstance(env, gymnasium.Env)
    check_env(env)
    check_env(make(name), seed=12345)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_same_seed_same_transcript(name):
    for seed in (0, 1, 99):
        first, second = make(name), make(name)
        second.reset(seed=seed + 1)  # history must not matter: a seeded reset starts from scratch
        assert transcript(first, seed) == transcript(second, seed)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_different_seeds_give_different_instances(name):
    env = make(name)
    observations = {env.reset(seed=seed)[0] for seed in range(20)}
    assert len(observations) >= 2


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
def test_procedural_grids_rarely_repeat(name):
    env = make(name)
    observations = {env.reset(seed=seed)[0] for seed in range(50)}
    assert len(observations) >= 45


@pytest.mark.parametrize("name", ENV_NAMES)
def test_usable_through_gymnasium_wrappers(name):
    env = gymnasium.wrappers.TimeLimit(make(name), max_episode_steps=2)
    env.reset(seed=0)
    env.step("not an action")
    *_, truncated, _ = env.step("not an action either")
    assert truncated


def test_unknown_env_lists_registered_names_and_nearest():
    with pytest.raises(ValueError, match="unknown environment 'sokobam'") as caught:
        make("sokobam")
    assert "frozenlake" in str(caught.value) and "Did you mean 'sokoban'?" in str(caught.value)


def test_unknown_option_lists_valid_options_and_nearest():
    with pytest.raises(ValueError, match="unknown option 'succes_rate'") as caught:
        make("frozenlake", succes_rate=1.0)
    message = str(caught.value)
    assert "size, frozen_prob, success_rate, max_steps, view" in message
    assert "Did you mean 'success_rate'?" in message


def test_env_options_come_from_init_and_arguments_section():
    options = env_options("frozenlake")
    assert list(options) == ["size", "frozen_prob", "success_rate", "max_steps", "view", "render", "cell_size"]
    assert options["success_rate"][0] == 0.98
    assert options["size"][1] == "rows and columns of the square lake."


def test_registry_is_read_only():
    with pytest.raises(TypeError):
        registry["mine"] = TextEnv  # type: ignore[index]


def test_duplicate_or_non_env_registration_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        register("sokoban")(type("Other", (TextEnv,), {}))
    with pytest.raises(TypeError, match="TextEnv subclass"):
        register("not_an_env")(dict)


class Counter(TextEnv):
    """A minimal correct env: count up to 3 with "Inc"; the seed picks the start."""

    name = "counter"
    description = "Count up to 3."
    action_words = ("Inc",)

    @property
    def instruction(self):
        return "Say Inc."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.value = int(self.np_random.integers(2))
        return self.render(), {}

    def step(self, action):
        valid = self.parse_action(action) is not None
        self.value += valid
        done = self.value >= 3
        info = {"success": done, "action_valid": valid, "action_effective": valid}
        return self.render(), float(done), done, False, info

    def render(self):
        return f"value {self.value}"


def test_checker_accepts_a_correct_env():
    check_env(Counter())


class UsesGlobalRandom(Counter):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.value = random.randrange(2)
        return self.render(), {}


class InvalidActionCounts(Counter):
    def step(self, action):
        self.value += 1
        done = self.value >= 3
        return self.render(), 0.0, done, False, {"success": done, "action_valid": True, "action_effective": True}


class MissingInfoKey(Counter):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        del info["action_effective"]
        return observation, reward, terminated, truncated, info


class StaleRender(Counter):
    def render(self):
        return "value ?"

    def step(self, action):
        _, *rest = super().step(action)
        return f"value {self.value}", *rest


class CaseSensitive(Counter):
    def parse_action(self, action):
        return action if action == "Inc" else None


class KeyedCounter(Counter):
    """Counter with a state key: the value."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed)
        return observation, info | {"state_key": str(self.value)}

    def step(self, action):
        *result, info = super().step(action)
        return *result, info | {"state_key": str(self.value)}


class KeyOnlyAtReset(KeyedCounter):
    def step(self, action):
        *result, info = super().step(action)
        del info["state_key"]
        return *result, info


class InvalidActionMovesKey(KeyedCounter):
    def step(self, action):
        *result, info = super().step(action)
        return *result, info | {"state_key": info["state_key"] + ("" if self.parse_action(action) else "!")}


def test_checker_accepts_state_keys():
    check_env(KeyedCounter())


class PictureCounter(Counter):
    """Counter that also shows its value as an image (mirl.envs.images contract)."""

    def picture(self):
        return Image.new("RGB", (4, 4), (self.value * 40, 0, 0))

    def render(self):
        return f"value {self.value}\n{IMAGE_PLACEHOLDER}"

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed)
        return observation, info | {"images": [self.picture()]}

    def step(self, action):
        *result, info = super().step(action)
        return *result, info | {"images": [self.picture()]}


class PlaceholderWithoutImage(Counter):
    def render(self):
        return f"value {self.value}\n{IMAGE_PLACEHOLDER}"


class GreyPicture(PictureCounter):
    def picture(self):
        return super().picture().convert("L")


class PictureOfCalls(PictureCounter):
    """Draws how often it was asked: an illegal action changes the image."""

    calls = 0

    def picture(self):
        self.calls += 1
        return Image.new("RGB", (4, 4), (self.calls % 256, 0, 0))


def test_checker_accepts_images():
    check_env(PictureCounter())


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (PlaceholderWithoutImage, r"1 <image> placeholder\(s\) but info\['images'\] holds 0"),
        (GreyPicture, "must be RGB"),
        (PictureOfCalls, "must leave the state unchanged"),
    ],
)
def test_checker_rejects_broken_images(broken, message):
    with pytest.raises(ContractError, match=message):
        check_env(broken())


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (KeyOnlyAtReset, r"info\['state_key'\] must be a string"),
        (InvalidActionMovesKey, "changed state_key"),
        (UsesGlobalRandom, "global random state"),
        (InvalidActionCounts, "must leave the state unchanged"),
        (MissingInfoKey, "action_effective"),
        (StaleRender, "render"),
        (CaseSensitive, "case-insensitively"),
    ],
)
def test_checker_rejects_broken_envs(broken, message):
    with pytest.raises(ContractError, match=message):
        check_env(broken())
