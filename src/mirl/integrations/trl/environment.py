"""mirl envs as TRL 1.16 ``environment_factory`` environments: the env's actions as one tool, its return as the reward.

TRL's ``GRPOTrainer(environment_factory=...)`` (experimental in 1.16) builds environment instances with a
zero-argument factory, resets one per rollout with the dataset row's columns as keyword arguments, appends the
string ``reset`` returns to the prompt's last user message, exposes every public method other than ``reset`` and
``get_reward`` as a tool in the model's own chat format, runs the model's tool calls, and calls ``get_reward()`` once
per finished rollout. Here:

- :class:`MirlEnvironment` wraps one mirl env (a registered name, or a :class:`mirl.Task`). ``reset(seed=...,
  split=...)`` plays instance ``seed`` of ``split`` (the columns :func:`environment_dataset` writes) and returns
  the first user message (turn, state, actions left). The one tool, ``act(answer)``, is one turn of mirl's rollout
  engine: ``answer`` is what ``<answer>`` holds in mirl's own format (``"Down || Right"``), parsed by mirl's reply
  parser with the same per-turn action cap and action budget, stepped through the same env boundary
  (``mirl.rollout.stepping.step_reply``), and rewarded as the engine rewards a turn: the env rewards of its legal
  actions, plus ``rollout.format_penalty`` when it held no action or an illegal one. The tool returns the next user
  message, or says the episode is over.
- ``get_reward()`` is the episode's return: the sum of the turn rewards. A rollout that stops while the episode is
  still on (the model replied without calling ``act``, or TRL's completion budget ran out) is charged
  ``format_penalty`` once more, as the engine charges a reply without an answer.
- :func:`environment_dataset` writes the rows: a conversational ``prompt`` (a system message with the env's
  instruction and how to act, an empty user message that ``reset`` fills with the first state), ``environment``
  (the env name, the key of a dict of factories), ``split`` and ``seed`` (the same instance seeds as
  :func:`mirl.integrations.trl.dataset`: even for training, odd for validation).

Deliberate differences from :class:`~mirl.integrations.trl.MirlRollout`, which plays the same instances through
``rollout_func``: the model acts through a tool call in its chat template's format instead of ``<think>`` and
``<answer>`` tags (so the token ids differ); TRL renders and generates (its tool loop re-applies the chat template
to the tool results, token-in/token-out for the model's own tokens, ``tool_mask`` 0 on the tool-result tokens);
and a reply without a tool call ends TRL's rollout, where mirl's engine would count it as a bad turn and go on.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

from mirl.config import RolloutConfig
from mirl.rollout.engine import _Live
from mirl.rollout.env_boundary import Boundary
from mirl.rollout.parsing import parse_reply
from mirl.rollout.prompts import ROLE_SENTENCE
from mirl.rollout.stepping import state_key_of, step_reply
from mirl.types import EnvSpec

SPLITS = ("train", "validation")
OVER = "The episode is over."


def _maker(env) -> tuple[str, Callable[..., object]]:
    """``(name, make(split, **options) -> env)`` of a registered env name or a ``mirl.Task``; the split reaches envs
    that take one (datasets, Tasks), as in ``mirl train``."""
    from mirl.envs import make, registry
    from mirl.envs.task import Task

    if isinstance(env, Task):
        return env.name, lambda split, **options: env.make(split)
    if not isinstance(env, str) or env not in registry:
        raise ValueError(f"env must be a registered mirl env or a mirl.Task, got {env!r}; `mirl envs` lists them")
    takes_split = "split" in inspect.signature(registry[env].__init__).parameters
    return env, lambda split, **options: make(env, **({"split": split} if takes_split else {}), **options)


def _cap(env_object, config: RolloutConfig) -> int:
    """Actions per turn at most, as the rollout engine computes it (1 for free-form envs)."""
    if env_object.action_words is None:
        return 1
    return min(config.max_actions_per_turn, env_object.max_actions_per_turn)


def instructions(env_object, cap: int) -> str:
    """The system message of the tool path: mirl's role sentence, the env's instruction and legend, and how to act."""
    lines = [ROLE_SENTENCE, env_object.instruction]
    if env_object.symbol_legend:
        lines.append(f"Symbols: {env_object.symbol_legend}")
    words = env_object.action_words
    if words is None:
        lines.append("Act by calling the act tool with your answer.")
    else:
        lines.append(
            f"Legal actions: {', '.join(words)}. Act by calling the act tool with up to {cap} of them separated by "
            f'"||", e.g. act(answer="{words[0]}").'
        )
    return "\n".join(lines)


class MirlEnvironment:
    """One mirl env instance for TRL's ``environment_factory`` (module docstring).

    Args:
        env: a registered env name (``mirl envs``) or a :class:`mirl.Task`.
        env_options: the env's constructor options (e.g. ``{"size": 4}``); give :func:`environment_dataset` the same.
        rollout: mirl's ``rollout`` block or a mapping of its fields; read here: ``max_turns``,
            ``max_actions_per_turn``, ``action_budget``, ``format_penalty``.

    TRL offers every public method as a tool, so the only public methods are ``reset``, ``act`` and
    ``get_reward``; what the episode did is in attributes: ``turn_rewards``, ``answers``, ``end_reason``,
    ``success``, ``seed``.
    """

    def __init__(self, env, *, env_options: Mapping | None = None, rollout: RolloutConfig | Mapping | None = None):
        self.name, self._make = _maker(env)
        self.env_options = dict(env_options or {})
        self.config = rollout if isinstance(rollout, RolloutConfig) else RolloutConfig(**dict(rollout or {}))
        self._live: _Live | None = None
        self.seed: int | None = None
        self.turn_rewards: list[float] = []
        self.answers: list[str] = []

    @classmethod
    def factory(cls, env, **kwargs) -> Callable[[], MirlEnvironment]:
        """A zero-argument factory for ``GRPOTrainer(environment_factory=...)`` (or one value of its dict)."""
        return functools.partial(cls, env, **kwargs)

    @property
    def end_reason(self) -> str | None:
        """Why the episode ended (the rollout engine's reasons), None while it is on or before ``reset``."""
        return None if self._live is None else self._live.end_reason

    @property
    def success(self) -> bool:
        return self._live is not None and self._live.success

    def reset(self, *, seed: int, split: str = "train", environment: str | None = None, **row) -> str:
        """Start instance ``seed`` of ``split`` (the dataset row's columns); returns the first user message."""
        if environment is not None and environment != self.name:
            raise ValueError(
                f"the row is for environment {environment!r}, this factory makes {self.name!r}; pass a dict of "
                "factories keyed by environment name, or build the dataset for this env"
            )
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self._live is not None:
            self._live.env.close()  # TRL reuses instances: the last episode's env goes
        env_object = self._make(split, **self.env_options)
        boundary = Boundary()
        reset = boundary.reset(env_object, int(seed))
        cap = _cap(env_object, self.config)
        budget = self.config.action_budget or env_object.default_action_budget
        self._live = _Live(
            env=env_object, spec=EnvSpec(self.name, int(seed), dict(self.env_options)), group=0, sample=0, cap=cap,
            budget=budget, max_turns=self.config.max_turns if env_object.multi_turn else 1, system_ids=(),
            observation=reset.observation, boundary=boundary, state_key=state_key_of(reset.info),
            end_reason=reset.problem or reset.info.get("end_reason"),
        )  # fmt: skip
        self.seed, self.turn_rewards, self.answers = int(seed), [], []
        if self._live.end_reason is not None:
            return f"{OVER} ({self._live.end_reason})"
        return self._user_message()

    def act(self, answer: str) -> str:
        """Take your turn in the environment.

        Args:
            answer: Your actions, separated by "||" when a turn may hold several, e.g. "Down || Right".

        Returns:
            The reward of your turn and the next state, or that the episode is over.
        """
        live = self._live
        if live is None:
            raise RuntimeError("act() before reset(): TRL resets every environment before generating")
        if live.end_reason is not None:
            return f"{OVER} Nothing was done."
        parsed = parse_reply(f"<think></think><answer>{answer}</answer>", live.env.action_words, live.cap)
        _, env_reward, executed, good = step_reply(live, parsed)
        reward = env_reward + (0.0 if good else self.config.format_penalty)
        self.turn_rewards.append(reward)
        self.answers.append(str(answer))
        live.unchanged = executed == 0
        if live.end_reason is None and live.budget == 0:
            live.end_reason = "action_budget"
        if live.end_reason is None and len(self.turn_rewards) >= live.max_turns:
            live.end_reason = "max_turns"
        if live.end_reason is not None:
            outcome = "solved" if live.success else live.end_reason
            return f"Reward of the last turn: {reward:g}\n{OVER} ({outcome}; return {sum(self.turn_rewards):g})"
        return self._user_message(reward)

    def get_reward(self) -> float:
        """The episode's return (module docstring), called by TRL once per finished rollout."""
        unfinished = self._live is not None and self._live.end_reason is None
        return float(sum(self.turn_rewards)) + (self.config.format_penalty if unfinished else 0.0)

    def _user_message(self, last_reward: float | None = None) -> str:
        live = self._live
        lines = [f"Turn {len(self.turn_rewards) + 1}."]
        if last_reward is not None:
            lines.append(f"Reward of the last turn: {last_reward:g}")
        if live.unchanged:
            lines.append("Your last turn had no legal action, so the state is unchanged.")
        lines += ["State:", live.observation, f"Actions left: {live.budget}."]
        return "\n".join(lines)


def environment_dataset(env, n: int, split: str = "train", *, first: int = 0, env_options: Mapping | None = None,
                        rollout: RolloutConfig | Mapping | None = None):  # fmt: skip
    """A ``datasets.Dataset`` of ``n`` instances of ``env`` for ``environment_factory``: columns ``prompt``
    (system message, empty user message), ``environment``, ``split``, ``seed`` (module docstring).

    Datasets of several envs concatenate (``datasets.concatenate_datasets``) for a dict of factories keyed by the
    env names.
    """
    from datasets import Dataset

    name, make = _maker(env)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    for label, value, low in (("n", n, 1), ("first", first, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{label} must be an int >= {low}, got {value!r}")
    config = rollout if isinstance(rollout, RolloutConfig) else RolloutConfig(**dict(rollout or {}))
    env_object = make(split, **dict(env_options or {}))
    system = instructions(env_object, _cap(env_object, config))
    env_object.close()
    prompt = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
    seeds = [2 * (first + i) + (split == "validation") for i in range(n)]
    return Dataset.from_dict({"prompt": [prompt] * n, "environment": [name] * n, "split": [split] * n, "seed": seeds})


def served_dataset(url: str, n: int, split: str = "train", *, token: str | None = None, timeout_s: float = 30.0):
    """The first ``n`` tasks of ``split`` that the OpenEnv server at ``url`` lists through its task routes
    (``GET /list_environments``, ``POST /{env}/task_range``), as rows for ``MirlEnvironment.factory("openenv",
    env_options={"url": url})``: the same columns as :func:`environment_dataset`, ``seed`` the task's seed (on a
    mirl server, task ``i`` of ``train`` is seed ``2i``), ``environment`` = ``"openenv"``.
    """
    from datasets import Dataset

    from mirl.envs.remote.client import RemoteError
    from mirl.envs.remote.task_client import _request, http_base

    base = http_base(url)
    status, names = _request(base, "/list_environments", None, token, timeout_s)
    if status != 200 or not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise RemoteError("server", f"{base} lists no environments (HTTP {status}); serve one with mirl serve-env")
    status, reply = _request(base, f"/{names[0]}/task_range", {"split": split, "start": 0, "stop": n}, token, timeout_s)
    tasks = reply.get("tasks") if isinstance(reply, dict) else None  # OpenEnv's reply: {"tasks": [...]}
    if status != 200 or not isinstance(tasks, list) or len(tasks) != n:
        raise RemoteError("server", f"{base}/{names[0]}/task_range gave no {n} tasks of {split!r} (HTTP {status})")
    rows = environment_dataset("openenv", 1, split, env_options={"url": url})
    prompt = rows[0]["prompt"]
    seeds = [int(task["seed"]) for task in tasks]
    return Dataset.from_dict({"prompt": [prompt] * n, "environment": ["openenv"] * n, "split": [split] * n,
                              "seed": seeds, "task": [str(task["id"]) for task in tasks]})  # fmt: skip
