"""Passage retrieval for the search environments: a ``Retriever`` protocol, in-process BM25, an HTTP client.

Two implementations of :class:`Retriever` (``search(query, k) -> [passage]``, best first):

- :class:`BM25Retriever`: Okapi BM25 in Lucene's variant (``k1 = 1.5``, ``b = 0.75``) over a passage list,
  built with ``bm25s`` (a dependency of mirl). The score of passage d for query q is

      score(q, d) = sum over distinct words w of q:  idf(w) * tf(w, d) / (tf(w, d) + k1 * (1 - b + b * |d| / avgdl))
      idf(w)      = ln(1 + (N - df(w) + 0.5) / (df(w) + 0.5))

  (Lucene drops the constant factor k1 + 1 of the textbook numerator; the ranking is the same).

  Words are lower-cased ``[a-z0-9]+`` runs minus a short English stop list; a query word repeated counts once,
  words the corpus lacks are ignored. Only passages with a positive score are returned; ties go to the lower
  passage index, so results are a pure function of corpus and query.
  The index is cached on disk per corpus: ``<cache>/bm25/<key>/``, where ``key`` is a SHA-256 over the format
  version, the parameters and every passage, and ``<cache>`` is ``cache_dir``, else ``$MIRL_CACHE``, else
  ``~/.cache/mirl``. It is written into a fresh temporary sibling and renamed into place, so a crash never leaves
  a half index, and read back as plain ``.npy``/JSON with ``allow_pickle=False``; a second start with the same
  corpus loads it instead of indexing. Within one process indices are also kept in memory by key.
- :class:`HttpRetriever` (in :mod:`mirl.envs.search.http_retriever`, which bounds time, size and depth of
  every answer): a client for a retrieval server in the reference's request/response shape, for users who run a
  dense retriever (E5 + FAISS): ``POST <url>`` with ``{"queries": [q, ...], "topk": k, "return_scores": true}``;
  the answer is ``{"result": [[{"document": {"contents": "..."}, "score": s}, ...], ...]}`` (one list per query;
  entries without scores, ``{"contents": "..."}``, are accepted too).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from mirl.envs.search.http_retriever import HttpRetriever, RetrievalError

__all__ = ["BM25Retriever", "HttpRetriever", "RetrievalError", "Retriever", "tokenize"]

INSTALL_HINT = "pip install bm25s (a dependency of mirl: pip install -e . installs it)"
INDEX_FORMAT = "mirl-bm25-v1"
K1, B = 1.5, 0.75
_STOP_TEXT = "a an and are as at be by did do does for from has have how in is it its of on or that the this to "
STOPWORDS = frozenset((_STOP_TEXT + "was were what when where which who whom whose why with").split())
_WORD = re.compile(r"[a-z0-9]+")


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the ``k`` best passages for a query, best first (fewer when fewer match)."""

    def search(self, query: str, k: int) -> list[str]: ...


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric words of ``text`` without stop words.

    >>> tokenize("Who founded the Vantor Mills, in 1912?")
    ['founded', 'vantor', 'mills', '1912']
    """
    return [word for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The mirl cache: ``cache_dir``, else ``$MIRL_CACHE``, else ``~/.cache/mirl`` (as the model cache)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("MIRL_CACHE") or Path.home() / ".cache" / "mirl").expanduser()


def corpus_key(passages: Sequence[str]) -> str:
    """SHA-256 (hex) over the index format, the tokenizer, the BM25 parameters and every passage, length-prefixed."""
    tokenizer = f"{_WORD.pattern}|{' '.join(sorted(STOPWORDS))}"
    digest = hashlib.sha256(f"{INDEX_FORMAT}|{tokenizer}|k1={K1}|b={B}|n={len(passages)}".encode())
    for passage in passages:
        data = passage.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def _bm25s():
    try:
        import bm25s
    except ImportError as err:
        raise ImportError(f"BM25 retrieval needs the `bm25s` package, which is not installed: {INSTALL_HINT}") from err
    return bm25s


def _build(passages: Sequence[str]):
    bm25s = _bm25s()
    model = bm25s.BM25(k1=K1, b=B)
    model.index([tokenize(passage) for passage in passages], show_progress=False)
    return model


def _save_atomically(model, target: Path) -> None:
    """Write the index into a temporary sibling, then rename it to ``target`` (a concurrent writer may win)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save(str(staging), allow_pickle=False, show_progress=False)
        os.replace(staging, target)
    except OSError:
        if not target.is_dir():  # not a lost race with another writer: a real failure
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _load(directory: Path):
    return _bm25s().BM25.load(str(directory), allow_pickle=False, mmap=False, load_corpus=False, show_progress=False)


