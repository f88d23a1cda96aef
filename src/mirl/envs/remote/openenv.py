"""OpenEnv: play an env served by any OpenEnv server (``mirl serve-env`` or another ``openenv`` server).

Observation:
    The text in the field ``observation_field`` of the server's observation. From a mirl server the images too
    (``info["images"]``, decoded from PNG with size checks) and the served env's prompt settings (instruction,
    symbol legend, action words, action budget), so an episode prompts and parses exactly as it would in-process.
    From another server the prompt uses ``instruction`` and free-form actions.

Actions:
    The action text, sent as ``{action_field: text}``. A mirl server judges legality (``info["action_valid"]``);
    another server's actions all count as valid.

Reward:
    The server's ``reward`` (0 when it sends none).

Termination:
    A mirl server's ``terminated`` / ``truncated``; another server's ``done`` as terminated. ``success`` is the
    served ``info["success"]``, else ``done`` with a positive reward. A failed call (see
    :mod:`mirl.envs.remote.client`: refused, timeout, oversized, malformed, closed, capacity, server) ends the
    episode as truncated with ``info["end_reason"] = "remote_<reason>"`` (the rollout engine records it as the
    episode's ``end_reason``) and ``info["remote_error"]`` holding the message; a failed reset gives an episode
    with no turns. Such a step counts as a valid action: the model is not penalised for a server's failure.

Tasks:
    ``reset(seed=s, options={"split": "validation"})`` plays a task of that split on a server that lists tasks
    (OpenEnv's task API; every ``mirl serve-env``): the reset sends ``{"split": ..., "index": (s // 2) mod
    num_tasks}``, which on a mirl server is the task whose seed is ``s`` when ``s`` has the split's parity (train
    even, validation odd, as the trainer's seeds have), so the episode is the local env's for that seed and split.
    ``options={"split": ..., "index": i}`` names the task itself. The ``split`` argument is the split of a reset
    whose options name none: the trainer passes ``"train"`` for training and ``"validation"`` for validation, so
    a run plays each split's tasks on a server that lists them. A server that lists no tasks is reset with the
    seed (the task options dropped); one that lists tasks but not that split ends the episode with
    ``remote_server`` (:mod:`mirl.envs.remote.task_client`).

Arguments:
    url: the server, http(s):// or ws(s)://, e.g. http://127.0.0.1:8000.
    action_field: the action's field name on the server (mirl servers: action).
    observation_field: the observation field holding the text (mirl servers: observation).
    timeout_s: deadline of one call (connect, reset or step), in seconds.
    instruction: the task description for a server that sends none (servers other than mirl's).
    token_env: name of the environment variable holding a bearer token, if the server wants one.
    max_message_bytes: largest reply accepted.
    split: the task split to play on a server that lists tasks (empty: seeds only).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.registry import register
from mirl.envs.remote import SERVE_EXTRA

DEFAULT_INSTRUCTION = "You are interacting with an environment. Read each observation and answer with your action."


@register("openenv")
class OpenEnvEnv(TextEnv):
    """A remote OpenEnv env: every reset and step is one call to the server, each within ``timeout_s``."""

    description = "A remote env served over OpenEnv (mirl serve-env or any OpenEnv server); needs url=..."
    concurrent_steps = True  # a step waits on the network: the engine steps a turn's episodes on threads
    option_limits = {"timeout_s": 3600, "max_message_bytes": 1 << 30}

    def __init__(
        self,
        url: str = "",
        action_field: str = "action",
        observation_field: str = "observation",
        timeout_s: float = 30.0,
        instruction: str = DEFAULT_INSTRUCTION,
        token_env: str = "MIRL_OPENENV_TOKEN",
        max_message_bytes: int = 4 << 20,
        split: str = "",
    ) -> None:
        from mirl.envs.remote.client import websocket_url
        from mirl.envs.remote.wire import MAX_ACTION_CHARS

        super().__init__()
        if importlib.util.find_spec("websockets") is None:
            raise ImportError(f"env openenv needs websockets, which the serve extra installs: {SERVE_EXTRA}")
        if not url:
            raise ValueError("env openenv needs the server's url, e.g. options: {url: http://127.0.0.1:8000}")
        websocket_url(url)  # a ValueError names the accepted schemes
        if not timeout_s > 0 or max_message_bytes < 1024:
            raise ValueError(
                f"timeout_s must be > 0 and max_message_bytes >= 1024, got {timeout_s} and {max_message_bytes}"
            )
        self.url, self.action_field, self.observation_field = url, action_field, observation_field
        self.timeout_s, self.max_message_bytes = float(timeout_s), int(max_message_bytes)
        self.token_env, self._instruction = token_env, instruction
        if not isinstance(split, str) or len(split) > 200:
            raise ValueError(f"split must be a split name of at most 200 characters, got {split!r}")
        self.split = split
        self.action_space.max_length = MAX_ACTION_CHARS
        self.action_words: tuple[str, ...] | None = None
        self.symbol_legend: str | None = None
        self._session = None
        self._observation, self._done = "", False

    @property
    def instruction(self) -> str:
        return self._instruction

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        from mirl.envs.remote.client import RemoteError, Session

        super().reset(seed=seed)
        self.close()
        token = os.environ.get(self.token_env) or None
        self._session = Session(self.url, token=token, max_bytes=self.max_message_bytes, deadline_s=self.timeout_s)
        try:
            data = self._reset_data(seed, options, token)
            fields, _, _ = self._read(self._session.call({"type": "reset", "data": data}))
            self._adopt(fields.get("agent"))
            info = self._info(fields, done=False, reward=0.0)
        except RemoteError as error:
            self._observation, self._done = "", True
            return "", self._failure(error)
        self._done = False
        return self._observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        from mirl.envs.remote.client import RemoteError

        if self._session is None:  # reset failed or never ran: the episode is over
            return self._observation, 0.0, False, True, self._failure_info("no session; reset first", "closed")
        try:
            fields, reward, done = self._read(self._session.call({"type": "step", "data": {self.action_field: action}}))
            info = self._info(fields, done=done, reward=reward)
        except RemoteError as error:  # the reply's text is not trusted (its images may be what failed)
            self._observation, self._done = "", True
            return "", 0.0, False, True, self._failure(error)
        terminated = bool(fields.get("terminated", done)) if "terminated" in fields else done
        truncated = bool(fields.get("truncated", False))
        self._done = terminated or truncated
        return self._observation, reward, terminated, truncated, info

    def render(self) -> str:
        return self._observation

    def _reset_data(self, seed: int | None, options: dict[str, Any] | None, token: str | None) -> dict[str, Any]:
        """What the reset sends: a task when ``options`` name a split and the server lists tasks, else the seed (and
        any other options, which the server judges)."""
        from mirl.envs.remote.task_client import split_size
        from mirl.envs.remote.tasks import index_for_seed

        rest = dict(options or {})
        split, index = rest.pop("split", None) or self.split or None, rest.pop("index", None)
        if split is not None and (not isinstance(split, str) or not 0 < len(split) <= 200):
            raise ValueError(f"options['split'] must be a split name, got {split!r}")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise ValueError(f"options['index'] must be an int >= 0, got {index!r}")
        count = split_size(self.url, split, token=token, deadline_s=self.timeout_s) if split else None
        if count is None:
            data: dict[str, Any] = {"seed": seed}
        elif index is not None:
            data = {"split": split, "index": index}
        else:
            drawn = int(self.np_random.integers(2**62)) if seed is None else seed
            data = {"split": split, "index": index_for_seed(drawn, count)}
        return {**data, "options": rest} if rest else data

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _read(self, data: dict[str, Any]) -> tuple[dict[str, Any], float, bool]:
        """``(observation fields, reward, done)`` of a reply's data; the text goes to ``self._observation``."""
        from mirl.envs.remote.client import RemoteError

        fields, reward, done = data.get("observation"), data.get("reward"), data.get("done", False)
        if not isinstance(fields, dict) or not isinstance(fields.get(self.observation_field), str):
            raise RemoteError("malformed", f"the observation has no text field {self.observation_field!r}")
        if reward is None:
            reward = 0.0
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not isinstance(done, bool):
            raise RemoteError("malformed", "reward must be a number or null and done a boolean")
        self._observation = fields[self.observation_field]
        return fields, float(reward), done

    def _info(self, fields: dict[str, Any], *, done: bool, reward: float) -> dict[str, Any]:
        from mirl.envs.images import OversizedImages
        from mirl.envs.remote.client import RemoteError
        from mirl.envs.remote.wire import decode_images

        served = fields.get("info")
        info = dict(served) if isinstance(served, dict) else {}
        info.setdefault("success", done and reward > 0)
        info.setdefault("action_valid", True)
        info.setdefault("action_effective", True)
        info.pop("images", None)  # images travel in their own field, as PNG, never inside the info
        if "images" in fields:
            try:
                info["images"] = decode_images(fields["images"])
            except OversizedImages as error:
                raise RemoteError("oversized", str(error)) from None
            except ValueError as error:
                raise RemoteError("malformed", str(error)) from None
        return info

    def _adopt(self, agent: Any) -> None:
        """Take the served env's prompt settings (a mirl server sends them with the reset)."""
        if not isinstance(agent, dict):
            return
        words = agent.get("action_words")
        self.action_words = tuple(str(w) for w in words) if isinstance(words, list) else None
        self.symbol_legend = agent.get("symbol_legend") if isinstance(agent.get("symbol_legend"), str) else None
        if isinstance(agent.get("instruction"), str):
            self._instruction = agent["instruction"]
        for name in ("default_action_budget", "max_actions_per_turn"):
            if isinstance(agent.get(name), int) and not isinstance(agent.get(name), bool) and agent[name] >= 1:
                setattr(self, name, agent[name])
        for name in ("multi_turn", "question_prompt"):
            if isinstance(agent.get(name), bool):
                setattr(self, name, agent[name])

    def _failure(self, error) -> dict[str, Any]:
        self.close()
        return self._failure_info(str(error), error.reason)

    @staticmethod
    def _failure_info(message: str, reason: str) -> dict[str, Any]:
        return {
            "success": False,
            "action_valid": True,
            "action_effective": False,
            "end_reason": f"remote_{reason}",
            "remote_error": message,
        }
