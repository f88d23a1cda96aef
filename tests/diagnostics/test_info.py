"""mirl.diagnostics.info: hand-computed matrices, parity with a double loop, properties, convergence."""

import ast
import doctest
import math
import pathlib
import subprocess
import sys

import pytest
import torch

import mirl.diagnostics.info as info
from mirl.diagnostics import REGIMES, RegimeThresholds, ZScoreEMA, mi_proxies, regime

TOL = 1e-12
KEYS = {
    "mi_estimate",
    "mi_upper_bound",
    "conditional_entropy",
    "reasoning_entropy",
    "matched_mean",
    "marginal_mean",
    "marginal_std",
    "mi_zscore",
    "mi_zscore_ema",
    "retrieval_acc",
    "retrieval_chance",
    "retrieval_above_chance",
} | {f"retrieval_{name}@{k}" for name in ("acc", "chance", "above_chance") for k in (2, 4, 8)}


def slow_mi_proxies(rows, true_col, col_group=None, ks=(1, 2, 4, 8), std_eps=1e-3):
    """Obvious double-loop version in pure Python floats, for parity."""
    num_rows, num_cols = len(rows), len(rows[0])
    group = list(range(num_cols)) if col_group is None else list(col_group)
    matched, marginal, chance = [], [], []
    first_hit = []
    for i in range(num_rows):
        row = rows[i]
        top = max(row)
        lse = top + math.log(sum(math.exp(v - top) for v in row))
        matched.append(row[true_col[i]])
        marginal.append(lse - math.log(num_cols))
        same = [j for j in range(num_cols) if group[j] == group[true_col[i]]]
        chance.append(len(same) / num_cols)
        ranked = sorted(range(num_cols), key=lambda j, row=row: -row[j])  # Python's sort is stable
        first_hit.append(min(ranked.index(j) for j in same))
    mean = lambda xs: sum(xs) / len(xs)
    std = math.sqrt(mean([(m - mean(marginal)) ** 2 for m in marginal]))
    gap = mean([a - b for a, b in zip(matched, marginal, strict=True)])
    out = {
        "mi_estimate": mean(matched) - mean(marginal),
        "mi_upper_bound": math.log(num_cols),
        "conditional_entropy": -mean(matched),
        "reasoning_entropy": -mean(marginal),
        "matched_mean": mean(matched),
        "marginal_mean": mean(marginal),
        "marginal_std": std,
        "mi_zscore": gap / (std + std_eps) if std >= std_eps else math.nan,  # undefined below the floor
        "mi_zscore_ema": gap / (std + std_eps) if std >= std_eps else math.nan,
    }
    for k in sorted({1, *ks}):
        k_eff = min(k, num_cols)
        suffix = "" if k == 1 else f"@{k}"
        acc = mean([1.0 if r < k_eff else 0.0 for r in first_hit])
        out[f"retrieval_acc{suffix}"] = acc
        out[f"retrieval_chance{suffix}"] = min(1.0, k_eff * mean(chance))
        out[f"retrieval_above_chance{suffix}"] = acc - min(1.0, k_eff * mean(chance))
    return out


def assert_close(got, want, tol=TOL):
    assert set(got) == set(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=tol, abs=tol, nan_ok=True), key


def test_docstrings():
    assert doctest.testmod(info).failed == 0


def test_two_by_two_by_hand():
    # p(z_i|x_i) = 3/4, p(z_i|x_j) = 1/4 on both rows:
    # matched = log 3/4, marginal = log((3/4 + 1/4) / 2) = log 1/2
    logp = torch.tensor([[0.75, 0.25], [0.25, 0.75]], dtype=torch.float64).log()
    out = mi_proxies(logp, torch.tensor([0, 1]))
    assert set(out) == KEYS and all(type(v) is float for v in out.values())
    assert out["mi_estimate"] == pytest.approx(math.log(1.5), abs=TOL)  # log 3/4 - log 1/2
    assert out["mi_upper_bound"] == pytest.approx(math.log(2), abs=TOL)
    assert out["conditional_entropy"] == pytest.approx(-math.log(0.75), abs=TOL)
    assert out["reasoning_entropy"] == pytest.approx(math.log(2), abs=TOL)
    assert out["marginal_std"] == pytest.approx(0.0, abs=TOL)  # both marginals are log 1/2
    # std 0 < std_eps: the quotient would be log 1.5 / 1e-3 = 405, a number made by the floor -> undefined
    assert math.isnan(out["mi_zscore"]) and math.isnan(out["mi_zscore_ema"])
    # N = 2: k_eff = 2 for k = 2, 4, 8, so every @k accuracy and chance is 1
    assert (out["retrieval_acc"], out["retrieval_chance"], out["retrieval_above_chance"]) == (1.0, 0.5, 0.5)
    assert out["retrieval_acc@8"] == out["retrieval_chance@8"] == 1.0


