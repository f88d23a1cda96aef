"""One mirl episode played through an async token-in/token-out generator, and its veRL-shaped output.

:func:`play_episode` drives exactly the native engine's per-episode steps (``mirl.rollout.engine``: start,
next context, apply, finish), one episode at a time, so the system prompt, the per-turn user messages, parsing,
the per-turn action cap, the action budget, the format penalty and the context bookkeeping are the engine's own
code, not a copy. Only generation differs: instead of one batched ``policy.generate`` call per turn, each turn
awaits ``generate(context_ids) -> Generation``, or ``generate(context_ids, images=...)`` when the context holds
images (the RGB images of the whole context, in order; see :mod:`mirl.integrations.verl.vision`). Image
observations are encoded with ``images``, the encoder of veRL's processor: its placeholder expansion is done once
per image and kept in the context ids.

One sequence per episode. veRL's agent loop returns one ``(prompt_ids, response_ids, response_mask)`` per
episode, so every context must extend the previous context + reply (it does in ``context_mode="full"`` while
no turn is dropped). Two limits end an episode with ``end_reason="context_length"`` where the native engine
would instead drop the oldest turns and train per turn (deliberate deviation, documented in docs/scale-out.md):

- the engine moved the first kept turn forward (the history no longer fits ``max_context_tokens``);
- ``response_budget`` is set and the next turn could overflow it: tokens after the first prompt
  (replies and env text so far) + ``max_new_tokens`` > ``response_budget`` (veRL's ``rollout.response_length``).

:func:`output_fields` lays the episode out as veRL wants it: ``prompt_ids`` = the first turn's context,
``response_ids`` = everything after it, ``response_mask`` = 1 exactly on sampled tokens (from
:func:`mirl.rollout.collate.collate`), the sampled log-probs (0 on env tokens), the episode return as
``reward_score``, the images as ``multi_modal_data={"images": [...]}`` when the episode shows any,
and under ``extra_fields["mirl"]`` the per-turn layout that :func:`episode_from_fields`
turns back into an :class:`~mirl.types.Episode` for the filter metrics and the MI diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from mirl.config import RolloutConfig
from mirl.integrations.verl.vision import episode_images
from mirl.policy.hf import end_of_turn_ids, ends_with_stop
from mirl.rollout.collate import collate
from mirl.rollout.engine import _apply, _finish, _next_context, _start
from mirl.rollout.generation import STOP_STRINGS, bounded, context_budget
from mirl.rollout.prompts import ChatFormat
from mirl.types import EnvSpec, Episode, Generation, Turn

GenerateFn = Callable[..., Awaitable[Generation]]  # (context ids) or (context ids, images=[RGB images])
CONTEXT_LENGTH = "context_length"
IMAGE_TOKEN = "image_token"  # a vision reply sampled an image-marker id (mirl.integrations.verl.vision)


@dataclass(frozen=True)
class Served:
    """What a veRL server returns for one request (the fields of veRL's ``TokenOutput`` an agent loop reads)."""

    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...]
    extra_fields: dict = field(default_factory=dict)  # veRL's server: {"global_steps": weights version, ...}
    num_preempted: int | None = None


def finish_reason(tokenizer, token_ids: Sequence[int], stop_ids: frozenset[int], max_new_tokens: int) -> str:
    """The native sampler's finish reason of a reply, read from its last token (``HFPolicy``'s order).

    ``"eos"`` when the last id ends a turn, ``"stop"`` when a stop string (``</answer>``) ends the decoded tail,
    ``"length"`` when ``max_new_tokens`` ids were sampled; a server that stopped for another reason gives
    ``"stop"``.
    """
    if token_ids and token_ids[-1] in stop_ids:
        return "eos"
    if token_ids and ends_with_stop(tokenizer, token_ids, STOP_STRINGS):
        return "stop"
    return "length" if len(token_ids) >= max_new_tokens else "stop"


def stop_token_ids(tokenizer) -> frozenset[int]:
    """Ids that end a reply: eos and the chat template's end-of-turn token (as the native sampler)."""
    return frozenset(end_of_turn_ids(tokenizer))


