"""Fixtures for trainer tests: a one-word test env and a tiny model taught the reply format.

A randomly initialised tiny model never writes ``<think>..</think><answer>..</answer>``, so every episode would
earn the same format penalty and no group would have reward spread. A few supervised steps on the format (answers
uniform over the four words) give a policy whose replies parse and whose rewards differ inside a group, which is
what the learning and preset tests need.
"""

from __future__ import annotations

import functools

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.config_files import load_config
from mirl.envs import TextEnv, register, registry
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_policy, tiny_tokenizer
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

WORDS = ("Left", "Right", "Up", "Down")


class PickWordEnv(TextEnv):
    """Observation: a fixed question. Actions: Left/Right/Up/Down. Reward: 1 for Left, else 0. Single turn."""

    description = "test env: answering Left earns 1"
    action_words = WORDS
    default_action_budget = 1
    multi_turn = False

    @property
    def instruction(self) -> str:
        return "Pick one direction."

    def reset(self, *, seed=None, options=None):
        self._done = False
        return "Which way?", {"success": False, "action_valid": True, "action_effective": False}

    def step(self, action):
        word = action.strip().capitalize()
        valid = word in WORDS
        reward = 1.0 if word == "Left" else 0.0
        info = {"success": reward == 1.0, "action_valid": valid, "action_effective": valid}
        return "Done.", reward if valid else 0.0, valid, False, info

    def render(self) -> str:
        return "Which way?"


def ensure_pick_env() -> str:
    if "pick_word" not in registry:
        register("pick_word")(PickWordEnv)
    return "pick_word"


@functools.lru_cache(maxsize=1)
def _formatted_state() -> dict:
    """State dict of a tiny model after 40 supervised steps on '<answer>WORD</answer>' replies."""
    ensure_pick_env()
    tokenizer = tiny_tokenizer()
    recorder = ScriptedPolicy(tokenizer, lambda context: " ok</think><answer>Up</answer>")
    config = RolloutConfig(max_turns=1, max_new_tokens=16)
    run_episodes(recorder, [EnvSpec("pick_word", 0)], 1, config)
    context = list(recorder.calls[0][0])
    policy = tiny_policy()
    model = policy.model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        words = [WORDS[i] for i in torch.randint(len(WORDS), (6,), generator=generator)]
        replies = [tokenizer.encode(f" ok</think><answer>{w}</answer>", add_special_tokens=False) for w in words]
        ids = torch.tensor([context + r for r in replies])
        labels = ids.clone()
        labels[:, : len(context)] = -100
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture
def formatted_policy():
    """A fresh tiny HFPolicy whose replies parse (answers spread over the four words)."""
    ensure_pick_env()
    policy = tiny_policy()
    policy.model.load_state_dict(_formatted_state())
    return policy.eval()


@pytest.fixture
def pick_env() -> str:
    return ensure_pick_env()


PICK_WORD_RUN = (
    "envs=[{name: pick_word}]",
    "rollout.prompts_per_iteration=3",
    "rollout.group_size=4",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=12",
    "algorithm.actor_lr=1e-3",
    "validation.every=-1",
    "logging.progress=false",
    "logging.tensorboard=false",
)


@pytest.fixture
def model_dir(tmp_path_factory, formatted_policy):
    """:func:`formatted_policy` saved as a model directory, for runs driven through the command line."""
    path = tmp_path_factory.mktemp("model") / "tiny"
    formatted_policy.save(path)
    return path


@pytest.fixture
def cli_args():
    """``cli_args(model_dir, out, name, *overrides)``: the overrides of a two-group pick_word run of ``model_dir``
    writing to ``out / name``, for ``mirl train`` and ``load_config``."""

    def make(model_dir, out, name: str, *extra: str) -> list[str]:
        return [
            f"model.name={model_dir}",
            "envs=[{name: pick_word}]",
            "rollout.prompts_per_iteration=2",
            "rollout.group_size=4",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=12",
            "diagnostics.num_pairs=6",
            "validation.every=-1",
            "logging.progress=false",
            f"trainer.output_dir={out}",
            f"trainer.name={name}",
            *extra,
        ]

    return make


@pytest.fixture
def run_config(tmp_path):
    """``run_config(name, *overrides)``: a small pick_word training config writing to ``tmp_path / name``."""

    def make(name: str, *extra: str):
        ensure_pick_env()  # load_config checks env names against the registry
        return load_config(None, [*PICK_WORD_RUN, f"trainer.output_dir={tmp_path}", f"trainer.name={name}", *extra])

    return make
