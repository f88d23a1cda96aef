"""Retokenisation drift: does the context a model was sampled with survive being rendered and encoded again?

A trainer that keeps conversations as text (TRL's tool loop re-applies the chat template, veRL's multi-turn
rollouts and most "prompt / completion" pipelines do) trains on ``encode(template(conversation))``, while the
model sampled turn k from ``encode(template(first messages, generation prompt))`` followed by its own tokens.
Where the first is not a prefix of the second, the log-probs the trainer computes are of a context the model never
saw. Three checks, each on token ids of the given tokenizer:

- **template** (conversations): for every k, the chat template applied to the first k messages (with the
  generation prompt when message k + 1 is the assistant's) must encode to a prefix of the template applied to the
  first k + 1 messages. Templates that drop earlier ``<think>`` blocks (Qwen3's) fail at the message after an
  assistant turn; so do whitespace normalisation and a reply whose text re-encodes across the template's boundary.
- **boundary** (text prompts): ``encode(prompt)`` must be a prefix of ``encode(prompt + completion)``: byte-pair
  merges across the join re-split the last prompt tokens.
- **sampled** (files that hold the sampled ids: mirl episodes): each turn's sampled ids must re-encode from their
  text to the same ids (``encode(decode(ids)) == ids``), and each turn's context must extend the previous turn's
  context and reply.

Where a check fails, :class:`Parting` says at which message (or turn) and token the two streams part, and shows the
tokens on both sides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

SHOWN = 6  # tokens shown on each side of a parting


@dataclass(frozen=True)
class Parting:
    """Where the sampled context and the re-rendered one part in one conversation."""

    conversation: int  # index of the record in the file, 0-based
    check: str  # "template", "boundary" or "sampled"
    step: int  # template: k (messages 1..k vs 1..k+1); boundary: 0; sampled: the turn, 0-based
    token: int  # index of the first token that differs
    sampled: str  # the sampled side's tokens around it (decoded, each in brackets)
    trained: str  # the re-rendered side's tokens around it
    where: str  # in words, e.g. "messages 1..3 + generation prompt vs 1..4 (after an assistant message)"


def first_difference(context: Sequence[int], longer: Sequence[int]) -> int | None:
    """The first index where ``context`` is not a prefix of ``longer``; None when it is one.

    >>> first_difference([1, 2], [1, 2, 3]), first_difference([1, 2], [1, 3, 3]), first_difference([1, 2], [1])
    (None, 1, 1)
    """
    for i, token in enumerate(context):
        if i >= len(longer) or longer[i] != token:
            return i
    return None


def _window(tokenizer, ids: Sequence[int], index: int) -> str:
    piece = ids[max(0, index - SHOWN) : index + SHOWN]
    # each token's text in brackets with escapes (a newline shows as \\n), so a parting in whitespace is visible
    return "".join("[" + repr(tokenizer.decode([token]))[1:-1] + "]" for token in piece)


def render_ids(tokenizer, messages: Sequence[dict], generation_prompt: bool) -> list[int]:
    """The chat template applied to ``messages``, encoded as one text (its special-token strings as special ids)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))


def template_partings(tokenizer, messages: Sequence[dict], conversation: int = 0) -> tuple[int, list[Parting]]:
    """``(steps checked, partings)`` of the template check over one conversation (module docstring)."""
    partings = []
    following = render_ids(tokenizer, messages[:1], False)
    for k in range(1, len(messages)):
        generation = messages[k]["role"] == "assistant"
        context = render_ids(tokenizer, messages[:k], generation) if generation else following
        following = render_ids(tokenizer, messages[: k + 1], False)
        index = first_difference(context, following)
        if index is not None:
            head = f"messages 1..{k}{' + generation prompt' if generation else ''}"
            where = f"{head} vs 1..{k + 1} (message {k} is the {messages[k - 1]['role']}'s)"
            partings.append(
                Parting(conversation, "template", k, index, _window(tokenizer, context, index),
                        _window(tokenizer, following, index), where)
            )  # fmt: skip
    return len(messages) - 1, partings


def boundary_parting(tokenizer, prompt: str, completion: str, conversation: int = 0) -> Parting | None:
    """The boundary check of a text prompt and its completion (module docstring)."""
    context = tokenizer.encode(prompt)
    joined = tokenizer.encode(prompt + completion)
    index = first_difference(context, joined)
    if index is None:
        return None
    where = "encode(prompt) vs encode(prompt + completion)"
    return Parting(
        conversation, "boundary", 0, index, _window(tokenizer, context, index), _window(tokenizer, joined, index), where
    )


def sampled_partings(tokenizer, record: dict, conversation: int = 0) -> tuple[int, list[Parting]]:
    """``(turns checked, partings)`` of the sampled-ids check over one mirl episode record (module docstring)."""
    partings = []
    turns = record["turns"]
    for t, turn in enumerate(turns):
        sampled = list(turn["response_ids"])
        again = list(tokenizer.encode(tokenizer.decode(sampled), add_special_tokens=False))
        index = first_difference(sampled, again) if sampled != again else None
        if index is None and sampled != again:
            index = len(sampled)  # the re-encoding is longer
        if index is not None:
            partings.append(
                Parting(conversation, "sampled", t, index, _window(tokenizer, sampled, index),
                        _window(tokenizer, again, index), f"turn {t + 1}: sampled ids vs encode(decode(sampled ids))")
            )  # fmt: skip
        if t + 1 < len(turns):
            extended = list(turn["context_ids"]) + sampled
            following = list(turns[t + 1]["context_ids"])
            index = first_difference(extended, following)
            if index is not None:
                where = f"turn {t + 1}'s context + reply vs turn {t + 2}'s context"
                partings.append(
                    Parting(conversation, "sampled", t, index, _window(tokenizer, extended, index),
                            _window(tokenizer, following, index), where)
                )  # fmt: skip
    return len(turns), partings


def drift_report(fmt: str, records: Sequence[dict], tokenizer) -> dict:
    """Every check that applies to ``records`` (read by ``load_records``), summed up; JSON-ready."""
    from mirl.diagnostics.formats import FORMATS

    checked: Counter[str] = Counter()
    partings: list[Parting] = []
    for index, record in enumerate(records):
        if fmt == "mirl":
            steps, found = sampled_partings(tokenizer, record, index)
            checked["sampled"] += steps
            partings += found
            continue
        sample = FORMATS[fmt].sample(record)
        if isinstance(sample.prompt, str):
            checked["boundary"] += 1
            partings += [p for p in [boundary_parting(tokenizer, sample.prompt, sample.completion, index)] if p]
        else:
            steps, found = template_partings(tokenizer, [*sample.prompt, *sample.completion], index)
            checked["template"] += steps
            partings += found
    affected = sorted({p.conversation for p in partings})
    return {
        "format": fmt,
        "conversations": len(records),
        "checked": dict(checked),
        "affected": len(affected),
        "partings": len(partings),
        "by_step": {f"{p.check} {p.step}": n for p, n in _first_of_each(partings).items()},
        "first_partings": [asdict(p) for p in partings[:20]],
    }


def _first_of_each(partings: Sequence[Parting]) -> dict[Parting, int]:
    """One parting per (check, step), with how many partings share it, in order of first appearance."""
    counts = Counter((p.check, p.step) for p in partings)
    firsts: dict[tuple, Parting] = {}
    for p in partings:
        firsts.setdefault((p.check, p.step), p)
    return {p: counts[key] for key, p in firsts.items()}
