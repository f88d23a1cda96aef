"""Trainer options that change what is built: KL reference, LoRA, dynamic sampling, env mixing, trajectory control."""

import json

import pytest
import torch

from mirl.config_files import load_config
from mirl.trainer import stages, train
from mirl.trainer.specs import allocate, train_seed, train_specs, validation_seed


@pytest.fixture
def make_config(run_config):
    return lambda name, *extra: run_config(name, "diagnostics.enabled=false", "trainer.iterations=1", *extra)


def _last(run_dir) -> dict:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


def test_kl_to_the_reference_is_logged_and_starts_at_zero(tmp_path, formatted_policy, pick_env, make_config):
    result = train(make_config("kl", "algorithm.kl_coef=0.1", "algorithm.preset=grpo"), policy=formatted_policy)
    metrics = _last(result.run_dir)
    # the reference is the initial policy, so on the first (on-policy) step KL(pi || pi_ref) is 0 up to fp error
    assert abs(metrics["train/kl"]) < 1e-5


def test_lora_trains_adapters_only(tmp_path, formatted_policy, pick_env, make_config):
    pytest.importorskip("peft")
    base = {k: v.clone() for k, v in formatted_policy.model.state_dict().items()}
    train(make_config("lora", "model.lora_rank=4", "algorithm.preset=ppo"), policy=formatted_policy)
    model = formatted_policy.model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {
        n.replace("base_model.model.", "").replace(".base_layer", ""): p
        for n, p in model.named_parameters()
        if "lora_" not in n
    }
    shared = [k for k in base if k in frozen]
    assert len(shared) == len(base)  # every base weight is still there, under the adapter's wrapper
    assert all(torch.equal(frozen[k], base[k]) for k in shared)  # and untouched
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in model.named_parameters() if "lora_B" in n)


def test_dynamic_sampling_refills_zero_spread_groups(formatted_policy, pick_env, tmp_path, make_config):
    config = make_config("dyn", "algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_max_rounds=3")
    episodes, rounds = stages.collect(formatted_policy, config, 1, sampling_seed=5)
    returns = stages.group_returns(episodes, 3, 4)
    assert sorted((e.group, e.sample) for e in episodes) == [(p, k) for p in range(3) for k in range(4)]
    spread = returns.std(dim=1)
    # either every group has spread, or the refill budget ran out trying
    assert bool((spread > 0).all()) or rounds == 3


def test_envs_mix_by_weight_with_disjoint_seeds():
    config = load_config(
        None,
        [
            "envs=[{name: sokoban, weight: 1}, {name: frozenlake, weight: 3}]",
            "rollout.prompts_per_iteration=8",
            "validation.num_instances=4",
        ],
    )
    specs = train_specs(config, iteration=3)
    assert [s.env for s in specs] == ["sokoban"] * 2 + ["frozenlake"] * 6
    assert allocate(8, [1.0, 3.0]) == [2, 6]
    assert len({s.seed for s in specs}) == 8 and all(s.seed % 2 == 0 for s in specs)
    assert train_seed(0, 3, 0) != train_seed(0, 4, 0)  # fresh instances every iteration
    assert all(validation_seed(j) % 2 == 1 for j in range(100))  # validation seeds are odd: never trained on


def test_trajectory_level_control_keeps_j_per_group(tmp_path, formatted_policy, pick_env, make_config):
    config = make_config("traj", "filter.strategy=none", "filter.trajectories_per_group=2")
    returns = torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 0.0]])
    _, rows = stages.select(returns, config)
    assert rows.sum(dim=1).tolist() == [2, 2, 2]  # top-1 and bottom-1 of each group
    assert rows[0].tolist() == [True, True, False, False] and rows[2].tolist() == [True, False, False, True]
