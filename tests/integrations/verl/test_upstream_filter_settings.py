"""The upstream proposal's keys (veRL PR #7894's ``algorithm.reward_variance_filtering``, SkyRL's ``enabled``) read
by veRL 0.9.1's own Hydra composition and mapped onto ``mirl.filter``; their metric names logged beside mirl's.

Needs veRL for the composition tests (``bash scripts/test-verl.sh``); no GPU, no Ray: the model path is a local
directory with a one-layer config (conftest ``model_dir``), and the sampler's filter is read from the composed
``sampler_kwargs`` exactly as ``SNRFilterSampler.__init__`` reads it.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from mirl.catalogue import unknown_keys
from mirl.cli import main
from mirl.config import Config, FilterConfig
from mirl.filtering import select_groups
from mirl.integrations.verl.groups import Row, select_rows

ROOT = Path(__file__).resolve().parents[3]
NOFILTER = ROOT / "configs/verl/sokoban-grpo-nofilter.yaml"
BLOCK = "algorithm.reward_variance_filtering"
needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs veRL 0.9.1")
UPSTREAM_DEFAULT = FilterConfig(strategy="top_p", value=0.9, mode="linear", statistic="var", ddof=1, eps=0.01)


def _filters(model_dir, overrides, setting=NOFILTER):
    """(driver's filter, sampler's filter) of a setting composed and checked by veRL's machinery."""
    from mirl.integrations.verl.launch import check, compose
    from mirl.integrations.verl.settings import filter_settings, read_settings

    config = check(compose(setting, [f"actor_rollout_ref.model.path={model_dir}", *overrides]))
    sampler_config, _ = filter_settings(config.trainer.v1.sampler.sampler_kwargs)  # SNRFilterSampler's read
    return read_settings(config).filter, sampler_config.filter


@needs_verl
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([f"{BLOCK}.enable=true"], UPSTREAM_DEFAULT),
        ([f"{BLOCK}.enabled=true"], UPSTREAM_DEFAULT),  # SkyRL's spelling
        ([f"{BLOCK}.enable=true", f"{BLOCK}.enabled=true"], UPSTREAM_DEFAULT),  # both, agreeing
        ([f"{BLOCK}.enable=true", f"{BLOCK}.top_p=0.6"], FilterConfig(**{**vars(UPSTREAM_DEFAULT), "value": 0.6})),
        (
            [f"{BLOCK}.enable=true", f"{BLOCK}.strategy=top_k", f"{BLOCK}.top_k=3"],
            FilterConfig(strategy="top_k_abs", value=3.0, statistic="var", ddof=1),
        ),
        (
            [f"{BLOCK}.enable=true", f"{BLOCK}.include_zero=true", f"{BLOCK}.variance_ddof=0"],
            FilterConfig(**{**vars(UPSTREAM_DEFAULT), "include_zero": True, "ddof": 0}),
        ),
        (
            [f"{BLOCK}.enable=true", f"{BLOCK}.selection_eps=0.0"],
            FilterConfig(**{**vars(UPSTREAM_DEFAULT), "eps": 0.0}),
        ),
        ([f"{BLOCK}.enable=false"], FilterConfig(strategy="none")),
        ([], FilterConfig(strategy="none")),  # nothing given the upstream way: the setting's mirl.filter
    ],
)
def test_each_upstream_key_through_verls_composition(model_dir, overrides, expected):
    # the shipped setting says mirl.filter.strategy=none; the upstream block replaces it once that key is dropped
    drop = ["~mirl.filter.strategy"] if overrides and overrides != [f"{BLOCK}.enable=false"] else []
    driver, sampler = _filters(model_dir, [*drop, *overrides])
    assert driver == sampler == expected


@needs_verl
def test_the_upstream_yaml_block_as_a_run_of_the_pr_writes_it(model_dir, tmp_path):
    setting = tmp_path / "upstream.yaml"
    setting.write_text(
        f"hydra:\n  searchpath: [pkg://verl.trainer.config, file://{ROOT / 'configs/verl'}]\n"
        "defaults:\n  - ppo_trainer\n  - _base\n  - _self_\n"
        "data: {train_files: data/verl/sokoban/train.parquet, val_files: data/verl/sokoban/val.parquet}\n"
        "algorithm:\n"
        "  adv_estimator: grpo\n"
        "  reward_variance_filtering:\n"
        "    enable: true\n"
        "    strategy: top_p\n"
        "    top_p: 0.8\n"
        "    top_k: 1\n"
        "    include_zero: false\n"
        "    variance_ddof: 1\n"
        "    selection_eps: 0.02\n"
        "mirl:\n  filter: {trajectories_per_group: 8}\n"
    )
    driver, sampler = _filters(model_dir, [], setting)
    expected = FilterConfig(**{**vars(UPSTREAM_DEFAULT), "value": 0.8, "eps": 0.02, "trajectories_per_group": 8})
    assert driver == sampler == expected


