"""Transcripts show each turn's rendered boards inline; the page names the run's modality."""

from __future__ import annotations

import base64
import json
import re

from mirl.envs.images import image_from_png, image_id
from mirl.report import build_report

from .conftest import write_vision_run

NO_PLOTS = ("metrics", "groups")  # the transcripts and the subtitle need neither
IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="board image ([0-9a-f]{16})"')


def _turn_blocks(page: str) -> list[str]:
    return page.split('<div class="turn">')[1:]


def test_each_turn_shows_its_boards_beside_its_text(tmp_path):
    run = write_vision_run(tmp_path / "runs")
    page = build_report(run).html_path.read_text()
    assert "mirl run report · modality: vision · " in page
    records = [json.loads(line) for line in (run / "rollouts" / "iteration_000001.jsonl").read_text().splitlines()]
    blocks = _turn_blocks(page)
    assert len(blocks) == 2 * 3  # one saved iteration (1) x 2 episodes shown x 3 turns
    shown_ids = []
    for block in blocks:
        observation, boards = re.search(
            r'<div class="obs"><pre>(.*?)</pre><div class="boards">(.*?)</div>', block, re.DOTALL
        ).groups()
        found = IMG.findall(boards)
        assert len(found) == 1 and "&lt;image&gt;" in observation and "######" in observation
        data, ident = found[0]
        assert image_id(image_from_png(base64.b64decode(data))) == ident  # the pixels the env drew
        shown_ids.append(ident)
    listed = {ident for record in records for turn in record["turns"] for ident in turn["images"]}
    assert set(shown_ids) <= listed and len(set(shown_ids)) > 1
    assert "Missing: image" not in page


def test_a_missing_image_is_named_and_the_rest_still_shows(tmp_path):
    run = write_vision_run(tmp_path / "runs", omit=NO_PLOTS)
    records = [json.loads(line) for line in (run / "rollouts" / "iteration_000001.jsonl").read_text().splitlines()]
    first_boards = {record["turns"][0]["images"][0] for record in records}  # every episode's first board
    for ident in first_boards:
        (run / "rollouts" / "images" / f"{ident}.png").unlink()
    page = build_report(run).html_path.read_text()
    blocks = _turn_blocks(page)
    for block in blocks[0::3]:  # turn 1 of each shown episode
        assert re.search(r'<span class="missing">image [0-9a-f]{16}\.png is missing</span>', block)
        assert not IMG.search(block)
    assert all(len(IMG.findall(block)) == 1 for i, block in enumerate(blocks) if i % 3)
    assert re.search(r"Missing: image [0-9a-f]{16}\.png is missing", page)


def test_text_run_is_labelled_text_and_config_vision_is_labelled_vision(make_run, tmp_path):
    text_page = build_report(make_run("plain", omit=NO_PLOTS)).html_path.read_text()
    assert "modality: text" in text_page and 'class="boards"' not in text_page
    no_turn_images = write_vision_run(tmp_path / "runs", "configured", turns=0, modality="vision", omit=NO_PLOTS)
    assert "modality: vision" in build_report(no_turn_images).html_path.read_text()
    auto = write_vision_run(tmp_path / "runs", "auto", modality="auto", omit=NO_PLOTS)
    assert "modality: vision" in build_report(auto).html_path.read_text()  # the turns carry images