def to_generation(served, tokenizer, stop_ids: frozenset[int], max_new_tokens: int) -> Generation:
    """A server's output (``token_ids``, ``log_probs``) as a mirl :class:`Generation`.

    veRL returns ``log_probs`` only with ``rollout.calculate_log_probs=true``; without them the reply still
    trains (veRL recomputes old log-probs) and the turn records zeros.
    """
    ids = tuple(int(t) for t in served.token_ids)
    logprobs = tuple(float(lp) for lp in served.log_probs) if served.log_probs else (0.0,) * len(ids)
    if len(logprobs) != len(ids):
        raise ValueError(f"server returned {len(logprobs)} log-probs for {len(ids)} tokens; expected one per token")
    return Generation(ids, logprobs, finish_reason(tokenizer, ids, stop_ids, max_new_tokens))


def _overflows(live, context: tuple[int, ...], config: RolloutConfig, response_budget: int | None) -> bool:
    if live.start > 0:  # the engine dropped a turn: the history no longer nests into one sequence
        return True
    if response_budget is None or not live.turns:
        return False
    prompt = len(live.turns[0].context_ids)
    return len(context) - prompt + config.max_new_tokens > response_budget


async def play_episode(
    generate: GenerateFn,
    spec: EnvSpec,
    tokenizer,
    config: RolloutConfig,
    *,
    group: int = 0,
    sample: int = 0,
    response_budget: int | None = None,
    images=None,
) -> Episode:
    """Play ``spec`` to the end with the native engine's per-turn steps, awaiting ``generate`` once per turn.

    ``images`` encodes image observations (``process(image) -> ImageInputs``; None: they are refused).
    """
    if config.context_mode != "full":
        raise ValueError(
            f"rollout.context_mode must be 'full' inside veRL (one sequence per episode), got "
            f"{config.context_mode!r}; set mirl.rollout.context_mode=full"
        )
    fmt = ChatFormat.from_tokenizer(tokenizer)
    budget = context_budget(None, tokenizer, config)  # the server's model length is veRL's to enforce
    live = _start(spec, group, sample, fmt, tokenizer, config)
    live.policy = images  # the engine encodes user messages with images through it
    reserved = images.reserved_ids() if images is not None else frozenset()
    for turn in range(config.max_turns):
        if live.end_reason is not None:
            break
        context = _next_context(live, turn, fmt, tokenizer, config, budget)
        if context is None:
            break
        if _overflows(live, context, config, response_budget):
            live.end_reason = CONTEXT_LENGTH
            break
        shown = [place.image.image for place in context.images]
        served = await (generate(context.ids, images=shown) if shown else generate(context.ids))
        reply = bounded(served, budget.tokens - len(context), config.max_new_tokens)
        reply, marked = _before_reserved(reply, reserved)
        _apply(live, context, reply, tokenizer, config)
        if marked and live.end_reason is None:
            live.end_reason = IMAGE_TOKEN
    return _finish(live)


def _before_reserved(reply: Generation, reserved: frozenset[int]) -> tuple[Generation, bool]:
    """The reply up to its first reserved (image-marker) id, and whether it held one (module docstring of
    :mod:`mirl.integrations.verl.vision`). The kept ids are a prefix of what was sampled, with their log-probs.

    >>> _before_reserved(Generation((5, 9, 6), (-0.1, -0.2, -0.3), "eos"), frozenset({9}))
    (Generation(token_ids=(5,), logprobs=(-0.1,), finish_reason='length'), True)
    """
    cut = next((t for t, token in enumerate(reply.token_ids) if token in reserved), None)
    if cut is None:
        return reply, False
    return Generation(reply.token_ids[:cut], reply.logprobs[:cut], "length"), True


def _turn_layout(turn: Turn) -> dict:
    return {
        "start": len(turn.context_ids),
        "length": len(turn.response_ids),
        "reasoning": list(turn.reasoning_span) if turn.reasoning_span is not None else None,
        "reward": turn.reward,
        "format_valid": turn.format_valid,
        "actions_valid": turn.actions_valid,
        "finish_reason": turn.finish_reason,
        "actions": list(turn.actions),
        "state_key": turn.state_key,
    }


