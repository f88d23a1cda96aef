"""Analysis of the mechanism study (studies/mechanism/README.md holds the registration; this file applies it).

    python studies/mechanism/analyze.py            # studies/results/mechanism -> results.md, results.json
    python studies/mechanism/analyze.py --power    # the registration's false-positive rates and power

Each run directory ``studies/results/mechanism/<arm>_s<seed>/`` holds the run's ``config.yaml``, ``metrics.jsonl``
and ``summary.json``; ``gates/`` holds the gates' results. Every table of the README's results section is printed
from these files. Helpers shared with the organism study (reading metrics, the interval verdict) come from
``studies/lab/analyze.py``; the markdown is written by ``tables.py`` beside this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[0] / "results" / "mechanism"


def _load(path: Path, name: str):
    """The script at ``path`` as module ``name`` (``studies/lab/analyze.py`` has this file's name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lab = _load(HERE.parent / "lab" / "analyze.py", "lab_analyze")
read_metrics, interval_verdict = lab.read_metrics, lab.interval_verdict
report = _load(HERE / "tables.py", "mechanism_tables").report  # the markdown of every table

SEEDS = (1, 2, 3, 4, 5, 6)  # registered paired seeds; seed 0 is the calibration seed
TREATMENT = ("b-low", "b-high", "f-low", "s-low", "r-only")
ARMS = (*TREATMENT, "p-graded", "floor")
PART2 = "p-ramp"  # Part 2's positive control (README, "Part 2"): its wording bonus ramps up over the run
FLOOR_HIGH = "floor-high"  # Part 2: a Floor on half hard instances (the batches of B-high, P-graded and P-ramp)
PART2_ARMS = (*ARMS, PART2, FLOOR_HIGH)
HIGH_MIX = ("b-high", "p-graded", PART2)  # Part 2 judges these runs against FLOOR_HIGH's noise
LATE = (81, 100)  # iterations (1-based, inclusive) that make "late"
EARLY = (1, 20)  # the manipulation check's iterations
# signal -> (metric key, direction of the bad change: -1 falls, +1 rises)
SIGNALS = {
    "retrieval": ("diag/trajectory/est/retrieval_acc", -1),
    "mi": ("diag/trajectory/est/mi_estimate", -1),
    "mi_contrast": ("diag/trajectory/est/mi_contrast", -1),
    "cond_entropy": ("diag/trajectory/est/conditional_entropy", +1),
    "entropy": ("diag/trajectory/est/reasoning_entropy", +1),
    "spread": ("filter/spread_mean_before", -1),
    "template": ("reasoning/template_frac", +1),
}
PRODUCT_ALARM = "diag/trajectory/alarm"  # mirl's own alarm (docs/metrics.md): described beside the table, not judged
TRAIL = 5  # iterations in the alarm rule's trailing mean
K_ALARM = 6.0  # standard errors worse than the running best that raise an alarm (1 % of noise runs: power.py)
FIRST_ALARM = 10  # no alarm before this iteration (the running best needs a few means)
BOOTSTRAP = 2000
MIN_FALLING = 4  # falling runs the early-warning verdicts need
# 0.975 quantiles of Student's t by degrees of freedom (1-12)
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
         10: 2.2281, 11: 2.2010, 12: 2.1788}  # fmt: skip


def accuracy(line: dict, bonus: float, penalty: float, questions: int) -> float:
    """Per-question accuracy of a batch from its logged return: the mean return less the wording bonus the batch
    earned and the format penalties it paid, per question (an answer is worth 1; chance 1/8 on a hard question).

    >>> accuracy({"rollout/return_mean": 1.5, "rollout/wording_bonus_frac": 0.5, "rollout/turns_mean": 2.0,
    ...           "rollout/action_invalid_frac": 0.0}, 0.2, -0.1, 2)
    0.65
    """
    turns = line["rollout/turns_mean"]
    bonus = line.get("rollout/wording_bonus", bonus)  # a ramped bonus logs the value in force (Part 2)
    earned = bonus * line.get("rollout/wording_bonus_frac", 0.0) * turns
    paid = penalty * line.get("rollout/action_invalid_frac", 0.0) * turns
    return round((line["rollout/return_mean"] - earned - paid) / questions, 12)


