"""Hand-made episodes for the diagnostics tests, tokenised with the tiny tokenizer exactly as the engine would."""

from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout.parsing import reasoning_span
from mirl.types import EnvSpec, Episode, Turn

TOK = tiny_tokenizer()


def make_turn(context: str, reasoning: str, answer: str = "Down", *, reward: float = 0.0) -> Turn:
    """A turn whose context is ``context + "<think>"`` and whose reply is ``reasoning</think><answer>answer</answer>``.

    An empty ``reasoning`` gives an empty Z (``reasoning_span`` None).
    """
    context_ids = tuple(TOK.encode(context + "<think>"))
    body = f"{reasoning}</think><answer>{answer}</answer>"
    response_ids = tuple(TOK.encode(body))
    return Turn(
        context_ids=context_ids,
        response_ids=response_ids,
        response_logprobs=(0.0,) * len(response_ids),
        response_text="<think>" + body,
        observation=context,
        reasoning_span=reasoning_span(TOK, response_ids),
        actions=tuple(a.strip() for a in answer.split("||") if a.strip()),
        reward=reward,
        format_valid=True,
        actions_valid=True,
    )


def make_episode(group: int, sample: int, turns: list[Turn], *, success: bool = False) -> Episode:
    return Episode(EnvSpec("toy", group), group, sample, tuple(turns), success, "max_turns")


def grid_episodes(num_groups: int = 3, samples: int = 2, num_turns: int = 2) -> list[Episode]:
    """``num_groups`` prompts x ``samples`` episodes, each ``num_turns`` turns with distinct reasonings."""
    episodes = []
    for g in range(num_groups):
        for k in range(samples):
            turns = [
                make_turn(
                    f"<|im_start|>user\nTurn {t + 1}: State: P_O_ {g} {'_' * g}<|im_end|>\n<|im_start|>assistant\n",
                    f"I am at row {g} and try plan {k} at step {t}.",
                    "Down || Left" if (g + k + t) % 2 else "Right",
                )
                for t in range(num_turns)
            ]
            episodes.append(make_episode(g, k, turns))
    return episodes
