"""SearchQA: answer a (multi-hop) question by searching a passage corpus, then submitting a short answer.

Observation:
    ``Question: ...`` and, after a search, the top ``top_k`` passages for the query as ``Doc i (Title: t) text``,
    each cut to ``max_chars // top_k`` characters (``max_chars`` in all, the reference's 4000), or a line saying
    that nothing matched. After ``finish[...]`` the question and the submitted answer.

Actions:
    One per turn (free-form for the rollout engine, parsed by :mod:`mirl.envs.commands`): ``search[query]`` or
    ``finish[answer]``, verbs case-insensitive. Anything else, an empty query or answer, or ``search[`` without
    the closing bracket is invalid: state unchanged, reward 0, ``action_valid=False``, no step used.

Reward:
    At ``finish``: 1 when the normalised answer equals the normalised gold answer (lower case, punctuation and
    the articles a/an/the removed, whitespace collapsed); otherwise the token F1 of the two when it is at least
    0.3, else 0 (REFERENCE section 8). Searches earn 0. ``info`` carries ``em`` and ``f1`` at the finish.

Termination:
    ``terminated=True`` at ``finish`` (``success`` = exact match); ``truncated=True`` once ``max_steps`` valid
    actions were taken without a finish. Later steps are invalid and change nothing.

Instances:
    ``source="synthetic"`` (offline default): questions over the fictional knowledge base of
    :mod:`mirl.envs.search.knowledge` (``corpus_size`` passages, generated from ``kb_seed``), single-hop, bridge and
    comparison kinds in equal shares; train and validation questions are disjoint by a hash of the question
    text (:func:`mirl.envs.data.split_of`). Retrieval is BM25 (:mod:`mirl.envs.search.retrieval`, with
    ``bm25s``), the index cached on disk. ``source="hf"``: HotpotQA (``hotpotqa/hotpot_qa``, distractor
    setting, its own train/validation splits); ``source="local"``: a ``.jsonl``/``.parquet`` file with the same
    columns (``question``, ``answer``, ``context``), split by a hash of the question. For HotpotQA rows each
    question's ten context paragraphs form its corpus, unless ``corpus_path`` names a shared corpus file (JSON
    lines with ``contents`` = ``"Title"\\ntext``, the reference's format, or ``title`` and ``text``).
    ``retriever_url`` replaces BM25 by a retrieval server (:class:`~mirl.envs.search.retrieval.HttpRetriever`);
    a search the server does not answer usably (an error status, a broken or oversize answer, its deadline) is a
    valid action whose observation starts ``Retrieval failed:`` with the reason, and ``info["retrieval_failed"]``.

Arguments:
    source: "synthetic" (offline knowledge base), "hf" (HotpotQA from the hub) or "local" (a HotpotQA-schema file).
    path: the file for source="local"; the hub id for source="hf" (default hotpotqa/hotpot_qa).
    split: "train" or "validation"; the two never share a question.
    corpus_size: passages in the synthetic knowledge base (50..1000000).
    kb_seed: seed of the synthetic knowledge base (the question comes from the reset seed).
    max_steps: actions (searches and the finish) per episode before it is truncated.
    top_k: passages returned per search.
    max_chars: characters of all passages of one search result together (each gets max_chars // top_k).
    corpus_path: a JSON-lines corpus searched instead of each HotpotQA question's own paragraphs.
    retriever_url: URL of a retrieval server (reference JSON shape) used instead of in-process BM25.
    cache_dir: where BM25 indices are cached (default $MIRL_CACHE, else ~/.cache/mirl).
"""

from __future__ import annotations

import functools
import json
import os
import re
import string
from collections import Counter
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.commands import parse_command, shorten
from mirl.envs.data import SPLITS, check_choice, load_rows, row_for_seed, split_of
from mirl.envs.registry import register
from mirl.envs.search.knowledge import KnowledgeBase, draw_question, generate_kb
from mirl.envs.search.retrieval import BM25Retriever, HttpRetriever, RetrievalError, Retriever

