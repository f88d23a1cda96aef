"""TRL PR #7242's ``reward_variance_*`` fields on ``SNRFilterGRPOConfig``: parsed by TRL's own ``TrlParser`` and
``HfArgumentParser`` (CLI flags and YAML), mapped onto mirl's filter, ranked on the raw rewards, logged under the
upstream metric names."""

from __future__ import annotations

import json
import warnings

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402
from transformers import HfArgumentParser  # noqa: E402

from mirl.config import FilterConfig  # noqa: E402
from mirl.integrations.trl import SNRFilterGRPOConfig, SNRFilterGRPOTrainer  # noqa: E402

ALL = ["g0", "g1", "g2", "g3"]
UPSTREAM_TOP_P = FilterConfig(strategy="top_p", value=0.9, mode="linear", statistic="var", ddof=1, eps=0.01)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _cli(tmp_path, *flags):
    parser = trl.TrlParser((SNRFilterGRPOConfig,))
    (args,) = parser.parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", *flags])
    return args


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--reward_variance_filtering", "top_p"], UPSTREAM_TOP_P),
        (
            ["--reward_variance_filtering", "top_p", "--reward_variance_top_p", "0.6"],
            FilterConfig(**{**vars(UPSTREAM_TOP_P), "value": 0.6}),
        ),
        (
            ["--reward_variance_filtering", "top_k", "--reward_variance_top_k", "2"],
            FilterConfig(strategy="top_k_abs", value=2.0, statistic="var", ddof=1),
        ),
        (
            ["--reward_variance_filtering", "top_p", "--reward_variance_filtering_include_zero", "true"],
            FilterConfig(**{**vars(UPSTREAM_TOP_P), "include_zero": True}),
        ),
        (
            ["--reward_variance_filtering", "top_p", "--reward_variance_filtering_selection_eps", "0"],
            FilterConfig(**{**vars(UPSTREAM_TOP_P), "eps": 0.0}),
        ),
        (  # both ways, agreeing, plus a mirl-only field
            [
                "--reward_variance_filtering",
                "top_p",
                "--filter_statistic",
                "var",
                "--filter_trajectories_per_group",
                "2",
            ],
            FilterConfig(**{**vars(UPSTREAM_TOP_P), "trajectories_per_group": 2}),
        ),
        (["--filter_strategy", "top_k_abs", "--filter_value", "2"], FilterConfig(strategy="top_k_abs", value=2.0)),
    ],
)
def test_trl_cli_flags(tmp_path, flags, expected):
    assert _cli(tmp_path, *flags).filter_config == expected


def test_trl_yaml_config_and_the_saved_run(tmp_path):
    yaml = tmp_path / "grpo.yaml"
    yaml.write_text(
        f"output_dir: {tmp_path}\nuse_cpu: true\nreward_variance_filtering: top_p\nreward_variance_top_p: 0.8\n"
        "reward_variance_top_k: 1\nreward_variance_filtering_include_zero: false\n"
        "reward_variance_filtering_selection_eps: 0.02\n"
    )
    (args,) = trl.TrlParser((SNRFilterGRPOConfig,)).parse_args_and_config(["--config", str(yaml)])
    assert args.filter_config == FilterConfig(**{**vars(UPSTREAM_TOP_P), "value": 0.8, "eps": 0.02})
    saved = json.loads(args.to_json_string())  # what TRL writes with the run and hands its loggers
    assert (saved["reward_variance_filtering"], saved["reward_variance_top_p"]) == ("top_p", 0.8)


