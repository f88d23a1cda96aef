"""Presets match REFERENCE.md section 6; overrides and errors; advantage estimators as a table."""

import ast
import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

import mirl.algorithms
from mirl.algorithms import ADVANTAGE_ESTIMATORS, PRESETS, AlgorithmPreset, compute_advantages, get_preset

NAN = float("nan")
F64 = torch.float64

# name: (estimator, scale_by_std, agg, eps_low, eps_high, use_critic, whiten_advantages)
REFERENCE_TABLE = {
    "ppo": ("gae", False, "token-mean", 0.2, 0.2, True, True),
    "dapo": ("gae", False, "token-mean", 0.2, 0.28, True, True),
    "grpo": ("grpo", True, "seq-mean-token-mean", 0.2, 0.28, False, False),
    "dr_grpo": ("grpo", False, "seq-mean-token-sum", 0.2, 0.28, False, False),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_TABLE))
def test_presets_match_reference_table(name):
    preset = PRESETS[name]
    fields = ("estimator", "scale_by_std", "agg", "eps_low", "eps_high", "use_critic", "whiten_advantages")
    assert tuple(getattr(preset, f) for f in fields) == REFERENCE_TABLE[name]
    assert preset.name == name
    # shared by all four: dual clip 3, no KL, entropy 0.001, gamma = lambda = 1, value clip 0.5
    assert (preset.dual_clip, preset.kl_coef, preset.entropy_coef) == (3.0, 0.0, 0.001)
    assert (preset.gamma, preset.lam, preset.value_clip) == (1.0, 1.0, 0.5)


