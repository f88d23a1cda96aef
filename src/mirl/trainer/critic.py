"""The value critic for ppo / dapo: a scalar head on a transformer backbone.

The backbone is a copy of the policy's (or ``model.critic_name``, a smaller model with the same tokenizer). The
value of response token t is read from the hidden state at t - 1, the state in which the token was chosen, so
``values[:, t]`` lines up with ``old_logprobs[:, t]``.

A vision-language backbone (a policy with images) gets each row's embeddings with the kept images' features on
their placeholders and the model's own multimodal positions (:func:`mirl.policy.vision_inputs.backbone_image_inputs`),
so the critic sees the images the policy saw.
"""

from __future__ import annotations

import torch
from torch import nn

from mirl.policy.checkpointing import checkpointed_layers
from mirl.policy.vision_inputs import backbone_image_inputs


class Critic(nn.Module):
    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.backbone = getattr(causal_lm, causal_lm.base_model_prefix)
        hidden = causal_lm.config.get_text_config().hidden_size
        dtype = next(self.backbone.parameters()).dtype
        self.head = nn.Linear(hidden, 1, dtype=dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.checkpointing = False  # recompute the backbone's layers in backward (mirl.policy.checkpointing)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, images=None) -> torch.Tensor:
        """Values (B, T) with values[:, t] = V(state before token t); values[:, 0] = 0. ``images[b]``: the
        ContextImage records of row b (a vision-language backbone only)."""
        mask = attention_mask.long()
        with checkpointed_layers(self.backbone, self.checkpointing and torch.is_grad_enabled()):
            if images is not None and any(images):
                inputs = backbone_image_inputs(self.backbone, input_ids, mask, images)
            else:
                inputs = {"input_ids": input_ids}
            # no KV cache: none is reused, and a checkpointed layer given one warns that it drops it
            hidden = self.backbone(attention_mask=mask, use_cache=False, **inputs).last_hidden_state
        state_values = self.head(hidden).squeeze(-1).float()  # (B, T): value after reading token t
        return torch.cat([state_values.new_zeros(state_values.shape[0], 1), state_values[:, :-1]], dim=1)
