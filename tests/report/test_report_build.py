"""Whole reports from synthetic runs: sections, files, missing-data notes, escaping, self-containment."""

import doctest
import json
import re

import pytest
import yaml

from mirl.report import build as build_module
from mirl.report import build_comparison, build_report, html, images, overview, rundir, transcripts

DETAILS = [
    "sec-training",
    "sec-diagnostics",
    "sec-regime",
    "sec-filter",
    "sec-rewards",
    "sec-gradients",
    "sec-reasoning",
    "sec-mismatch",
    "sec-transcripts",
]
SECTIONS = ["sec-verdict", "sec-key", *DETAILS, "sec-overview", "sec-metrics"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LIGHT = ("diag", "grad", "filter", "groups", "rollouts")  # fewer figures where the test is about the header


def section_ids(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)">', page)


def section_html(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.DOTALL)
    assert match, f"section {section_id} not found"
    return match.group(1)


def assert_self_contained(page: str) -> None:
    # every src is a data URI; every href is an in-page anchor or a data URI; nothing to fetch
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))
    assert all(href.startswith(("#", "data:")) for href in re.findall(r'href="([^"]*)"', page))
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_full_report_has_every_section_image_and_png(full_report):
    run, result, page = full_report
    assert result.html_path == run / "report.html"
    assert section_ids(page) == SECTIONS
    names = sorted(p.name for p in result.png_paths)
    assert names == sorted(
        [
            "key.png",
            "training.png",
            "diagnostics.png",
            "regime.png",
            "filter.png",
            "reward_matrix.png",
            "gradients.png",
            "reasoning.png",
            "mismatch.png",
        ]
    )
    assert all(p.parent == run / "report" and p.read_bytes().startswith(PNG_MAGIC) for p in result.png_paths)
    assert page.count('src="data:image/png;base64,') == len(result.png_paths)
    assert result.missing == ()
    assert 'class="missing"' not in page and 'class="banner"' not in page  # finished and complete
    assert_self_contained(page)
    assert "<h3>Iteration 1</h3>" in page and "<h3>Iteration 20</h3>" in page  # transcripts: first, middle, last


def test_model_text_is_escaped(full_report):
    page = full_report[2]
    assert "<img src=x" not in page and '<script>alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page


def test_run_with_missing_parts_leaves_empty_sections_out_and_says_why(make_run):
    run = make_run(iterations=12, omit=("groups", "rollouts", "grad", "val", "summary", "filter", "mismatch"))
    result = build_report(run)
    page = result.html_path.read_text()
    shown = ["sec-training", "sec-diagnostics", "sec-regime", "sec-reasoning"]
    assert section_ids(page) == ["sec-verdict", "sec-key", *shown, "sec-not-shown", "sec-overview", "sec-metrics"]
    not_shown = section_html(page, "sec-not-shown")
    assert "Missing: Reward matrices: groups.jsonl is missing or empty" in not_shown
    assert "Missing: Transcripts: no saved rollouts (rollouts/)" in not_shown
    assert "Missing: Gradient norms: no grad/&lt;bucket&gt;/&lt;component&gt;/norm metrics" in not_shown
    assert "Missing: Filter: no filter/... metrics logged" in not_shown
    assert "Missing: Sampler/trainer mismatch: rollout/logp_diff_mean not logged" in not_shown
    assert "Missing: val/success not logged" in section_html(page, "sec-training")  # shown, with its gap
    assert "Missing: summary.json is missing" in section_html(page, "sec-overview")
    assert "summary.json is missing: status unknown" in page  # the banner
    assert "Reward matrices: groups.jsonl is missing or empty" in result.missing
    assert "Training and validation: val/success not logged" in result.missing
    assert not (run / "report" / "gradients.png").exists()
    assert "Gradient norms</h2>" not in page and "REFERENCE" not in page
    assert_self_contained(page)


