"""Hostile retrieval servers on 127.0.0.1 against SearchQA's ``retriever_url`` client.

Every broken answer (status line, headers, body, JSON, redirect) must end as a failed search the agent is shown,
never an exception out of ``step()``; a dripping server must not hold a request past its deadline; a huge body
or millions of hits must not be read into memory (peak RSS measured in a fresh process).
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import time

import pytest

from mirl.cli import main
from mirl.envs import make
from mirl.envs.search.retrieval import HttpRetriever

from .hostile_server import HostileServer, drip, endless, headers, raw

GOOD = json.dumps({"result": [[{"document": {"contents": '"Title"\nsome text'}, "score": 1.0}]]}).encode()
DEEP = b"[" * 200_000
DEEP_OBJECT = b'{"a":' * 100_000

BROKEN = {
    "bad status line": raw(b"HTTX/1.1 200 OK\r\n\r\n" + GOOD),
    "garbage": raw(b"\x00\x01\x02 not http at all\r\n\r\n"),
    "empty reply": raw(b""),
    "long status line": raw(b"HTTP/1.1 200 " + b"O" * (1 << 20) + b"\r\n\r\n"),
    "long header line": raw(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (1 << 20) + b"\r\n\r\n"),
    "too many headers": raw(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 50_000 + b"\r\n" + GOOD),
    "incomplete read": raw(headers(length=1000) + b'{"result": [['),
    "bad chunking": raw(headers(extra="Transfer-Encoding: chunked\r\n") + b"zz\r\nabc\r\n"),
    "status 500": raw(headers("500 Internal Server Error", length=2) + b"{}"),
    "status 404": raw(headers("404 Not Found", length=0)),
    "deep list": raw(headers(length=len(DEEP)) + DEEP),
    "deep object": raw(headers(length=len(DEEP_OBJECT)) + DEEP_OBJECT),
    "not json": raw(headers(length=6) + b"<html>"),
    "not utf-8": raw(headers(length=4) + b'"\xff\xfe"'),
    "wrong shape": raw(headers(length=13) + b'{"wrong": 1}\n'),
    "gzip body": raw(headers(extra="Content-Encoding: gzip\r\n") + gzip.compress(GOOD)),
}


def searchqa(url: str):
    env = make("searchqa", corpus_size=50, retriever_url=url)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_answer_is_a_failed_search_not_an_exception(case):
    with HostileServer(BROKEN[case]) as server:
        observation, reward, terminated, truncated, info = searchqa(server.url).step("search[vantor mills]")
    assert "Retrieval failed: retrieval server" in observation, observation
    assert reward == 0 and not terminated and not truncated
    assert info["action_valid"] and info["retrieval_failed"]


def test_a_good_answer_still_reads():
    with HostileServer(raw(headers(length=len(GOOD)) + GOOD)) as server:
        observation, *_, info = searchqa(server.url).step("search[vantor mills]")
    assert "Doc 1 (Title: Title) some text" in observation and "retrieval_failed" not in info


def test_a_redirect_to_another_port_is_not_followed():
    with HostileServer(raw(headers(length=len(GOOD)) + GOOD)) as elsewhere:
        moved = headers("302 Found", extra=f"Location: {elsewhere.url}\r\n", length=0)
        with HostileServer(raw(moved)) as server:
            observation, *_ = searchqa(server.url).step("search[vantor mills]")
    assert "HTTP 302" in observation and "redirects are not followed" in observation
    assert elsewhere.requests == 0


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(headers(length=1000), id="body"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Slow: ", id="headers"),
    ],
)
def test_a_70_second_drip_ends_at_the_deadline(where):
    """One byte every 0.5 s resets any per-read timeout; the request's one deadline (2 s here) still holds."""
    with HostileServer(drip(where, b"a", interval=0.5, seconds=70)) as server:
        client = HttpRetriever(server.url, timeout=2)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="no complete answer within 2 s"):
            client.search("vantor mills", 5)
        elapsed = time.monotonic() - start
    assert 1.9 < elapsed < 3.5, elapsed


MEASURE = """
import resource, sys
from mirl.envs.search.retrieval import HttpRetriever, RetrievalError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    HttpRetriever(sys.argv[1], timeout=30).search("vantor mills", 5)
    print("answered")
except RetrievalError as err:
    print("refused:", err)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
HITS = b'{"document": {"contents": "x"}, "score": 1.0},'
BIG_ANSWERS = {
    "400 MB body": endless(headers(), 400 << 20, b" " * (64 << 10)),
    "400 MB announced": endless(headers(length=400 << 20), 400 << 20, b" " * (64 << 10)),
    "2M hits": endless(headers() + b'{"result": [[', 2_000_000 * len(HITS), HITS * 1000),
    "2M empty hits": raw(headers() + b'{"result": [[' + b"{}," * 2_000_000 + b"{}]]}"),
}


@pytest.mark.parametrize("case", sorted(BIG_ANSWERS))
def test_a_huge_answer_is_refused_without_reading_it_into_memory(case):
    """The old client read the whole body: 843 MB peak for 400 MB, 461 MB for 2 million hits."""
    with HostileServer(BIG_ANSWERS[case]) as server:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-c", MEASURE, server.url], capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines and lines[0].startswith("refused: retrieval server"), done
    growth_mb = int(lines[-1])
    assert growth_mb < 64, f"peak RSS grew by {growth_mb} MB"
    assert time.monotonic() - start < 30


def test_mirl_play_shows_a_failed_search_and_goes_on(monkeypatch, capsys):
    with HostileServer(raw(b"HTTX/1.1 200 OK\r\n\r\n")) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("search[vantor mills]\nfinish[nobody]\n"))
        code = main(["play", "searchqa", f"retriever_url={server.url}", "corpus_size=50"])
    out = capsys.readouterr().out
    assert code == 0 and "Retrieval failed" in out and "episode over" in out
