"""``check_env``: verify that an environment honours the text-environment contract of :mod:`mirl.envs.base`.

What is checked, in order (each failure raises :class:`ContractError` naming the rule and what was seen):

1. declarations: ``name`` and a one-line ``description`` are set; ``action_words`` is None or distinct words;
   ``default_action_budget`` and ``max_actions_per_turn`` are ints >= 1; ``multi_turn`` and ``question_prompt``
   are bools;
2. reset: returns ``(str, dict)``; ``render()`` equals the observation; ``instruction`` is non-empty text;
3. steps over a probe script (the legal words in turn, in odd case and padding, and junk text): every return
   has the right types, ``info`` holds bool ``success``/``action_valid``/``action_effective``, ``render()``
   equals the observation, and an illegal word leaves the state unchanged with reward 0 and
   ``action_valid=False`` (envs with ``action_words`` only: free-form envs judge their own text); an env whose
   reset info has ``state_key`` gives a string key in every step's info, unchanged by an illegal word;
   images (:mod:`mirl.envs.images`): every observation holds as many placeholders as its ``info["images"]``
   holds RGB images within the size limit, and an illegal word leaves the images' pixels unchanged;
4. determinism: the same seed gives the same transcript twice (images compared pixel by pixel), and
   ``" LEFT "`` acts exactly like ``"Left"``;
5. no global random state (``random``, ``numpy.random``, and ``torch`` when loaded) is read or written;
6. Gymnasium's own ``gymnasium.utils.env_checker.check_env`` passes, warnings included.

>>> from mirl.envs import make
>>> check_env(make("frozenlake"))
"""

from __future__ import annotations

import math
import random
import sys
import warnings
from typing import Any

import gymnasium.utils.env_checker
import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.images import image_id, observation_images

FREE_FORM_PROBES = ("42", "1 + 2", "The answer is: 3", "", "(7 - 2) * 4", "search[frozen lake]")
JUNK_ACTION = "~ not an action ~"
_INFO_KEYS = ("success", "action_valid", "action_effective")


class ContractError(AssertionError):
    """An environment broke the text-environment contract."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def probe_actions(env: TextEnv, length: int = 12) -> list[str]:
    """A fixed script of ``length`` actions for ``env`` (call after reset): junk first, then words and junk."""
    if env.action_words is None:
        return [FREE_FORM_PROBES[i % len(FREE_FORM_PROBES)] for i in range(length)]
    words = list(env.action_words)
    script = []
    for i in range(length):
        word = words[(i * 7 + i // len(words)) % len(words)]
        script.append(JUNK_ACTION if i % 5 == 0 else word)
    return script


def transcript(env: TextEnv, seed: int, actions: list[str] | None = None) -> list[tuple]:
    """Reset with ``seed``, play ``actions`` (default :func:`probe_actions`) until the episode ends; every output."""
    observation, info = env.reset(seed=seed)
    record: list[tuple] = [(observation, info, env.instruction, env.action_words)]
    for action in probe_actions(env) if actions is None else actions:
        result = env.step(action)
        record.append((*result, env.render()))
        if result[2] or result[3]:
            break
    return record


def _check_declarations(env: TextEnv) -> None:
    cls = type(env)
    _require(isinstance(env, TextEnv), f"expected a TextEnv instance, got {cls.__qualname__}")
    _require(isinstance(cls.name, str) and cls.name != "", f"{cls.__qualname__}.name is empty; use @register(name)")
    description = cls.description
    _require(
        isinstance(description, str) and description.strip() != "" and "\n" not in description,
        f"{cls.name}.description must be one non-empty line, got {description!r}",
    )
    for attribute in ("default_action_budget", "max_actions_per_turn"):
        value = getattr(cls, attribute)
        _require(type(value) is int and value >= 1, f"{cls.name}.{attribute} must be an int >= 1, got {value!r}")
    for attribute in ("multi_turn", "question_prompt"):
        value = getattr(cls, attribute)
        _require(type(value) is bool, f"{cls.name}.{attribute} must be a bool, got {value!r}")
    _require(
        cls.symbol_legend is None or isinstance(cls.symbol_legend, str),
        f"{cls.name}.symbol_legend must be None or text, got {cls.symbol_legend!r}",
    )


def _check_reset(env: TextEnv, seed: int) -> None:
    result = env.reset(seed=seed)
    _require(
        isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str) and isinstance(result[1], dict),
        f"{env.name}.reset must return (str, dict), got {result!r:.200}",
    )
    _require(env.render() == result[0], f"{env.name}.render() differs from the reset observation")
    _image_ids(env, "reset", result[0], result[1])
    _require(isinstance(env.instruction, str) and env.instruction.strip() != "", f"{env.name}.instruction is empty")
    words = env.action_words
    _require(
        words is None
        or (isinstance(words, tuple) and len(words) > 0 and len({w.casefold() for w in words}) == len(words)),
        f"{env.name}.action_words must be None or distinct words (case-insensitively), got {words!r}",
    )


def _image_ids(env: TextEnv, where: str, observation: str, info: dict) -> list[str]:
    """The content ids of an observation's images; :class:`ContractError` when they break the image contract."""
    try:
        return [image_id(image) for image in observation_images(observation, info)]
    except ValueError as error:
        raise ContractError(f"{env.name}.{where}: {error}") from None


