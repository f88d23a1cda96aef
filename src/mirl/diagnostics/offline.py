"""Offline diagnosis of saved rollouts: read episodes from JSONL, score them, summarise the MI family.

Two input formats, told apart by the first non-blank line:

- mirl's own episode records (``mirl.rollout.io``, schema in ``docs/rollouts.md``): lines with ``"turns"``;
- a generic chat format for rollouts from other frameworks (``docs/diagnose.md``): one JSON object per
  trajectory with ``"messages"`` (a list of ``{"role": "system" | "user" | "assistant", "content": str}``) and
  optionally ``"group"`` (any JSON scalar naming the prompt), ``"success"`` (bool) and ``"reward"`` (number).

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
from collections import Counter
from collections.abc import Sequence

import torch

from mirl.config import DiagnosticsConfig
from mirl.diagnostics.records import check_chat_record, check_token_ids, load_records
from mirl.diagnostics.run import DiagnosticsState, run_diagnostics
from mirl.errors import InputFileError
from mirl.types import EnvSpec, Episode, Turn

_THINK_OPEN = "<think>"


def read_rollouts(path: str | os.PathLike, tokenizer) -> list[Episode]:
    """Episodes from a JSONL file in either format (module docstring); the tokenizer is used for chat records.

    The whole file is checked first (:func:`mirl.diagnostics.records.load_records`), so a bad line is reported
    with its number and field before any tokenizing; call ``load_records`` yourself to check before loading a
    model, then :func:`episodes_from_records`.
    """
    return episodes_from_records(*load_records(path), tokenizer, path=path)


def episodes_from_records(fmt: str, records: Sequence[dict], tokenizer, path=None, load_image=None) -> list[Episode]:
    """Checked records (``load_records``) -> episodes: ``fmt`` is ``"mirl"`` or ``"chat"``. mirl records must
    hold only ids the tokenizer has (``check_token_ids``; ``path`` words the error with the line number).
    ``load_image(id)`` gives the turns of a vision run their images back (``mirl.rollout.io.image_loader``)."""
    if fmt == "chat":
        return read_chat_records(records, tokenizer)
    if fmt == "mirl":
        check_token_ids(records, len(tokenizer), path)
        return _mirl_episodes(records, load_image)
    raise ValueError(f"fmt must be 'mirl' or 'chat', got {fmt!r}")


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
    """Episodes from generic chat records (module docstring), grouped by ``"group"`` or by their first X."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; chat records need one to render X (load a chat model)")
    trajectories = [_chat_turns(record, n, tokenizer) for n, record in enumerate(records, 1)]
    keys = [
        ("group", record["group"]) if "group" in record else ("context", turns[0].context_ids if turns else ())
        for record, turns in zip(records, trajectories, strict=True)
    ]
    group_of: dict = {}
    samples: Counter[int] = Counter()
    episodes = []
    for record, turns, key in zip(records, trajectories, keys, strict=True):
        group = group_of.setdefault(key, len(group_of))
        sample, samples[group] = samples[group], samples[group] + 1
        reward = float(record.get("reward", 0.0))
        if turns and reward:
            turns[-1] = dataclasses.replace(turns[-1], reward=reward)
        episodes.append(
            Episode(EnvSpec("chat", group), group, sample, tuple(turns), bool(record.get("success", False)), "external")
        )
    return episodes


def _chat_turns(record: dict, line: int, tokenizer) -> list[Turn]:
    from mirl.rollout.parsing import parse_reply, reasoning_span
    from mirl.rollout.prompts import render_chat

    messages = _normalised_messages(record, line)
    turns = []
    for m, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        rendered = render_chat(tokenizer, messages[:m])
        context_ids = tuple(tokenizer.encode(rendered + _THINK_OPEN, add_special_tokens=False))
        body = message["content"][len(_THINK_OPEN) :]
        response_ids = tuple(tokenizer.encode(body, add_special_tokens=False))
        parsed = parse_reply(message["content"], None, 1)
        observation = next((msg["content"] for msg in reversed(messages[:m]) if msg["role"] == "user"), "")
        turns.append(
            Turn(
                context_ids=context_ids,
                response_ids=response_ids,
                response_logprobs=(math.nan,) * len(response_ids),
                response_text=message["content"],
                observation=observation,
                reasoning_span=reasoning_span(tokenizer, response_ids),
                actions=parsed.actions,
                reward=0.0,
                format_valid=parsed.format_valid,
                actions_valid=parsed.format_valid and bool(parsed.actions),
            )
        )
    return turns


def _normalised_messages(record: dict, line: int) -> list[dict[str, str]]:
    """The record's messages, each assistant content starting with ``<think>``; errors name the record."""
    problem = check_chat_record(record)
    if problem:
        raise InputFileError(f"record {line}: {problem}")
    out = []
    for message in record["messages"]:
        content = message["content"]
        if message["role"] == "assistant":
            stripped = content.lstrip()
            content = stripped if stripped.startswith(_THINK_OPEN) else _THINK_OPEN + content
        out.append({"role": message["role"], "content": content})
    return out


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
    format_reasoning: str | None = None,
) -> dict[str, float | str]:
    """``run_diagnostics`` on saved episodes with a fresh state and a generator seeded with ``seed``.

    Returns the same catalogue keys as in training, plus ``time/scoring`` (wall seconds). ``progress(done,
    total)`` is told the tokens scored (``run_diagnostics``). ``format_reasoning``: the format example's
    reasoning, whose copies count towards ``no_reasoning`` as in training (``mirl diagnose`` passes mirl's).
    """
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
