"""Pair samplers: which (X, Z) token pairs the cross-scoring matrix is built from.

X is a turn's exact ``context_ids`` (system prompt, conversation so far, assistant header and the pre-filled
``<think>``); Z is ``turn.reasoning_ids`` (the tokens between the tags, whitespace-stripped, tags excluded). A
turn whose Z is empty is skipped and counted in ``PairSet.empty_reasoning``. Every sampler draws from a
``torch.Generator`` that the caller passes in; the global RNG is never touched.

Scopes (REFERENCE.md section 3, plus the per-position scope of section 10):

- ``first_turn``: candidates are the first turns of all episodes with a non-empty Z. Up to ``num_pairs``
  candidates are drawn without replacement; each pair's true column is its group's column, which holds that
  group's first-turn context (its first episode's). Which groups get a column is ``columns``:

  - ``"sampled"`` (default, as the paper's code): the distinct groups among the drawn pairs, in batch order. N,
    the bound log N and chance level are those of the pairs actually scored: with the 128x1 layout and 64 pairs,
    N = 64.
  - ``"all"``: every group that has an episode with at least one turn (N ~ P, 128 in that layout), so groups
    whose pairs were not drawn (or whose reasonings were all empty) are still columns a pair can be confused with.
- ``trajectory``: ``num_pairs`` draws with replacement; a draw picks an episode uniformly among those with at
  least one valid turn (non-empty Z), then one of its valid turns uniformly. Every drawn pair is its own column
  (N = M ~ 64), so the same turn drawn twice gives two identical columns. ``empty_reasoning`` counts the empty
  turns of all episodes.
- ``turn_position`` (scopes ``turn1``, ``turn2``, ...): for each 0-based turn index t, the candidates are turn t
  of every episode that has one; up to ``num_pairs`` valid ones are drawn without replacement and, as in the
  trajectory scope, every pair is its own column. A position appears when at least one episode reached it.

Duplicate prompts. ``PairSet.col_group[j]`` numbers the distinct token sequences among the columns in order of
first appearance: columns with equal ids hold token-identical prompts and count as one prompt for retrieval
(e.g. the K trajectories of one group share their first-turn context).

Action pairs (beyond the paper) split one sampled reply into ``lead + Z + bridge + A``: ``lead`` = the tokens
before Z, ``bridge`` = the tokens between Z and the answer, ``A`` = the smallest token span covering the
stripped ``<answer>`` content (the same straddle rule as ``mirl.rollout.parsing.reasoning_span``, located by
decoding prefixes of the reply with the policy's tokenizer). Turns without a parsable answer are left out.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from mirl.types import Episode

SCOPES: tuple[str, ...] = ("first_turn", "trajectory", "turn_position")

_THINK_OPEN = "<think>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"


@dataclass(frozen=True)
class Pair:
    """One (X, Z) pair: a turn's context and reasoning, and where it came from."""

    x_ids: tuple[int, ...]  # the turn's context ids, ending with the pre-filled "<think>"
    z_ids: tuple[int, ...]  # the turn's reasoning ids (never empty)
    column: int  # index of the pair's own prompt in PairSet.columns
    episode: int  # index of the episode in the list given to the sampler
    turn: int  # 0-based turn index in the episode


@dataclass(frozen=True)
class PairSet:
    """The M pairs and N prompt columns of one scope."""

    scope: str  # "first_turn", "trajectory" or "turn<t>" (1-based t)
    pairs: tuple[Pair, ...]  # (M,)
    columns: tuple[tuple[int, ...], ...]  # (N,) prompt ids of each column
    col_group: tuple[int, ...]  # (N,) distinct-prompt id of each column
    empty_reasoning: int  # candidate turns skipped for an empty Z

    @property
    def true_col(self) -> torch.Tensor:
        """(M,) long: each pair's own column."""
        return torch.tensor([pair.column for pair in self.pairs], dtype=torch.long)

    @property
    def reasonings(self) -> list[tuple[int, ...]]:
        return [pair.z_ids for pair in self.pairs]

    @property
    def num_prompts(self) -> int:
        """Distinct prompts among the columns."""
        return len(set(self.col_group))