@needs_verl
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [f"{BLOCK}.enable=true"],  # the setting's mirl.filter.strategy=none is still there
            f"{BLOCK}.enable=true (default strategy top_p) sets mirl.filter.strategy=top_p, but "
            "mirl.filter.strategy=none is also given; remove one of the two (on the command line: "
            "~mirl.filter.strategy)",
        ),
        (
            ["~mirl.filter.strategy", f"{BLOCK}.enable=true", f"{BLOCK}.top_p=0.6", "+mirl.filter.value=0.9"],
            f"{BLOCK}.top_p=0.6 sets mirl.filter.value=0.6, but mirl.filter.value=0.9 is also given",
        ),
        (
            ["~mirl.filter.strategy", f"{BLOCK}.enable=true", "+mirl.filter.statistic=std"],
            "ranks by variance (mirl.filter.statistic=var), but mirl.filter.statistic=std is also given",
        ),
        ([f"{BLOCK}.enable=true", f"{BLOCK}.enabled=false"], f"{BLOCK}.enable=true and {BLOCK}.enabled=false disagree"),
        ([f"{BLOCK}.top_p=0.5"], f"{BLOCK}.top_p given but {BLOCK}.enable is not"),
        (["~mirl.filter.strategy", f"{BLOCK}.enable=true", f"{BLOCK}.variance_ddof=2"], "must be 0 or 1 in mirl"),
        (["~mirl.filter.strategy", f"{BLOCK}.enabled=true", f"{BLOCK}.top_k=0"], f"{BLOCK}.top_k must be an integer"),
        ([f"+{BLOCK}.bogus=1"], f"unknown key(s) ['bogus'] in {BLOCK}"),
        (
            ["~mirl.filter.strategy"],
            f"names no filter; set mirl.filter.strategy (none: no filter) or {BLOCK}.enable=true",
        ),
    ],
)
def test_conflicts_and_bad_values_are_one_line_user_errors(model_dir, capsys, overrides, message):
    args = ["verl-config", str(NOFILTER), f"actor_rollout_ref.model.path={model_dir}", *overrides, "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-config: ") and message in err and err.count("\n") == 1, err


@needs_verl
def test_a_sampler_without_the_upstream_block_is_caught(model_dir, capsys):
    overrides = [
        "~mirl.filter.strategy",
        f"{BLOCK}.enable=true",
        "~trainer.v1.sampler.sampler_kwargs.reward_variance_filtering",
    ]
    args = ["verl-config", str(NOFILTER), f"actor_rollout_ref.model.path={model_dir}", *overrides, "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "mirl verl-config: trainer.v1.sampler.sampler_kwargs names no filter strategy, so the sampler"
    )
    assert "reward_variance_filtering: ${algorithm.reward_variance_filtering}" in err and err.count("\n") == 1, err


def _rows(returns: torch.Tensor) -> list[Row]:
    """One veRL row per session, keyed as veRL stores them, with a one-turn mirl record (its reward = the return)."""
    rows = []
    for p, group in enumerate(returns.tolist()):
        for k, reward in enumerate(group):
            turn = {"start": 3, "length": 2, "reasoning": [0, 1], "reward": reward, "format_valid": True,
                    "actions_valid": True, "finish_reason": "stop", "actions": [f"arm{k % 2}"]}  # fmt: skip
            record = {"env": "bandit", "seed": p, "options": "{}", "success": reward >= 1.0, "end_reason": "success",
                      "turns": [turn]}  # fmt: skip
            rows.append(Row(f"u{p}_{k}_0", reward, record, (1, 2, 3), (4, 5, 6 + k)))
    return rows


RETURNS = torch.tensor([[0.0, 4.0, 0.0, 4.0], [0.0, 2.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]])


def test_the_upstream_metric_names_are_logged_beside_mirls():
    config = Config(filter=UPSTREAM_DEFAULT)
    step = select_rows(_rows(RETURNS), config)
    want = select_groups(RETURNS, strategy="top_p", value=0.9, statistic="var", include_zero=False, eps=0.01)
    assert step.metrics["filter/kept_count"] == step.metrics["reward_variance_filtering/num_kept_groups"]
    assert step.metrics["reward_variance_filtering/num_kept_groups"] == float(want.keep.sum())
    # variances (ddof 1): 16/3, 1, 0, 0.25; total 6.5833..; kept: group 0 and 1 (5.33 < 0.9 * 6.58 - 0.01 <= 6.33)
    assert want.keep.tolist() == [True, True, False, False]
    total = 16 / 3 + 1 + 0.25
    assert step.metrics["reward_variance_filtering/total_variance"] == pytest.approx(total, rel=1e-12)
    assert step.metrics["reward_variance_filtering/selected_variance_ratio"] == pytest.approx((16 / 3 + 1) / total)
    assert step.metrics["reward_variance_filtering/num_zero_variance_groups"] == 1.0
    assert step.metrics["reward_variance_filtering/kept_group_ratio"] == step.metrics["filter/kept_ratio"] == 0.5
    assert step.metrics["reward_variance_filtering/num_groups"] == 4.0
    assert unknown_keys(list(step.metrics)) == []


def test_rows_are_scored_once_per_trajectory_and_a_fanned_out_session_is_refused():
    config = Config(filter=UPSTREAM_DEFAULT)
    step = select_rows(_rows(RETURNS), config)
    assert step.returns.shape == (4, 4)  # one return per session, not per row or turn
    kept = {key.split("_")[0] for key in step.keep_keys}
    assert kept == {"u0", "u1"} and len(step.keep_keys) == 8  # whole groups, every session once
    fanned = [*_rows(RETURNS[:1]), Row("u0_0_1", 0.0, {}, (1,), (2,))]  # a second row of session 0: one per turn
    with pytest.raises(ValueError, match=r"row 'u0_0_1' is not a whole trajectory .*default_agent_loop=mirl"):
        select_rows(fanned, config)
