"""Open reports in headless Chromium: no console errors, every image decodes, every section is there.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (/usr/bin/chromium, /usr/bin/chromedriver) and
the Python package ``selenium``; skipped with the reason when any is absent. The flags keep Chromium from
reaching out to the network (this suite runs offline) and give it a fresh profile.
"""

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
    assert len(page["images"]) == len(result.png_paths) == 7
    assert all(image["complete"] and image["width"] > 0 for image in page["images"])
    assert len(page["sections"]) == 9 and page["missing"] == 0


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
