"""The upstream proposals' filter settings, read into mirl's ``filter`` keys.

The authors of SNR-Aware Filtering proposed it to three engines: veRL PR #7894
(``algorithm.reward_variance_filtering.*``), SkyRL PR #2217 (the same block under
``trainer.algorithm.reward_variance_filtering``, ``enabled`` for ``enable``) and TRL PR #7242 (``GRPOConfig``
fields ``reward_variance_*``). What their selection does (read from veRL's and SkyRL's code at the PRs' heads):

- score: the variance of each prompt group's sequence rewards with ``variance_ddof`` (default 1, sample
  variance); a group with at most ``variance_ddof`` rewards scores 0.
- ``strategy: top_p``: rank the groups by variance, largest first (ties keep the order the groups came in), and
  keep the shortest prefix whose cumulative variance reaches ``top_p * total_variance - selection_eps``, where
  ``total_variance`` is the sum of all groups' variances. So ``top_p`` is a share of the *variance* mass (not of
  the std mass, not of the group count), and ``selection_eps`` is an absolute slack in variance units: when the
  target is at or below 0 (a batch with almost no signal) nothing is kept. mirl's linear top-p on ``statistic:
  var`` with ``eps = selection_eps`` is that rule (REFERENCE.md's ``p * sum(s) - eps``, eps = 0.01, on variances).
- ``strategy: top_k``: keep the ``top_k`` highest-variance groups; a *count* (int >= 1), which is mirl's
  ``top_k_abs`` (mirl's ``top_k`` is a fraction of the groups).
- ``include_zero: false`` (the default) removes the groups with zero variance before ranking, so ``top_k`` may keep
  fewer than ``top_k`` groups; when every group has zero variance nothing is kept.
- defaults: ``enable: false``, ``strategy: top_p``, ``top_p: 0.9``, ``top_k: 1``, ``include_zero: false``,
  ``variance_ddof: 1``, ``selection_eps: 0.01``. TRL's fields carry the same meanings; its variance is the sample
  variance (ddof 1) and has no field.

Where mirl's rule still differs (documented in docs/metrics.md): rewards that are NaN or inf are an error in mirl
(upstream drops them from their group); with ``top_p: 1.0`` mirl keeps every candidate group (the reference's rule;
upstream stops once the mass is within ``selection_eps``); with ``include_zero: true`` and no spread in any group
mirl keeps nothing under ``top_p`` (upstream keeps every group); a target exactly equal to 0 keeps one group in mirl
and none upstream; and "zero variance" is mirl's no-spread rule (:func:`mirl.filtering.has_spread`) rather than a
computed variance compared with 0.

:func:`read_upstream` maps the settings to mirl's ``filter`` keys and checks them against the ``filter`` keys given
the mirl way; a key given both ways with different values is an error naming both. Plain Python: the
integrations turn the ``ValueError`` into their own error type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

DEFAULTS: dict[str, object] = {
    "enable": False,
    "strategy": "top_p",
    "top_p": 0.9,
    "top_k": 1,
    "include_zero": False,
    "variance_ddof": 1,
    "selection_eps": 0.01,
}
"""The upstream defaults (veRL PR #7894's ``ppo_trainer.yaml``; SkyRL and TRL use the same values)."""

STRATEGIES = {"top_p": "top_p", "top_k": "top_k_abs"}
"""Upstream strategy -> mirl strategy."""

# mirl filter key -> the upstream setting it comes from (for error messages; value: top_p or top_k)
SOURCE = {
    "strategy": "strategy",
    "mode": "strategy",
    "statistic": "strategy",
    "largest": "strategy",
    "ddof": "variance_ddof",
    "include_zero": "include_zero",
    "eps": "selection_eps",
}


class KeyConflict(ValueError):
    """A ``filter`` key given both ways with different values; ``key`` is the mirl key."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _number(name: str, value: object, *, integer: bool = False) -> float | int:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        expected = "an integer" if integer else "a finite number"
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def _checked(settings: Mapping[str, object], names: Mapping[str, str]) -> dict[str, object]:
    """The settings with their defaults filled in, each checked; errors name the user's key."""
    values = DEFAULTS | {key: value for key, value in settings.items() if value is not None}
    if not isinstance(values["enable"], bool):
        raise ValueError(f"{names['enable']} must be true or false, got {values['enable']!r}")
    if values["strategy"] not in STRATEGIES:
        raise ValueError(f"{names['strategy']} must be top_p or top_k, got {values['strategy']!r}")
    top_p = _number(names["top_p"], values["top_p"])
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"{names['top_p']} must be in (0, 1], got {top_p!r}; e.g. 0.9")
    if _number(names["top_k"], values["top_k"], integer=True) < 1:
        raise ValueError(f"{names['top_k']} must be an integer >= 1 (a number of groups), got {values['top_k']!r}")
    if not isinstance(values["include_zero"], bool):
        raise ValueError(f"{names['include_zero']} must be true or false, got {values['include_zero']!r}")
    ddof = _number(names["variance_ddof"], values["variance_ddof"], integer=True)
    if ddof not in (0, 1):
        raise ValueError(f"{names['variance_ddof']} must be 0 or 1 in mirl, got {ddof!r}; 1 is the upstream default")
    if _number(names["selection_eps"], values["selection_eps"]) < 0:
        raise ValueError(f"{names['selection_eps']} must be >= 0, got {values['selection_eps']!r}; e.g. 0.01")
    return values


