"""SNRFilterGRPOTrainer: one step on a filtered batch equals a GRPOTrainer step on the kept groups only."""

from __future__ import annotations

import json
import warnings

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402

from mirl.config import FilterConfig  # noqa: E402
from mirl.integrations.trl import SNRFilterGRPOTrainer, mask_dropped_rows  # noqa: E402
from mirl.integrations.trl.filter import filter_rows  # noqa: E402

ALL = ["g0", "g1", "g2", "g3"]
TOP_P = {"strategy": "top_p", "value": 0.9, "include_zero": False}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _step(trainer, params):
    before = params(trainer)
    trainer.train()
    return before, params(trainer)


def _assert_close(a: dict, b: dict, atol: float = 1e-12) -> None:
    assert a.keys() == b.keys()
    for name in a:
        diff = float((a[name] - b[name]).abs().max())
        assert diff <= atol, f"{name}: max |diff| {diff:.3g} > {atol:.3g}"


def test_filter_rows_keeps_the_groups_with_spread():
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 0, 0, 0, 0, 1.0, 0.5, 0.0, 0.2, 1, 1, 1, 1])
    selection, rows = filter_rows(rewards, 4, FilterConfig(**TOP_P))
    assert selection.keep.tolist() == [True, False, True, False]
    assert rows.tolist() == [True] * 4 + [False] * 4 + [True] * 4 + [False] * 4


def test_mask_dropped_rows_recomputes_the_normaliser():
    output = {
        "advantages": torch.tensor([1.0, -1.0, 2.0]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]]),
        "num_items_in_batch": torch.tensor(6),
    }
    out = mask_dropped_rows(output, torch.tensor([True, False, True]), gather=lambda t: t[None])
    assert out["advantages"].tolist() == [1.0, 0.0, 2.0]
    assert out["tool_mask"].tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert int(out["num_items_in_batch"]) == 3  # 2 + 1 tokens of the kept rows
    assert int(output["num_items_in_batch"]) == 6  # input untouched


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo"])
def test_filtered_step_equals_kept_only_step(tmp_path, trl_build, trl_params, loss_type):
    filtered = trl_build(SNRFilterGRPOTrainer, tmp_path / "f", ALL, loss_type=loss_type, filter=TOP_P)
    _, after_filtered = _step(filtered, trl_params)  # build, then train, then build the next (each build seeds)
    kept = trl_build(trl.GRPOTrainer, tmp_path / "k", ["g0", "g2"], loss_type=loss_type)
    before, after_kept = _step(kept, trl_params)
    assert filtered.last_selection.kept_count == 2  # g0 and g2, in the order the sampler drew them
    moved = max(float((after_kept[n] - before[n]).abs().max()) for n in before)
    assert moved > 1e-2  # the step does something, so equality below is not vacuous
    # float64 model, but transformers' fused lm-head log-probs run at float32 precision, and the two batches are
    # padded and shuffled differently: ~1e-7 of the step. Keeping the dropped rows in the normaliser (or in the
    # loss) would be off by ~50% of the step.
    _assert_close(after_filtered, after_kept, atol=1e-6 * moved)


def test_dropped_groups_rewards_do_not_matter(tmp_path, trl_build, trl_params):
    other = {"g0": [0.0, 1.0, 0.0, 1.0], "g1": [0.5] * 4, "g2": [1.0, 0.5, 0.0, 0.2], "g3": [0.0] * 4}
    a = trl_build(SNRFilterGRPOTrainer, tmp_path / "a", ALL, filter=TOP_P)
    _, after_a = _step(a, trl_params)
    b = trl_build(SNRFilterGRPOTrainer, tmp_path / "b", ALL, filter=TOP_P, rewards=other)
    _, after_b = _step(b, trl_params)
    _assert_close(after_a, after_b, atol=0.0)


def test_dropping_every_group_leaves_parameters_unchanged(tmp_path, trl_build, trl_params):
    flat = {key: [1.0] * 4 for key in ALL}
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter=TOP_P, rewards=flat)
    before, after = _step(trainer, trl_params)
    assert trainer.last_selection.kept_count == 0
    _assert_close(before, after, atol=0.0)
    logged = trainer.state.log_history[0]
    assert logged["filter/empty"] == 1.0 and logged["filter/kept_count"] == 0.0
    assert logged["filter/empty_streak"] == 1.0 and trainer.empty_streak == 1


