"""The nouns every stage passes along.

Shape letters (README glossary): P prompts, K samples per prompt, B rows in a batch, T tokens, V vocabulary,
M scored reasonings, N prompt columns. Masks are ``bool`` with True meaning "counts".

Token ids and log-probs inside frozen records are tuples so a record can never be mutated after the stage that
made it; tensors appear only in :class:`RolloutBatch`, which the trainer builds from episodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How a policy samples one turn."""

    max_new_tokens: int = 400
    temperature: float = 1.0
    top_p: float = 1.0
    # generation stops after the first of these strings appears in the decoded reply (or at end-of-turn / eos)
    stop: tuple[str, ...] = ("</answer>",)
    # None: draw from the caller's generator state; an int makes the call reproducible
    seed: int | None = None
    # prompt + reply tokens at most per row (the context budget); None: only max_new_tokens (and the model's
    # maximum positions) bound a reply. A reply stopped by this bound ends with finish reason "length".
    max_total_tokens: int | None = None


@dataclass(frozen=True)
class Generation:
    """One sampled continuation: the ids exactly as sampled and their log-probs.

    ``logprobs[t]`` is log pi(token_ids[t] | prompt, token_ids[:t]) under the distribution that was sampled from
    (logits divided by the temperature, before any top-p truncation), in float32 or better.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    # "stop" (a stop string), "eos" (end-of-turn or eos token), "length" (max_new_tokens or the total-token bound);
    # the rollout engine relabels a reply that the context budget stopped or cut "context"
    finish_reason: str


@dataclass(frozen=True)
class Turn:
    """One agent turn, with the exact token stream the model saw and produced."""

    context_ids: tuple[int, ...]  # everything the model was given, ending with the pre-filled "<think>"
    response_ids: tuple[int, ...]  # the sampled ids, exactly
    response_logprobs: tuple[float, ...]  # (len(response_ids),)
    response_text: str  # "<think>" + decode(response_ids): the reply as the parser saw it
    observation: str  # the state text shown in this turn's user message
    reasoning_span: tuple[int, int] | None  # [start, end) into response_ids of Z: between the tags, stripped
    actions: tuple[str, ...]  # parsed actions, in order, capped at the per-turn limit
    reward: float  # env rewards of this turn's actions plus the format penalty and the wording bonus, if any
    format_valid: bool  # the reply matched <think>...</think><answer>...</answer>
    actions_valid: bool  # format_valid and every action legal
    # "stop", "eos", "length" (max_new_tokens) or "context" (cut at the context budget / the model's positions)
    finish_reason: str = "stop"
    # the env's ``info["state_key"]`` for the state this turn starts from (equal keys = identical env states,
    # within one instance); None when the env gives none. Step-level credit groups turns by it.
    state_key: str | None = None
    # the images in context_ids, in order (a vision-language policy's turns; empty for text)
    images: tuple[ContextImage, ...] = ()

    @property
    def reasoning_ids(self) -> tuple[int, ...]:
        if self.reasoning_span is None:
            return ()
        start, end = self.reasoning_span
        return self.response_ids[start:end]


@dataclass(frozen=True)
class EnvSpec:
    """An environment instance: a registered env name, its options and the seed that fixes the instance."""

    env: str
    seed: int
    options: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """A finished trajectory of one env instance; ``group`` and ``sample`` place it in the (P, K) layout."""

    spec: EnvSpec
    group: int  # prompt index p in [0, P)
    sample: int  # sample index k in [0, K)
    turns: tuple[Turn, ...]
    success: bool
    # "success", "terminated", "truncated", "action_budget", "max_turns", "context_length"
    end_reason: str
    system_prompt_ids: tuple[int, ...] = ()

    @property
    def total_reward(self) -> float:
        """The episode return: env rewards plus format penalties (and wording bonuses) over all turns."""
        return float(sum(turn.reward for turn in self.turns))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def turn_rewards(self) -> tuple[float, ...]:
        """Each turn's reward in order; they sum to :attr:`total_reward`."""
        return tuple(turn.reward for turn in self.turns)


