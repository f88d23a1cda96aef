"""Early stops (REFERENCE §4): empty selections, reward-spread collapse, validation-success collapse."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mirl.config import EarlyStopConfig


@dataclass
class EarlyStopState:
    """Counters carried across iterations (and through checkpoints)."""

    empty_streak: int = 0
    spread_history: list[float] = field(default_factory=list)  # spreads of the first non-empty iterations
    spread_low_streak: int = 0
    val_low_streak: int = 0

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def spread_baseline(self, config: EarlyStopConfig) -> float | None:
        n = config.spread_baseline_iterations
        if n <= 0 or len(self.spread_history) < n:
            return None
        return sum(self.spread_history[:n]) / n


def after_selection(state: EarlyStopState, config: EarlyStopConfig, *, empty: bool, spread: float) -> str | None:
    """Update the counters with one iteration's selection; return a stop reason or None.

    ``spread`` is the mean in-group reward std of the batch before filtering.
    """
    state.empty_streak = state.empty_streak + 1 if empty else 0
    if config.max_empty_steps > 0 and state.empty_streak >= config.max_empty_steps:
        return f"empty_selection: {state.empty_streak} consecutive iterations kept no group"
    if empty:
        return None
    baseline = state.spread_baseline(config)
    if baseline is None:
        if config.spread_baseline_iterations > 0:
            state.spread_history.append(spread)
        return None
    state.spread_low_streak = state.spread_low_streak + 1 if spread < config.spread_fraction * baseline else 0
    if state.spread_low_streak >= config.spread_patience:
        return (
            f"reward_spread_collapse: in-group reward std below {config.spread_fraction:g} x baseline "
            f"{baseline:.4g} for {state.spread_low_streak} iterations"
        )
    return None


def after_validation(state: EarlyStopState, config: EarlyStopConfig, *, success: float) -> str | None:
    """Update the validation counter; return a stop reason or None."""
    if config.val_patience <= 0:
        return None
    state.val_low_streak = state.val_low_streak + 1 if success < config.val_success_floor else 0
    if state.val_low_streak >= config.val_patience:
        return (
            f"validation_collapse: success below {config.val_success_floor:g} for "
            f"{state.val_low_streak} consecutive validations"
        )
    return None
