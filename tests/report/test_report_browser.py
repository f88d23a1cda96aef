"""Open reports in headless Chromium: no console errors, every image decodes, every section is there, and the first
screen of committed runs (the quickstart run, organism runs P and B-low) says one thing: one input-dependence number
in its card, the regime card and the summary line, and a busy machine as a note that leaves the health word alone.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (/usr/bin/chromium, /usr/bin/chromedriver) and
the Python package ``selenium``; skipped with the reason when any is absent. The flags keep Chromium from
reaching out to the network (this suite runs offline) and give it a fresh profile.
"""

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from mirl.report import build_comparison, build_report

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1600",
)


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists():
            pytest.skip(f"{binary} not found: apt-get install -y chromium chromium-driver")
    profile = tempfile.mkdtemp(prefix="mirl-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path) -> dict:
    driver.get(path.resolve().as_uri())
    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({complete: i.complete, width: i.naturalWidth}));"
    )
    sections = driver.execute_script("return Array.from(document.querySelectorAll('section')).map(s => s.id);")
    missing = driver.execute_script("return document.querySelectorAll('.missing').length;")
    errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    return {"images": images, "sections": sections, "missing": missing, "errors": errors}


def test_full_report_renders_with_every_image_loaded(browser, full_report):
    result = full_report[1]
    page = open_page(browser, result.html_path)
    assert page["errors"] == []
    assert len(page["images"]) == len(result.png_paths) == 9
    assert all(image["complete"] and image["width"] > 0 for image in page["images"])
    assert len(page["sections"]) == 13 and page["missing"] == 0


FIRST_SCREEN = (1280, 900)  # a laptop browser window


def test_first_screen_shows_the_verdict_strip_and_a_plot_and_the_metrics_table_is_collapsed(
    browser, full_report, tmp_path
):
    browser.set_window_size(*FIRST_SCREEN)
    try:
        page = open_page(browser, full_report[1].html_path)
        height = browser.execute_script("return window.innerHeight;")
        strip = browser.execute_script("return document.getElementById('verdict').getBoundingClientRect().toJSON();")
        plot = browser.execute_script("return document.querySelector('#sec-key img').getBoundingClientRect().toJSON();")
        table = browser.execute_script(
            "const d = document.querySelector('#sec-metrics details');"
            "return {open: d.open, tableVisible: d.querySelector('table').checkVisibility()};"
        )
        shot_path = tmp_path / "first_screen.png"
        shot_path.write_bytes(browser.get_screenshot_as_png())
        ratio = browser.execute_script("return window.devicePixelRatio;")
    finally:
        browser.set_window_size(1280, 1600)
    assert page["errors"] == []
    assert strip["top"] >= 0 and strip["bottom"] <= height  # the whole strip on the first screen
    assert plot["top"] + 200 <= height  # and at least 200 px of the key plots
    assert table == {"open": False, "tableVisible": False}
    from PIL import Image

    shot = Image.open(shot_path).convert("RGB")
    # the health badge (unhealthy: #c62828) is painted inside the strip, and the plot's pixels are not blank
    badge = shot.crop([int(v * ratio) for v in (strip["left"], strip["top"], strip["right"], strip["bottom"])])
    assert (198, 40, 40) in {color for _, color in badge.getcolors(1 << 20)}
    visible = shot.crop([int(v * ratio) for v in (plot["left"], plot["top"], plot["right"], height)])
    assert len(visible.getcolors(1 << 20)) > 20


def test_partial_report_renders_and_shows_missing_notes(browser, make_run):
    result = build_report(make_run(iterations=6, omit=("groups", "rollouts", "grad", "diag", "summary")))
    page = open_page(browser, result.html_path)
    assert page["errors"] == []
    assert page["images"] and all(image["complete"] and image["width"] > 0 for image in page["images"])
    assert page["missing"] == len(result.missing) > 0


def test_comparison_renders(browser, make_run, tmp_path):
    result = build_comparison([make_run("a", iterations=8), make_run("b", iterations=4)], tmp_path / "c.html")
    page = open_page(browser, result.html_path)
    assert page["errors"] == []
    assert len(page["images"]) == 1 and page["images"][0]["width"] > 0
    assert page["sections"] == ["sec-curves", "sec-summary"]


def test_vision_transcripts_show_each_board_beside_its_observation(browser, tmp_path):
    from .conftest import write_vision_run

    result = build_report(write_vision_run(tmp_path / "runs", omit=("metrics", "groups")))
    page = open_page(browser, result.html_path)
    assert page["errors"] == [] and page["missing"] > 0  # the plots' sections are named as not shown
    boards = browser.execute_script(
        "return Array.from(document.querySelectorAll('.obs')).map(o => {"
        "  const text = o.querySelector('pre').getBoundingClientRect(), img = o.querySelector('img');"
        "  return {text: text.toJSON(), board: img.getBoundingClientRect().toJSON(),"
        "          width: img.naturalWidth, complete: img.complete}; });"
    )
    assert len(boards) == 6  # 2 episodes x 3 turns
    for entry in boards:
        text, board = entry["text"], entry["board"]
        assert entry["complete"] and entry["width"] == 6 * 28  # a 6 x 6 room at the default cell size
        assert board["left"] >= text["right"] and board["top"] < text["bottom"]  # beside the text, same row


