"""SNRFilterGRPOTrainer: one step on a filtered batch equals a GRPOTrainer step on the kept groups only."""

from __future__ import annotations

import warnings

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402

from mirl.integrations.trl import SNRFilterGRPOTrainer, mask_dropped_rows  # noqa: E402
from mirl.integrations.trl.filter import as_filter_config, filter_rows, local_rows  # noqa: E402

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
    selection, rows = filter_rows(rewards, 4, as_filter_config(TOP_P))
    assert selection.keep.tolist() == [True, False, True, False]
    assert rows.tolist() == [True] * 4 + [False] * 4 + [True] * 4 + [False] * 4


def test_filter_config_rejects_unknown_key():
    with pytest.raises(ValueError, match="unknown filter key"):
        as_filter_config({"stratgy": "top_p"})


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
    filtered = trl_build(SNRFilterGRPOTrainer, tmp_path / "f", ALL, loss_type=loss_type, filter_config=TOP_P)
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
    a = trl_build(SNRFilterGRPOTrainer, tmp_path / "a", ALL, filter_config=TOP_P)
    _, after_a = _step(a, trl_params)
    b = trl_build(SNRFilterGRPOTrainer, tmp_path / "b", ALL, filter_config=TOP_P, rewards=other)
    _, after_b = _step(b, trl_params)
    _assert_close(after_a, after_b, atol=0.0)


def test_dropping_every_group_leaves_parameters_unchanged(tmp_path, trl_build, trl_params):
    flat = {key: [1.0] * 4 for key in ALL}
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter_config=TOP_P, rewards=flat)
    before, after = _step(trainer, trl_params)
    assert trainer.last_selection.kept_count == 0
    _assert_close(before, after, atol=0.0)
    logged = trainer.state.log_history[0]
    assert logged["filter/empty"] == 1.0 and logged["filter/kept_count"] == 0.0
    assert logged["filter/empty_streak"] == 1.0 and trainer.empty_streak == 1


def test_filter_none_is_bitwise_grpo(tmp_path, trl_build, trl_params):
    ours = trl_build(SNRFilterGRPOTrainer, tmp_path / "o", ALL, dtype=torch.float32, filter_config={"strategy": "none"})
    _, after_ours = _step(ours, trl_params)
    theirs = trl_build(trl.GRPOTrainer, tmp_path / "t", ALL, dtype=torch.float32)
    _, after_theirs = _step(theirs, trl_params)
    for name in after_ours:
        assert torch.equal(after_ours[name], after_theirs[name]), name


def test_filter_metrics_reach_trl_logger(tmp_path, trl_build, trl_params):
    trainer = trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, filter_config=TOP_P)
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
        trl_build(SNRFilterGRPOTrainer, tmp_path, ALL, loss_type="grpo", filter_config=TOP_P)
    assert any("dilute" in str(w.message) for w in caught)


def test_two_processes_mask_their_slices_and_share_one_normaliser():
    # 4 groups of K=4 on 2 processes, 8 rows each: process 0 holds g0, g1; process 1 holds g2, g3
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 0, 0, 0, 0, 1.0, 0.5, 0.0, 0.2, 1, 1, 1, 1])
    _, rows = filter_rows(rewards, 4, as_filter_config(TOP_P))  # made identically on both processes
    lengths = torch.tensor([3, 1, 2, 4, 2, 2, 2, 2, 1, 1, 3, 2, 4, 4, 4, 4])  # loss tokens per row
    masks = (torch.arange(4)[None, :] < lengths[:, None]).long()  # (16, 4)
    outputs = [{"advantages": torch.ones(8), "completion_mask": masks[p * 8 : (p + 1) * 8]} for p in (0, 1)]
    keeps = [local_rows(rows, p, 8) for p in (0, 1)]
    # each process's own count (a one-process gather), then accelerate's gather: both counts on every process
    local = [mask_dropped_rows(outputs[p], keeps[p], lambda t: t[None])["num_items_in_batch"] for p in (0, 1)]
    assert [int(c) for c in local] == [10, 7]  # kept g0 rows: 3+1+2+4 tokens; kept g2 rows: 1+1+3+2
    out = [mask_dropped_rows(outputs[p], keeps[p], lambda t: torch.stack(local)) for p in (0, 1)]
    assert [o["advantages"].tolist() for o in out] == [[1.0] * 4 + [0.0] * 4] * 2
    assert [int(o["num_items_in_batch"]) for o in out] == [17, 17]
    assert int(sum((o["completion_mask"] * o["tool_mask"]).sum() for o in out)) == 17


def test_filtered_step_with_micro_batches_equals_kept_only_step(tmp_path, trl_build, trl_params):
    # one generation batch split into 2 micro-batches (gradient accumulation): the normaliser spans the generation
    filtered = trl_build(
        SNRFilterGRPOTrainer,
        tmp_path / "f",
        ALL,
        filter_config=TOP_P,
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