@dataclass(frozen=True)
class ActionPair:
    """One sampled reply split as ``lead + z + bridge + answer`` (module docstring), with its context."""

    x_ids: tuple[int, ...]  # the turn's context ids
    lead_ids: tuple[int, ...]  # reply tokens before Z (often empty)
    z_ids: tuple[int, ...]  # the reasoning
    bridge_ids: tuple[int, ...]  # reply tokens between Z and the answer ("</think><answer>")
    answer_ids: tuple[int, ...]  # the answer content (never empty)
    column: int  # the pair's column in its PairSet


def distinct_ids(sequences: Sequence[Hashable]) -> tuple[int, ...]:
    """Number equal items alike, in order of first appearance.

    >>> distinct_ids([(1, 2), (3,), (1, 2)])
    (0, 1, 0)
    """
    seen: dict[Hashable, int] = {}
    return tuple(seen.setdefault(item, len(seen)) for item in sequences)


FIRST_TURN_COLUMNS: tuple[str, ...] = ("sampled", "all")


def first_turn_pairs(
    episodes: Sequence[Episode], *, num_pairs: int, generator: torch.Generator, columns: str = "sampled"
) -> PairSet:
    """First-turn scope: up to ``num_pairs`` pairs without replacement, one column per group (module docstring).

    ``columns="sampled"`` makes columns of the groups among the drawn pairs only; ``"all"`` of every group.
    """
    _check_num_pairs(num_pairs)
    if columns not in FIRST_TURN_COLUMNS:
        raise ValueError(f"columns must be one of {', '.join(FIRST_TURN_COLUMNS)}, got {columns!r}")
    group_context: dict[int, tuple[int, ...]] = {}  # group -> its first episode's first-turn context
    candidates: list[Pair] = []  # column = the group id for now
    empty = 0
    for index, episode in enumerate(episodes):
        if not episode.turns:
            continue
        turn = episode.turns[0]
        group_context.setdefault(episode.group, turn.context_ids)
        if not turn.reasoning_ids:
            empty += 1
            continue
        candidates.append(Pair(turn.context_ids, turn.reasoning_ids, episode.group, index, 0))
    picked = [candidates[i] for i in _without_replacement(len(candidates), num_pairs, generator)]
    groups = list(group_context) if columns == "all" else [g for g in group_context if g in {p.column for p in picked}]
    column_of = {group: j for j, group in enumerate(groups)}
    pairs = tuple(Pair(p.x_ids, p.z_ids, column_of[p.column], p.episode, p.turn) for p in picked)
    contexts = tuple(group_context[g] for g in groups)
    return PairSet("first_turn", pairs, contexts, distinct_ids(contexts), empty)


def trajectory_pairs(episodes: Sequence[Episode], *, num_pairs: int, generator: torch.Generator) -> PairSet:
    """Trajectory scope: ``num_pairs`` draws with replacement, episode then valid turn (module docstring)."""
    _check_num_pairs(num_pairs)
    pool: list[tuple[int, list[int]]] = []  # (episode index, its valid turn indices)
    empty = 0
    for index, episode in enumerate(episodes):
        valid = [t for t, turn in enumerate(episode.turns) if turn.reasoning_ids]
        empty += len(episode.turns) - len(valid)
        if valid:
            pool.append((index, valid))
    pairs: list[Pair] = []
    if pool:
        episode_draws = torch.randint(len(pool), (num_pairs,), generator=generator).tolist()
        for column, draw in enumerate(episode_draws):
            index, valid = pool[draw]
            turn_index = valid[int(torch.randint(len(valid), (1,), generator=generator))]
            turn = episodes[index].turns[turn_index]
            pairs.append(Pair(turn.context_ids, turn.reasoning_ids, column, index, turn_index))
    return _own_columns("trajectory", pairs, empty)


def turn_position_pairs(episodes: Sequence[Episode], *, num_pairs: int, generator: torch.Generator) -> list[PairSet]:
    """Per-turn-position scopes ``turn1``, ``turn2``, ...: each pair its own column (module docstring)."""
    _check_num_pairs(num_pairs)
    longest = max((len(episode.turns) for episode in episodes), default=0)
    sets = []
    for t in range(longest):
        candidates, empty = [], 0
        for index, episode in enumerate(episodes):
            if len(episode.turns) <= t:
                continue
            turn = episode.turns[t]
            if not turn.reasoning_ids:
                empty += 1
                continue
            candidates.append(Pair(turn.context_ids, turn.reasoning_ids, -1, index, t))
        picked = _without_replacement(len(candidates), num_pairs, generator)
        pairs = [candidates[i] for i in picked]
        sets.append(_own_columns(f"turn{t + 1}", pairs, empty))
    return sets