def output_fields(episode: Episode) -> dict:
    """The fields of veRL's ``AgentLoopOutput`` for one episode (module docstring), ``metrics`` excepted."""
    record = {
        "env": episode.spec.env,
        "seed": episode.spec.seed,
        "options": json.dumps(dict(episode.spec.options), sort_keys=True),
        "success": episode.success,
        "end_reason": episode.end_reason,
        "turns": [_turn_layout(turn) for turn in episode.turns],
    }
    if not episode.turns:
        return _fields(list(episode.system_prompt_ids), [], [], [], episode, record)
    fields = _laid_out(episode, record)
    images = episode_images(episode)
    if images:
        fields["multi_modal_data"] = {"images": images}  # veRL's key: its worker reads multi_modal_data["images"]
    return fields


def _laid_out(episode: Episode, record: dict) -> dict:
    batch = collate([episode])  # one row: the turns' contexts nest
    prompt_length = len(episode.turns[0].context_ids)
    if batch.num_rows != 1:
        raise ValueError(f"expected one row for an episode whose contexts nest, got {batch.num_rows}")
    length = int(batch.attention_mask[0].sum())
    ids = batch.input_ids[0, :length].tolist()
    mask = batch.response_mask[0, prompt_length:length].long().tolist()
    logprobs = batch.old_logprobs[0, prompt_length:length].tolist()
    return _fields(ids[:prompt_length], ids[prompt_length:], mask, logprobs, episode, record)


def _fields(prompt_ids, response_ids, mask, logprobs, episode: Episode, record: dict) -> dict:
    return {
        "prompt_ids": prompt_ids,
        "response_ids": response_ids,
        "response_mask": mask,
        "response_logprobs": logprobs,
        "reward_score": episode.total_reward,
        "num_turns": 2 * episode.num_turns,  # veRL counts messages: one user + one assistant per turn
        "extra_fields": {"mirl": record},
    }


def episode_from_fields(
    prompt_ids: Sequence[int], response_ids: Sequence[int], record: dict, *, group: int, sample: int
) -> Episode:
    """Rebuild the :class:`Episode` behind one veRL row from its ids and ``extra_fields["mirl"]``.

    Token ids, spans, rewards, flags and finish reasons are exact; the observation text and the log-probs are
    not carried through veRL and come back as ``""`` and zeros; ``response_text`` is left empty.
    """
    stream = tuple(int(t) for t in prompt_ids) + tuple(int(t) for t in response_ids)
    turns = []
    for layout in record["turns"]:
        start, length = int(layout["start"]), int(layout["length"])
        if start + length > len(stream):
            raise ValueError(
                f"turn layout [{start}, {start + length}) runs past the {len(stream)} ids of the row; the row was "
                "truncated (raise rollout.response_length)"
            )
        span = layout["reasoning"]
        turns.append(
            Turn(
                context_ids=stream[:start],
                response_ids=stream[start : start + length],
                response_logprobs=(0.0,) * length,
                response_text="",
                observation="",
                reasoning_span=(int(span[0]), int(span[1])) if span is not None else None,
                actions=tuple(layout["actions"]),
                reward=float(layout["reward"]),
                format_valid=bool(layout["format_valid"]),
                actions_valid=bool(layout["actions_valid"]),
                finish_reason=str(layout["finish_reason"]),
                state_key=_state_key(layout),
            )
        )
    spec = EnvSpec(str(record["env"]), int(record["seed"]), json.loads(record["options"]))
    return Episode(spec, group, sample, tuple(turns), bool(record["success"]), str(record["end_reason"]))


def _state_key(layout: dict) -> str | None:
    """A layout's ``state_key`` as a string; None when absent (records written before the key existed)."""
    key = layout.get("state_key")
    return None if key is None else str(key)


__all__ = [
    "CONTEXT_LENGTH",
    "Served",
    "episode_from_fields",
    "finish_reason",
    "output_fields",
    "play_episode",
    "stop_token_ids",
    "to_generation",
]
