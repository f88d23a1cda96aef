"""Text samples (``mirl.diagnostics.formats``) -> episodes, re-tokenised with the scoring model's tokenizer.

Other frameworks save text, not the sampled ids, so X and Z here are the scoring model's encoding of that text:
they can differ from what was sampled (a merge across a tag boundary, another template rendering, special
tokens the writer dropped). ``mirl diagnose`` says so in its output.

Each reply splits as ``lead + reply``: the lead (the text before Z) joins X, the reply is encoded on its own, as
sampled tokens follow a prompt, and Z is a token span of it.

- The default rule (``--reasoning closed|open``). For formats whose agents pre-fill ``<think>`` (mirl's chat
  JSONL, RAGEN) every assistant turn's lead is ``<think>``, added when the content does not start with it, also
  in the history of later turns. Otherwise (veRL, TRL, prompt-completion) a reply's lead is everything up to its
  first ``<think>``, or nothing when it has none: the prompt is kept as written (a template that pre-fills
  ``<think>`` already ended it). Z is the text up to ``</think>`` (``open``: also an unclosed one, up to
  ``<answer>`` or the end).
- ``--reasoning-regex`` (:class:`~mirl.diagnostics.reasoning.ReasoningRegex`): the lead is the reply up to
  capture group 1 of the first match, Z the group's text; history is rendered as written.

X of a conversation turn is the chat template applied to the messages before it with the generation prompt,
plus the lead, encoded in one piece (the template writes any BOS). A text prompt is encoded as it is, with the
tokenizer's special tokens (BOS where it has one), then the lead. Samples without a group id of the file's own
form groups by identical prompt ids (and step). Sampled log-probs are unknown and stored as NaN.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

from mirl.diagnostics.formats import TextSample
from mirl.diagnostics.reasoning import ReasoningRegex, token_span
from mirl.types import EnvSpec, Episode, Turn

THINK_OPEN = "<think>"


def episodes_from_samples(
    samples: Sequence[TextSample],
    tokenizer,
    regex: ReasoningRegex | None = None,
    env: str = "chat",
    prefill: bool = True,
) -> list[Episode]:
    """One episode per sample, grouped by the file's group id or by identical prompts (module docstring).
    ``prefill``: the writer's agents pre-fill ``<think>`` in assistant turns (chat, RAGEN)."""
    if any(not isinstance(s.prompt, str) for s in samples) and not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; chat records need one to render X (load a chat model)")
    group_of: dict = {}
    samples_in: Counter[int] = Counter()
    episodes = []
    for index, sample in enumerate(samples):
        if regex is not None:
            regex.budget.at = regex.budget.name(index)
        build = _text_turns if isinstance(sample.prompt, str) else _conversation_turns
        prompt_ids, turns = build(sample, tokenizer, regex, prefill)
        key = sample.group if sample.group is not None else ("prompt", sample.step, prompt_ids)
        group = group_of.setdefault(key, len(group_of))
        index, samples_in[group] = samples_in[group], samples_in[group] + 1
        if turns and sample.reward:
            turns[-1] = dataclasses.replace(turns[-1], reward=sample.reward)
        spec = EnvSpec(env, group)
        episodes.append(Episode(spec, group, index, tuple(turns), bool(sample.success), "external"))
    return episodes


def split_reply(text: str, regex: ReasoningRegex | None, *, prefill: bool) -> tuple[str, str, tuple | None]:
    """``(lead, reply, z_chars)``: Z's characters in ``reply``, or None when the regex found none (the default
    rule's Z is located later, by ``reasoning_span``). ``prefill``: a conversation turn, whose lead is always
    ``<think>``.

    >>> split_reply("<think>a</think>", None, prefill=True), split_reply("ok</think>", None, prefill=True)
    (('<think>', 'a</think>', None), ('<think>', 'ok</think>', None))
    >>> split_reply("Hm. <think>a</think>", None, prefill=False)
    ('Hm. <think>', 'a</think>', None)
    >>> split_reply("x <r> a </r>", ReasoningRegex.compile("<r>(.*)</r>"), prefill=False)
    ('x <r>', ' a </r>', (1, 2))
    """
    if regex is not None:
        found = regex.search(text)
        if found is None:
            return "", text, None
        group, start, end = found
        return text[:group], text[group:], (start - group, end - group) if end > start else None
    if prefill:
        stripped = text.lstrip()
        body = stripped[len(THINK_OPEN) :] if stripped.startswith(THINK_OPEN) else text
        return THINK_OPEN, body, None
    found = text.find(THINK_OPEN)
    lead = text[: found + len(THINK_OPEN)] if found >= 0 else ""
    return lead, text[len(lead) :], None


def _turn(tokenizer, context_ids: tuple[int, ...], split: tuple, by_regex: bool, observation: str) -> Turn:
    """One turn from ``split_reply``'s ``(lead, reply, z_chars)``; without a regex Z ends at ``</think>``."""
    from mirl.rollout.parsing import parse_reply, reasoning_span

    lead, reply, z_chars = split
    response_ids = tuple(tokenizer.encode(reply, add_special_tokens=False))
    if by_regex:
        span = token_span(tokenizer, response_ids, z_chars)
    else:
        span = reasoning_span(tokenizer, response_ids)
    text = lead + reply
    parsed = parse_reply(THINK_OPEN + reply if lead.endswith(THINK_OPEN) else text, None, 1)
    return Turn(
        context_ids=context_ids,
        response_ids=response_ids,
        response_logprobs=(math.nan,) * len(response_ids),
        response_text=text,
        observation=observation,
        reasoning_span=span,
        actions=parsed.actions,
        reward=0.0,
        format_valid=parsed.format_valid,
        actions_valid=parsed.format_valid and bool(parsed.actions),
    )


def _text_turns(sample: TextSample, tokenizer, regex, prefill: bool) -> tuple[tuple, list[Turn]]:
    prompt_ids = tuple(tokenizer.encode(sample.prompt))
    split = split_reply(sample.completion, regex, prefill=False)
    context_ids = tuple(tokenizer.encode(sample.prompt + split[0])) if split[0] else prompt_ids
    return prompt_ids, [_turn(tokenizer, context_ids, split, regex is not None, sample.prompt)]


def _conversation_turns(sample: TextSample, tokenizer, regex, prefill: bool) -> tuple[tuple, list[Turn]]:
    from mirl.rollout.prompts import render_chat

    history: list[dict] = []
    prompt_ids: tuple[int, ...] = ()
    turns = []
    for message in (*sample.prompt, *sample.completion):
        if message["role"] != "assistant":
            history.append(message)
            continue
        rendered = render_chat(tokenizer, history)
        if not turns:
            prompt_ids = tuple(tokenizer.encode(rendered, add_special_tokens=False))
        split = split_reply(message["content"], regex, prefill=prefill and regex is None)
        context_ids = tuple(tokenizer.encode(rendered + split[0], add_special_tokens=False))
        observation = next((m["content"] for m in reversed(history) if m["role"] == "user"), "")
        turns.append(_turn(tokenizer, context_ids, split, regex is not None, observation))
        history.append({"role": "assistant", "content": split[0] + split[1]})
    return prompt_ids, turns
