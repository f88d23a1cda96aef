"""Stepping an episode's env with the actions of one parsed reply (the rollout engine's env side).

Works on the engine's per-episode state (``_Live`` in :mod:`mirl.rollout.engine`): its env, observation, images,
state key, remaining action budget, success and end reason. Every step goes through the rollout's
:class:`~mirl.rollout.env_boundary.Boundary`, which checks what the env returned; a refused value ends the episode
with the boundary's reason.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from mirl.envs.base import StepRecord

_STEP_THREADS = 64  # threads stepping envs with concurrent_steps (their own pools bound the real work)


def step_all(lives: list, replies: list) -> list[tuple[str, float, int, bool]]:
    """Step every episode's parsed reply, in order; ``(shown, env reward, executed, all legal)`` per episode.

    An env whose ``step`` waits on other processes (DeepCoder's sandbox runs) sets ``concurrent_steps = True``;
    the steps of such episodes in one turn run on threads (each episode has its own env), so their waits
    overlap. Other envs step one after another on the calling thread, and the tokenizer is never used on a thread.
    """
    concurrent = [i for i, live in enumerate(lives) if getattr(live.env, "concurrent_steps", False)]
    results: dict[int, tuple[str, float, int, bool]] = {}
    if len(concurrent) > 1:
        with ThreadPoolExecutor(max_workers=min(len(concurrent), _STEP_THREADS)) as executor:
            stepped = executor.map(lambda i: step_reply(lives[i], replies[i]), concurrent)
            results.update(zip(concurrent, stepped, strict=True))
    return [results[i] if i in results else step_reply(live, replies[i]) for i, live in enumerate(lives)]


def step_reply(live, parsed) -> tuple[str, float, int, bool]:
    """Step the reply's legal actions; ``(observation shown before, env reward, actions executed, all legal)``."""
    shown, live.shown_key = live.observation, live.state_key
    env_reward, executed, good = 0.0, 0, parsed.all_legal
    for action, legal in zip(parsed.actions, parsed.legal, strict=True):
        if not legal or live.budget == 0 or live.end_reason is not None:
            continue
        result = live.boundary.step(live.env, action)
        if result.problem is not None:  # a value the engine refuses: the episode ends, its return untouched
            live.end_reason = result.problem
            break
        info = result.info
        env_reward += result.reward
        live.steps.append(StepRecord(action, result.reward, info))
        live.observation, live.state_key = result.observation, state_key_of(info)
        live.images = result.images
        live.success = bool(info["success"])
        if info["action_valid"]:
            executed += 1
            live.budget -= 1
        else:
            good = False
        if result.terminated or result.truncated:  # an env may name its own reason (a remote env's failed call)
            ended = "success" if live.success else ("terminated" if result.terminated else "truncated")
            live.end_reason = info.get("end_reason") or ended
    return shown, env_reward, executed, good


def state_key_of(info: dict) -> str | None:
    """The env's ``info["state_key"]`` as a string (str of a hashable key), or None when absent."""
    key = info.get("state_key")
    return None if key is None else str(key)
