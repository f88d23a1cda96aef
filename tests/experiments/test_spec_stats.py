"""Sweep specs (expansion, names, errors) and the statistics behind the analyses, on hand-made values."""

import math
from pathlib import Path

import pytest

from mirl.experiments import KINDS, stats
from mirl.experiments.spec import RESUMABLE, SpecError, load_spec


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_spec_expands_to_cases_x_grid_x_seeds_with_safe_unique_names(tmp_path):
    write(tmp_path, "trainer: {iterations: 2}\n", "base.yaml")
    spec = load_spec(
        write(
            tmp_path,
            "name: s\nbase: base.yaml\noverrides: [trainer.iterations=3]\n"
            "grid: {filter.value: [0.5, 0.9], envs: [[{name: frozenlake, options: {success_rate: 0.9}}]]}\n"
            "cases: [{name: 8x16, overrides: {rollout.group_size: 16}},\n"
            "        {name: 4x4, overrides: [rollout.group_size=4]}]\n"
            "seeds: [1, 2]\n",
        )
    )
    runs = spec.runs()
    assert len(runs) == 2 * 2 * 1 * 2  # cases x filter.value x envs x seeds
    assert runs[0].name == "8x16_value-0.5_envs-name-frozenlake-options-success_rate-0.9_s1"
    assert runs[0].cell == {
        "case": "8x16",
        "filter.value": "0.5",
        "envs": "[{name: frozenlake, options: {success_rate: 0.9}}]",
    }
    # order: resumability first, then the spec's overrides, the case, the grid, the seed (later ones win)
    assert runs[0].overrides == (
        *RESUMABLE,
        "trainer.iterations=3",
        "rollout.group_size=16",
        "filter.value=0.5",
        "envs=[{name: frozenlake, options: {success_rate: 0.9}}]",
        "trainer.seed=1",
    )
    assert len({r.name for r in runs}) == len(runs)
    assert spec.sweep_dir == spec.output_dir / "s"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: ../x\n", "single path component"),
        ("grid: {a: []}\n", "non-empty list"),
        ("grid: {trainer.seed: [1, 2]}\n", "put seeds under 'seeds'"),
        ("seeds: [1, 1]\n", "distinct"),
        ("seeds: [-1]\n", "integers >= 0"),
        ("overrides:\n  - envs=[{name: bandit}]\n", "list of key=value strings"),
        ("base: missing.yaml\n", "not found"),
        ("grids: {}\n", "unknown field 'grids'"),
        ("cases: [{name: a}, {name: a}]\n", "case names must be distinct"),
        ("[1, 2]\n", "must be a mapping"),
        ("name: [\n", "not valid YAML"),
    ],
)
def test_malformed_specs_name_the_problem(tmp_path, text, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, text))


def test_colliding_run_names_are_refused(tmp_path):
    spec = load_spec(write(tmp_path, "grid: {model.name: [a/b, a-b]}\n"))
    with pytest.raises(SpecError, match="would both be named"):
        spec.runs()


def test_mean_and_standard_error():
    mean, sem, n = stats.mean_sem([0.2, 0.4, 0.9])
    # mean 0.5; deviations -0.3, -0.1, 0.4: ss = 0.09 + 0.01 + 0.16 = 0.26, std = sqrt(0.26 / 2), sem = std / sqrt 3
    assert (mean, n) == (pytest.approx(0.5, rel=1e-12), 3)
    assert sem == pytest.approx(math.sqrt(0.13) / math.sqrt(3), rel=1e-12)
    assert math.isnan(stats.mean_sem([1.0])[1]) and stats.mean_sem([])[2] == 0


def test_spearman_on_monotone_and_tied_relations():
    x = [0.1, 0.5, 0.7, 2.0, 9.0]
    assert stats.spearman(x, [math.exp(v) for v in x]) == pytest.approx(1.0, rel=1e-12)
    assert stats.spearman(x, [-(v**3) for v in x]) == pytest.approx(-1.0, rel=1e-12)
    # ranks x = 1, 2, 3, 4; y = 1, 2.5, 2.5, 4 -> centred (-1.5, -.5, .5, 1.5), (-1.5, 0, 0, 1.5):
    # rho = (2.25 + 2.25) / sqrt(5 * 4.5)
    assert stats.spearman([1, 2, 3, 4], [1, 5, 5, 9]) == pytest.approx(4.5 / math.sqrt(22.5), rel=1e-12)
    assert math.isnan(stats.spearman([1, 2, 3], [4, 4, 4]))
    low, high = stats.bootstrap_ci(x, [math.exp(v) for v in x], resamples=200)
    assert low == high == pytest.approx(1.0, rel=1e-12)  # every resample of a monotone relation is monotone


def test_doctests():
    import doctest

    from mirl.experiments import spec

    assert doctest.testmod(stats).failed == 0 and doctest.testmod(spec).failed == 0


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "configs" / "sweeps").glob("*/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_sweep_spec_plans_runs_whose_configs_load(path):
    from mirl.experiments.sweep import check_runs

    spec = load_spec(path)
    runs = spec.runs()
    iterations = check_runs(spec, runs)  # raises SpecError naming the run and key on any bad override
    assert runs and set(iterations) == {r.name for r in runs} and min(iterations.values()) >= 1


def test_the_shipped_specs_cover_every_analysis_at_both_scales():
    kinds = set(KINDS)
    for scale in ("paper", "cpu"):
        texts = " ".join(p.read_text() for p in SHIPPED if p.parent.name == scale)
        assert {k for k in kinds if f"--kind {k}" in texts} == kinds, scale
