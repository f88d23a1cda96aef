"""A tiny hand-checkable environment (a corridor) and reply/config helpers for the rollout tests."""

from mirl.config import RolloutConfig
from mirl.envs.base import TextEnv


class Corridor(TextEnv):
    """Cells 0..length-1, player at 0, goal at length-1; a pit left of cell 0.

    Reward -0.1 per valid move, +1 more for the move onto the goal (terminated, success); Left from cell 0 falls
    into the pit (terminated, no success); after ``max_steps`` valid moves the episode is truncated.
    """

    action_words = ("Left", "Right")
    symbol_legend = "P player, _ floor, G goal"
    default_action_budget = 6
    multi_turn = True
    max_actions_per_turn = 3

    def __init__(self, length: int = 4, max_steps: int = 100) -> None:
        super().__init__()
        self.length, self.max_steps = length, max_steps

    @property
    def instruction(self) -> str:
        return "Walk right to the goal."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.steps = 0, 0
        return self.render(), {"success": False}

    def step(self, action):
        if action not in self.action_words:
            return (
                self.render(),
                0.0,
                False,
                False,
                {"success": False, "action_valid": False, "action_effective": False},
            )
        self.steps += 1
        self.cell += 1 if action == "Right" else -1
        success = self.cell == self.length - 1
        terminated = success or self.cell < 0
        reward = -0.1 + (1.0 if success else 0.0)
        info = {"success": success, "action_valid": True, "action_effective": True}
        return self.render(), reward, terminated, self.steps >= self.max_steps and not terminated, info

    def render(self):
        if self.cell < 0:
            return "fell"
        return "".join("P" if i == self.cell else "G" if i == self.length - 1 else "_" for i in range(self.length))


def reply(answer: str, think: str = "ok") -> str:
    """A well-formed reply as the model writes it after the pre-filled <think>."""
    return f"{think}</think><answer>{answer}</answer>"


def config(**overrides) -> RolloutConfig:
    return RolloutConfig(**{"max_turns": 5, "max_actions_per_turn": 2, "max_new_tokens": 64, **overrides})
