"""``MirlAgentLoop``: any registered mirl environment inside veRL's agent loop (registered as ``"mirl"``).

Each veRL session (one of the ``rollout.n`` sessions of a prompt ``uid``) plays one episode of the env instance
named by its dataset row (``env_name``, ``env_seed``, ``env_options`` as written by ``mirl verl-data``) with
:func:`mirl.integrations.verl.episode.play_episode`: the native engine's prompts, parsing, action budget, format
penalty and context mode, token-in/token-out. Each turn is one ``server_manager.generate`` call on the exact
context ids; the sampled ids are kept as sampled and the env's text is tokenized once and appended. All turns of
an episode share one ``request_id``, so veRL routes them to the same server and its prefix cache.

Sampling: temperature, top_p and top_k come from veRL (``actor_rollout_ref.rollout``); mirl adds
``max_tokens = mirl.rollout.max_new_tokens`` and the stop string ``</answer>``, kept in the output (vLLM:
``include_stop_str_in_output``; SGLang: ``no_stop_trim``).

The output is one ``AgentLoopOutput`` per episode: ``response_mask`` 1 exactly on sampled tokens, the episode
return as ``reward_score`` (so veRL's reward function is not called), and ``extra_fields["mirl"]`` with the
success flag, the end reason and the per-turn layout the sampler turns into the native ``rollout/*`` metrics.

Images, as veRL's own multimodal loops pass them (:mod:`mirl.integrations.verl.vision`): an env that renders its
state as images (``render: image``) has each observation image expanded once by veRL's ``processor`` into the
context ids; every ``generate`` call of a context with images carries them all, in order, as ``image_data``; the
output carries them as ``multi_modal_data={"images": [...]}``, from which veRL's worker computes
``multi_modal_inputs`` and the multimodal position ids. A text-only episode calls and returns exactly as before.
Without a processor (a text model), an image observation is a one-line error.

The server's own ``extra_fields`` travel on as veRL's ``ToolAgentLoop`` passes them (:func:`merge_server_fields`):
the first turn's fields whole (``global_steps``, ``min_global_steps``, ``num_cached_tokens``, ...), then each later
turn's ``max_global_steps`` and the sums of the speculative-decoding counts. veRL's agent-loop worker copies
``min_global_steps`` and ``max_global_steps`` into the row tags, and its trainer's ``_compute_metrics`` reads them
as ints (the staleness metrics). Like veRL's loops, the output also carries ``turn_scores`` (here the per-turn env
rewards) and an empty ``tool_rewards``, and ``metrics.num_preempted`` sums the server's preemption counts.
"""

from __future__ import annotations

import json
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import SPEC_DECODE_EXTRA_KEYS

from mirl.integrations.verl.episode import output_fields, play_episode, stop_token_ids, to_generation
from mirl.integrations.verl.plugin import AGENT_NAME
from mirl.integrations.verl.settings import read_settings
from mirl.integrations.verl.vision import image_encoder
from mirl.rollout.generation import STOP_STRINGS
from mirl.types import EnvSpec

KEEP_STOP = {"vllm": {"include_stop_str_in_output": True}, "sglang": {"no_stop_trim": True}}


def env_spec(kwargs: dict[str, Any]) -> EnvSpec:
    """The env instance of a dataset row (columns written by ``mirl verl-data``)."""
    missing = [key for key in ("env_name", "env_seed", "env_options") if key not in kwargs]
    if missing:
        raise KeyError(
            f"dataset row lacks {missing}; build the parquet files with `mirl verl-data ENV --train N --val M DIR`"
        )
    options = kwargs["env_options"]
    return EnvSpec(str(kwargs["env_name"]), int(kwargs["env_seed"]), json.loads(options) if options else {})


def merge_server_fields(merged: dict[str, Any], served: dict[str, Any]) -> None:
    """Fold one turn's server ``extra_fields`` into the episode's, as veRL's ``ToolAgentLoop`` does.

    The first turn's fields are taken whole; a later turn replaces ``max_global_steps`` (the newest weights the
    episode was sampled with) and adds its speculative-decoding counts to those already present.

    >>> merged = {}
    >>> merge_server_fields(merged, {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3})
    >>> merge_server_fields(merged, {"global_steps": 4, "min_global_steps": 4, "max_global_steps": 4})
    >>> merged
    {'global_steps': 3, 'min_global_steps': 3, 'max_global_steps': 4}
    """
    if not merged:
        merged.update(served)
        return
    if served.get("max_global_steps") is not None:
        merged["max_global_steps"] = served["max_global_steps"]
    for key in SPEC_DECODE_EXTRA_KEYS:
        if key in served and key in merged:
            merged[key] = int(merged[key]) + int(served[key])


@register(AGENT_NAME)
class MirlAgentLoop(AgentLoopBase):
    """A veRL agent loop that plays one mirl episode per session (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = read_settings(self.config)
        self.stop_ids = stop_token_ids(self.tokenizer)

    def sampling_params(self, sampling_params: dict[str, Any]) -> dict[str, Any]:
        """veRL's sampling parameters plus mirl's per-turn length and stop string."""
        params = dict(sampling_params)
        params["max_tokens"] = self.settings.rollout.max_new_tokens
        params["stop"] = list(STOP_STRINGS)
        params.update(KEEP_STOP.get(str(self.rollout_config.get("name", "vllm")), {}))
        return params

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        spec = env_spec(kwargs)
        params = self.sampling_params(sampling_params)
        request_id = uuid4().hex
        rollout = self.settings.rollout
        server_fields: dict[str, Any] = {}
        preempted: list[int] = []

        async def generate(context_ids, images=None):
            shown = {"image_data": list(images)} if images else {}  # every image of the context, in order
            served = await self.server_manager.generate(
                request_id=request_id, prompt_ids=list(context_ids), sampling_params=params, **shown
            )
            merge_server_fields(server_fields, dict(served.extra_fields or {}))
            if served.num_preempted is not None:
                preempted.append(int(served.num_preempted))
            return to_generation(served, self.tokenizer, self.stop_ids, rollout.max_new_tokens)

        started = time.perf_counter()
        episode = await play_episode(
            generate,
            spec,
            self.tokenizer,
            rollout,
            sample=int(kwargs.get("session_id", 0)),
            response_budget=int(self.rollout_config.response_length),
            images=image_encoder(self.processor),
        )
        fields = output_fields(episode)
        if len(fields["prompt_ids"]) > self.rollout_config.prompt_length:
            raise ValueError(
                f"the first prompt of {spec.env} seed {spec.seed} has {len(fields['prompt_ids'])} tokens, more than "
                f"actor_rollout_ref.rollout.prompt_length={self.rollout_config.prompt_length}; raise "
                "data.max_prompt_length"
            )
        fields["extra_fields"] = server_fields | {
            "turn_scores": [turn.reward for turn in episode.turns],
            "tool_rewards": [],
            **fields["extra_fields"],
        }
        metrics = AgentLoopMetrics(
            generate_sequences=time.perf_counter() - started, num_preempted=sum(preempted) if preempted else -1
        )
        return AgentLoopOutput(metrics=metrics, **fields)