HF_DATASET = "hotpotqa/hotpot_qa"
HF_CONFIG = "distractor"
F1_THRESHOLD = 0.3
VERBS = ("search", "finish")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, articles removed, whitespace collapsed (SQuAD / HotpotQA).

    >>> normalize_answer("The  Vantor Mills, Ltd.")
    'vantor mills ltd'
    """
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised token multisets: 2 P R / (P + R), P = common / |pred|, R = common / |gold|.

    >>> token_f1("Vantor Mills", "the Vantor Mills Company")   # P = 2/2, R = 2/3 -> 0.8
    0.8
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def answer_reward(prediction: str, gold: str) -> tuple[float, bool, float]:
    """``(reward, exact_match, f1)``: 1 on exact match, else F1 when F1 >= 0.3, else 0.

    >>> answer_reward("an Arvenia!", "Arvenia")
    (1.0, True, 1.0)
    """
    exact = normalize_answer(prediction) == normalize_answer(gold)
    f1 = 1.0 if exact else token_f1(prediction, gold)
    reward = 1.0 if exact else (f1 if f1 >= F1_THRESHOLD else 0.0)
    return reward, exact, f1


@functools.lru_cache(maxsize=4)
def synthetic_kb(corpus_size: int, kb_seed: int) -> tuple[KnowledgeBase, tuple[str, ...]]:
    kb = generate_kb(corpus_size, kb_seed)
    return kb, kb.passages


@functools.lru_cache(maxsize=8)
def _bm25(passages: tuple[str, ...], cache_dir: str | None) -> BM25Retriever:
    return BM25Retriever(passages, cache_dir=cache_dir)


@functools.lru_cache(maxsize=2)
def _hotpot_hub(path: str, split: str) -> Any:
    try:
        import datasets
    except ImportError as err:
        raise ImportError("source='hf' needs the `datasets` package: pip install 'mirl[data]'") from err
    try:
        return datasets.load_dataset(path, HF_CONFIG, split=split)
    except Exception as err:  # network and cache failures take many exception types; re-raised with the fix
        raise RuntimeError(
            f"could not load {path!r} ({HF_CONFIG}, split {split!r}): {type(err).__name__}: {err}. Offline? Use "
            "source='local' with a downloaded .jsonl/.parquet file of the same columns, or source='synthetic'"
        ) from err


def context_passages(context: Any) -> tuple[str, ...]:
    """``"title\\ntext"`` per paragraph of a HotpotQA ``context``: the hub's ``{"title": [...], "sentences":
    [[...], ...]}`` or the original ``[[title, [sentence, ...]], ...]``."""
    if isinstance(context, dict):
        pairs = zip(context["title"], context["sentences"], strict=True)
    else:
        pairs = ((title, sentences) for title, sentences in context)
    return tuple(f"{title}\n{''.join(sentences).strip()}" for title, sentences in pairs)


def read_corpus(path: str) -> tuple[str, ...]:
    """Passages of a JSON-lines corpus: ``contents`` (``"Title"\\ntext``) or ``title`` + ``text`` per line."""
    passages = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("contents"), str):
                title, _, text = row["contents"].partition("\n")
                passages.append(f"{title.strip().strip(chr(34))}\n{text}")
            elif isinstance(row, dict) and isinstance(row.get("text"), str):
                passages.append(f"{row.get('title', '')}\n{row['text']}")
            else:
                raise ValueError(f"{path}:{line_no}: expected a JSON object with 'contents' or 'title' and 'text'")
    if not passages:
        raise ValueError(f"corpus file {path} holds no passages")
    return tuple(passages)


def render_results(passages: list[str], max_chars: int, top_k: int) -> str:
    """``Doc i (Title: t) text`` lines, each cut to ``max_chars // top_k`` characters."""
    if not passages:
        return "No passage matches the query."
    lines = []
    for i, passage in enumerate(passages, start=1):
        title, _, text = passage.partition("\n")
        title = title.strip().strip('"')  # the reference's corpora quote titles: "Title"\ntext
        lines.append(shorten(f"Doc {i} (Title: {title}) {' '.join(text.split())}", max_chars // top_k))
    return "\n".join(lines)


def _positive_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


@register("searchqa")
class SearchQA(TextEnv):
    """Answer a question by searching passages (see the module docstring)."""

    description = "Answer a multi-hop question by searching a passage corpus: search[query], finish[answer]."
    action_words = None
    default_action_budget = 5
    multi_turn = True
    max_actions_per_turn = 1

    def __init__(
        self,
        *,
        source: str = "synthetic",
        path: str | None = None,
        split: str = "train",
        corpus_size: int = 20000,
        kb_seed: int = 0,
        max_steps: int = 5,
        top_k: int = 5,
        max_chars: int = 4000,
        corpus_path: str | None = None,
        retriever_url: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.source = check_choice("source", source, ("synthetic", "hf", "local"))
        self.split = check_choice("split", split, SPLITS)
        self.max_steps = _positive_int("max_steps", max_steps, 1, 100)
        self.top_k = _positive_int("top_k", top_k, 1, 50)
        self.max_chars = _positive_int("max_chars", max_chars, 100, 100_000)
        self.cache_dir = cache_dir
        self.kb: KnowledgeBase | None = None
        self.rows = None
        self.retriever: Retriever | None = None
        if retriever_url is not None:
            self.retriever = HttpRetriever(retriever_url)
        elif corpus_path is not None:
            if not os.path.isfile(corpus_path):
                raise FileNotFoundError(f"corpus_path must be an existing JSON-lines file, got {corpus_path!r}")
            self.retriever = _bm25(read_corpus(corpus_path), cache_dir)
        if self.source == "synthetic":
            self.kb, passages = synthetic_kb(_positive_int("corpus_size", corpus_size, 50, 1_000_000), int(kb_seed))
            self.retriever = self.retriever or _bm25(passages, cache_dir)
        elif self.source == "hf":
            self.rows = _hotpot_hub(path or HF_DATASET, split)
        else:
            if path is None:
                raise ValueError("source='local' needs path=<file.jsonl|file.parquet> with HotpotQA columns")
            self.rows = load_rows(
                "local", path, split, key_fields=("question",), key=str, required=("answer", "context")
            )
        self.question, self.answer = "", ""
        self.instance = None  # the synthetic Question (text, answer, kind, hops), for oracles and analysis
        self._episode_retriever: Retriever | None = None
        self._observation, self.steps, self._ended = "", 0, (False, False)
        self._done = self._success = False

    @property
    def instruction(self) -> str:
        return (
            "Answer the question using a search engine over a corpus of passages. Write exactly one action per "
            f"turn: search[your query] shows the {self.top_k} best-matching passages; finish[your answer] submits "
            "a short answer (a name, a place or a year) and ends the episode. Some questions need two searches: "
            "find the first entity, then the one its passage names. "
            f"You may take {self.max_steps} actions in all."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"searchqa.reset takes no options, got {sorted(options)}; pass them to make()")
        if self.kb is not None:
            question = draw_question(self.kb, self.np_random, lambda q: split_of(q.text) == self.split)
            self.question, self.answer, self.instance = question.text, question.answer, question
            self._episode_retriever = self.retriever
        else:
            row = row_for_seed(self.rows, int(self.np_random.integers(2**31)) if seed is None else seed)
            self.question, self.answer = str(row["question"]), str(row["answer"])
            self._episode_retriever = self.retriever or BM25Retriever(context_passages(row["context"]), cache=False)
        self.steps, self._ended = 0, (False, False)  # (terminated, truncated)
        self._done = self._success = False
        self._observation = f"Question: {self.question}"
        return self._observation, {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._episode_retriever is None:
            raise RuntimeError("call reset(seed=...) before step()")
        command = None if self._done else parse_command(action, VERBS)
        if command is None or not command[1]:
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, self._ended[0], self._ended[1], info
        verb, argument = command
        self.steps += 1
        info: dict[str, Any] = {"action_valid": True, "action_effective": True, "steps": self.steps}
        reward = 0.0
        if verb == "search":
            try:
                results = render_results(
                    self._episode_retriever.search(argument, self.top_k), self.max_chars, self.top_k
                )
            except RetrievalError as err:  # an unusable server answer is a failed search the agent is shown
                results, info["retrieval_failed"] = f"Retrieval failed: {shorten(str(err), 300)}", True
            self._observation = f"Question: {self.question}\nSearch results for {shorten(argument, 200)!r}:\n{results}"
        else:
            reward, exact, f1 = answer_reward(argument, self.answer)
            self._done, self._success = True, exact
            info |= {"em": exact, "f1": f1}
            self._observation = f"Question: {self.question}\nYour answer: {shorten(argument, 200)}"
        self._ended = (verb == "finish", verb != "finish" and self.steps >= self.max_steps)
        self._done = any(self._ended)
        info["success"] = self._success
        return self._observation, reward, *self._ended, info

    def render(self) -> str:
        return self._observation
