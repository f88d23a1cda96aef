"""The in-training entry point of the MI diagnostics: sample pairs, cross-score, compute the proxies.

The trainer calls :func:`is_scheduled` and, when it says so, :func:`run_diagnostics` on the batch *before*
filtering (REFERENCE.md section 3), and logs the returned dict (every key is in ``mirl.catalogue``).

Per scope s (``first_turn``, ``trajectory``, and ``turn1``, ``turn2``, ... for ``turn_position``):

- ``diag/s/pairs``, ``diag/s/columns``, ``diag/s/empty_reasoning``: M, N, and the candidates skipped for an
  empty Z (floats);
- ``diag/s/est/<stat>`` and ``diag/s/seq/<stat>``: ``mi_proxies`` of the per-token matrix L and of the
  per-sequence matrix S, each with its own z-score EMA in :class:`DiagnosticsState`;
- ``diag/s/copied_reasoning``: scored pairs whose Z copies the format example (``format_reasoning``);
- ``diag/s/entropy_temperature`` and ``diag/s/sample_temperature``: the temperature H(Z|X) is measured at
  (the scoring temperature, 1) and the one the reasonings were sampled at;
- the graded keys of :mod:`mirl.diagnostics.graded`: ``diag/invalid_frac``, ``diag/s/est/agnostic_share`` with its
  interval, ``diag/s/grounded_share`` / ``template_share`` where the env judges reasonings, ``diag/s/alarm``;
- ``diag/s/regime``: :func:`mirl.diagnostics.regimes.call_iteration` on the ``est`` family, with the
  ``diagnostics.regime_*`` criteria: ``no_reasoning`` when most reasoning is empty or copied, ``undetermined``
  with too few columns or when the sampling temperature alone moves H(Z|X) across its threshold.

A scope whose columns hold fewer than 2 distinct prompts (or that has no pair) cannot tell inputs apart: it
reports its counts and the regime ``"undetermined"`` (``"no_reasoning"`` when the reasoning was empty), no MI
keys, and leaves its EMAs untouched. An undefined z-score (NaN from ``mi_proxies``) is left out of the result.

Action dependence (``config.action_dependence``, beyond the paper), on the same pairs, for the turns whose reply
splits as ``lead + Z + bridge + A`` (see ``sampling.ActionPair``), per-token scores of the answer tokens only:

- ``za`` approximates I(Z; A | X): row i keeps its own context and reply and swaps in reasoning j,
  cell (i, j) = log p(A_i | X_i, lead_i, Z_j, bridge_i) / |A_i|, true column j = i, duplicate reasonings
  grouped. The batch's reasonings stand in for samples of p(Z | X_i). High: the action follows the reasoning.
- ``xa`` approximates I(X; A | Z): row i keeps its own reply and swaps the context for the scope's column j,
  cell (i, j) = log p(A_i | X_j, lead_i, Z_i, bridge_i) / |A_i|, true column = the pair's column. High: the
  action reads the state beyond what the reasoning says (under template collapse this is what still grounds
  the action; with grounded reasoning that decides the action it can be low).

Both give ``diag/s/za_est/<stat>``, ``za_seq``, ``xa_est``, ``xa_seq`` and ``diag/s/za_est/regime``,
``diag/s/xa_est/regime``. The matched cell of each row is the exact sampled token stream.
"""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from mirl.config import DiagnosticsConfig
from mirl.diagnostics.alarm import Alarm
from mirl.diagnostics.graded import alarm_value, graded, invalid_frac, judged_shares
from mirl.diagnostics.info import RegimeThresholds, ZScoreEMA, mi_proxies
from mirl.diagnostics.null import permutation_null
from mirl.diagnostics.reasoning import with_reasoning
from mirl.diagnostics.regimes import SCORING_TEMPERATURE, Criteria, Evidence, call_iteration, is_copy
from mirl.diagnostics.sampling import ActionPair, PairSet, action_pairs, distinct_ids, sample_scopes
from mirl.diagnostics.scoring import grid_tokens, score_grid, score_matrix
from mirl.types import Episode