def sample_scopes(
    episodes: Sequence[Episode],
    scopes: Sequence[str],
    *,
    num_pairs: int,
    generator: torch.Generator,
    first_turn_columns: str = "sampled",
) -> list[PairSet]:
    """The pair sets of the named scopes, in the given order (``turn_position`` expands to turn1, turn2, ...)."""
    sets: list[PairSet] = []
    for scope in scopes:
        if scope == "turn_position":
            sets += turn_position_pairs(episodes, num_pairs=num_pairs, generator=generator)
        elif scope == "first_turn":
            pairs = first_turn_pairs(episodes, num_pairs=num_pairs, generator=generator, columns=first_turn_columns)
            sets.append(pairs)
        elif scope == "trajectory":
            sets.append(trajectory_pairs(episodes, num_pairs=num_pairs, generator=generator))
        else:
            raise ValueError(f"unknown diagnostics scope {scope!r}, expected one of {', '.join(SCOPES)}")
    return sets


def action_pairs(pair_set: PairSet, episodes: Sequence[Episode], tokenizer) -> list[ActionPair]:
    """The pairs of ``pair_set`` whose reply has a non-empty answer, split as ``lead + Z + bridge + A``."""
    out = []
    for pair in pair_set.pairs:
        turn = episodes[pair.episode].turns[pair.turn]
        span = answer_span(tokenizer, turn.response_ids)
        if turn.reasoning_span is None or span is None:
            continue
        (z_start, z_end), (a_start, a_end) = turn.reasoning_span, span
        if a_start < z_end:  # the answer's first token straddles the reasoning's last one
            continue
        ids = turn.response_ids
        out.append(
            ActionPair(
                turn.context_ids,
                ids[:z_start],
                ids[z_start:z_end],
                ids[z_end:a_start],
                ids[a_start:a_end],
                pair.column,
            )
        )
    return out


def answer_span(tokenizer, response_ids: Sequence[int]) -> tuple[int, int] | None:
    """Token span ``[start, end)`` of the stripped ``<answer>`` content of a reply, or None.

    The reply text is ``"<think>" + decode(response_ids)`` (the engine pre-fills ``<think>``); the answer is
    group 2 of ``mirl.rollout.parsing.REPLY_PATTERN``. The span is the smallest range of tokens covering every
    character of the stripped answer; None when the reply does not parse or the answer is empty.
    """
    from mirl.rollout.parsing import REPLY_PATTERN

    ids = list(response_ids)
    text = _decode(tokenizer, ids)
    match = REPLY_PATTERN.search(_THINK_OPEN + text)
    if match is None:
        return None
    inner = match.group(2)
    stripped = inner.strip()
    if not stripped:
        return None
    first_char = match.start(2) - len(_THINK_OPEN) + len(inner) - len(inner.lstrip())
    last_char = first_char + len(stripped) - 1
    return _token_at(tokenizer, ids, first_char), _token_at(tokenizer, ids, last_char) + 1


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _token_at(tokenizer, ids: list[int], char: int) -> int:
    """Smallest t with ``len(decode(ids[:t + 1]))`` (trailing U+FFFD not counted) > ``char``: binary search."""
    low, high = 0, len(ids) - 1
    while low < high:
        mid = (low + high) // 2
        if len(_decode(tokenizer, ids[: mid + 1]).rstrip("\ufffd")) > char:
            high = mid
        else:
            low = mid + 1
    return low


def _own_columns(scope: str, pairs: list[Pair], empty: int) -> PairSet:
    """Every pair becomes its own column (trajectory and per-position scopes)."""
    own = tuple(Pair(p.x_ids, p.z_ids, j, p.episode, p.turn) for j, p in enumerate(pairs))
    columns = tuple(p.x_ids for p in own)
    return PairSet(scope, own, columns, distinct_ids(columns), empty)


def _without_replacement(population: int, count: int, generator: torch.Generator) -> list[int]:
    """``min(count, population)`` distinct indices in ``[0, population)``, sorted."""
    if population <= count:
        return list(range(population))
    return sorted(torch.randperm(population, generator=generator)[:count].tolist())


def _check_num_pairs(num_pairs: int) -> None:
    if isinstance(num_pairs, bool) or not isinstance(num_pairs, int) or num_pairs < 1:
        raise ValueError(f"num_pairs must be an int >= 1 (the paper uses 64), got {num_pairs!r}")