def _check_step(env: TextEnv, action: str, before: tuple[str, list[str]], result: Any) -> None:
    name = env.name
    _require(isinstance(result, tuple) and len(result) == 5, f"{name}.step must return a 5-tuple, got {result!r:.200}")
    observation, reward, terminated, truncated, info = result
    _require(isinstance(observation, str), f"{name}.step observation must be str, got {type(observation)}")
    _require(
        isinstance(reward, int | float) and not isinstance(reward, bool) and math.isfinite(reward),
        f"{name}.step reward must be a finite float, got {reward!r}",
    )
    _require(
        type(terminated) is bool and type(truncated) is bool,
        f"{name}.step terminated/truncated must be bool, got {terminated!r}, {truncated!r}",
    )
    _require(isinstance(info, dict), f"{name}.step info must be a dict, got {type(info)}")
    for key in _INFO_KEYS:
        _require(type(info.get(key)) is bool, f"{name}.step info[{key!r}] must be a bool, got {info.get(key)!r}")
    _require(env.render() == observation, f"{name}.render() differs from the observation step returned")
    images = _image_ids(env, "step", observation, info)
    if env.action_words is not None and env.parse_action(action) is None:
        _require(
            (observation, images) == before
            and reward == 0
            and not info["action_valid"]
            and not info["action_effective"],
            f"{name}: the illegal action {action!r} must leave the state unchanged with reward 0 and "
            f"action_valid=action_effective=False, got reward {reward!r}, info {info!r}",
        )


def _check_steps(env: TextEnv, seed: int) -> None:
    observation, info = env.reset(seed=seed)
    key, images = info.get("state_key"), _image_ids(env, "reset", observation, info)
    for action in probe_actions(env):
        before = (env.render(), images)
        result = env.step(action)
        _check_step(env, action, before, result)
        images = _image_ids(env, "step", result[0], result[4])
        key = _check_state_key(env, action, key, result[4])
        if result[2] or result[3]:
            break


def _check_state_key(env: TextEnv, action: str, before: Any, info: dict) -> Any:
    """An env with a reset ``state_key`` keeps giving string keys; an illegal word leaves the key as it was."""
    if before is None:
        return None
    key = info.get("state_key")
    _require(isinstance(key, str), f"{env.name}.step info['state_key'] must be a string like reset's, got {key!r}")
    if env.action_words is not None and env.parse_action(action) is None:
        _require(key == before, f"{env.name}: the illegal action {action!r} changed state_key {before!r} -> {key!r}")
    return key


def _check_determinism(env: TextEnv, seed: int) -> None:
    first = transcript(env, seed)
    _require(transcript(env, seed) == first, f"{env.name}: two runs with seed {seed} gave different transcripts")
    if env.action_words is None:
        return
    env.reset(seed=seed)
    padded = [f"  {action.swapcase()}\n" for action in probe_actions(env)]
    _require(
        transcript(env, seed, padded) == first,
        f"{env.name}: action words must match case-insensitively after stripping whitespace",
    )


def _global_rng_state() -> tuple:
    torch = sys.modules.get("torch")
    torch_state = torch.random.get_rng_state().tolist() if torch is not None else None
    return random.getstate(), repr(np.random.get_state()), torch_state


def _check_gymnasium(env: TextEnv) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium.utils.env_checker.check_env(env, skip_render_check=True, skip_close_check=True)
    messages = [str(warning.message) for warning in caught]
    _require(not messages, f"{env.name}: gymnasium's env checker warned: {messages}")


def check_env(env: TextEnv, *, seed: int = 0) -> None:
    """Raise :class:`ContractError` unless ``env`` honours the contract (see the module docstring).

    The env is reset several times; use a fresh instance afterwards if its current episode matters.
    """
    _check_declarations(env)
    for stage in (_check_reset, _check_steps, _check_determinism):
        global_state = _global_rng_state()
        stage(env, seed)
        _require(
            _global_rng_state() == global_state,
            f"{env.name} changed global random state in {stage.__name__}; draw only from self.np_random",
        )
    _check_gymnasium(env)
