"""The metric catalogue: every key mirl logs, with its formula and unit.

A key is ``area/name``; parts in braces are placeholders (``{env}`` an env name, ``{scope}`` a diagnostics scope,
``{family}`` a score family, ``{k}`` a retrieval cut-off, ``{bucket}`` a reward-spread bucket, ``{component}`` a
loss component). :func:`unknown_keys` is what the trainer's tests use to prove nothing is logged outside the
catalogue. ``iteration`` and ``time`` are bookkeeping fields present on every line of ``metrics.jsonl``.

It sits below the trainer, the diagnostics, the report and the integrations, which all read it (tests/test_purity.py
checks that it imports nothing of mirl's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Metric:
    key: str
    formula: str
    unit: str = ""


_PLACEHOLDER = {
    "env": r"[A-Za-z0-9_\-]+",
    "scope": r"first_turn|trajectory|turn\d+",
    "family": r"(?:za_|xa_)?(?:est|seq)",
    "k": r"\d+",
    "bucket": r"all|b\d+",
    "component": r"task|entropy|kl",
}

_MI_STATS = (
    ("mi_estimate", "mean_i matched_i - mean_i marginal_i (MI-Est)", "nats"),
    ("mi_upper_bound", "log N", "nats"),
    ("conditional_entropy", "H(Z|X) = -mean_i matched_i", "nats"),
    ("reasoning_entropy", "H(Z) = -mean_i marginal_i", "nats"),
    ("matched_mean", "mean_i L[i, col(i)]", "nats"),
    ("marginal_mean", "mean_i (logsumexp_j L[i, j] - log N)", "nats"),
    ("marginal_std", "population std of marginal_i", "nats"),
    ("mi_zscore", "mean_i (matched_i - marginal_i) / (marginal_std + eps); absent when marginal_std < eps", ""),
    ("mi_zscore_ema", "as mi_zscore with an EMA (decay 0.9) of marginal_std; absent when that EMA < eps", ""),
    ("retrieval_acc", "fraction of rows whose argmax column is the true prompt", "fraction"),
    ("retrieval_acc@{k}", "true prompt among the top min(k, N) columns", "fraction"),
    ("retrieval_chance", "mean_i |columns equivalent to row i's prompt| / N", "fraction"),
    ("retrieval_chance@{k}", "min(1, k_eff * chance)", "fraction"),
    ("retrieval_above_chance", "retrieval_acc - retrieval_chance", "fraction"),
    ("retrieval_above_chance@{k}", "retrieval_acc@k - retrieval_chance@k", "fraction"),
)
# the permutation null (mirl.diagnostics.null): the null's mean and spread of raw MI-Est and of retrieval above chance,
# then raw - null mean with its 95 % interval. For MI-Est that difference is a contrast (matched scores minus a row's
# average score under the batch's prompts), not an MI estimate: it has no log N bound.
_NULL_STATS = (
    *(
        (f"{stat}_{key}", formula.format(stat=stat), "")
        for stat in ("mi_estimate", "retrieval_above_chance")
        for key, formula in (
            ("null_mean", "mean of {stat} over D shuffles of the row -> prompt attribution"),
            ("null_std", "std (ddof 1) of {stat} over the D shuffles"),
        )
    ),
    ("mi_contrast", "mi_estimate - mi_estimate_null_mean = mean_i matched_i - mean over shuffles of the mean "
     "shuffled matched score: 0 without input dependence, no log N bound (not an MI estimate)", "nats"),
    ("mi_contrast_ci_low", "mi_estimate - the 97.5 % quantile of its null: lower end of mi_contrast's 95 % interval",
     "nats"),
    ("mi_contrast_ci_high", "mi_estimate - the 2.5 % quantile of its null: upper end of mi_contrast's 95 % interval",
     "nats"),
    ("retrieval_above_chance_corrected", "retrieval_above_chance - its null mean (0 without information)",
     "fraction"),
    ("retrieval_above_chance_ci_low", "retrieval_above_chance - the 97.5 % quantile of its null: lower end of the "
     "corrected value's 95 % interval", "fraction"),
    ("retrieval_above_chance_ci_high", "retrieval_above_chance - the 2.5 % quantile of its null: upper end of the "
     "corrected value's 95 % interval", "fraction"),
)  # fmt: skip

CATALOGUE: tuple[Metric, ...] = (
    Metric("iteration", "1-based training iteration"),
    Metric("time", "unix time when the line was written", "s"),
    # rollout: the batch before filtering
    Metric("rollout/success", "mean over P*K episodes of the env's success flag", "fraction"),
    Metric("rollout/return_mean", "mean episode return (env rewards + format penalties)"),
    Metric("rollout/return_std", "population std of episode returns"),
    Metric("rollout/success/{env}", "success rate of the episodes of one env", "fraction"),
    Metric("rollout/return/{env}", "mean return of the episodes of one env"),
    Metric("rollout/turns_mean", "mean turns per episode", "turns"),
    Metric("rollout/invalid_frac", "turns whose reply failed to parse / all turns", "fraction"),
    Metric("rollout/action_invalid_frac", "turns with an illegal action or no parse / all turns", "fraction"),
    Metric("rollout/response_tokens_mean", "mean sampled tokens per turn", "tokens"),
    Metric("rollout/reasoning_tokens_mean", "mean |Z| over turns with a parsed reasoning", "tokens"),
    Metric("rollout/valid_thinking_frac", "turns with a non-empty reasoning Z / all turns", "fraction"),
    Metric("rollout/truncated_frac", "turns that hit max_new_tokens / all turns", "fraction"),
    Metric(
        "rollout/context_capped_frac",
        "turns whose reply was cut at the context budget (min(max_context_tokens, model positions) - context) "
        "/ all turns",
        "fraction",
    ),
    Metric("rollout/episodes", "P * K (after dynamic-sampling refills)", "episodes"),
    Metric(
        "rollout/infra_failed_frac",
        "episodes ended by an env infrastructure failure (end_reason remote_*: refused, timeout, ...) / all",
        "fraction",
    ),
    Metric(
        "rollout/env_malformed_frac",
        "episodes ended because the env returned a value the engine refused (end_reason malformed_* or "
        "oversized_*: a reward that is not a finite number within +-1e6, text that does not encode, images that do "
        "not match their placeholders or pass the size limits; mirl.rollout.env_boundary) / all",
        "fraction",
    ),
    Metric("rollout/refill_rounds", "dynamic-sampling rounds used this iteration", "rounds"),
    # sampler/trainer mismatch on the kept batch's trained tokens before the update (mirl.trainer.mismatch):
    # d_t = log pi_old(y_t) - log mu(y_t), the trainer's minus the sampler's log-prob of the same token
    Metric("rollout/logp_diff_mean", "mean_t |d_t| over trained tokens", "nats"),
    Metric("rollout/logp_diff_max", "max_t |d_t| over trained tokens", "nats"),
    Metric(
        "rollout/mismatch_kl",
        "mean over sequences of sum_t (exp(d_t) - 1 - d_t): k3 estimate of KL(sampler || trainer) per sequence",
        "nats",
    ),
    Metric("rollout/ratio_outside_frac", "trained tokens whose ratio exp(d_t) leaves [0.5, 2]", "fraction"),
    Metric("rollout/correction_weight_mean", "mean rollout-correction weight w_t over trained tokens", ""),
    Metric(
        "rollout/correction_frac",
        "trained tokens whose weight the cap changed: truncated (token_tis) or zeroed (sequence_mask)",
        "fraction",
    ),
    Metric(
        "rollout/wording_bonus_frac",
        "turns whose reasoning Z matches rollout.wording_regex (re.search) / all turns; logged when that regex is set",
        "fraction",
    ),
    Metric(
        "rollout/wording_bonus",
        "the wording bonus in force this iteration (rollout.wording_bonus times iteration / rollout.wording_bonus_ramp,"
        " at most 1); logged when the ramp is on",
        "reward",
    ),
    # reasoning: scorer-free measures of the batch's reasonings Z (mirl.rollout.reasoning_measures)
    Metric(
        "reasoning/grounded_frac",
        "turns the env's reasoning_kind labels grounded / turns it labels; absent when no env has reasoning_kind",
        "fraction",
    ),
    Metric("reasoning/template_frac", "turns labelled template / labelled turns (as grounded_frac)", "fraction"),
    Metric(
        "reasoning/cross_input_overlap",
        "mean Jaccard of word-bigram sets over pairs of Z from different prompt groups (<= 256 Z)",
        "fraction",
    ),
    Metric(
        "reasoning/within_input_overlap",
        "mean Jaccard of word-bigram sets over pairs of Z from one prompt group at one turn index (<= 256 Z)",
        "fraction",
    ),
    # filter: SNR-Aware Filtering on the (P, K) returns
    Metric("filter/kept_count", "groups kept by the selection rule", "groups"),
    Metric("filter/kept_ratio", "kept_count / P", "fraction"),
    Metric("filter/spread_mean_before", "mean over all groups of the in-group std of returns (filter.ddof)"),
    Metric("filter/spread_mean_after", "same mean over kept groups (0 when empty)"),
    Metric("filter/score_mean", "mean selection score s_g over groups"),
    Metric("filter/score_std", "population std of s_g over groups"),
    Metric("filter/spread_ratio", "pstd(std_g)/mean(std_g) across groups, std_g the in-group return std", ""),
    Metric("filter/spread_ratio_var", "pstd(var_g)/mean(var_g): the paper's RV-ratio predictor of filter gains", ""),
    Metric("filter/groups_too_easy", "zero-spread groups where every return >= success threshold", "groups"),
    Metric("filter/groups_too_hard", "zero-spread groups where every return < success threshold", "groups"),
    Metric("filter/groups_too_coarse", "zero-spread groups whose episodes took different actions", "groups"),
    Metric("filter/groups_mixed", "groups with non-zero spread", "groups"),
    Metric("filter/groups_zero_spread", "groups whose returns are all equal (up to 1e-9 relative)", "groups"),
    Metric("filter/turn_spread_mean", "mean over groups of the unbiased std of the group's turn advantages", ""),
    Metric("filter/groups_turn_signal", "groups whose turn advantages differ (docs/credit.md)", "groups"),
    Metric(
        "filter/groups_zero_spread_turn_signal",
        "groups with equal episode returns but turn advantages that differ",
        "groups",
    ),
    Metric("filter/empty", "1 if nothing was kept (no update this iteration)", "flag"),
    # the same selection under the upstream proposals' names (veRL PR #7894), logged by the veRL and TRL
    # integrations; v_g = in-group variance of the returns with filter.ddof, 0 for a group without spread
    Metric("reward_variance_filtering/num_groups", "P, the groups of the batch", "groups"),
    Metric("reward_variance_filtering/num_kept_groups", "groups kept (= filter/kept_count)", "groups"),
    Metric("reward_variance_filtering/kept_group_ratio", "num_kept_groups / P (= filter/kept_ratio)", "fraction"),
    Metric("reward_variance_filtering/total_variance", "sum_g v_g over all groups", ""),
    Metric(
        "reward_variance_filtering/selected_variance_ratio",
        "sum of v_g over kept groups / total_variance (0 when total_variance = 0)",
        "fraction",
    ),
    Metric(
        "reward_variance_filtering/num_zero_variance_groups",
        "groups without spread (= filter/groups_zero_spread)",
        "groups",
    ),
    Metric("filter/empty_streak", "consecutive iterations with an empty selection", "iterations"),
    Metric("filter/kept_trajectories", "rows trained on after group and trajectory selection", "rows"),
    # train: the policy / critic update on the kept batch
    Metric("train/policy_loss", "aggregated clipped PPO surrogate, mean over optimiser steps"),
    Metric("train/entropy", "masked mean token entropy of the policy on trained tokens", "nats"),
    Metric("train/kl", "masked mean KL(pi || pi_ref) estimate (0 when kl_coef = 0)", "nats"),
    Metric("train/clip_frac", "trained tokens where the clipped branch is active", "fraction"),
    Metric("train/dual_clip_frac", "trained tokens where the dual clip is active", "fraction"),
    Metric("train/approx_kl", "masked mean k3(pi_old, pi) on trained tokens", "nats"),
    Metric("train/ratio_mean", "masked mean importance ratio pi / pi_old", ""),
    Metric("train/ratio_max", "max importance ratio over trained tokens", ""),
    Metric("train/grad_norm", "mean global L2 gradient norm before clipping over optimiser steps", ""),
    Metric("train/nonfinite_steps", "optimiser steps skipped for a non-finite gradient norm", "steps"),
    Metric("train/optimizer_steps", "optimiser steps taken this iteration", "steps"),
    Metric("train/advantage_mean", "masked mean advantage on trained tokens", ""),
    Metric("train/advantage_std", "masked population std of advantages on trained tokens", ""),
    Metric(
        "train/turns_nonzero_advantage_frac",
        "trained turns whose max |advantage| over their tokens > 1e-6 / trained turns",
        "fraction",
    ),
    Metric("train/value_loss", "clipped value loss of the critic (ppo / dapo)"),
    Metric("train/value_clip_frac", "value predictions where the clipped branch is active", "fraction"),
    Metric("train/value_mean", "masked mean critic value on response tokens"),
    Metric("train/loss_scale", "factor applied to the loss for the shrunken batch (loss_scaling)", ""),
    Metric("train/rows", "training rows this iteration", "rows"),
    Metric("train/response_tokens", "model-sampled tokens trained on this iteration", "tokens"),
    Metric("train/lr", "actor learning rate", ""),
    # diagnostics: MI proxies from cross-scoring, per scope and family
    *(Metric(f"diag/{{scope}}/{{family}}/{name}", formula, unit) for name, formula, unit in _MI_STATS),
    *(Metric(f"diag/{{scope}}/{{family}}/{name}", formula, unit) for name, formula, unit in _NULL_STATS),
    Metric("diag/{scope}/pairs", "M: (X, Z) pairs scored", "pairs"),
    Metric("diag/{scope}/columns", "N: prompt columns", "columns"),
    Metric("diag/{scope}/empty_reasoning", "candidate pairs skipped for an empty Z", "pairs"),
    Metric("diag/{scope}/copied_reasoning", "scored pairs whose Z copies the prompt's format example", "pairs"),
    Metric("diag/{scope}/entropy_temperature", "temperature H(Z|X) is measured at (cross-scoring: 1)", ""),
    Metric("diag/{scope}/sample_temperature", "temperature the scored reasonings were sampled at", ""),
    Metric(
        "diag/{scope}/est/agnostic_share",
        "share of scored reasonings without input dependence of their own: (p - retrieval_acc@k) / (p - "
        "retrieval_chance@k) clipped to [0, 1], p = diagnostics.agnostic_power (0.93), k = agnostic_share_cut "
        "(docs/metrics.md)",
        "fraction",
    ),
    Metric(
        "diag/{scope}/est/agnostic_share_ci_low",
        "the same map of the upper end of retrieval_acc@k's 95 % Wilson interval over the M pairs",
        "fraction",
    ),
    Metric(
        "diag/{scope}/est/agnostic_share_ci_high",
        "the same map of the lower end of retrieval_acc@k's 95 % Wilson interval over the M pairs",
        "fraction",
    ),
    Metric("diag/{scope}/est/agnostic_share_cut", "k: the largest logged cut-off whose retrieval_chance@k <= 1/2", ""),
    Metric(
        "diag/{scope}/grounded_share",
        "scored pairs the env's reasoning_kind labels grounded / scored pairs it labels (scorer-free)",
        "fraction",
    ),
    Metric("diag/{scope}/template_share", "scored pairs labelled template / labelled (as grounded_share)", "fraction"),
    Metric(
        "diag/{scope}/alarm",
        "1 once the agnostic share's lower bound stood above the first diagnosed share at 3 diagnosed "
        "iterations in a row with under half the replies malformed, else 0 (docs/metrics.md, Alarm)",
    ),
    Metric("diag/invalid_frac", "diagnosed batch's turns whose reply failed to parse / all its turns", "fraction"),
    Metric(
        "diag/{scope}/regime",
        "regime name (a string): quadrant of H(Z|X) per token vs input dependence (retrieval above chance and "
        "the agnostic share), or undetermined / no_reasoning / degenerate (docs/metrics.md)",
    ),
    Metric("diag/{scope}/{family}/regime", "regime name for an action-dependence family (a string)"),
    Metric("diag/{scope}/regime_id", "index of diag/{scope}/regime in REGIMES, -1 undetermined (TRL logs numbers)"),
    # gradient decomposition per reward-spread bucket (REFERENCE §5)
    Metric("grad/{bucket}/{component}/norm", "L2 norm of the gradient of one loss component, before clipping"),
    Metric("grad/{bucket}/{component}/norm_per_sample", "norm / trajectories in the bucket"),
    Metric("grad/{bucket}/{component}/norm_per_token", "norm / response tokens in the bucket"),
    Metric("grad/{bucket}/spread_mean", "mean in-group reward std of the bucket's groups"),
    Metric("grad/{bucket}/samples", "trajectories in the bucket", "rows"),
    # validation on fixed instances at the validation temperature
    Metric("val/success", "mean success over validation episodes", "fraction"),
    Metric("val/return", "mean validation return"),
    Metric("val/pass@{k}", "instances with at least one success among k samples", "fraction"),
    Metric("val/action_valid_frac", "validation turns whose actions were all legal", "fraction"),
    Metric("val/infra_failed_frac", "validation episodes ended by an env infrastructure failure / all", "fraction"),
    Metric(
        "val/env_malformed_frac",
        "validation episodes ended because the env returned a value the engine refused (malformed_*, oversized_*)",
        "fraction",
    ),
    Metric("val/success/{env}", "validation success of one env", "fraction"),
    Metric("val/return/{env}", "validation return of one env"),
    Metric("val/pass@{k}/{env}", "pass@k of one env", "fraction"),
    Metric("val/action_valid_frac/{env}", "action validity of one env", "fraction"),
    # timing and throughput
    Metric("time/rollout", "wall time of rollout generation", "s"),
    Metric("time/scoring", "wall time of the MI diagnostics (cross-scoring)", "s"),
    Metric("time/gradients", "wall time of the gradient decomposition", "s"),
    Metric("time/filter", "wall time of group selection", "s"),
    Metric("time/update", "wall time of advantages and optimiser steps (includes time/gradients)", "s"),
    Metric("time/validation", "wall time of validation", "s"),
    Metric(
        "time/checkpoint",
        "the run's wall time on the previous checkpoint: starting its write, then waiting for it before the update"
        " (the write itself overlaps the rollout; a line is written before its checkpoint)",
        "s",
    ),
    Metric("time/iteration", "wall time of the iteration's stages (its checkpoint write excluded)", "s"),
    Metric("perf/rollout_tokens_per_s", "sampled tokens / time/rollout", "tokens/s"),
    Metric("perf/update_tokens_per_s", "trained tokens (context + response) / time/update", "tokens/s"),
    Metric("perf/peak_memory_gb", "peak resident memory (CPU) or peak allocated (GPU) so far", "GB"),
)


def _pattern(key: str) -> str:
    parts = re.split(r"(\{[a-z]+\})", key)
    return "".join(f"(?:{_PLACEHOLDER[p[1:-1]]})" if p.startswith("{") else re.escape(p) for p in parts)


@lru_cache(maxsize=1)
def _compiled() -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{_pattern(metric.key)})" for metric in CATALOGUE) + r"\Z")


def is_known(key: str) -> bool:
    """True if ``key`` matches a catalogue entry (placeholders filled)."""
    return _compiled().match(key) is not None


def unknown_keys(keys) -> list[str]:
    """Keys that match no catalogue entry, sorted."""
    return sorted(key for key in keys if not is_known(key))


def describe(key: str) -> Metric | None:
    """The catalogue entry a key belongs to, or None."""
    for metric in CATALOGUE:
        if re.fullmatch(_pattern(metric.key), key):
            return metric
    return None