def test_hf_argument_parser(tmp_path):
    parser = HfArgumentParser(SNRFilterGRPOConfig)
    flags = ["--output_dir", str(tmp_path), "--use_cpu", "--reward_variance_filtering", "top_k"]
    flags += ["--reward_variance_top_k", "3"]
    (args,) = parser.parse_args_into_dataclasses(flags)
    assert args.filter_config == FilterConfig(strategy="top_k_abs", value=3.0, statistic="var", ddof=1)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--reward_variance_filtering", "top_p", "--reward_variance_top_p", "0.8", "--filter_value", "0.9"],
            "reward_variance_top_p=0.8 sets filter_value=0.8, but filter_value=0.9 is also given; remove one of the "
            "two",
        ),
        (
            ["--reward_variance_filtering", "top_p", "--filter_ddof", "0"],
            "reward_variance_filtering='top_p' (default variance_ddof 1) sets filter_ddof=1, but filter_ddof=0 is also "
            "given; remove one of the two",
        ),
        (
            ["--reward_variance_filtering", "top_k", "--filter_strategy", "top_k"],
            "reward_variance_filtering=top_k sets filter_strategy=top_k_abs, but filter_strategy=top_k is also given",
        ),
        (
            ["--reward_variance_top_p", "0.8"],
            "reward_variance_top_p given but reward_variance_filtering is not, so the upstream filter would stay off; "
            "set reward_variance_filtering='top_p' to filter with it",
        ),
        (["--reward_variance_filtering", "none"], "reward_variance_filtering must be top_p or top_k, got 'none'"),
        (["--reward_variance_filtering", "top_k", "--reward_variance_top_k", "0"], "reward_variance_top_k must be"),
        ([], "filter_strategy is not set; choose the filter explicitly"),
    ],
)
def test_bad_or_conflicting_fields_are_one_line_errors(tmp_path, flags, message):
    args = _cli(tmp_path, *flags)
    with pytest.raises(ValueError) as caught:
        _ = args.filter_config
    assert message in str(caught.value) and "\n" not in str(caught.value)


SMALL, LARGE = [0.0, 0.1, 0.0, 0.1], [0.0, 10.0, 0.0, 10.0]  # raw variances (ddof 1) 1/300 and 100/3


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_ranks_the_raw_rewards_not_the_normalised_ones(tmp_path, trl_build, aggregation):
    # both groups' z-scores are +-0.866 alike (and under normalize_then_sum so is TRL's summed reward): ranking them
    # would tie, and the scores would be ~1 for both. The raw variances are 1/300 and 100/3.
    rewards = {"g0": SMALL, "g1": LARGE}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # normalize_then_sum warns about batch statistics; not this test's subject
        trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ["g0", "g1"], rewards=rewards, filter={},
                            reward_variance_filtering="top_k", multi_objective_aggregation=aggregation)  # fmt: skip
    trainer.train()
    selection = trainer.last_selection
    assert sorted(selection.scores.tolist()) == pytest.approx([1 / 300, 100 / 3], rel=1e-6)
    kept_group = int(selection.keep.nonzero())
    raw = trainer._raw_rewards.view(-1, 4)[kept_group].tolist()
    assert raw == pytest.approx(LARGE, rel=1e-6)  # the group with the larger raw spread, whatever order it came in
    logged = trainer.state.log_history[0]
    assert logged["reward_variance_filtering/num_kept_groups"] == logged["filter/kept_count"] == 1.0
    assert logged["reward_variance_filtering/total_variance"] == pytest.approx(1 / 300 + 100 / 3, rel=1e-6)
    assert logged["reward_variance_filtering/selected_variance_ratio"] == pytest.approx(
        (100 / 3) / (1 / 300 + 100 / 3), rel=1e-6
    )
    assert logged["reward_variance_filtering/num_groups"] == 2.0
    assert logged["reward_variance_filtering/num_zero_variance_groups"] == 0.0


def test_upstream_top_p_step_logs_both_names(tmp_path, trl_build):
    # conftest rewards: g0 [0, 1, 0, 1] var 1/3, g1 flat, g2 [1, .5, 0, .2] var 0.1825, g3 flat (ddof 1)
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter={}, reward_variance_filtering="top_p")
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["filter/kept_count"] == logged["reward_variance_filtering/num_kept_groups"] == 2.0
    assert logged["filter/groups_zero_spread"] == logged["reward_variance_filtering/num_zero_variance_groups"] == 2.0
    assert logged["reward_variance_filtering/kept_group_ratio"] == logged["filter/kept_ratio"] == 0.5
    assert logged["reward_variance_filtering/selected_variance_ratio"] == pytest.approx(1.0)
    assert torch.equal(trainer.last_selection.keep.sum(), torch.tensor(2))
