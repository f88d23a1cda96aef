"""Cross-scoring with images: every reasoning Z_i under every prompt X_j with X_j's images."""

from __future__ import annotations

import torch

from mirl.config import DiagnosticsConfig, RolloutConfig
from mirl.diagnostics.reasoning import with_reasoning
from mirl.diagnostics.run import DiagnosticsState, run_diagnostics, with_image_keys
from mirl.diagnostics.sampling import first_turn_pairs
from mirl.diagnostics.scoring import score_matrix
from mirl.rollout import run_episodes
from mirl.types import EnvSpec


def _episodes(policy):
    specs = [EnvSpec("sokoban", seed, {"render": "image", "cell_size": 16}) for seed in range(3)]
    config = RolloutConfig(max_turns=2, max_new_tokens=12)
    return run_episodes(policy, specs, 2, config, sampling_seed=1)


def _plain_sum(model, turn, reasoning, image_token_id) -> float:
    """sum_t log p(z_t | x, z_<t) from transformers' own forward (its vision features and rotary positions)."""
    ids = torch.tensor([list(turn.context_ids) + list(reasoning)])
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == image_token_id).int(),
        "pixel_values": torch.cat([place.image.pixel_values for place in turn.images]),
        "image_grid_thw": torch.tensor([place.image.grid_thw for place in turn.images]),
    }
    with torch.no_grad():
        logits = model(**inputs).logits[0].double()
    start = len(turn.context_ids)
    logp = torch.log_softmax(logits[start - 1 : -1], -1).gather(-1, ids[0, start:, None])[:, 0]
    return float(logp.sum())


def test_cross_scores_equal_a_plain_forward_per_pair(vl_policy):
    episodes = _episodes(vl_policy)
    keyed = with_reasoning(with_image_keys(vl_policy, episodes), "open", vl_policy.tokenizer)  # unclosed <think>
    pairs = first_turn_pairs(keyed, num_pairs=6, generator=torch.Generator().manual_seed(0))
    assert len(pairs.columns) == 3 and len(set(pairs.col_group)) == 3  # three boards, three distinct prompts
    # the boards differ only in their images: by tokens alone the prompts would be one column
    plain_ids = {episodes[2 * g].turns[0].context_ids for g in range(3)}
    assert len(plain_ids) == 1
    per_seq, per_token = score_matrix(vl_policy, pairs.columns, pairs.reasonings)
    for i, pair in enumerate(pairs.pairs):
        for j in range(len(pairs.columns)):
            column_turn = episodes[2 * j].turns[0]  # column j holds group j's first context (its first episode)
            expected = _plain_sum(vl_policy.model, column_turn, pair.z_ids, vl_policy.image_token_id)
            assert abs(float(per_seq[i, j]) - expected) < 1e-5
            assert abs(float(per_token[i, j]) - expected / len(pair.z_ids)) < 1e-5


def test_diagnostics_run_on_image_episodes(vl_policy):
    episodes = _episodes(vl_policy)
    config = DiagnosticsConfig(scopes=("first_turn", "trajectory"), num_pairs=8, reasoning="open")
    out = run_diagnostics(vl_policy, episodes, config, DiagnosticsState(), generator=torch.Generator().manual_seed(0))
    assert out["diag/first_turn/columns"] == 3.0
    assert 0.0 <= out["diag/first_turn/est/retrieval_acc"] <= 1.0
    assert "diag/trajectory/est/mi_estimate" in out
