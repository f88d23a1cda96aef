"""Episodes that ended because the environment's infrastructure failed, not because of anything the model did.

A remote env (the ``openenv`` client, ``mirl.envs.remote``) that cannot reach its server, times out or gets a
broken reply ends the episode with ``end_reason = "remote_<reason>"`` ("remote_refused", "remote_timeout", ...).
Such an episode's return of 0 says nothing about the model; counted with the others it reads as a model that
fails. So every batch counts them (``rollout/infra_failed_frac``, ``val/infra_failed_frac``), the report shows
them, and a batch in which *every* episode failed for the same infrastructure reason is an error that names it:
there is nothing to learn from or to validate.

>>> reasons = ["remote_refused", "remote_refused"]
>>> infrastructure_share(reasons), all_failed_because(reasons), all_failed_because(["remote_refused", "success"])
(1.0, 'remote_refused', None)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from mirl.errors import UserError

PREFIX = "remote_"  # end reasons of infrastructure failures (mirl.envs.remote.openenv)
HINTS = {
    "remote_refused": "nothing is listening at the env's url: start the server (mirl serve-env NAME --port PORT) or "
    "fix the url option",
    "remote_timeout": "the env server did not answer in time: check that it runs and raise the client's timeout",
}


MALFORMED = "malformed_"  # end reasons of an env value the engine refused (mirl.rollout.env_boundary)
OVERSIZED = "oversized_"  # ... and of one above the engine's size limits ("oversized_images")
MAX_ENV_REWARD = 1e6  # |reward| of one env step at most; a larger, non-finite or non-numeric one ends the episode


def reward_problem(reward: object) -> str | None:
    """Why one env step's reward cannot be trained on, or None: it must be a real number (bool, int or float,
    numpy scalars included), finite and within +-:data:`MAX_ENV_REWARD`. Checked before ``float()``, which an
    integer too large for a float would overflow.

    >>> [reward_problem(r) for r in (1, -0.5, True)]
    [None, None, None]
    >>> reward_problem(float("nan")), reward_problem(10**400), reward_problem("1")
    ('not finite', 'beyond +-1e+06', 'not a number (str)')
    """
    if isinstance(reward, str | bytes) or not hasattr(reward, "__float__"):
        return f"not a number ({type(reward).__name__})"
    if isinstance(reward, int) and not isinstance(reward, bool) and abs(reward) > MAX_ENV_REWARD:
        return f"beyond +-{MAX_ENV_REWARD:g}"
    try:
        value = float(reward)
    except (TypeError, ValueError, OverflowError):
        return f"not a number ({type(reward).__name__})"
    if not math.isfinite(value):
        return "not finite"
    return f"beyond +-{MAX_ENV_REWARD:g}" if abs(value) > MAX_ENV_REWARD else None


def malformed_share(end_reasons: Iterable[str | None]) -> float:
    """Share of episodes ended because the env sent a value the engine refused (``malformed_*``, ``oversized_*``)."""
    reasons = list(end_reasons)
    return sum(bool(r) and str(r).startswith((MALFORMED, OVERSIZED)) for r in reasons) / max(1, len(reasons))


class InfrastructureError(UserError):
    """Every episode of a batch ended by the same infrastructure failure; the message names it and the fix."""


def is_infrastructure(end_reason: str | None) -> bool:
    return bool(end_reason) and str(end_reason).startswith(PREFIX)


def infrastructure_share(end_reasons: Iterable[str | None]) -> float:
    """Share of episodes that ended by an infrastructure failure (0 for no episodes)."""
    reasons = list(end_reasons)
    return sum(map(is_infrastructure, reasons)) / len(reasons) if reasons else 0.0


def all_failed_because(end_reasons: Iterable[str | None]) -> str | None:
    """The reason when every episode ended by one and the same infrastructure failure, else None."""
    counts = Counter(end_reasons)
    if len(counts) == 1:
        (reason,) = counts
        return reason if is_infrastructure(reason) else None
    return None


def check_not_all_failed(episodes, what: str) -> None:
    """Raise :class:`InfrastructureError` when every episode of ``episodes`` (``what``: "the rollout of iteration
    3", "validation") ended by the same infrastructure failure."""
    episodes = list(episodes)
    reason = all_failed_because(e.end_reason for e in episodes)
    if reason is None:
        return
    envs = sorted({e.spec.env for e in episodes})
    urls = sorted({str(e.spec.options["url"]) for e in episodes if "url" in e.spec.options})
    where = f" ({', '.join(envs)}" + (f" at {', '.join(urls)}" if urls else "") + ")"
    hint = HINTS.get(reason, "the env's server failed; see its log")
    raise InfrastructureError(f"every one of the {len(episodes)} episodes of {what} ended with {reason}{where}: {hint}")