def test_empty_run_directory_still_gives_a_report(tmp_path):
    result = build_report(tmp_path)
    page = result.html_path.read_text()
    assert section_ids(page) == ["sec-verdict", "sec-not-shown", "sec-overview", "sec-metrics"]
    assert result.png_paths == ()
    assert '<div class="health no-data">no data<div class="state">status unknown' in section_html(page, "sec-verdict")
    for title in ("Training and validation", "Diagnostics: MI vs entropy", "Transcripts"):
        assert f"{title}: " in section_html(page, "sec-not-shown"), title
    assert "Missing: Diagnostics: MI vs entropy: metrics.jsonl is missing" in section_html(page, "sec-not-shown")


def test_running_run_with_a_half_written_line(make_run):
    run = make_run(iterations=9, status="running", truncated_tail=True, omit=LIGHT)
    result = build_report(run)
    page = result.html_path.read_text()
    assert "This run is still in progress (9 of 18 iterations done)" in page
    assert "unparsable" not in page  # a half-written last line is normal, not a problem to report
    assert "<details><summary>" in section_html(page, "sec-metrics")  # the raw table, collapsed


def test_stopped_run_shows_the_stop_reason(make_run):
    page = build_report(make_run(iterations=6, status="stopped", omit=LIGHT)).html_path.read_text()
    assert "The run stopped after 6 of 12 iterations: reward-spread collapse." in page


def test_chosen_iterations_and_custom_output(make_run, tmp_path):
    out = tmp_path / "out" / "mine.html"
    result = build_report(make_run(iterations=20, omit=("diag", "grad", "filter")), out, iterations=[10, 99])
    page = out.read_text()
    assert result.html_path == out and (tmp_path / "out" / "mine" / "reward_matrix.png").is_file()
    assert "Missing: iteration 99 not available (have 1..20)" in section_html(page, "sec-rewards")
    assert "<h3>Iteration 10</h3>" in page and "<h3>Iteration 1</h3>" not in page


def test_regime_table_lists_the_latest_regime(full_report):
    regime = section_html(full_report[2], "sec-regime")
    # synthetic MI at t = 20/20: 0.6 exp(-3) = 0.0299 < 0.1 log 64 = 0.416 -> template_collapse at iteration 20
    assert "<td>trajectory</td><td>template_collapse</td><td>20</td><td>reasoning is varied but barely" in regime
    assert "Thresholds: H(Z|X) = 0.5 (nats per token, scored at T = 1, for samples drawn at T = 1)" in regime
    assert "docs/metrics.md" in regime


def test_the_page_opens_with_the_verdict_then_the_key_plots_and_ends_with_the_collapsed_metrics(full_report):
    page = full_report[2]
    verdict = section_html(page, "sec-verdict")
    # diagnosed at 1, 5, 10, 15, 20: t = 10/20, 15/20, 20/20 give MI 0.134, 0.063, 0.030 < 0.1 log 64 = 0.416
    # with H(Z|X) ~ 1.2 >= 0.5 -> template_collapse in the last 3 -> unhealthy
    assert '<div class="health unhealthy">unhealthy<div class="state">status finished · iterations 20 of 20' in verdict
    for label in ("success", "validation", "input dependence", "regime", "kept share"):
        assert f'<div class="label">{label}</div>' in verdict, label
    assert "template collapse (trajectory)" in verdict and "3 of the last 3 determined" in verdict
    assert "varied but barely depends on the input" in verdict  # the plain-language reading
    assert page.index('id="sec-verdict"') < page.index('id="sec-key"') < page.index('id="sec-training"')
    assert 'data-file="key.png"' in section_html(page, "sec-key")
    metrics = section_html(page, "sec-metrics")
    assert page.rindex("<section") == page.index('<section id="sec-metrics">')  # last
    assert metrics.count("<details>") == 1 and "<details open" not in metrics
    assert "<td>diag/trajectory/est/mi_estimate</td>" in metrics and "MI-Est" in metrics  # formula from the catalogue
    assert "REFERENCE" not in page