ORGANISM = Path(__file__).resolve().parents[2] / "studies" / "results" / "lab"


def test_organism_report_and_comparison_render(browser, tmp_path):
    """The committed calibration runs of the organism study: P's report names where its template collapse set in,
    and the comparison of B-low and F-low draws both runs' curves."""
    runs = {}
    for name in ("p_s0", "b-low_s0", "f-low_s0"):
        runs[name] = tmp_path / name
        shutil.copytree(ORGANISM / name, runs[name])
    report = build_report(runs["p_s0"])
    page = open_page(browser, report.html_path)
    assert page["errors"] == []
    assert page["images"] and all(image["complete"] and image["width"] > 0 for image in page["images"])
    strip = browser.execute_script("return document.getElementById('verdict').innerText;")
    assert "template collapse" in strip and "input dependence fell at iteration" in strip
    comparison = build_comparison([runs["b-low_s0"], runs["f-low_s0"]], tmp_path / "compare.html")
    page = open_page(browser, comparison.html_path)
    assert page["errors"] == [] and len(page["images"]) == 1 and page["images"][0]["width"] > 0
    rows = browser.execute_script("return document.getElementById('sec-summary').innerText;")
    assert "b-low_s0" in rows and "f-low_s0" in rows


QUICKSTART = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "quickstart_run"
FIRST_SCREENS = {"quickstart": QUICKSTART, "p_s1": ORGANISM / "p_s1", "b-low_s1": ORGANISM / "b-low_s1"}
EXCESS = re.compile(r"retrieval above chance ([+-]\d\.\d{3})")
NUMBER = re.compile(r"[+-]?\d+\.\d+")


def first_screen(driver, html: Path, shot: Path) -> dict:
    """The verdict strip of ``html`` at a laptop's window size: each card's label, value and detail, the health word,
    the warnings and notes with whether they are in view, and a screenshot."""
    driver.set_window_size(*FIRST_SCREEN)
    try:
        open_page(driver, html)
        found = driver.execute_script(
            "const text = (q) => Array.from(document.querySelectorAll(q)).map(e => e.textContent);"
            "const inView = (q) => Array.from(document.querySelectorAll(q)).every("
            "  e => e.getBoundingClientRect().bottom <= window.innerHeight);"
            "return {cards: Array.from(document.querySelectorAll('#verdict .card')).map(c => ({"
            "          label: c.querySelector('.label').textContent, value: c.querySelector('.value').textContent,"
            "          detail: c.querySelector('.detail').textContent})),"
            "        health: document.querySelector('#verdict .health').firstChild.textContent,"
            "        warnings: text('ul.warnings li'), notes: text('ul.notes li'),"
            "        visible: inView('#verdict') && inView('ul.warnings') && inView('ul.notes')};"
        )
        shot.write_bytes(driver.get_screenshot_as_png())
    finally:
        driver.set_window_size(1280, 1600)
    found["cards"] = {card["label"]: card for card in found["cards"]}
    return found


