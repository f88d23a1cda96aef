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

from collections import Counter
from collections.abc import Iterable

from mirl.errors import UserError

PREFIX = "remote_"  # end reasons of infrastructure failures (mirl.envs.remote.openenv)
HINTS = {
    "remote_refused": "nothing is listening at the env's url: start the server (mirl serve-env NAME --port PORT) or "
    "fix the url option",
    "remote_timeout": "the env server did not answer in time: check that it runs and raise the client's timeout",
}


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
