"""Offline diagnosis of saved rollouts: read episodes from a file, score them, summarise the MI family.

Input formats (``mirl.diagnostics.records.load_records`` tells them apart by the first record, or the caller
names one):

- mirl's own episode records (``mirl.rollout.io``, schema in ``docs/rollouts.md``): lines with ``"turns"``,
  holding the exact sampled ids;
- text from other frameworks (``mirl.diagnostics.formats``, ``docs/diagnose.md``): mirl's generic chat JSONL,
  RAGEN's JSONL export, veRL's rollout dumps, TRL's logged completions, and ``{"prompt", "completion"}``
  records. They are re-tokenised with the scoring model's tokenizer and chat template
  (``mirl.diagnostics.retokenise``): X and Z are then not the exact sampled ids.

A chat trajectory becomes an :class:`~mirl.types.Episode` with one turn per assistant message m. X is the
model's chat template applied to ``messages[:m]`` with the generation prompt, followed by ``"<think>"``, encoded
in one piece; the reply is the assistant content after its leading ``<think>`` (prepended when absent, also in
the history of later turns, since the agent format pre-fills it), encoded on its own, as sampled tokens
follow a prompt. Z is located with ``mirl.rollout.parsing.reasoning_span``. Without ``"group"``, trajectories
whose first X is token-identical form one group. Sampled log-probs are unknown and stored as NaN (diagnosis
never reads them); a trajectory's ``"reward"`` is put on its last turn.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence

import torch

from mirl.config import DiagnosticsConfig
from mirl.diagnostics.reasoning import ReasoningRegex, with_reasoning_regex
from mirl.diagnostics.records import check_token_ids, load_records
from mirl.diagnostics.run import DiagnosticsState, run_diagnostics
from mirl.types import Episode


def read_rollouts(path: str | os.PathLike, tokenizer, fmt: str = "auto", regex: ReasoningRegex | None = None):
    """Episodes from a rollout file in any format mirl reads (``records.load_records``; ``fmt`` names one); text
    formats are re-tokenised with ``tokenizer`` (``mirl.diagnostics.retokenise``).

    The whole file is checked first (:func:`mirl.diagnostics.records.load_records`), so a bad line is reported
    with its number and field before any tokenizing; call ``load_records`` yourself to check before loading a
    model, then :func:`episodes_from_records`.
    """
    return episodes_from_records(*load_records(path, fmt), tokenizer, path=path, regex=regex)


def episodes_from_records(
    fmt: str, records: Sequence[dict], tokenizer, path=None, load_image=None, regex: ReasoningRegex | None = None
) -> list[Episode]:
    """Checked records (``load_records``) -> episodes. mirl records must hold only ids the tokenizer has
    (``check_token_ids``; ``path`` words the error with the line number); ``load_image(id)`` gives the turns of a
    vision run their images back (``mirl.rollout.io.image_loader``). Any other format is text, re-tokenised
    (``retokenise.episodes_from_samples``). ``regex``: Z is found by it instead of the ``<think>`` tags."""
    from mirl.diagnostics.formats import FORMATS
    from mirl.diagnostics.retokenise import episodes_from_samples

    if regex is not None and getattr(records, "where", None) is not None:  # skipped replies named by line or row
        regex.budget.name = lambda index: records.where(records.lines[index])
    if fmt == "mirl":
        check_token_ids(records, len(tokenizer), path)
        episodes = _mirl_episodes(records, load_image)
        return episodes if regex is None else with_reasoning_regex(episodes, regex, tokenizer)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be 'mirl' or one of {sorted(FORMATS)}, got {fmt!r}")
    samples = [FORMATS[fmt].sample(record) for record in records]
    return episodes_from_samples(samples, tokenizer, regex, env=fmt, prefill=FORMATS[fmt].prefill)


def _mirl_episodes(records: Sequence[dict], load_image=None) -> list[Episode]:
    """mirl episodes, with groups renumbered by (iteration, group) so iterations sharing a file never merge."""
    from mirl.rollout.io import episode_from_record

    group_of: dict[tuple, int] = {}
    episodes = []
    for record in records:
        episode = episode_from_record(record, load_image)
        group = group_of.setdefault((record.get("iteration"), episode.group), len(group_of))
        episodes.append(dataclasses.replace(episode, group=group))
    return episodes


def read_chat_records(records: Sequence[dict], tokenizer) -> list[Episode]:
    """Episodes from checked chat records (module docstring), grouped by ``"group"`` or by their first X."""
    return episodes_from_records("chat", records, tokenizer)


def diagnose(
    policy,
    episodes: Sequence[Episode],
    *,
    scopes: Sequence[str] = ("first_turn", "trajectory"),
    num_pairs: int = 64,
    seed: int = 0,
    mode: str = "shared",
    action_dependence: bool = False,
    reasoning: str = "closed",
    progress=None,
    format_reasoning: str | Sequence[str] | None = None,
) -> dict[str, float | str]:
    """``run_diagnostics`` on saved episodes with a fresh state and a generator seeded with ``seed``.

    Returns the same catalogue keys as in training, plus ``time/scoring`` (wall seconds). ``progress(done,
    total)`` is told the tokens scored (``run_diagnostics``). ``format_reasoning``: the format examples'
    reasonings, whose copies count towards ``no_reasoning`` as in training (``mirl diagnose`` passes mirl's).
    """
    from mirl.diagnostics.formats import FORMATS

    config = DiagnosticsConfig(
        scopes=list(scopes), num_pairs=num_pairs, action_dependence=action_dependence, reasoning=reasoning
    )
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    out = run_diagnostics(
        policy,
        episodes,
        config,
        DiagnosticsState.from_config(config),
        generator=generator,
        mode=mode,
        progress=progress,
        format_reasoning=format_reasoning,
        # another framework's replies are re-parsed with mirl's reply format, which they need not follow
        validity=not any(episode.spec.env in FORMATS for episode in episodes),
    )
    out["time/scoring"] = time.perf_counter() - start
    return out


def summary_rows(metrics: dict[str, float | str], ks: Sequence[int] = (1, 2, 4, 8)) -> list[dict[str, object]]:
    """One row per scope found in ``metrics`` (per-token ``est`` family): the numbers the CLI table shows."""
    scopes = [key.split("/")[1] for key in metrics if key.startswith("diag/") and key.endswith("/pairs")]
    rows = []
    for scope in scopes:
        base, est = f"diag/{scope}", f"diag/{scope}/est"
        row: dict[str, object] = {
            "scope": scope,
            "pairs": metrics[f"{base}/pairs"],
            "columns": metrics[f"{base}/columns"],
            "empty_reasoning": metrics[f"{base}/empty_reasoning"],
            "regime": metrics[f"{base}/regime"],
        }
        if "diag/invalid_frac" in metrics:  # the replies' validity, judged in mirl's reply format only
            row["invalid_frac"] = metrics["diag/invalid_frac"]
        if f"{est}/agnostic_share" in metrics:
            row["agnostic_share"] = metrics[f"{est}/agnostic_share"]
            row["agnostic_share_interval"] = (
                metrics[f"{est}/agnostic_share_ci_low"],
                metrics[f"{est}/agnostic_share_ci_high"],
            )
        for name in ("grounded_share", "template_share"):  # the env's judgement, where it has one
            if f"{base}/{name}" in metrics:
                row[name] = metrics[f"{base}/{name}"]
        if f"{est}/mi_estimate" in metrics:
            for stat in ("mi_estimate", "mi_upper_bound", "mi_zscore", "conditional_entropy", "reasoning_entropy"):
                row[stat] = metrics.get(f"{est}/{stat}", math.nan)  # an undefined z-score is left out
            row["mi_estimate_seq"] = metrics[f"{base}/seq/mi_estimate"]
            for stat, interval in (
                ("mi_contrast", "mi_contrast"),
                ("retrieval_above_chance_corrected", "retrieval_above_chance"),
            ):  # the permutation null, when it ran
                if f"{est}/{stat}" in metrics:
                    row[stat] = metrics[f"{est}/{stat}"]
                    row[f"{stat}_interval"] = (
                        metrics[f"{est}/{interval}_ci_low"],
                        metrics[f"{est}/{interval}_ci_high"],
                    )
            for k in ks:
                suffix = "" if k == 1 else f"@{k}"
                row[f"retrieval{suffix or '@1'}"] = metrics[f"{est}/retrieval_acc{suffix}"]
                row[f"chance{suffix or '@1'}"] = metrics[f"{est}/retrieval_chance{suffix}"]
        for stem in ("za", "xa"):  # action dependence, when it was scored
            if f"{base}/{stem}_est/mi_estimate" in metrics:
                row[f"{stem}_mi_estimate"] = metrics[f"{base}/{stem}_est/mi_estimate"]
        rows.append(row)
    return rows