_MEMORY: dict[tuple[str, str], object] = {}  # (key, cache root) -> model; the last _MEMORY_SIZE used
_MEMORY_SIZE = 8


def _cached_model(key: str, root: str, passages: tuple[str, ...]):
    """The BM25 model of ``passages``: from memory, else from ``<root>/bm25/<key>``, else built and saved there."""
    if (key, root) not in _MEMORY:
        _MEMORY[(key, root)] = _disk_model(Path(root) / "bm25" / key, passages)
        while len(_MEMORY) > _MEMORY_SIZE:
            del _MEMORY[next(iter(_MEMORY))]
    return _MEMORY[(key, root)]


def _disk_model(directory: Path, passages: tuple[str, ...]):
    if directory.is_dir() and not directory.is_symlink():
        try:
            model = _load(directory)
            if int(model.scores["num_docs"]) == len(passages):
                return model
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            pass  # a damaged cache entry is rebuilt below
        shutil.rmtree(directory, ignore_errors=True)
    model = _build(passages)
    _save_atomically(model, directory)
    return model


class BM25Retriever:
    """BM25 over ``passages`` (see the module docstring); ``cache=False`` keeps the index in memory only.

    >>> retriever = BM25Retriever(["Vantor Mills is a bakery.", "Kelbrin Labs makes lamps."], cache=False)
    >>> retriever.search("who runs kelbrin labs", 5)
    ['Kelbrin Labs makes lamps.']
    """

    def __init__(
        self, passages: Sequence[str], *, cache: bool = True, cache_dir: str | os.PathLike | None = None
    ) -> None:
        if len(passages) == 0 or not all(isinstance(p, str) for p in passages):
            raise ValueError("BM25Retriever needs a non-empty sequence of passage strings")
        self.passages = tuple(passages)
        self.key = corpus_key(self.passages)
        if cache:
            self.model = _cached_model(self.key, str(cache_root(cache_dir)), self.passages)
        else:
            self.model = _build(self.passages)
        self._vocab: dict[str, int] = self.model.vocab_dict

    def scores_from_ids(self, ids: Sequence[int]) -> np.ndarray:
        """BM25 score of every passage, float64 ``(n,)``: the sum of the index's precomputed per-(word, passage)
        terms over the query's word ids; one ``bincount`` over their postings (the library adds them one word
        at a time with ``np.add.at``, several times slower; a test checks both agree)."""
        index = self.model.scores
        starts, ends = index["indptr"][ids], index["indptr"][np.asarray(ids) + 1]
        postings = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
        return np.bincount(
            index["indices"][postings], weights=index["data"][postings], minlength=int(index["num_docs"])
        )

    def search_ids(self, query: str, k: int) -> list[int]:
        """Indices of the ``k`` best passages with a positive score: score descending, then index ascending."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        ids = sorted({self._vocab[word] for word in tokenize(query) if word in self._vocab})
        if not ids:
            return []
        scores = self.scores_from_ids(ids)  # (n,)
        positive = np.flatnonzero(scores > 0)
        if len(positive) > k:
            threshold = np.partition(scores[positive], len(positive) - k)[len(positive) - k]
            positive = positive[scores[positive] >= threshold]
        order = np.lexsort((positive, -scores[positive]))  # score descending, index ascending
        return [int(i) for i in positive[order][:k]]

    def search(self, query: str, k: int) -> list[str]:
        return [self.passages[i] for i in self.search_ids(query, k)]