def test_preset_table_is_complete_and_frozen():
    assert sorted(PRESETS) == sorted(REFERENCE_TABLE)
    assert sorted(ADVANTAGE_ESTIMATORS) == ["gae", "grpo"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        PRESETS["ppo"].eps_high = 0.3


def test_get_preset_overrides_without_touching_the_table():
    preset = get_preset("grpo", entropy_coef=0.0, kl_coef=0.01, agg="seq-mean-token-sum-norm")
    assert (preset.entropy_coef, preset.kl_coef, preset.agg) == (0.0, 0.01, "seq-mean-token-sum-norm")
    assert PRESETS["grpo"].entropy_coef == 0.001
    assert get_preset("ppo") == PRESETS["ppo"]


def test_get_preset_errors_suggest_the_fix():
    with pytest.raises(ValueError, match=r"unknown algorithm preset 'drgrpo'.*did you mean 'dr_grpo'\?"):
        get_preset("drgrpo")
    with pytest.raises(ValueError, match=r"no field 'eps_hihg'; did you mean 'eps_high'\?"):
        get_preset("ppo", eps_hihg=0.3)
    with pytest.raises(ValueError, match=r"breaks \['0 <= eps_low < 1'\]"):
        get_preset("ppo", eps_low=1.5)
    with pytest.raises(ValueError, match="did you mean 'token-mean'"):
        get_preset("ppo", agg="token_mean")
    with pytest.raises(ValueError, match="needs values; set use_critic=True"):
        get_preset("ppo", use_critic=False)
    with pytest.raises(
        ValueError,
        match=r"unknown preset .grpo.: KL estimator .low_var., expected one of \[.k1., .k2., .k3.\]",
    ):
        get_preset("grpo", kl_kind="low_var")
    with pytest.raises(ValueError, match="advantage estimator .reinforce., expected one of"):
        AlgorithmPreset("x", "reinforce", False, "token-mean", 0.2, 0.2, None, False, False)


def _group_batch():
    group_returns = torch.tensor([[1.0, 0.0], [2.0, 2.0]], dtype=F64)  # P = 2, K = 2 -> B = 4 rows
    mask = torch.tensor([[True, True, False], [True, False, False], [False, True, True], [True, True, True]])
    return group_returns, mask


def test_grpo_advantages_are_broadcast_to_trained_tokens():
    group_returns, mask = _group_batch()
    advantages, value_targets = compute_advantages(PRESETS["grpo"], group_returns=group_returns, mask=mask)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # group 0: +-0.5 / unbiased std sqrt(0.5); group 1: equal returns -> 0
    expected = torch.tensor([[a, a, 0.0], [-a, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(advantages, expected, rtol=1e-12, atol=0)
    assert value_targets is None
    dr_advantages, _ = compute_advantages(PRESETS["dr_grpo"], group_returns=group_returns, mask=mask)
    assert dr_advantages[:2].tolist() == [[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0]]


def test_ppo_places_the_return_on_the_last_token_and_whitens():
    group_returns, mask = _group_batch()
    values = torch.where(mask, torch.full(mask.shape, 0.5, dtype=F64), NAN)
    raw = get_preset("ppo", whiten_advantages=False)
    advantages, value_targets = compute_advantages(raw, group_returns=group_returns, mask=mask, values=values)
    # gamma = lam = 1: A_t = return (put on the last token) - V_t; the target is the return on each token
    assert value_targets.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    assert advantages.tolist() == [[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0], [0.0, 1.5, 1.5], [1.5, 1.5, 1.5]]
    whitened, _ = compute_advantages(PRESETS["ppo"], group_returns=group_returns, mask=mask, values=values)
    torch.testing.assert_close(whitened[mask].mean(), torch.tensor(0.0, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(whitened[mask].std(), torch.tensor(1.0, dtype=F64), rtol=1e-7, atol=0)


def test_estimators_refuse_inputs_they_cannot_use():
    group_returns, mask = _group_batch()
    values = torch.zeros(mask.shape, dtype=F64)
    with pytest.raises(ValueError, match="needs the critic's values"):
        compute_advantages(PRESETS["ppo"], group_returns=group_returns, mask=mask)
    with pytest.raises(ValueError, match="uses group returns only"):
        compute_advantages(PRESETS["grpo"], group_returns=group_returns, mask=mask, values=values)
    with pytest.raises(ValueError, match=r"one return per mask row.*\(2, 2\) returns for mask \(3, 3\)"):
        compute_advantages(PRESETS["grpo"], group_returns=group_returns, mask=mask[:3, :])


def test_core_imports_only_torch_the_standard_library_and_itself():
    # STYLE rule 3: the numeric core is pure; checked on the source, whatever mirl/__init__ imports
    package = Path(mirl.algorithms.__file__).parent
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                allowed = top in sys.stdlib_module_names or top == "torch" or name.startswith("mirl.algorithms")
                assert allowed, f"{path.name} imports {name}"


def test_task_coef_scales_only_the_task_term_and_zero_leaves_the_regularisers():
    from mirl.algorithms.objective import loss_terms

    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, adv, mask = logp.detach().clone(), torch.tensor([[2.0, 2.0]]), torch.tensor([[True, True]])
    entropy = torch.tensor([[1.0, 3.0]])
    full, _ = loss_terms(get_preset("grpo"), logp, old, adv, mask, entropy=entropy)
    half, _ = loss_terms(get_preset("grpo", task_coef=0.5), logp, old, adv, mask, entropy=entropy)
    none, _ = loss_terms(get_preset("grpo", task_coef=0.0), logp, old, adv, mask, entropy=entropy)
    # ratio 1 at the first update: task = -mean(A) = -2; entropy = -0.001 * mean(1, 3) = -0.002
    values = [float(terms["task"].detach()) for terms in (full, half, none)]
    assert values == [-2.0, -1.0, 0.0]
    assert float(full["entropy"]) == float(none["entropy"]) == pytest.approx(-0.002, rel=1e-6)
    (gradient,) = torch.autograd.grad(none["task"], logp)
    assert torch.equal(gradient, torch.zeros_like(logp))
    with pytest.raises(ValueError, match="task_coef >= 0"):
        get_preset("grpo", task_coef=-1.0)


def test_the_config_knob_reaches_the_preset():
    from mirl import load_config
    from mirl.trainer.setup import resolve_preset

    assert resolve_preset(load_config(None, ["algorithm.preset=grpo"]).algorithm).task_coef == 1.0
    assert resolve_preset(load_config(None, ["algorithm.task_coef=0"]).algorithm).task_coef == 0.0


def test_credit_needs_the_estimator_it_builds_on():
    assert get_preset("grpo", credit="step_groups").credit == "step_groups"
    assert get_preset("ppo", credit="bilevel_gae", credit_lam=0.9).credit_lam == 0.9
    with pytest.raises(ValueError, match="credit 'bilevel_gae' works with the 'gae' estimator"):
        get_preset("grpo", credit="bilevel_gae")
    with pytest.raises(ValueError, match="credit 'turn' works with the 'grpo' estimator"):
        get_preset("dapo", credit="turn")
    with pytest.raises(ValueError, match="unknown preset 'grpo': credit 'steps'"):
        get_preset("grpo", credit="steps")
    with pytest.raises(ValueError, match="step_weight >= 0"):
        get_preset("grpo", credit="step_groups", step_weight=-1.0)
