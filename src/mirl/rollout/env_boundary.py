"""The rollout engine's one boundary with its envs: what an env's ``reset`` and ``step`` return, and the prompt
settings it exposes, are checked here before the engine uses them, for local and remote envs alike (a remote env's
values are whatever a server someone else runs chose to send).

A value that breaks the contract ends its episode with a named reason, recorded as the episode's ``end_reason``,
counted by ``rollout/env_malformed_frac`` and shown in the report; nothing an env returns can raise out of
:func:`~mirl.rollout.engine.run_episodes`:

- ``malformed_reward``: a reward that is not a real number, is not finite or lies beyond +-:data:`MAX_ENV_REWARD`
  (:func:`~mirl.rollout.failures.reward_problem`); the episode's return is left as it was;
- ``malformed_text``: an observation that is not a string or does not encode as UTF-8 (a lone surrogate);
- ``oversized_text``: an observation above :data:`MAX_OBSERVATION_CHARS` characters;
- ``malformed_result``: ``reset`` not returning ``(observation, info)`` or ``step`` not the Gymnasium 5-tuple;
- ``malformed_info``: an info that is not a dict, a step's info without ``success`` and ``action_valid``, flags
  that are not booleans, an ``end_reason`` that is not a short word, a ``state_key`` above 4,096 characters;
- ``malformed_images``: images that are not RGB ``PIL.Image.Image`` objects, or a number of images that differs
  from the observation's placeholders (:mod:`mirl.envs.images`);
- ``oversized_images``: an image above :data:`~mirl.envs.images.MAX_IMAGE_SIDE` a side, an observation with more
  than :data:`~mirl.envs.images.MAX_MESSAGE_IMAGES` images or :data:`~mirl.envs.images.MAX_MESSAGE_PIXELS`
  pixels, or a rollout whose observations
  together pass :data:`MAX_ROLLOUT_PIXELS` pixels (what one rollout keeps in memory);
- ``malformed_prompt``: prompt settings the system prompt cannot be written from (an empty action-word list, an
  action word that is empty or not a string, an instruction or legend that is not encodable text); the episode
  ends before its first turn.

An exception the env raises is not a value and propagates: a local env's bug shows with its traceback, and the
remote client (:mod:`mirl.envs.remote.openenv`) turns every failed call into a ``remote_*`` end reason itself.
The first time a reason occurs for an env in a process, a warning names the env and what was wrong, so the author
of a local env sees the contract they broke.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

from mirl.envs.images import OversizedImages, observation_images
from mirl.rollout.failures import reward_problem

MAX_OBSERVATION_CHARS = 1 << 20  # one observation's text
MAX_ROLLOUT_PIXELS = 1 << 28  # pixels of every observation of one rollout together (about 0.8 GB as RGB)
MAX_END_REASON_CHARS = 64
MAX_STATE_KEY_CHARS = 4096
MAX_ACTION_WORDS = 4096

_FLAG_TYPES: tuple[type, ...] = (bool, int)
try:  # numpy comparisons give numpy booleans; envs return them as flags
    import numpy as _np

    _FLAG_TYPES += (_np.bool_, _np.integer)
except ImportError:  # pragma: no cover - numpy is a dependency
    pass


class EnvValueError(Exception):
    """A value an env returned that the engine refuses; ``reason`` is the episode's end reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class EnvResult:
    """A checked ``reset`` or ``step``: the values the engine may use, or ``problem`` (the end reason) and nothing
    else. ``reward`` is a finite float; ``images`` the observation's checked images."""

    observation: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)
    images: list = field(default_factory=list)
    problem: str | None = None