def series(lines: list[dict], config: dict) -> dict[str, list[float]]:
    """Per-iteration values of every signal, the accuracy, success and the zero-spread share of a run."""
    rollout = config.get("rollout", {})
    options = (config.get("envs") or [{}])[0].get("options", {})
    bonus, penalty = float(rollout.get("wording_bonus", 0.0)), float(rollout.get("format_penalty", -0.1))
    questions = int(options.get("questions", 2))
    out = {name: [float(line.get(key, math.nan)) for line in lines] for name, (key, _) in SIGNALS.items()}
    out["accuracy"] = [accuracy(line, bonus, penalty, questions) for line in lines]
    out["success"] = [float(line["rollout/success"]) for line in lines]
    groups = int(rollout.get("prompts_per_iteration", 8))
    out["zero_spread"] = [line.get("filter/groups_zero_spread", math.nan) / groups for line in lines]
    out["kept"] = [float(line.get("filter/kept_ratio", math.nan)) for line in lines]
    out["product_alarm"] = [float(line.get(PRODUCT_ALARM, math.nan)) for line in lines]
    return out


def load(results: Path = RESULTS) -> dict[tuple[str, int], dict]:
    """``{(arm, seed): {"series": ..., "summary": ..., "config": ...}}`` for every finished run under ``results``."""
    import yaml

    runs = {}
    for directory in sorted(results.glob("*_s*")):
        arm, _, seed = directory.name.rpartition("_s")
        files = [directory / name for name in ("config.yaml", "metrics.jsonl", "summary.json")]
        if not (seed.isdigit() and all(f.is_file() for f in files)):
            continue
        summary = json.loads(files[2].read_text(encoding="utf-8"))
        if summary.get("status") != "finished":
            continue
        config = yaml.safe_load(files[0].read_text(encoding="utf-8"))
        runs[(arm, int(seed))] = {"series": series(read_metrics(files[1]), config), "summary": summary}
    return runs


def span_mean(values: list[float], span: tuple[int, int]) -> float:
    """Mean over iterations ``span`` (1-based, inclusive), NaNs left out.

    >>> span_mean([1.0, 2.0, 3.0, float("nan"), 5.0], (2, 5))
    3.3333333333333335
    """
    chosen = [v for v in values[span[0] - 1 : span[1]] if not math.isnan(v)]
    return statistics.fmean(chosen) if chosen else math.nan