UNDETERMINED = "undetermined"
_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)


@dataclass
class DiagnosticsState:
    """The z-score EMAs that live across iterations: one ``ZScoreEMA`` per (scope, family), made on first use.

    >>> state = DiagnosticsState(decay=0.9)
    >>> state.ema("trajectory", "est").update(2.0)
    2.0
    >>> state.state_dict()
    {'decay': 0.9, 'emas': {'trajectory/est': {'decay': 0.9, 's_ema': 2.0}}}
    """

    decay: float = 0.9
    emas: dict[str, ZScoreEMA] = field(default_factory=dict)
    alarms: dict[str, Alarm] = field(default_factory=dict)  # one per scope (graded.py)

    @classmethod
    def from_config(cls, config: DiagnosticsConfig) -> DiagnosticsState:
        return cls(decay=config.ema_decay)

    def ema(self, scope: str, family: str) -> ZScoreEMA:
        return self.emas.setdefault(f"{scope}/{family}", ZScoreEMA(decay=self.decay))

    def alarm(self, scope: str) -> Alarm:
        return self.alarms.setdefault(scope, Alarm())

    def state_dict(self) -> dict:
        emas = {key: ema.state_dict() for key, ema in self.emas.items()}
        if not self.alarms:
            return {"decay": self.decay, "emas": emas}
        return {"decay": self.decay, "emas": emas, "alarms": {k: a.state_dict() for k, a in self.alarms.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        if set(state) not in ({"decay", "emas"}, {"decay", "emas", "alarms"}):  # alarms: absent in older checkpoints
            raise ValueError(
                f"DiagnosticsState state must have the keys ['decay', 'emas'] (and 'alarms'), got {sorted(state)}; "
                "pass a dict made by DiagnosticsState.state_dict()"
            )
        emas = {}
        for key, ema_state in state["emas"].items():
            emas[key] = ZScoreEMA()
            emas[key].load_state_dict(ema_state)
        alarms = {}
        for key, alarm_state in state.get("alarms", {}).items():
            alarms[key] = Alarm()
            alarms[key].load_state_dict(alarm_state)
        self.decay, self.emas, self.alarms = float(state["decay"]), emas, alarms


def is_scheduled(iteration: int, every: int) -> bool:
    """Whether diagnostics run at 1-based ``iteration``: at iteration 1 and at every multiple of ``every``.

    ``every=5`` gives 1, 5, 10, 15, ...; ``every=1`` every iteration; ``every=0`` never (off).

    >>> [i for i in range(1, 16) if is_scheduled(i, 5)]
    [1, 5, 10, 15]
    >>> is_scheduled(3, 0)
    False
    """
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 1:
        raise ValueError(f"iteration must be a 1-based int, got {iteration!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"every must be an int >= 0 (0 = off), got {every!r}")
    return every > 0 and (iteration == 1 or iteration % every == 0)


def with_image_keys(policy, episodes: Sequence[Episode]) -> Sequence[Episode]:
    """A vision policy's episodes with each context's image placeholders replaced by the image's handle
    (:meth:`VisionPolicy.keyed <mirl.policy.hf_vision.VisionPolicy.keyed>`), so that X_j carries its images into
    ``policy.score`` and prompts with equal tokens but different images are different columns. Text episodes (or
    a policy without images) come back as they are."""
    keyed = getattr(policy, "keyed", None)
    if keyed is None or not any(turn.images for episode in episodes for turn in episode.turns):
        return episodes
    return [
        dataclasses.replace(
            episode,
            turns=tuple(
                dataclasses.replace(turn, context_ids=keyed(turn.context_ids, turn.images)) if turn.images else turn
                for turn in episode.turns
            ),
        )
        for episode in episodes
    ]


def run_diagnostics(
    policy,
    episodes: Sequence[Episode],
    config: DiagnosticsConfig,
    state: DiagnosticsState,
    *,
    generator: torch.Generator,
    mode: str = "shared",
    progress: Callable[[int, int], None] | None = None,
    sample_temperature: float = SCORING_TEMPERATURE,
    format_reasoning: str | Sequence[str] | None = None,
    validity: bool = True,
) -> dict[str, float | str]:
    """MI proxies of every configured scope (module docstring for the keys); updates ``state``'s EMAs.

    Args:
        policy: the current policy (``score``; ``tokenizer`` for action dependence; ``model`` in naive mode).
        episodes: the iteration's P x K episodes, before filtering.
        config: scopes, pairs, ks, std_eps, max_batch_tokens (naive mode), regime thresholds, action_dependence.
        state: the EMAs carried across iterations (checkpointed with ``state_dict``).
        generator: the only source of randomness of the pair samplers, drawn from in scope order.
        mode: ``"shared"`` (prefix caching, the default) or ``"naive"`` (full re-encode), see ``scoring``.
        progress: ``progress(done, total)`` in tokens scored (``scoring.grid_tokens``): called once with
            ``done = 0`` and the planned total of every matrix before any scoring, then after each piece.
        sample_temperature: the temperature the episodes were sampled at (``rollout.temperature``).
        format_reasoning: the reasoning of the prompt's format example (or the reasonings of several), when the
            prompt shows one; pairs whose reasoning copies it are counted (``copied_reasoning``) and weigh
            towards ``no_reasoning``.
        validity: whether the turns' ``format_valid`` flags judge the replies (mirl's reply format); False for
            replies re-parsed from a framework with another format: no ``diag/invalid_frac``, never ``degenerate``.
    """
    thresholds = RegimeThresholds(entropy=config.regime_entropy_threshold)  # action dependence: MI-based labels
    out: dict[str, float | str] = {}
    episodes = with_image_keys(policy, episodes)
    if config.reasoning != "closed":  # (the recorded spans are the closed ones)
        episodes = with_reasoning(episodes, config.reasoning, policy.tokenizer)
    pair_sets = sample_scopes(
        episodes, config.scopes, num_pairs=config.num_pairs, generator=generator, first_turn_columns=config.columns
    )
    ready = [ps for ps in pair_sets if ps.pairs and ps.num_prompts >= 2]
    actions = [
        _action_grids(action_pairs(ps, episodes, policy.tokenizer), ps) for ps in ready if config.action_dependence
    ]
    planned = sum(_matrix_tokens(ps, mode) for ps in ready)
    planned += sum(grid_tokens(*grid, mode) for grids in actions for grid in (grids.za, grids.xa) if grid)
    scoring = Scoring(mode, progress, planned)
    criteria = _criteria(config)
    invalid = invalid_frac(episodes) if validity else None
    if invalid is not None:
        out["diag/invalid_frac"] = invalid
    valid = invalid is None or invalid < criteria.max_invalid
    for pair_set in pair_sets:
        scope = pair_set.scope
        copied = _copies(pair_set, episodes, format_reasoning)
        out.update(_counts(pair_set, copied, sample_temperature) | judged_shares(pair_set, episodes))
        evidence = Evidence(
            len(pair_set.pairs),
            len(pair_set.columns),
            pair_set.empty_reasoning,
            copied,
            prompts=pair_set.num_prompts,
            invalid=invalid,
        )
        if not any(pair_set is ps for ps in ready):
            out[f"diag/{scope}/regime"] = call_iteration(evidence, criteria).label
            continue
        matrices = score_matrix(
            policy,
            pair_set.columns,
            pair_set.reasonings,
            mode=mode,
            max_batch_tokens=config.max_batch_tokens,
            progress=scoring.callback,
        )
        scores = _Scores(*matrices, pair_set.true_col, pair_set.col_group)
        est = _family(out, scope, "", scores, config, state)
        out.update(graded(scope, est, len(pair_set.pairs), config.agnostic_power))
        out[f"diag/{scope}/alarm"] = alarm_value(state.alarm(scope), out, scope, valid)
        # input dependence: retrieval above chance, null-corrected when the permutation null ran (regimes.py)
        retrieval = out.get(f"diag/{scope}/est/retrieval_above_chance_corrected", est["retrieval_above_chance"])
        measured = {"cond_entropy": est["conditional_entropy"], "retrieval": retrieval, "mi": est["mi_estimate"]}
        agnostic = out.get(f"diag/{scope}/est/agnostic_share")
        evidence = dataclasses.replace(evidence, **measured, agnostic=agnostic, sample_temperature=sample_temperature)
        out[f"diag/{scope}/regime"] = call_iteration(evidence, criteria).label
        if config.action_dependence:
            grids = actions[next(i for i, ps in enumerate(ready) if ps is pair_set)]
            out.update(_action_metrics(policy, grids, pair_set, config, state, thresholds, scoring))
    return out


class Scoring:
    """The scoring mode, and the tokens scored so far for a ``progress(done, total)`` callback (or None)."""

    def __init__(self, mode: str, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.mode, self.progress, self.done, self.total = mode, progress, 0, total
        self.callback = self.advance if progress is not None else None
        if progress is not None:
            progress(0, total)

    def advance(self, tokens: int) -> None:
        self.done += tokens
        if self.progress is not None:
            self.progress(self.done, self.total)


def _matrix_tokens(pair_set: PairSet, mode: str) -> int:
    """Tokens the MI matrix of ``pair_set`` runs through the model (``scoring.grid_tokens``)."""
    columns, reasonings = list(pair_set.columns), list(pair_set.reasonings)
    return grid_tokens([columns] * len(reasonings), [[z] * len(columns) for z in reasonings], mode)


def _counts(pair_set: PairSet, copied: int, sample_temperature: float) -> dict[str, float]:
    prefix = f"diag/{pair_set.scope}"
    return {
        f"{prefix}/pairs": float(len(pair_set.pairs)),
        f"{prefix}/columns": float(len(pair_set.columns)),
        f"{prefix}/empty_reasoning": float(pair_set.empty_reasoning),
        f"{prefix}/copied_reasoning": float(copied),
        f"{prefix}/entropy_temperature": SCORING_TEMPERATURE,
        f"{prefix}/sample_temperature": float(sample_temperature),
    }


def _criteria(config: DiagnosticsConfig) -> Criteria:
    return Criteria(
        entropy=config.regime_entropy_threshold,
        retrieval=config.regime_retrieval_threshold,
        agnostic=config.regime_agnostic_threshold,
        min_columns=config.regime_min_columns,
        min_iterations=config.regime_min_iterations,
    )


def _copies(pair_set: PairSet, episodes: Sequence[Episode], example: str | Sequence[str] | None) -> int:
    """Pairs whose reasoning (the text between the think tags of the turn's reply) copies ``example`` (or one of
    several examples' reasonings)."""
    examples = [example] if isinstance(example, str) else [e for e in example or () if e]
    if not examples:
        return 0
    count = 0
    for pair in pair_set.pairs:
        found = _THINK.search(episodes[pair.episode].turns[pair.turn].response_text)
        count += bool(found) and any(is_copy(found.group(1), e) for e in examples)
    return count


@dataclass(frozen=True)
class _Scores:
    """One cross-scoring result and its labels."""

    per_seq: torch.Tensor  # (M, N) S
    per_token: torch.Tensor  # (M, N) L
    true_col: torch.Tensor  # (M,) long
    col_group: Sequence[int]  # (N,)


def _family(
    out: dict, scope: str, stem: str, scores: _Scores, config: DiagnosticsConfig, state: DiagnosticsState
) -> dict[str, float]:
    """Add ``diag/scope/{stem}est/*`` (from L) and ``{stem}seq/*`` (from S) to ``out``; return the est proxies."""
    results = {}
    for family, matrix in (("est", scores.per_token), ("seq", scores.per_seq)):
        name = f"{stem}{family}"
        results[family] = mi_proxies(
            matrix,
            scores.true_col,
            col_group=torch.tensor(scores.col_group, dtype=torch.long),
            ks=tuple(config.ks),
            std_eps=config.std_eps,
            ema=state.ema(scope, name),
        )
        defined = {stat: value for stat, value in results[family].items() if not math.isnan(value)}
        out.update({f"diag/{scope}/{name}/{stat}": value for stat, value in defined.items()})
    if config.null_draws:
        # its own seed per scope and family: the null never shifts the pair samplers' random stream
        generator = torch.Generator().manual_seed(zlib.crc32(f"{scope}/{stem}".encode()))
        col_group = torch.tensor(scores.col_group, dtype=torch.long)
        null = permutation_null(
            scores.per_token, scores.true_col, col_group=col_group, draws=config.null_draws, generator=generator
        )
        out.update({f"diag/{scope}/{stem}est/{key}": value for key, value in null.items() if not math.isnan(value)})
    return results["est"]


@dataclass(frozen=True)
class _ActionGrids:
    """The action-dependence cells of one scope: ``(prefixes, continuations)`` of za and xa, None if not ready."""

    rows: list[ActionPair]
    za: tuple[list, list] | None
    xa: tuple[list, list] | None
    reasoning_groups: list[int]


def _action_grids(rows: list[ActionPair], pair_set: PairSet) -> _ActionGrids:
    """The cells of the za and xa matrices (module docstring); a matrix without two distinct labels is None."""
    reasoning_groups = distinct_ids([row.z_ids for row in rows])
    za = xa = None
    if len(set(reasoning_groups)) >= 2:
        prefixes = [[row.x_ids + row.lead_ids] * len(rows) for row in rows]
        za = (prefixes, [[other.z_ids + row.bridge_ids + row.answer_ids for other in rows] for row in rows])
    if rows and pair_set.num_prompts >= 2:
        columns = list(pair_set.columns)
        conts = [[row.lead_ids + row.z_ids + row.bridge_ids + row.answer_ids] * len(columns) for row in rows]
        xa = ([columns for _ in rows], conts)
    return _ActionGrids(rows, za, xa, reasoning_groups)


def _action_metrics(
    policy,
    grids: _ActionGrids,
    pair_set: PairSet,
    config: DiagnosticsConfig,
    state: DiagnosticsState,
    thresholds: RegimeThresholds,
    scoring: Scoring,
) -> dict[str, float | str]:
    """The ``za`` and ``xa`` families of one scope (module docstring)."""
    out: dict[str, float | str] = {}
    scope, rows = pair_set.scope, grids.rows
    scored = [len(row.answer_ids) for row in rows]
    options = {"mode": scoring.mode, "max_batch_tokens": config.max_batch_tokens, "progress": scoring.callback}
    if grids.za is not None:
        matrices = score_grid(policy, *grids.za, scored, **options)
        scores = _Scores(*matrices, torch.arange(len(rows)), grids.reasoning_groups)
        est = _family(out, scope, "za_", scores, config, state)
        out[f"diag/{scope}/za_est/regime"] = thresholds.classify(est)
    if grids.xa is not None:
        matrices = score_grid(policy, *grids.xa, scored, **options)
        true_col = torch.tensor([row.column for row in rows], dtype=torch.long)
        est = _family(out, scope, "xa_", _Scores(*matrices, true_col, pair_set.col_group), config, state)
        out[f"diag/{scope}/xa_est/regime"] = thresholds.classify(est)
    for stem, grid in (("za", grids.za), ("xa", grids.xa)):
        if grid is None:
            out[f"diag/{scope}/{stem}_est/regime"] = UNDETERMINED
    return out