def test_compare_overlays_runs_and_tabulates_final_and_peak(make_run, tmp_path):
    a = make_run("a", iterations=10)
    b = make_run("b", iterations=5, omit=("val",), status="running", seed=1)
    result = build_comparison([a, b], tmp_path / "cmp.html", labels=["base", "filtered"])
    page = result.html_path.read_text()
    assert section_ids(page) == ["sec-curves", "sec-summary"]
    assert [p.name for p in result.png_paths] == ["compare.png"]
    assert "Missing: filtered: val/success not logged" in section_html(page, "sec-curves")
    assert "filtered: This run is still in progress" in section_html(page, "sec-summary")
    success = rundir.read_run(a).metrics.get("rollout/success")
    cell = f"{overview.fmt(success.last)} / {overview.fmt(success.peak)} @{success.peak_iteration}"
    assert f'<td>base</td><td class="num">{cell}</td>' in page
    summary = section_html(page, "sec-summary")
    assert summary.index("<h3>Verdict</h3>") < summary.index("<h3>Runs</h3>")  # one verdict row per run first
    assert "<td>base</td><td>unhealthy</td><td>10 of 10</td>" in summary  # a template collapse called
    assert "<td>filtered</td><td>check</td><td>5 of 10</td>" in summary  # still running, 2 diagnosed
    assert "too few diagnosed iterations to call a regime (2, need 3)" in summary
    assert_self_contained(page)


def test_compare_names_only_gaps_in_what_it_reads_and_keeps_machine_notes_apart(make_run, tmp_path):
    """groups.jsonl and rollouts/ feed the single-run report only: no "Missing" banner for them here. A busy
    machine's message is in the notes column, and the health word is the one without it."""
    import json

    busy = make_run("busy", iterations=10, omit=("groups", "rollouts"))
    summary = json.loads((busy / "summary.json").read_text())
    note = (
        "the machine is busy (load average 5.7 on 2 cores): iteration 1 sampled 15 tokens/s, and iterations will "
        "take longer than on an idle machine"
    )
    (busy / "summary.json").write_text(json.dumps(summary | {"warnings": [note]}))
    quiet = make_run("quiet", iterations=10, omit=("groups", "rollouts", "config"))
    page = build_comparison([busy, quiet], tmp_path / "cmp.html").html_path.read_text()
    banners = [line for line in page.splitlines() if 'class="missing"' in line]
    assert banners == ['<p class="missing">Missing: quiet: config.yaml is missing</p>']
    summary = section_html(page, "sec-summary")
    assert "<th>notes (the machine)</th>" in summary and f"<td>{html.esc(note)}</td></tr>" in summary
    assert f"<td>{html.esc(note)}</td><td>" not in summary  # not in the warnings column


def test_compare_rejects_wrong_label_count(make_run, tmp_path):
    with pytest.raises(ValueError, match="expected 2, got 1"):
        build_comparison([make_run("a"), make_run("b")], tmp_path / "c.html", labels=["only-one"])


def test_compare_makes_duplicate_names_unique(tmp_path):
    from mirl.report.compare import unique_labels

    runs = [rundir.read_run(tmp_path) for _ in range(3)]
    assert unique_labels(runs, None) == [tmp_path.name, f"{tmp_path.name}#2", f"{tmp_path.name}#3"]


@pytest.mark.parametrize("module", [build_module, html, images, overview, rundir, transcripts])
def test_doctests(module):
    failures, _ = doctest.testmod(module)
    assert failures == 0


def test_a_run_with_the_filter_off_reads_filter_off_not_a_kept_share_or_its_unused_value(make_run, tmp_path):
    """A run with filter.strategy=none used to read "none 0.9" in compare and "kept share 1" in its verdict."""
    run = make_run("plain", iterations=4)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["filter"] = {"strategy": "none", "value": 0.9}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line | {"filter/kept_ratio": 1.0}) + "\n" for line in lines))
    from mirl.report.verdict import verdict

    assert verdict(rundir.read_run(run)).fact("kept share").value == "filter off"
    page = build_comparison([run, make_run("other", iterations=4)], tmp_path / "c.html").html_path.read_text()
    assert "none 0.9" not in page and "<td>none</td>" in page