def t_interval(differences: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student-t interval of paired differences (n - 1 degrees of freedom).

    >>> [round(x, 4) for x in t_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]  # 3.5 +- 2.5706 * sqrt(3.5 / 6)
    [3.5, 1.5367, 5.4633]
    """
    mean = statistics.fmean(differences)
    half = T_975[len(differences) - 1] * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def manipulation(runs: dict) -> dict:
    """The manipulation check: B-low's zero-spread share over iterations 1-20 (mean over its seeds) is >= 0.6 and
    at least 0.3 above B-high's; judged only with every registered seed of both arms."""
    shares = {}
    for arm in ("b-low", "b-high"):
        per_seed = [span_mean(runs[(arm, s)]["series"]["zero_spread"], EARLY) for s in SEEDS if (arm, s) in runs]
        shares[arm] = statistics.fmean(per_seed) if per_seed else math.nan
        shares[f"{arm}_seeds"] = len(per_seed)
    if math.isnan(shares["b-low"]) or math.isnan(shares["b-high"]):
        return shares | {"verdict": "not run"}
    ok = shares["b-low"] >= 0.6 and shares["b-low"] - shares["b-high"] >= 0.3
    complete = shares["b-low_seeds"] == shares["b-high_seeds"] == len(SEEDS)
    verdict = ("passes" if ok else "fails: the manipulation failed") if complete else "incomplete"
    return shares | {"verdict": verdict}


# criterion -> (treated arm, base arm, measure, expected sign of treated - base)
CRITERIA = {
    "A filter keeps templates away": ("f-low", "b-low", "template", -1),
    "A' filter keeps accuracy": ("f-low", "b-low", "accuracy", +1),
    "B scaled regularisers act like the filter": ("s-low", "b-low", "template", -1),
    "C low spread drives templates": ("b-low", "b-high", "template", +1),
    "D zero-spread groups carry the drift": ("r-only", "b-low", "template", +1),
}


def criterion(runs: dict, treated: str, base: str, measure: str, sign: int) -> dict:
    """Late ``treated`` - ``base`` of ``measure``, paired over seeds, its interval and verdict in the expected
    direction (``sign``); "incomplete" below the registered seed count, and never judged then."""
    seeds = [s for s in SEEDS if (treated, s) in runs and (base, s) in runs]
    if len(seeds) < 2:
        return {"seeds": seeds, "verdict": "not run"}
    diffs = [
        span_mean(runs[(treated, s)]["series"][measure], LATE) - span_mean(runs[(base, s)]["series"][measure], LATE)
        for s in seeds
    ]
    mean, low, high = t_interval(diffs)
    signed = (sign * mean, *sorted((sign * low, sign * high)))
    verdict = interval_verdict([signed]) if len(seeds) == len(SEEDS) else f"incomplete ({len(seeds)} seeds)"
    return {"seeds": seeds, "interval": (mean, low, high), "verdict": verdict}


def trailing(values: list[float], width: int = TRAIL) -> list[float]:
    """Trailing means of ``width`` iterations (NaN until ``width`` values exist).

    >>> trailing([1.0, 2.0, 3.0, 4.0], 2)
    [nan, 1.5, 2.5, 3.5]
    """
    return [math.nan if i + 1 < width else statistics.fmean(values[i + 1 - width : i + 1]) for i in range(len(values))]


def alarm(values: list[float], direction: int, sd: float, k: float = K_ALARM) -> int | None:
    """The registered alarm rule: the first iteration (1-based, from :data:`FIRST_ALARM`) at which the trailing
    mean of :data:`TRAIL` iterations is ``k`` standard errors (``sd / sqrt(TRAIL)``) worse than its running best
    (the best trailing mean so far, in the signal's good direction); None if it never is.

    >>> alarm([1.0] * 12 + [0.0] * 8, -1, 0.1)
    14
    """
    threshold = k * sd / math.sqrt(TRAIL)
    best = math.nan
    for i, mean in enumerate(trailing(values)):
        if math.isnan(mean):
            continue
        best = mean if math.isnan(best) else (min(best, mean) if direction > 0 else max(best, mean))
        if i + 1 >= FIRST_ALARM and direction * (mean - best) > threshold:
            return i + 1
    return None


def floor_sd(runs: dict, floor: str = "floor") -> dict[str, float]:
    """SD (ddof 1) of single-iteration values of each signal and of accuracy, pooled over the ``floor`` runs."""
    out = {}
    for name in (*SIGNALS, "accuracy"):
        values = [v for (arm, _), run in runs.items() if arm == floor for v in run["series"][name] if not math.isnan(v)]
        out[name] = statistics.stdev(values) if len(values) > 1 else math.nan
    return out


def bootstrap(values: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean and 95 % percentile bootstrap interval over ``values`` (one per run; runs are seeds)."""
    data = np.asarray(values, dtype=float)
    means = data[rng.integers(len(data), size=(BOOTSTRAP, len(data)))].mean(axis=1)
    return float(data.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def early_warning(runs: dict, seed: int = 0, arms: tuple[str, ...] = ARMS, matched: bool = False) -> dict:
    """For every run whose accuracy falls (its own alarm fires), each signal's lead: accuracy's alarm iteration
    minus the signal's (no alarm: counted at the run's end + 1, so a silent signal gets its most negative lead);
    false-alarm rate of each signal on the runs whose accuracy does not fall and on the Floor runs. ``matched``
    (Part 2): the runs on half hard instances (:data:`HIGH_MIX`, and the Floor-high runs) take their noise from the
    Floor-high runs, the rest from the Floor runs."""
    sd = floor_sd(runs)
    high = floor_sd(runs, FLOOR_HIGH) if matched else sd
    if any(math.isnan(v) for v in (*sd.values(), *high.values())):
        return {"note": "no Floor runs of this batch mix: the alarm rule has no noise level"}
    rng = np.random.default_rng(seed)
    falling, steady, floors = [], [], []
    for (arm, s), run in sorted(runs.items()):
        if arm not in arms or s not in SEEDS:  # the registered runs only: not the warm-up, pilot or GRPO set
            continue
        noise = high if arm in (*HIGH_MIX, FLOOR_HIGH) else sd
        onset = alarm(run["series"]["accuracy"], -1, noise["accuracy"])
        alarms = {n: alarm(run["series"][n], d, noise[n]) for n, (_, d) in SIGNALS.items()}
        fired = [i + 1 for i, v in enumerate(run["series"]["product_alarm"]) if v == 1.0]
        alarms["mirl alarm (not registered)"] = fired[0] if fired else None
        record = {"run": f"{arm}_s{s}", "onset": onset, "alarms": alarms, "end": len(run["series"]["accuracy"])}
        (floors if arm in ("floor", FLOOR_HIGH) else falling if onset is not None else steady).append(record)
    table = {}
    for name in (*SIGNALS, "mirl alarm (not registered)"):
        leads = [r["onset"] - (r["alarms"][name] or r["end"] + 1) for r in falling]
        table[name] = {
            "lead": bootstrap(leads, rng) if leads else None,
            "warned_first": sum(lead > 0 for lead in leads),
            "false_alarms": (sum(r["alarms"][name] is not None for r in steady), len(steady)),
            "floor_false_alarms": (sum(r["alarms"][name] is not None for r in floors), len(floors)),
        }
    verdicts = warning_verdicts(falling, steady, floors, rng, table["retrieval"]["lead"])
    out = {"falling_runs": [r["run"] for r in falling], "table": table, "floor_sd": sd, "verdicts": verdicts}
    out["per_run"] = {r["run"]: {"onset": r["onset"], **r["alarms"]} for r in falling}
    return out | ({"floor_high_sd": high} if matched else {})


def warning_verdicts(
    falling: list[dict], steady: list[dict], floors: list[dict], rng: np.random.Generator, w1: tuple | None = None
) -> dict:
    """W1: retrieval's mean lead has a bootstrap interval above 0 and it false-alarms on at most 20 % of the steady
    and Floor runs together (holds), or the interval lies at or below 0 (fails). W2: the paired lead of retrieval
    over plain entropy H(Z), per falling run, has an interval above 0 (holds) or at or below 0 (fails). Fewer than
    :data:`MIN_FALLING` falling runs: not testable."""
    if len(falling) < MIN_FALLING:
        return {
            "W1": f"not testable ({len(falling)} falling runs)",
            "W2": f"not testable ({len(falling)} falling runs)",
        }

    def lead(record, name):
        return record["onset"] - (record["alarms"][name] or record["end"] + 1)

    quiet = steady + floors
    rate = sum(r["alarms"]["retrieval"] is not None for r in quiet) / len(quiet) if quiet else math.nan
    w1 = w1 or bootstrap([lead(r, "retrieval") for r in falling], rng)  # the table's interval, when given
    w2 = bootstrap([lead(r, "retrieval") - lead(r, "entropy") for r in falling], rng)
    first = "holds" if w1[1] > 0 and rate <= 0.2 else ("fails" if w1[2] <= 0 else "inconclusive")
    second = "holds" if w2[1] > 0 else ("fails" if w2[2] <= 0 else "inconclusive")
    return {"W1": first, "W1_lead": w1, "W1_false_alarm_rate": rate, "W2": second, "W2_lead_difference": w2}


def gates(results: Path = RESULTS) -> dict:
    """The two gates' results as committed (``gates/swap.json``, ``gates/pilot.json``)."""
    out = {}
    for name in ("swap", "swap-v2", "swap-v3", "pilot"):  # organism v1, v2 (both failed), v3 (second amendment)
        path = results / "gates" / f"{name}.json"
        out[name] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"verdict": "not run"}
    return out


