"""The mechanism study's results as markdown (``results.md``): every table ``analyze.py`` computes, printed from its
result dictionary (studies/mechanism/README.md)."""

from __future__ import annotations

import json
import math


def _fmt(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.3f}"


def _warning_table(ew: dict, title: str) -> list[str]:
    lines = ["", f"## {title} (lead = accuracy's alarm - the signal's, iterations; bootstrap 95 % over runs)", ""]
    if "positive_control" in ew:
        lines += [f"P-ramp positive control: **{ew['positive_control']['verdict']}** "
                  f"(fell: {ew['positive_control'].get('fell', [])})", ""]  # fmt: skip
    if "table" not in ew:
        return [*lines, ew["note"]]
    lines += [f"Runs whose accuracy fell: {', '.join(ew['falling_runs']) or 'none'}", "",
              "| signal | mean lead | warned first | false alarms (steady runs) | false alarms (Floor) |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, row in ew["table"].items():
        lead = row["lead"]
        shown = f"{lead[0]:+.1f} [{lead[1]:+.1f}, {lead[2]:+.1f}]" if lead else "-"
        fa, ff = row["false_alarms"], row["floor_false_alarms"]
        lines.append(f"| {name} | {shown} | {row['warned_first']} | {fa[0]}/{fa[1]} | {ff[0]}/{ff[1]} |")
    header = "| run | accuracy | " + " | ".join(ew["table"]) + " |"
    lines += ["", f"Verdicts: {json.dumps(ew['verdicts'])}", "", "Alarm iterations of each falling run (- = never):",
              "", header, "|---|---|" + "---|" * len(ew["table"])]  # fmt: skip
    for run, row in ew["per_run"].items():
        lines.append(f"| {run} | {row['onset']} | " + " | ".join(str(row[n] or "-") for n in ew["table"]) + " |")
    return lines


def report(result: dict) -> str:
    """Markdown of every table."""
    lines = ["# Mechanism study: results (printed by analyze.py)", "", "## Gates", ""]
    for name, gate in result["gates"].items():
        lines.append(
            f"- {name}: **{gate.get('verdict')}** {json.dumps({k: v for k, v in gate.items() if k != 'verdict'})}"
        )
    lines += ["", "## Runs finished (seeds)", ""]
    lines += [f"- {arm}: {seeds or 'none'}" for arm, seeds in result["inventory"].items()]
    lines += ["", "## Per arm (means over seeds; late = iterations 81-100; description, no verdict)", "",
              "| arm | seeds | zero-spread 1-20 | late template | late accuracy | late retrieval | late success |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm, row in result.get("arms", {}).items():
        values = [row[k] for k in ("zero_spread_1_20", "late_template", "late_accuracy", "late_retrieval",
                                   "late_success")]  # fmt: skip
        lines.append(f"| {arm} | {len(row['seeds'])} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    m = result["manipulation"]
    lines += ["", "## Manipulation check (zero-spread share, iterations 1-20)", "",
              f"B-low {m.get('b-low', math.nan):.3f} ({m.get('b-low_seeds', 0)} seeds), "
              f"B-high {m.get('b-high', math.nan):.3f} ({m.get('b-high_seeds', 0)} seeds): **{m['verdict']}**", "",
              "## Criteria (late = iterations 81-100; treated - base, 95 % t interval over paired seeds)", "",
              "| criterion | difference | seeds | verdict |", "|---|---|---|---|"]  # fmt: skip
    for name, c in result["criteria"].items():
        interval = c.get("interval")
        shown = f"{_fmt(interval[0])} [{_fmt(interval[1])}, {_fmt(interval[2])}]" if interval else "-"
        lines.append(f"| {name} | {shown} | {len(c['seeds'])} | {c['verdict']} |")
    for key, title in (("early_warning", "Early warning, Part 1"), ("early_warning_part2", "Early warning, Part 2")):
        lines += _warning_table(result[key], title)
    det = result["detection"]
    lines += ["", f"## mirl's alarm against the template share (description, not registered; level {det['level']})",
              "", f"Runs where neither the 5-iteration template share reached {det['level']} nor the alarm fired: "
              f"{det['quiet_runs']}. Alarm iteration minus the share's: {det['alarm_minus_template'] or 'none'}.", "",
              "| run | template share reached | mirl alarm |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {r['run']} | {r['template'] or 'never'} | {r['alarm'] or 'never'} |" for r in det["rows"]]
    return "\n".join(lines) + "\n"