# Row 0: true col 0 is the strict max                    -> ranks [0, 1, 2]: hit at rank 0
# Row 1: true col 1; col 2 wins, cols 0 and 1 tie at -1  -> ranks [2, 0, 1] (tie: lower index first): rank 2
# Row 2: true col 2; cols 1 and 2 tie at 0               -> ranks [1, 2, 0]: rank 1
TIED = [[0.0, -1.0, -2.0], [-1.0, -1.0, 0.0], [-3.0, 0.0, 0.0]]


def test_three_by_three_by_hand():
    out = mi_proxies(torch.tensor(TIED, dtype=torch.float64), torch.tensor([0, 1, 2]))
    log3 = math.log(3)
    lse = [
        math.log(1 + math.exp(-1) + math.exp(-2)),
        math.log(2 * math.exp(-1) + 1),
        math.log(math.exp(-3) + 2),
    ]
    marginal = [v - log3 for v in lse]
    matched = [0.0, -1.0, 0.0]
    mi = sum(matched) / 3 - sum(marginal) / 3
    assert out["mi_estimate"] == pytest.approx(mi, abs=TOL)
    assert out["conditional_entropy"] == pytest.approx(1 / 3, abs=TOL)  # -(0 - 1 + 0) / 3
    assert out["reasoning_entropy"] == pytest.approx(-sum(marginal) / 3, abs=TOL)
    mean_marginal = sum(marginal) / 3
    std = math.sqrt(sum((m - mean_marginal) ** 2 for m in marginal) / 3)  # ddof 0
    assert out["marginal_std"] == pytest.approx(std, abs=TOL)
    assert out["mi_zscore"] == pytest.approx(mi / (std + 1e-3), abs=TOL)
    # ranks of the hits 0, 2, 1: top-1 = 1/3, top-2 = 2/3, top-4 (k_eff 3) = 1; chance = 1/3, 2/3, 1
    assert out["retrieval_acc"] == pytest.approx(1 / 3, abs=TOL)
    assert out["retrieval_acc@2"] == pytest.approx(2 / 3, abs=TOL)
    assert out["retrieval_acc@4"] == out["retrieval_acc@8"] == 1.0
    assert out["retrieval_chance@2"] == pytest.approx(2 / 3, abs=TOL)
    assert out["retrieval_chance@4"] == 1.0
    assert out["retrieval_above_chance"] == pytest.approx(0.0, abs=TOL)


def test_duplicate_prompts_by_hand():
    # Columns 0 and 1 hold the same prompt (group 0), column 2 another (group 1).
    # Row 0 (group 0): ranks [0, 1, 2] -> hit at 0.  Row 1 (group 0): ranks [2, 0, 1] -> col 0 at rank 1.
    # Row 2 (group 1): ranks [1, 2, 0] -> col 2 at rank 1.  top-1 = 1/3, top-2 = 1.
    # chance per row: 2/3, 2/3, 1/3 -> mean 5/9; chance@2 = min(1, 2 * 5/9) = 1
    out = mi_proxies(torch.tensor(TIED), torch.tensor([0, 1, 2]), col_group=torch.tensor([7, 7, 3]))
    assert out["retrieval_acc"] == pytest.approx(1 / 3, abs=TOL)
    assert out["retrieval_acc@2"] == 1.0
    assert out["retrieval_chance"] == pytest.approx(5 / 9, abs=TOL)
    assert out["retrieval_chance@2"] == 1.0
    assert out["retrieval_above_chance"] == pytest.approx(1 / 3 - 5 / 9, abs=TOL)
    # the information terms do not look at col_group
    plain = mi_proxies(torch.tensor(TIED), torch.tensor([0, 1, 2]))
    assert out["mi_estimate"] == plain["mi_estimate"]


def test_argmax_ties_go_to_lowest_column():
    # every column scores the same: the ranking is [0, 1, 2, 3] for every row
    logp = torch.zeros(4, 4, dtype=torch.float64)
    for true in range(4):
        out = mi_proxies(logp, torch.tensor([true] * 4), ks=(1, 2, 3))
        assert out["retrieval_acc"] == (1.0 if true == 0 else 0.0)
        assert out["retrieval_acc@2"] == (1.0 if true <= 1 else 0.0)
        assert out["retrieval_acc@3"] == (1.0 if true <= 2 else 0.0)
    assert torch.argmax(torch.tensor([0.0, 1.0, 1.0])).item() == 1  # same rule as torch.argmax