def arm_means(runs: dict) -> dict[str, dict]:
    """Per arm (the registered ones, then the GRPO set's ``<arm>-grpo``, then the gate runs), means over its seeds
    of the zero-spread share in iterations 1-20 and of the late template share, accuracy, retrieval and success:
    description, no verdict."""
    names = sorted(
        {arm for arm, _ in runs}, key=lambda a: (a.removesuffix("-grpo") not in PART2_ARMS, a.endswith("-grpo"), a)
    )
    out = {}
    for arm in names:
        seeds = sorted(s for a, s in runs if a == arm)
        chosen = [runs[(arm, s)]["series"] for s in seeds]
        row = {"seeds": seeds, "zero_spread_1_20": statistics.fmean(span_mean(c["zero_spread"], EARLY) for c in chosen)}
        for measure in ("template", "accuracy", "retrieval", "success"):
            row[f"late_{measure}"] = statistics.fmean(span_mean(c[measure], LATE) for c in chosen)
        out[arm] = row
    return out


def detection(runs: dict, level: float = 0.5) -> dict:
    """Description, not registered: for each registered run, the first iteration at which the scorer-free template
    share's 5-iteration trailing mean reaches ``level`` (the collapse as the env's ground truth sees it) and the first
    iteration of mirl's own alarm; runs where neither happens are counted, not listed."""
    rows, quiet = [], 0
    for (arm, s), run in sorted(runs.items()):
        if arm not in PART2_ARMS or s not in SEEDS:
            continue
        reached = [i + 1 for i, v in enumerate(trailing(run["series"]["template"])) if v >= level]
        fired = [i + 1 for i, v in enumerate(run["series"]["product_alarm"]) if v == 1.0]
        if reached or fired:
            rows.append({"run": f"{arm}_s{s}", "template": reached[0] if reached else None,
                         "alarm": fired[0] if fired else None})  # fmt: skip
        else:
            quiet += 1
    both = [r["alarm"] - r["template"] for r in rows if r["template"] and r["alarm"]]
    return {"level": level, "rows": rows, "quiet_runs": quiet, "alarm_minus_template": both}