@dataclass
class Boundary:
    """The checks of one rollout; it counts the rollout's image pixels against :data:`MAX_ROLLOUT_PIXELS`.

    Envs stepped on threads share it (the count is locked).
    """

    max_rollout_pixels: int | None = None  # None: :data:`MAX_ROLLOUT_PIXELS`
    pixels: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.max_rollout_pixels is None:
            self.max_rollout_pixels = MAX_ROLLOUT_PIXELS

    def reset(self, env, seed: int | None) -> EnvResult:
        """``env.reset(seed=seed)``, checked."""
        result = env.reset(seed=seed)
        try:
            if not isinstance(result, tuple) or len(result) != 2:
                raise EnvValueError("malformed_result", f"reset returned {_kind(result)}, not (observation, info)")
            observation, info = result
            return self._checked(observation, 0.0, False, False, info, step=False)
        except EnvValueError as error:
            return _refused(env, error)

    def step(self, env, action: str) -> EnvResult:
        """``env.step(action)``, checked."""
        result = env.step(action)
        try:
            if not isinstance(result, tuple) or len(result) != 5:
                raise EnvValueError("malformed_result", f"step returned {_kind(result)}, not the Gymnasium 5-tuple")
            return self._checked(*result, step=True)
        except EnvValueError as error:
            return _refused(env, error)

    def prompt_problem(self, env) -> str | None:
        """The end reason when ``env``'s prompt settings cannot be used (read after ``reset``), else None."""
        try:
            _check_prompt(env)
        except EnvValueError as error:
            _warn_once(env, error)
            return error.reason
        return None

    def _checked(self, observation, reward, terminated, truncated, info, *, step: bool) -> EnvResult:
        problem = reward_problem(reward)
        if problem is not None:
            raise EnvValueError("malformed_reward", f"a reward {problem}")
        _check_text(observation)
        _check_info(info, step=step)
        if not all(isinstance(flag, _FLAG_TYPES) for flag in (terminated, truncated)):
            raise EnvValueError("malformed_info", "terminated and truncated must be booleans")
        images = self._images(observation, info)
        return EnvResult(observation, float(reward), bool(terminated), bool(truncated), info, images)

    def _images(self, observation: str, info: dict) -> list:
        try:
            images = observation_images(observation, info)
        except OversizedImages as error:
            raise EnvValueError("oversized_images", str(error)) from None
        except ValueError as error:
            raise EnvValueError("malformed_images", str(error)) from None
        pixels = sum(image.size[0] * image.size[1] for image in images)
        with self._lock:
            if self.pixels + pixels > self.max_rollout_pixels:
                raise EnvValueError(
                    "oversized_images", f"the rollout's images pass {self.max_rollout_pixels} pixels in all"
                )
            self.pixels += pixels
        return images


def _check_text(observation: Any) -> None:
    if not isinstance(observation, str):
        raise EnvValueError("malformed_text", f"the observation is {_kind(observation)}, not a string")
    if len(observation) > MAX_OBSERVATION_CHARS:
        raise EnvValueError(
            "oversized_text", f"the observation has {len(observation)} characters, above {MAX_OBSERVATION_CHARS}"
        )
    _encodable(observation, "the observation")


def _encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise EnvValueError("malformed_text", f"{what} holds what UTF-8 cannot encode (a lone surrogate)") from None


def _check_info(info: Any, *, step: bool) -> None:
    if not isinstance(info, dict):
        raise EnvValueError("malformed_info", f"the info is {_kind(info)}, not a dict")
    required = ("success", "action_valid") if step else ()
    missing = [key for key in required if key not in info]
    if missing:
        raise EnvValueError("malformed_info", f"the step's info has no {' or '.join(map(repr, missing))}")
    for key in ("success", "action_valid"):
        if key in info and not isinstance(info[key], _FLAG_TYPES):
            raise EnvValueError("malformed_info", f"info[{key!r}] is {_kind(info[key])}, not a boolean")
    reason = info.get("end_reason")
    if reason is not None and (
        not isinstance(reason, str) or not reason.isprintable() or not 0 < len(reason) <= MAX_END_REASON_CHARS
    ):
        raise EnvValueError("malformed_info", f"info['end_reason'] must be a word of at most {MAX_END_REASON_CHARS}")
    key = info.get("state_key")
    if key is not None and len(str(key)) > MAX_STATE_KEY_CHARS:
        raise EnvValueError("malformed_info", f"info['state_key'] is above {MAX_STATE_KEY_CHARS} characters")


def _check_prompt(env) -> None:
    for name in ("instruction", "symbol_legend"):
        value = getattr(env, name, None)
        if value is None and name == "symbol_legend":
            continue
        if not isinstance(value, str) or len(value) > MAX_OBSERVATION_CHARS:
            raise EnvValueError("malformed_prompt", f"the env's {name} is {_kind(value)}, not text")
        _encodable(value, f"the env's {name}")
    words = env.action_words
    if words is None:
        return
    if not isinstance(words, list | tuple) or not 0 < len(words) <= MAX_ACTION_WORDS:
        raise EnvValueError("malformed_prompt", f"the env's action words must be 1 to {MAX_ACTION_WORDS} strings")
    for word in words:
        if not isinstance(word, str) or not word.strip() or len(word) > 256:
            raise EnvValueError("malformed_prompt", f"an action word is {word!r:.40}, not a short non-empty string")
        _encodable(word, "an action word")


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}"


_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _refused(env, error: EnvValueError) -> EnvResult:
    _warn_once(env, error)
    return EnvResult(problem=error.reason)


def _warn_once(env, error: EnvValueError) -> None:
    name = type(env).__name__
    with _WARNED_LOCK:
        if (name, error.reason) in _WARNED:
            return
        _WARNED.add((name, error.reason))
    warnings.warn(
        f"env {name} returned a value the rollout refuses ({error.detail}); its episode ends as {error.reason}, "
        "counted by rollout/env_malformed_frac (further ones are counted, not warned)",
        stacklevel=3,
    )
