"""BM25 retrieval (hand-computed scores, parity with bm25s, ranking, disk cache) and the HTTP retriever client."""

from __future__ import annotations

import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from mirl.envs.search import retrieval
from mirl.envs.search.retrieval import BM25Retriever, HttpRetriever, Retriever, tokenize

CORPUS = ["apple banana", "apple apple cherry", "banana", "durian elderberry fig"]


def test_bm25_scores_match_the_formula_by_hand():
    retriever = BM25Retriever(CORPUS[:3], cache=False)
    ids = [retriever.model.vocab_dict["apple"]]
    scores = retriever.scores_from_ids(ids)
    # N = 3, df(apple) = 2: idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6); avgdl = (2 + 3 + 1) / 3 = 2
    idf = math.log(1.6)
    # doc 0: tf 1, |d| 2: 1 / (1 + 1.5 * (0.25 + 0.75 * 2 / 2)) = 1 / 2.5
    # doc 1: tf 2, |d| 3: 2 / (2 + 1.5 * (0.25 + 0.75 * 3 / 2)) = 2 / 4.0625
    expected = [idf / 2.5, idf * 2 / 4.0625, 0.0]
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    assert retriever.search("apple", 5) == ["apple apple cherry", "apple banana"]  # zero scores are left out


def test_fast_scores_equal_the_library_scores():
    passages = [f"word{i % 7} word{i % 11} word{i % 3} tail{i}" for i in range(200)]
    retriever = BM25Retriever(passages, cache=False)
    ids = [retriever.model.vocab_dict[w] for w in ("word1", "word5", "word2", "tail7")]
    np.testing.assert_allclose(retriever.scores_from_ids(ids), retriever.model.get_scores_from_ids(ids), rtol=1e-6)


def test_ties_go_to_the_lower_index_and_k_limits():
    retriever = BM25Retriever(["same words", "other", "same words", "same words"], cache=False)
    assert retriever.search_ids("same", 2) == [0, 2]
    assert retriever.search_ids("same words", 10) == [0, 2, 3]
    assert retriever.search("", 3) == [] and retriever.search("the of and", 3) == []  # stop words only
    assert retriever.search("unknownword", 3) == []
    with pytest.raises(ValueError, match="k must be >= 1"):
        retriever.search("same", 0)


def test_tokenize_lowercases_and_drops_stop_words():
    assert tokenize("The Kelbrin-Labs, founded in 1912!") == ["kelbrin", "labs", "founded", "1912"]


def test_index_is_cached_on_disk_without_pickles(tmp_path, monkeypatch):
    BM25Retriever(CORPUS, cache_dir=tmp_path)
    (entry,) = (tmp_path / "bm25").iterdir()
    assert entry.name == retrieval.corpus_key(CORPUS)
    for array in entry.glob("*.npy"):
        np.load(array, allow_pickle=False)  # plain arrays: loads without unpickling
    assert not list((tmp_path / "bm25").glob(".*"))  # no staging directory left behind
    retrieval._MEMORY.clear()
    monkeypatch.setattr(retrieval, "_build", lambda passages: pytest.fail("the cached index was rebuilt"))
    assert BM25Retriever(CORPUS, cache_dir=tmp_path).search("cherry", 1) == ["apple apple cherry"]


def test_a_damaged_cache_entry_is_rebuilt(tmp_path):
    BM25Retriever(CORPUS, cache_dir=tmp_path)
    (entry,) = (tmp_path / "bm25").iterdir()
    (entry / "params.index.json").write_text("{not json")
    retrieval._MEMORY.clear()
    assert BM25Retriever(CORPUS, cache_dir=tmp_path).search("fig", 1) == ["durian elderberry fig"]
    assert json.loads((entry / "params.index.json").read_text())["num_docs"] == len(CORPUS)


def test_a_planted_symlink_is_neither_read_nor_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache" / "bm25").mkdir(parents=True)
    (tmp_path / "cache" / "bm25" / retrieval.corpus_key(CORPUS)).symlink_to(elsewhere)
    retrieval._MEMORY.clear()
    assert BM25Retriever(CORPUS, cache_dir=tmp_path / "cache").search("fig", 1) == ["durian elderberry fig"]
    assert list(elsewhere.iterdir()) == []


def test_missing_bm25s_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"pip install bm25s"):
        BM25Retriever(["a passage"], cache=False)


class _Server:
    """A retrieval server on 127.0.0.1 in the reference's shape, answering from a BM25Retriever."""

    def __init__(self, passages, *, broken=False):
        backend = BM25Retriever(passages, cache=False)
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                result = [
                    [{"document": {"id": str(i), "contents": f'"{backend.passages[i]}"'}, "score": 1.0}
                     for i in backend.search_ids(query, body["topk"])]
                    for query in body["queries"]
                ]  # fmt: skip
                data = json.dumps({"wrong": 1} if broken else {"result": result}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_http_retriever_speaks_the_reference_shape():
    with _Server(CORPUS) as server:
        client = HttpRetriever(server.url, timeout=5)
        assert isinstance(client, Retriever)
        assert client.search("banana", 5) == ['"banana"', '"apple banana"']  # the shorter passage first
        assert client.batch_search(["cherry", "fig"], 1) == [['"apple apple cherry"'], ['"durian elderberry fig"']]
    assert server.requests[0] == {"queries": ["banana"], "topk": 5, "return_scores": True}


def test_http_retriever_errors_name_the_server():
    with _Server(CORPUS, broken=True) as server, pytest.raises(RuntimeError, match="a list per query"):
        HttpRetriever(server.url, timeout=5).search("banana", 2)
    with _Server(CORPUS) as server:
        dead = server.url
    with pytest.raises(RuntimeError, match="127.0.0.1"):
        HttpRetriever(dead, timeout=2).search("banana", 2)
    with pytest.raises(ValueError, match="http://"):
        HttpRetriever("ftp://host/retrieve")
