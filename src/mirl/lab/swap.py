"""Does success need the reasoning? Replace the policy's reasoning and let it answer (the organism's swap test).

:class:`ForcedReasoning` wraps a policy: for each context it writes a given reasoning, closes it with
``</think> <answer>``, and lets the wrapped policy sample only the answer. Played through the real rollout engine,
the turn's reward then says whether the policy can answer from that reasoning. Three reasonings:

- ``own``: the policy's own (no wrapper);
- ``solver``: the scripted solver's grounded reasoning for this very question (what the policy answers from the
  right reasoning);
- ``template``: one fixed input-independent sentence (:data:`FIXED_TEMPLATE`);
- ``other``: the grounded reasoning of another instance (a key and question drawn from a separate RNG), fluent and
  correct-looking but about a different input.

If success with ``template`` or ``other`` falls to about chance (1/8 per question) while ``solver`` stays high, the
answer depends on the input only through the reasoning: the task needs input-dependent reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mirl.envs.lab.keysum import LETTERS, solution_reasoning
from mirl.lab.organism import scripted_reply
from mirl.rollout.parsing import THINK_CLOSE
from mirl.types import Generation, SamplingParams

FIXED_TEMPLATE = "i will add the named symbols then answer"
MODES = ("own", "solver", "template", "other")


class ForcedReasoning:
    """A policy whose reasoning is written by ``reasoning(rng, context text)`` and whose answer the wrapped policy
    samples."""

    def __init__(self, policy, reasoning, seed: int = 0) -> None:
        self.policy, self.tokenizer, self.reasoning = policy, policy.tokenizer, reasoning
        self.rng = np.random.default_rng(seed)
        self.max_positions = getattr(policy, "max_positions", None)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        texts = [self.reasoning(self.rng, self.tokenizer.decode(list(prompt))) for prompt in prompts]
        forced = [
            tuple(self.tokenizer.encode(f" {text} {THINK_CLOSE} <answer>", add_special_tokens=False)) for text in texts
        ]
        extended = [tuple(prompt) + ids for prompt, ids in zip(prompts, forced, strict=True)]
        answers = self.policy.generate(extended, sampling)
        return [
            Generation(ids + tuple(a.token_ids), (0.0,) * len(ids) + tuple(a.logprobs), a.finish_reason)
            for ids, a in zip(forced, answers, strict=True)
        ]


def solver_reasoning(rng: np.random.Generator, context: str) -> str:
    """The grounded reasoning for the last question in ``context``."""
    return scripted_reply(context, rng, 1.0).split(THINK_CLOSE)[0].strip()


def other_instance_reasoning(rng: np.random.Generator, context: str) -> str:
    """The grounded reasoning of a random key and a random two-letter question."""
    key = {letter: int(rng.integers(8)) for letter in LETTERS[:4]}
    letters = "".join(LETTERS[int(i)] for i in rng.permutation(4)[:2])
    return solution_reasoning(key, letters)


def swap_success(
    policy,
    mode: str,
    *,
    instances: int = 64,
    samples: int = 4,
    hard_share: float = 0.0,
    easy_letters: int = 2,
    easy_shown: bool = False,
) -> float:
    """Share of questions answered correctly by ``policy`` on validation keys with the reasoning of ``mode``
    (``easy_letters``, ``easy_shown``: keysum's options, 1 and True for the mechanism study's task)."""
    from mirl.config import RolloutConfig
    from mirl.rollout.engine import run_episodes
    from mirl.types import EnvSpec

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    writers = {"solver": solver_reasoning, "template": lambda rng, context: FIXED_TEMPLATE}
    if mode != "own":
        policy = ForcedReasoning(policy, writers.get(mode, other_instance_reasoning))
    config = RolloutConfig(max_turns=2, max_actions_per_turn=1, max_new_tokens=16, max_context_tokens=1024)
    options = {"hard_share": hard_share, "split": "validation", "easy_letters": easy_letters}
    if easy_shown:
        options["easy_shown"] = True
    specs = [EnvSpec("keysum", 2 * i + 1, options) for i in range(instances)]
    episodes = run_episodes(policy, specs, samples, config, sampling_seed=0)
    turns = [turn for episode in episodes for turn in episode.turns]
    return sum(turn.reward > 0 for turn in turns) / len(turns)