def filter_keys(values: Mapping[str, object]) -> dict[str, object]:
    """mirl ``filter`` keys equivalent to checked upstream ``values`` (every canonical key present).

    >>> filter_keys({**DEFAULTS, "enable": True})
    {'strategy': 'top_p', 'value': 0.9, 'mode': 'linear', 'statistic': 'var', 'largest': True, 'ddof': 1, \
'include_zero': False, 'eps': 0.01}
    >>> filter_keys({**DEFAULTS, "enable": True, "strategy": "top_k", "top_k": 4})
    {'strategy': 'top_k_abs', 'value': 4.0, 'statistic': 'var', 'largest': True, 'ddof': 1, 'include_zero': False}
    """
    if not values["enable"]:
        return {"strategy": "none"}
    strategy = STRATEGIES[str(values["strategy"])]
    if strategy == "top_k_abs":
        head: dict[str, object] = {"strategy": strategy, "value": float(values["top_k"])}  # type: ignore[arg-type]
    else:
        head = {"strategy": strategy, "value": float(values["top_p"]), "mode": "linear"}  # type: ignore[arg-type]
    tail = {
        "statistic": "var",
        "largest": True,
        "ddof": values["variance_ddof"],
        "include_zero": values["include_zero"],
    }
    if strategy == "top_p":
        tail["eps"] = float(values["selection_eps"])  # type: ignore[arg-type]
    return head | tail


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def read_upstream(
    upstream: Mapping[str, object],
    mirl_given: Mapping[str, object],
    *,
    names: Mapping[str, str],
    mirl_prefix: str,
    enabled_as: str | None = None,
) -> dict[str, object]:
    """mirl's ``filter`` keys from the upstream settings merged with those given the mirl way.

    Args:
        upstream: the given upstream settings under the canonical names (``enable``, ``strategy``, ``top_p``,
            ``top_k``, ``include_zero``, ``variance_ddof``, ``selection_eps``); ``None`` or absent = not given.
        mirl_given: the ``filter`` keys the user gave the mirl way (keys absent = not given).
        names: canonical name -> the key as the user wrote it (for messages), e.g.
            ``algorithm.reward_variance_filtering.top_p``.
        mirl_prefix: how the mirl keys are written in messages, e.g. ``"mirl.filter."``.
        enabled_as: how the user switches the upstream filter on, for messages; default ``{names["enable"]}=true``
            (TRL switches it on with the strategy: ``reward_variance_filtering='top_p'``).

    Returns:
        ``mirl_given`` updated with the mapped keys; ``mirl_given`` unchanged when no upstream setting is given.

    Raises:
        ValueError: an upstream value is out of range, or upstream settings are given without ``enable``;
            :class:`KeyConflict` (a ``ValueError``): a mirl key given both ways disagrees. The message is one line
            naming the keys and the fix.

    >>> names = {key: f"rvf.{key}" for key in DEFAULTS}
    >>> read_upstream({"enable": True, "top_p": 0.8}, {"trajectories_per_group": 4}, names=names, mirl_prefix="f.")
    {'trajectories_per_group': 4, 'strategy': 'top_p', 'value': 0.8, 'mode': 'linear', 'statistic': 'var', \
'largest': True, 'ddof': 1, 'include_zero': False, 'eps': 0.01}
    >>> read_upstream({"enable": True, "strategy": "top_p"}, {"statistic": "std"}, names=names, mirl_prefix="f.")
    Traceback (most recent call last):
    ...
    mirl.filtering.upstream.KeyConflict: rvf.strategy=top_p ranks by variance (f.statistic=var), but \
f.statistic=std is also given; remove one of the two
    """
    given = {key: value for key, value in upstream.items() if value is not None}
    if not given:
        return dict(mirl_given)
    enabled_as = enabled_as or f"{names['enable']}=true"
    if "enable" not in given:
        listed = ", ".join(names[key] for key in given)
        raise ValueError(
            f"{listed} given but {names['enable']} is not, so the upstream filter would stay off; set "
            f"{enabled_as} to filter with it, or remove {listed}"
        )
    values = _checked(given, names)
    mapped = filter_keys(values)
    for key, value in mapped.items():
        if key in mirl_given and not _same(mirl_given[key], value):
            source = "enable" if not values["enable"] else str(values["strategy"]) if key == "value" else SOURCE[key]
            if source in given:
                setting = f"{names[source]}={_show(values[source])}"
            else:  # the upstream default of a key the user did not write
                setting = f"{enabled_as} (default {source} {_show(values[source])})"
            raise KeyConflict(
                f"{setting} {_meaning(key, value, mirl_prefix)}, but {mirl_prefix}{key}={_show(mirl_given[key])} is "
                "also given; remove one of the two",
                key,
            )
    return dict(mirl_given) | mapped


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _meaning(key: str, value: object, prefix: str) -> str:
    if key == "statistic":
        return f"ranks by variance ({prefix}statistic=var)"
    return f"sets {prefix}{key}={_show(value)}"