@pytest.mark.parametrize("seed", range(6))
def test_parity_with_double_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    num_rows, num_cols = 1 + seed * 7, 1 + seed * 3
    logp = torch.randn(num_rows, num_cols, generator=gen, dtype=torch.float64) * 3
    if seed % 2:
        logp = logp.round()  # many ties, to exercise the ranking rule
    true_col = torch.randint(num_cols, (num_rows,), generator=gen)
    col_group = torch.randint(max(1, num_cols // 2), (num_cols,), generator=gen) if seed >= 3 else None
    got = mi_proxies(logp, true_col, col_group=col_group, ks=(1, 2, 3, 4, 8))
    want = slow_mi_proxies(
        logp.tolist(),
        true_col.tolist(),
        None if col_group is None else col_group.tolist(),
        ks=(1, 2, 3, 4, 8),
    )
    assert_close(got, want)


def test_identical_columns_give_zero_mi_and_chance_retrieval():
    # row i is constant c_i: logsumexp = c_i + log N, so marginal_i = c_i = matched_i
    num_cols, per_col = 5, 3
    row_values = torch.linspace(-4.0, -1.0, num_cols * per_col, dtype=torch.float64)
    logp = row_values[:, None].expand(-1, num_cols).contiguous()  # (15, 5)
    true_col = torch.arange(num_cols).repeat(per_col)  # every column is the truth for 3 rows
    out = mi_proxies(logp, true_col, ks=(1, 2, 4, 8))
    assert out["mi_estimate"] == pytest.approx(0.0, abs=TOL)
    assert out["conditional_entropy"] == pytest.approx(out["reasoning_entropy"], abs=TOL)
    # ties rank columns 0..4 in order; the truth is uniform over columns, so acc@k = k_eff / N = chance@k
    for suffix in ("", "@2", "@4", "@8"):
        assert out[f"retrieval_acc{suffix}"] == pytest.approx(out[f"retrieval_chance{suffix}"], abs=TOL)
        assert out[f"retrieval_above_chance{suffix}"] == pytest.approx(0.0, abs=TOL)


def test_strongly_diagonal_matrix():
    num_cols = 6
    logp = -100.0 * (1 - torch.eye(num_cols, dtype=torch.float64))  # 0 on the diagonal, -100 elsewhere
    out = mi_proxies(logp, torch.arange(num_cols))
    # marginal_i = log(1 + 5 e^-100) - log 6 = -log 6 + O(e^-100)
    assert out["mi_estimate"] == pytest.approx(math.log(num_cols), abs=TOL)
    assert out["retrieval_acc"] == out["retrieval_acc@2"] == 1.0
    assert out["retrieval_above_chance"] == pytest.approx(1 - 1 / num_cols, abs=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_mi_bounds(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    num_rows, num_cols = 20, 2 + seed * 3
    logp = torch.randn(num_rows, num_cols, generator=gen, dtype=torch.float64) * 5
    true_col = torch.randint(num_cols, (num_rows,), generator=gen)
    # any matrix: logsumexp >= matched, so MI <= log N
    assert mi_proxies(logp, true_col)["mi_estimate"] <= math.log(num_cols) + TOL
    # matched entry is each row's max: logsumexp <= max + log N, so MI >= 0
    argmax = logp.argmax(dim=1)
    assert mi_proxies(logp, argmax)["mi_estimate"] >= -TOL
    # a matrix with some rows scoring better elsewhere can go negative: the lower bound is not unconditional
    worst = logp.argmin(dim=1)
    assert mi_proxies(logp, worst)["mi_estimate"] < 0


def test_k_larger_than_columns():
    # N = 3, k = 8 -> k_eff = 3: every row hits and chance@8 = min(1, 3 * 1/3) = 1
    out = mi_proxies(torch.tensor(TIED), torch.tensor([2, 0, 1]), ks=(8,))
    assert out["retrieval_acc@8"] == 1.0 and out["retrieval_chance@8"] == 1.0
    assert not {"retrieval_acc@2", "retrieval_acc@4"} & set(out)
    assert "retrieval_acc" in out  # top-1 keys are always present


def test_float32_input_computed_in_float64():
    gen = torch.Generator().manual_seed(3)
    logp32 = torch.randn(9, 4, generator=gen)
    true_col = torch.randint(4, (9,), generator=gen, dtype=torch.int32)
    got = mi_proxies(logp32, true_col)
    assert got == mi_proxies(logp32.double(), true_col.long())  # upcast first, then identical arithmetic


def test_ema_sequence_by_hand():
    ema = ZScoreEMA()
    assert ema.s_ema is None
    assert ema.update(2.0) == 2.0  # first use: s_ema = marginal_std
    assert ema.update(1.0) == pytest.approx(1.9, abs=TOL)  # 0.9 * 2 + 0.1 * 1
    assert ema.update(0.0) == pytest.approx(1.71, abs=TOL)  # 0.9 * 1.9
    slow = ZScoreEMA(decay=0.5, s_ema=4.0)
    assert slow.update(2.0) == 3.0  # 0.5 * 4 + 0.5 * 2


def test_ema_inside_mi_proxies():
    ema = ZScoreEMA()
    first = mi_proxies(torch.tensor(TIED), torch.tensor([0, 1, 2]), ema=ema)
    assert ema.s_ema == first["marginal_std"]
    assert first["mi_zscore_ema"] == pytest.approx(first["mi_zscore"], abs=TOL)
    logp = torch.tensor([[0.75, 0.25], [0.5, 0.5]]).log()
    second = mi_proxies(logp, torch.tensor([0, 1]), ema=ema)
    s_ema = 0.9 * first["marginal_std"] + 0.1 * second["marginal_std"]
    assert ema.s_ema == pytest.approx(s_ema, abs=TOL)
    assert second["mi_zscore_ema"] == pytest.approx(second["mi_estimate"] / (s_ema + 1e-3), rel=TOL)
    assert second["mi_zscore_ema"] != pytest.approx(second["mi_zscore"], rel=1e-3)


def test_zscore_is_undefined_below_the_floor_and_defined_above_it():
    # marginals (per row) -0.5 and -0.5 + 2d: population std = d
    def rows(d):
        # row i: [a_i, a_i] -> marginal_i = a_i (logsumexp of two equal entries minus log 2)
        return torch.tensor([[-0.5, -0.5], [-0.5 + 2 * d, -0.5 + 2 * d]], dtype=torch.float64)

    below = mi_proxies(rows(0.0004), torch.tensor([0, 1]))  # std 4e-4 < 1e-3
    assert below["marginal_std"] == pytest.approx(4e-4, rel=1e-9)
    assert math.isnan(below["mi_zscore"]) and math.isnan(below["mi_zscore_ema"])
    above = mi_proxies(rows(0.002), torch.tensor([0, 1]))  # std 2e-3: defined; gap 0 -> 0 / 3e-3
    assert above["mi_zscore"] == 0.0 and above["mi_zscore_ema"] == 0.0


def test_ema_state_dict_round_trip():
    ema = ZScoreEMA(decay=0.8)
    assert ZScoreEMA().state_dict() == {"decay": 0.9, "s_ema": None}
    ema.update(3.0)
    restored = ZScoreEMA()
    restored.load_state_dict(ema.state_dict())
    assert restored == ema and restored.state_dict() == {"decay": 0.8, "s_ema": 3.0}
    assert restored.update(1.0) == ema.update(1.0)  # 0.8 * 3 + 0.2 * 1 = 2.6 on both
    with pytest.raises(ValueError, match="keys"):
        restored.load_state_dict({"s_ema": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        restored.load_state_dict({"decay": 0.9, "s_ema": -1.0})
    assert restored.state_dict() == ema.state_dict()  # a rejected state leaves the EMA untouched
    with pytest.raises(ValueError, match="decay"):
        ZScoreEMA(decay=1.0)


def test_convergence_to_exact_mi():
    # Toy model: N = 4 prompts drawn uniformly, 6 discrete "reasonings", a fixed random table p(z|x).
    # With L[i, j] = log p(z_i | x_j), marginal_i = log mean_j p(z_i | x_j) = log p(z_i) exactly, so MI-Est is
    # the mean of M i.i.d. terms d = log p(z|x) - log p(z) with E[d] = I(X;Z) and Var[d] = E[d^2] - I^2.
    # The test allows 5 standard errors; under the normal approximation a fresh seed fails with probability
    # about 6e-7 per M (the seed is fixed, so the run is deterministic).
    gen = torch.Generator().manual_seed(1234)
    table = torch.softmax(2.0 * torch.randn(4, 6, generator=gen, dtype=torch.float64), dim=1)  # (N, V) p(z|x)
    p_z = table.mean(dim=0)  # (V,)
    d = table.log() - p_z.log()  # (N, V)
    exact_mi = (table * d).sum().item() / 4
    variance = (table * d**2).sum().item() / 4 - exact_mi**2
    for num_rows in (1_000, 10_000, 100_000):
        x = torch.randint(4, (num_rows,), generator=gen)  # (M,)
        z = torch.multinomial(table[x], 1, generator=gen).squeeze(1)  # (M,)
        logp = table.log()[:, z].T  # (M, N) L[i, j] = log p(z_i | x_j)
        tolerance = 5 * math.sqrt(variance / num_rows)
        assert abs(mi_proxies(logp, x)["mi_estimate"] - exact_mi) <= tolerance
    assert tolerance < 0.05 * exact_mi  # the last check is tight enough to catch a wrong estimator


@pytest.mark.parametrize(
    ("logp", "true_col", "kwargs", "match"),
    [
        (torch.zeros(3), torch.tensor([0]), {}, "2-D float"),
        (torch.zeros(2, 2, dtype=torch.int64), torch.tensor([0, 1]), {}, "2-D float"),
        (torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64), {}, "M >= 1"),
        (torch.zeros(2, 0), torch.tensor([0, 0]), {}, "N >= 1"),
        (torch.tensor([[0.0, float("nan")]]), torch.tensor([0]), {}, "finite"),
        (torch.tensor([[0.0, -float("inf")]]), torch.tensor([0]), {}, "finite"),
        (torch.zeros(2, 2), torch.tensor([0, 2]), {}, r"\[0, 2\)"),
        (torch.zeros(2, 2), torch.tensor([0, -1]), {}, r"\[0, 2\)"),
        (torch.zeros(2, 2), torch.tensor([0.0, 1.0]), {}, "integer"),
        (torch.zeros(2, 2), torch.tensor([0]), {}, r"shape \(2,\)"),
        (torch.zeros(2, 2), torch.tensor([0, 1]), {"col_group": torch.tensor([0, 0, 1])}, "col_group"),
        (torch.zeros(2, 2), torch.tensor([0, 1]), {"ks": (1, 0)}, "ks"),
        (torch.zeros(2, 2), torch.tensor([0, 1]), {"std_eps": 0.0}, "std_eps"),
    ],
)
def test_validation(logp, true_col, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mi_proxies(logp, true_col, **kwargs)


def test_regime_quadrants():
    assert REGIMES == ("diverse_grounded", "template_collapse", "compressed_grounded", "low_entropy_collapse")
    kw = {"entropy_threshold": 0.5, "mi_threshold": 0.2}
    assert regime(1.0, 1.0, **kw) == "diverse_grounded"
    assert regime(1.0, 0.0, **kw) == "template_collapse"
    assert regime(0.1, 1.0, **kw) == "compressed_grounded"
    assert regime(0.1, 0.0, **kw) == "low_entropy_collapse"
    assert regime(0.5, 0.2, **kw) == "diverse_grounded"  # at the threshold counts as high
    with pytest.raises(ValueError, match="mi"):
        regime(1.0, float("nan"), **kw)


def test_regime_thresholds_scale_with_log_n():
    thresholds = RegimeThresholds()
    assert (thresholds.entropy, thresholds.mi_fraction) == (0.5, 0.1)
    # MI 0.3: high against 0.1 * log 8 = 0.208, low against 0.1 * log 64 = 0.416
    first_turn = {"conditional_entropy": 1.0, "mi_estimate": 0.3, "mi_upper_bound": math.log(8)}
    trajectory = {"conditional_entropy": 1.0, "mi_estimate": 0.3, "mi_upper_bound": math.log(64)}
    assert thresholds.classify(first_turn) == "diverse_grounded"
    assert thresholds.classify(trajectory) == "template_collapse"
    with pytest.raises(ValueError, match="mi_fraction"):
        RegimeThresholds(mi_fraction=1.5)


def test_imports_only_torch_and_stdlib():
    allowed = {"__future__", "math", "collections.abc", "dataclasses", "torch"}
    source = pathlib.Path(info.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported <= allowed, imported - allowed


def test_package_import_loads_no_transformers():
    code = (
        "import sys; from mirl.diagnostics import mi_proxies; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'transformers', 'mirl'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(result.stdout.strip()))
    allowed = {"mirl", "mirl.version", "mirl.diagnostics", "mirl.diagnostics.info", "mirl.algorithms.masked"}
    assert loaded <= allowed, loaded
