"""A copy of the trained model in another dtype for the sampler to run on (``model.sampler_dtype``).

Training in float32 while sampling in bfloat16 is what a GPU run with a 16-bit inference engine does; on the CPU it
reproduces the sampler/trainer log-prob mismatch that the trainer measures and corrects
(:mod:`mirl.algorithms.rollout_correction`). The copy is built on first use from the trained model (LoRA deltas
merged, as a serving engine loads them: :func:`mirl.policy.vllm.engine_weights`) and its weights are copied again
whenever the trained model changed since the last copy (an optimiser step, a checkpoint load), so the sampler
always runs the current policy, rounded to its dtype.
"""

from __future__ import annotations

import copy

import torch


class SamplerCopy:
    """The trained model's weights in ``dtype``, refreshed lazily; :meth:`model_for` hands out the current copy."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.model: torch.nn.Module | None = None
        self._synced: tuple | None = None

    @torch.no_grad()
    def model_for(self, trained: torch.nn.Module) -> torch.nn.Module:
        """The copy, with ``trained``'s current weights cast to ``dtype``."""
        from mirl.policy.vllm import _fingerprint, engine_weights

        version = _fingerprint(trained)
        if self.model is None:
            plain = copy.deepcopy(trained)
            if hasattr(plain, "merge_and_unload"):  # a PEFT model: its merged base is what the sampler runs
                plain = plain.merge_and_unload()
            self.model = plain.to(self.dtype).requires_grad_(False).eval()
        elif version != self._synced:
            state = self.model.state_dict()
            for name, tensor in engine_weights(trained):
                state[name].copy_(tensor)
        self._synced = version
        return self.model