@pytest.mark.parametrize("name", sorted(FIRST_SCREENS))
def test_the_first_screen_gives_one_input_dependence_number_everywhere(browser, tmp_path, capsys, name):
    """The quickstart run, a P run and a B-low run: the input-dependence card leads with one number, the value its
    word judges (null-corrected retrieval above chance, with its interval), and the regime card and the summary line
    `mirl report` prints give the same number; the nominal chance is not on the card."""
    from mirl.cli import main

    run = tmp_path / name
    shutil.copytree(FIRST_SCREENS[name], run)
    assert main(["report", str(run)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    screen = first_screen(browser, run / "report.html", tmp_path / f"{name}.png")
    assert screen["visible"]
    card, regime = screen["cards"]["input dependence"], screen["cards"]["regime"]
    (value,) = EXCESS.findall(card["value"])
    assert card["value"].startswith(f"retrieval above chance {value} (null-corrected; 95% ")
    assert len(NUMBER.findall(card["value"])) == 3  # the value and its interval, nothing else
    assert "chance 0." not in card["value"] + card["detail"]  # no nominal chance beside it
    assert EXCESS.findall(regime["detail"]) == [value]
    assert f"| input dependence {card['value']} |" in line and line.startswith(f"summary: {screen['health']} |")


def test_a_busy_machine_is_a_note_on_the_first_screen_and_leaves_the_health_word_alone(browser, tmp_path):
    """B-low seed 1 carries only a throughput warning from its shared machine: the note is on the first screen, and
    the health word is what the same run reads without it."""
    import json

    from mirl.report import read_run
    from mirl.report.verdict import verdict

    busy, quiet = tmp_path / "busy", tmp_path / "quiet"
    for run in (busy, quiet):
        shutil.copytree(ORGANISM / "b-low_s1", run)
    summary = json.loads((quiet / "summary.json").read_text())
    said = summary.pop("warnings")
    (quiet / "summary.json").write_text(json.dumps(summary))
    build_report(busy)
    screen = first_screen(browser, busy / "report.html", tmp_path / "busy.png")
    assert len(said) == 1 and "tokens/s" in said[0] and "the machine is busier" in said[0]
    assert screen["notes"] == [f"note: {said[0]}"] and screen["visible"] and screen["warnings"] == []
    without = verdict(read_run(quiet))  # the strip renders this verdict; the same run, its note taken away
    assert without.warnings == () and screen["health"] == without.health


def test_compare_rows_give_the_reports_numbers_and_no_notes_about_files_they_do_not_read(browser, tmp_path):
    """`mirl compare` of P and B-low, run where the README suggests: every row's input dependence is the report's
    card, an empty collapse onset says why, and no orange "Missing" banner stands for groups.jsonl or rollouts/."""
    from mirl.report import read_run
    from mirl.report.verdict import verdict

    runs = []
    for name in ("p_s1", "b-low_s1"):
        runs.append(tmp_path / name)
        shutil.copytree(ORGANISM / name, runs[-1])
    result = build_comparison(runs, tmp_path / "compare.html")
    page = open_page(browser, result.html_path)
    assert page["errors"] == [] and page["missing"] == 0
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#sec-summary table:first-of-type tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent));"
    )
    header = browser.execute_script(
        "return Array.from(document.querySelectorAll('#sec-summary table:first-of-type th')).map(c => c.textContent);"
    )
    for run, row in zip(runs, rows, strict=True):
        cells = dict(zip(header, row, strict=True))
        assert cells["input dependence"] == verdict(read_run(run)).fact("input dependence").value
    assert dict(zip(header, rows[0], strict=True))["collapse onset"] == "no fall detected"


def _degenerate_run(root: Path) -> Path:
    """A 20-iteration run whose replies break down: malformed share 0.05 -> 0.9 while retrieval falls and H(Z|X)
    rises, its iterations labelled as training labels them (degenerate from half malformed on)."""
    import json

    run = root / "degenerate"
    run.mkdir()
    lines = []
    for i in range(1, 21):
        invalid = min(0.9, 0.05 + 0.05 * i)
        base = "diag/trajectory"
        lines.append({
            "iteration": i, "rollout/success": 0.1, "rollout/invalid_frac": invalid, "diag/invalid_frac": invalid,
            "train/optimizer_steps": 1.0, f"{base}/pairs": 32.0, f"{base}/columns": 32.0,
            f"{base}/regime": "degenerate" if invalid >= 0.5 else "template_collapse",
            f"{base}/est/retrieval_acc": max(0.03, 0.3 - 0.02 * i), f"{base}/est/retrieval_chance": 0.03,
            f"{base}/est/conditional_entropy": 2.7 + 0.1 * i, f"{base}/est/mi_estimate": 0.1,
        })  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "iterations_done": 20}))
    return run


def test_first_lines_name_the_regime_degeneration_and_wrong_but_grounded(browser, tmp_path):
    """The verdict strip's first line (health and regime) and its facts, in a real browser, for the committed P
    run (template collapse), B-low (grounded), F-low seed 9 (wrong but grounded), the quickstart run, and a run
    whose replies broke down (degenerate, never template collapse)."""
    quickstart = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "quickstart_run"
    organism = ("p_s0", "b-low_s0", "f-low_s9", "reg-only_s97")
    sources = {name: ORGANISM / name for name in organism} | {"quickstart": quickstart}
    runs = {}
    for name, source in sources.items():
        runs[name] = tmp_path / name
        shutil.copytree(source, runs[name])
    runs["degenerate"] = _degenerate_run(tmp_path)
    from PIL import Image

    strips = {}
    for name, run in runs.items():
        page = open_page(browser, build_report(run).html_path)
        assert page["errors"] == []
        strips[name] = browser.execute_script("return document.getElementById('verdict').innerText;").lower()
        shot = tmp_path / f"{name}.png"
        shot.write_bytes(browser.get_screenshot_as_png())
        colours = {colour for _, colour in Image.open(shot).convert("RGB").getcolors(1 << 22)}
        assert (198, 40, 40) in colours or not strips[name].startswith("unhealthy")  # the red badge is painted
    assert strips["p_s0"].split()[0] == "unhealthy" and "template collapse" in strips["p_s0"]
    # b-low_s0's only warning is a busy machine's note, which never sets the health word
    assert strips["b-low_s0"].split()[0] == "healthy" and "compressed grounded" in strips["b-low_s0"]
    assert "wrong but grounded" in strips["f-low_s9"] and "no longer leads to success" in strips["f-low_s9"]
    assert strips["quickstart"].split()[0] == "unhealthy" and "no reasoning" in strips["quickstart"]
    regularised = strips["reg-only_s97"]  # the committed run trained on the regularisers alone
    assert regularised.split()[0] == "unhealthy" and "degenerate (trajectory)" in regularised
    assert "template collapse (trajectory)" not in regularised  # named only as what it is not
    degenerate = strips["degenerate"]
    assert degenerate.split()[0] == "unhealthy" and "degenerate (trajectory)" in degenerate
    assert "template collapse (trajectory)" not in degenerate and "as format validity fell" in degenerate