@dataclass(frozen=True)
class RolloutBatch:
    """Episodes collated into right-padded token tensors for training.

    ``old_logprobs[b, t]`` is the sampled log-prob of ``input_ids[b, t]`` where ``response_mask[b, t]``;
    it is 0 elsewhere and must never be read there. ``token_rewards`` holds the episode return on the last
    response token of each row; ``turn_rewards`` holds each turn's own reward on that turn's last response token
    (per-turn credit reads it; episode-level methods never do).
    """

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) bool
    response_mask: torch.Tensor  # (B, T) bool: model-sampled tokens only
    old_logprobs: torch.Tensor  # (B, T) float
    token_rewards: torch.Tensor  # (B, T) float
    returns: torch.Tensor  # (B,) float: episode return of the row's trajectory
    group_ids: torch.Tensor  # (B,) long: prompt group p of the row
    episode_ids: torch.Tensor  # (B,) long: index of the row's episode in the collated list
    turn_ids: torch.Tensor  # (B, T) long: turn number of each response token, -1 elsewhere
    turn_rewards: torch.Tensor  # (B, T) float: turn i's reward on turn i's last response token, 0 elsewhere
    # (B,) the images of each row, placed in its input_ids (a vision-language policy's rows); () for text
    images: tuple[tuple[ContextImage, ...], ...] = ()

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())

    def select(self, rows: torch.Tensor) -> RolloutBatch:
        """The rows picked by a bool mask (B,) or a long index tensor, as a new batch."""
        fields = {name: getattr(self, name)[rows] for name in self.__dataclass_fields__ if name != "images"}
        if self.images:
            index = rows.nonzero().squeeze(-1) if rows.dtype == torch.bool else rows.reshape(-1)
            fields["images"] = tuple(self.images[int(i)] for i in index)
        return RolloutBatch(**fields)

    def image_args(self, rows: torch.Tensor | None = None) -> dict:
        """``{"images": ...}`` of the rows (all when None) for ``token_logprobs`` when the batch has images, else
        ``{}`` (so text policies are called exactly as before)."""
        if not any(self.images):
            return {}
        if rows is None:
            return {"images": self.images}
        index = rows.nonzero().squeeze(-1) if rows.dtype == torch.bool else rows.reshape(-1)
        return {"images": tuple(self.images[int(i)] for i in index)}

    @property
    def row_images(self) -> tuple[tuple[ContextImage, ...], ...] | None:
        """The images of each row when any row has one, else None (what ``token_logprobs(images=...)`` takes)."""
        return self.images if any(self.images) else None


@dataclass(frozen=True, eq=False)
class ImageInputs:
    """One image as a vision-language policy's processor prepared it, once: what sampling, training and scoring
    all read, so the three see the same pixels and the same placeholder expansion.

    ``block_ids`` is the image's part of the token stream (e.g. ``<|vision_start|>``, ``num_tokens`` copies of
    ``<|image_pad|>``, ``<|vision_end|>``) and ``pad_offset`` the index in it of the first placeholder token.
    Equality is identity (records holding tensors are compared by their ``id``).
    """

    id: str  # content id (:func:`mirl.envs.images.image_id`): equal pixels, equal id
    image: object  # the RGB PIL image the env rendered (written to the rollout files)
    pixel_values: torch.Tensor  # (patches, channels x temporal x patch x patch) float, as the processor made it
    grid_thw: tuple[int, int, int]  # patches along time, height, width (before the spatial merge)
    block_ids: tuple[int, ...]
    pad_offset: int
    num_tokens: int  # placeholder tokens the image fills: t x h x w / merge^2


@dataclass(frozen=True, eq=False)
class ContextImage:
    """An image inside a token stream: its placeholder tokens are ``ids[start : start + image.num_tokens]``."""

    start: int
    image: ImageInputs

    def shifted(self, offset: int) -> ContextImage:
        return ContextImage(self.start + offset, self.image)