def test_filter_none_is_bitwise_grpo(tmp_path, trl_build, trl_params):
    ours = trl_build(SNRFilterGRPOTrainer, tmp_path / "o", ALL, dtype=torch.float32, filter={"strategy": "none"})
    _, after_ours = _step(ours, trl_params)
    theirs = trl_build(trl.GRPOTrainer, tmp_path / "t", ALL, dtype=torch.float32)
    _, after_theirs = _step(theirs, trl_params)
    for name in after_ours:
        assert torch.equal(after_ours[name], after_theirs[name]), name


def test_filter_metrics_reach_trl_logger(tmp_path, trl_build, trl_params):
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter=TOP_P)
    _step(trainer, trl_params)
    logged = trainer.state.log_history[0]
    assert logged["filter/kept_count"] == 2.0 and logged["filter/kept_ratio"] == 0.5
    assert logged["filter/kept_trajectories"] == 8.0
    assert logged["filter/groups_zero_spread"] == 2.0 and logged["filter/empty_streak"] == 0.0
    # g0, g2 have spread; g1 all 0 (fails, same reward): too hard; g3 all 1 (succeeds): too easy
    assert [logged[f"filter/groups_{x}"] for x in ("mixed", "too_hard", "too_easy")] == [2.0, 1.0, 1.0]
    assert "filter/groups_too_coarse" not in logged


def test_sequence_mean_loss_warns(tmp_path, trl_build):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, loss_type="grpo", filter=TOP_P)
    assert any("normalises per micro-batch" in str(w.message) for w in caught)


def test_filtered_step_with_micro_batches_equals_kept_only_step(tmp_path, trl_build, trl_params):
    # one generation batch split into 2 micro-batches (gradient accumulation): the normaliser spans the generation
    filtered = trl_build(
        SNRFilterGRPOTrainer,
        tmp_path / "f",
        ALL,
        filter=TOP_P,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
    )
    _, after_filtered = _step(filtered, trl_params)
    kept = trl_build(
        trl.GRPOTrainer, tmp_path / "k", ["g0", "g2"], per_device_train_batch_size=4, gradient_accumulation_steps=2
    )
    before, after_kept = _step(kept, trl_params)
    moved = max(float((after_kept[n] - before[n]).abs().max()) for n in before)
    assert filtered.last_selection.kept_count == 2 and moved > 1e-2
    _assert_close(after_filtered, after_kept, atol=1e-6 * moved)


def test_filter_is_set_by_trl_cli_and_yaml_and_saved_with_the_run(tmp_path):
    from mirl.integrations.trl import SNRFilterGRPOConfig

    parser = trl.TrlParser((SNRFilterGRPOConfig,))
    cli = ["--output_dir", str(tmp_path), "--filter_strategy", "top_k_abs", "--filter_value", "2", "--use_cpu"]
    (args,) = parser.parse_args_and_config(cli)
    assert (args.filter_config.strategy, args.filter_config.value) == ("top_k_abs", 2.0)
    yaml = tmp_path / "grpo.yaml"
    yaml.write_text(
        f"output_dir: {tmp_path}\nuse_cpu: true\nfilter_strategy: top_p\nfilter_value: 0.8\nfilter_include_zero: true\n"
    )
    (args,) = parser.parse_args_and_config(["--config", str(yaml)])
    assert (args.filter_config.strategy, args.filter_config.value, args.filter_config.include_zero) == (
        "top_p",
        0.8,
        True,
    )
    saved = json.loads(args.to_json_string())  # what TRL writes with the run and hands its loggers
    assert (saved["filter_strategy"], saved["filter_value"]) == ("top_p", 0.8)


def test_filter_must_be_chosen(tmp_path, trl_build, trl_args):
    with pytest.raises(ValueError, match="filter_strategy is not set"):
        trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter={})  # every filter_* default, no strategy
    with pytest.raises(TypeError, match="SNRFilterGRPOConfig"):
        SNRFilterGRPOTrainer(model=None, reward_funcs=None, args=trl_args(tmp_path))  # a plain GRPOConfig


def test_dropped_rows_leave_the_micro_batches(tmp_path, trl_build):
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter=TOP_P, per_device_train_batch_size=8,
                        gradient_accumulation_steps=2)  # fmt: skip
    trainer.train()
    # 16 rows, 8 kept (g0, g2): two micro-batches of 4 kept rows each, cut to the longest kept completion
    assert [int(b["completion_ids"].shape[0]) for b in trainer._buffered_inputs] == [4, 4]
    assert all(bool((b["advantages"] != 0).any()) for b in trainer._buffered_inputs)