def positive_control(runs: dict) -> dict:
    """Part 2's check on P-ramp: how many of its runs fell (accuracy alarmed); it counts when at least
    :data:`MIN_FALLING` of the 6 did."""
    sd = floor_sd(runs, FLOOR_HIGH)
    seeds = [s for s in SEEDS if (PART2, s) in runs]
    if not seeds or math.isnan(sd["accuracy"]):
        return {"verdict": "not run"}
    fell = [s for s in seeds if alarm(runs[(PART2, s)]["series"]["accuracy"], -1, sd["accuracy"]) is not None]
    if len(seeds) < len(SEEDS):
        verdict = f"incomplete ({len(seeds)} seeds)"
    else:
        verdict = "counts" if len(fell) >= MIN_FALLING else "failed: fewer than 4 of 6 runs fell"
    return {"seeds": seeds, "fell": fell, "verdict": verdict}


def analyse(runs: dict, results: Path = RESULTS) -> dict:
    inventory = {arm: [s for s in SEEDS if (arm, s) in runs] for arm in PART2_ARMS}
    out = {"gates": gates(results), "inventory": inventory, "manipulation": manipulation(runs)}
    out["arms"] = arm_means(runs)
    out["criteria"] = {name: criterion(runs, *spec) for name, spec in CRITERIA.items()}
    if not out["manipulation"]["verdict"].startswith("passes"):
        for result in out["criteria"].values():  # registered: no verdict on the mechanism without the manipulation
            if result["verdict"] in ("holds", "fails", "inconclusive"):
                result["verdict"] += " (not evidence: the manipulation check did not pass)"
    out["early_warning"] = early_warning(runs)
    part2 = early_warning(runs, arms=PART2_ARMS, matched=True)
    out["early_warning_part2"] = part2 | {"positive_control": positive_control(runs)}
    out["detection"] = detection(runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--power", action="store_true", help="print false-positive rates and power, then exit")
    args = parser.parse_args(argv)
    if args.power:
        sys.path.insert(0, str(HERE))
        from power import power_table  # noqa: PLC0415  (beside this file)

        print(power_table())
        return 0
    result = analyse(load(args.results), args.results)
    args.results.mkdir(parents=True, exist_ok=True)
    text = report(result)
    (args.results / "results.md").write_text(text, encoding="utf-8")
    (args.results / "results.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
