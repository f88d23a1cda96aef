"""WebShop: find the product an instruction describes in a web shop, choose its options and buy it.

Observation:
    The instruction, then the current page, then ``Available actions: ...`` listing every action legal there:
    the search page (``search[...]``); a results page (10 products per page of the top 50, each ``[ASIN]
    title`` and price; ``back to search``, ``next >``, ``< prev``); an item page (title, price, one button per
    option value, ``description``, ``features``, ``reviews``, ``buy now``, ``< prev`` back to the results); a
    description / features / reviews sub-page (``< prev`` back to the item). Buying ends on a page that shows
    the score and lists no action.

Actions:
    One per turn (free-form for the rollout engine, parsed by :mod:`mirl.envs.commands`): ``search[keywords]`` on
    the search page, ``click[button]`` with a button of the current page (case and surrounding spaces ignored).
    Anything else, a ``click`` of a button not on the page, a search elsewhere or an empty query is invalid: state
    unchanged, reward 0, ``action_valid=False``, no step used. Clicking an option value selects it for its option
    (the first option holding that value); selections last while the item stays open.

Reward:
    At ``buy now``: the raw score of :mod:`mirl.envs.shop.reward`, ``r_type * (matched attributes + matched
    options + price within cap) / (attributes + options + 1)``, with ``reward="raw"`` (default: dense, as the
    paper's table); or the reference's binarised success, 1 iff the raw score is 1, with ``reward="binary"``.
    ``info`` carries ``raw_score`` and its parts. Every other step earns 0.

State key:
    ``info["state_key"]`` (reset and every step) names the page: its kind, the query, the results page number,
    the open item's ASIN, the chosen options and the sub-page, joined by ``|``.

Termination:
    ``terminated=True`` at ``buy now`` (``success`` = raw score 1); ``truncated=True`` after ``max_steps``
    valid actions without buying (the reference's budget of 9). Later steps are invalid and change nothing.

Instances:
    ``source="synthetic"`` (offline default): the catalogue of :mod:`mirl.envs.shop.catalogue` (``num_products``
    products from ``catalogue_seed``); the reset seed draws the goal; train and validation goals are disjoint by a
    hash of ASIN and instruction. ``source="local"``: the real WebShop files in the directory ``path``
    (:mod:`mirl.envs.shop.data`), goals from the human instructions. Search is BM25 over each product's
    title, attributes, option values, features and description (:mod:`mirl.envs.search.retrieval`).

Arguments:
    source: "synthetic" (offline catalogue) or "local" (a directory with the real WebShop JSON files).
    path: the directory for source="local".
    split: "train" or "validation"; the two never share a goal.
    num_products: products in the synthetic catalogue (20..200000).
    catalogue_seed: seed of the synthetic catalogue (the goal comes from the reset seed).
    max_steps: valid actions per episode before it is truncated.
    reward: "raw" (the dense score) or "binary" (1 iff the raw score is 1, as the reference).
    cache_dir: where the BM25 index is cached (default $MIRL_CACHE, else ~/.cache/mirl).
"""

from __future__ import annotations

import functools
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.commands import parse_command, shorten
from mirl.envs.data import SPLITS, check_choice, row_for_seed, split_of
from mirl.envs.registry import register
from mirl.envs.search.retrieval import BM25Retriever
from mirl.envs.shop.catalogue import Goal, Product, draw_goal, generate_catalogue
from mirl.envs.shop.reward import score

PER_PAGE, MAX_RESULTS = 10, 50
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
SUB_PAGES = ("description", "features", "reviews")


@functools.lru_cache(maxsize=4)
def _synthetic(num_products: int, seed: int) -> tuple[Product, ...]:
    return generate_catalogue(num_products, seed)


@functools.lru_cache(maxsize=4)
def _engine(texts: tuple[str, ...], cache_dir: str | None) -> BM25Retriever:
    return BM25Retriever(texts, cache_dir=cache_dir)


def goal_key(goal: Goal) -> str:
    return f"{goal.asin}|{goal.instruction}"


@register("webshop")
class WebShop(TextEnv):
    """Shop for the product an instruction describes (see the module docstring)."""

    description = "Find, configure and buy the product an instruction describes: search[keywords], click[button]."
    action_words = None
    default_action_budget = 9
    multi_turn = True
    max_actions_per_turn = 1

    def __init__(
        self,
        *,
        source: str = "synthetic",
        path: str | None = None,
        split: str = "train",
        num_products: int = 2000,
        catalogue_seed: int = 0,
        max_steps: int = 9,
        reward: str = "raw",
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.source = check_choice("source", source, ("synthetic", "local"))
        self.split = check_choice("split", split, SPLITS)
        self.reward_mode = check_choice("reward", reward, ("raw", "binary"))
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= 100:
            raise ValueError(f"max_steps must be an int in [1, 100] (the reference uses 9), got {max_steps!r}")
        self.max_steps = max_steps
        self.goals: tuple[Goal, ...] | None = None
        if self.source == "synthetic":
            self.products = _synthetic(num_products, int(catalogue_seed))
        else:
            if path is None:
                raise ValueError("source='local' needs path=<directory with the WebShop items and instruction files>")
            from mirl.envs.shop.data import load_webshop

            self.products, goals = load_webshop(path)
            self.goals = tuple(goal for goal in goals if split_of(goal_key(goal)) == split)
            if not self.goals:
                raise ValueError(f"split {split!r} of {path} holds no goal; use a larger instruction file")
        self.engine = _engine(tuple(p.search_text for p in self.products), cache_dir)
        self._by_asin = {product.asin: i for i, product in enumerate(self.products)}
        self.goal: Goal | None = None
        self._observation = ""

    @property
    def instruction(self) -> str:
        return (
            "You are shopping in a web shop. Find the product the instruction describes, select the options it "
            "asks for and buy it. Write exactly one action per turn: search[keywords] on the search page, or "
            "click[button] with one of the buttons under 'Available actions' (for example click[b0abc12345] to "
            f"open a product, click[blue] to choose an option, click[buy now]). You have {self.max_steps} actions."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"webshop.reset takes no options, got {sorted(options)}; pass them to make()")
        if self.goals is None:
            self.goal = draw_goal(self.products, self.np_random, self._reachable)
        else:
            self.goal = row_for_seed(
                [{"goal": g} for g in self.goals], int(self.np_random.integers(2**31)) if seed is None else seed
            )["goal"]
        self.page, self.query, self.results, self.page_no = "search", "", [], 0
        self.item: int | None = None
        self.chosen: dict[str, str] = {}
        self.sub_page, self.steps, self._ended, self._success = "", 0, (False, False), False
        self._observation = self._render_page()
        return self._observation, {"success": False, "state_key": self.state_key()}

    def _reachable(self, goal: Goal) -> bool:
        """A synthetic goal is kept when it is in this split and a search for its own instruction lists the target
        product among the top ``MAX_RESULTS`` (so every instance is solvable within the budget)."""
        if split_of(goal_key(goal)) != self.split:
            return False
        return self._by_asin[goal.asin] in self.engine.search_ids(goal.instruction, MAX_RESULTS)

    # ---- pages -------------------------------------------------------------------------------------------
    def buttons(self) -> dict[str, tuple]:
        """Clickable buttons of the current page: lower-cased label -> what the click does."""
        if self.page == "results":
            buttons: dict[str, tuple] = {BACK: ("back",)}
            if self.page_no > 0:
                buttons[PREV] = ("page", self.page_no - 1)
            if (self.page_no + 1) * PER_PAGE < len(self.results):
                buttons[NEXT] = ("page", self.page_no + 1)
            for index in self._shown():
                buttons[self.products[index].asin.lower()] = ("item", index)
            return buttons
        if self.page == "item":
            buttons = {BACK: ("back",), PREV: ("page", self.page_no)}
            for name, values in self.products[self.item].options:
                for value in values:
                    buttons.setdefault(value.lower(), ("option", name, value))
            buttons |= {sub: ("sub", sub) for sub in SUB_PAGES}
            return buttons | {BUY: ("buy",)}
        if self.page == "sub":
            return {BACK: ("back",), PREV: ("item", self.item)}
        return {}

    def _shown(self) -> list[int]:
        return self.results[self.page_no * PER_PAGE : (self.page_no + 1) * PER_PAGE]

    def _render_page(self) -> str:
        lines = [f"Instruction: {self.goal.instruction}"]
        if self.page == "search":
            lines += ["[Search]", "Available actions: search[<keywords>]"]
            return "\n".join(lines)
        if self.page == "results":
            pages = max(1, -(-len(self.results) // PER_PAGE))
            lines.append(f"Results for {shorten(self.query, 200)!r}: page {self.page_no + 1} of {pages}")
            lines += [f"[{self.products[i].asin}] {self.products[i].title} | ${self.products[i].price:.2f}" for i in
                      self._shown()] or ["No product matches the search."]  # fmt: skip
        elif self.page == "item":
            product = self.products[self.item]
            lines += [product.title, f"Price: ${product.price:.2f}"]
            lines += [f"{name}: " + " ".join(f"[{v}]" for v in values) for name, values in product.options]
            chosen = ", ".join(f"{name}: {value}" for name, value in self.chosen.items())
            lines.append(f"Selected: {chosen or 'nothing yet'}")
        elif self.page == "sub":
            product = self.products[self.item]
            body = {"description": [product.description], "features": list(product.features)}
            lines += [f"{self.sub_page.capitalize()} of {product.title}:"]
            lines += body.get(self.sub_page, list(product.reviews)) or ["(none)"]
        lines.append("Available actions: " + ", ".join(f"click[{label}]" for label in self.buttons()))
        return "\n".join(lines)

    # ---- transitions -------------------------------------------------------------------------------------
    def _click(self, effect: tuple) -> None:
        kind = effect[0]
        if kind == "back":
            self.page, self.item, self.chosen = "search", None, {}
        elif kind == "page":
            self.page, self.page_no, self.item, self.chosen = "results", effect[1], None, {}
        elif kind == "item":
            if self.item != effect[1]:
                self.chosen = {}
            self.page, self.item = "item", effect[1]
        elif kind == "option":
            self.chosen[effect[1]] = effect[2]
        elif kind == "sub":
            self.page, self.sub_page = "sub", effect[1]

    def _buy(self) -> tuple[float, dict]:
        product = self.products[self.item]
        result = score(product, tuple(self.chosen.values()), self.goal)
        self._success = result.raw == 1.0
        reward = result.raw if self.reward_mode == "raw" else float(self._success)
        self.page = "done"
        self._observation = (
            f"Instruction: {self.goal.instruction}\nYou bought {product.title} "
            f"({', '.join(self.chosen.values()) or 'no options'}). Thank you for shopping with us! "
            f"Score: {result.raw:.3f}\nAvailable actions: none (the episode is over)"
        )
        return reward, result.as_info()

    def _parse(self, action: str) -> tuple | None:
        command = None if self.page == "done" or any(self._ended) else parse_command(action, ("search", "click"))
        if command is None:
            return None
        verb, argument = command
        if verb == "search":
            return ("search", argument) if self.page == "search" and argument else None
        return self.buttons().get(" ".join(argument.lower().split()))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.goal is None:
            raise RuntimeError("call reset(seed=...) before step()")
        effect = self._parse(action)
        if effect is None:
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, *self._ended, info | {"state_key": self.state_key()}
        self.steps += 1
        reward, info = 0.0, {"steps": self.steps}
        if effect[0] == "search":
            self.query, self.page, self.page_no = effect[1], "results", 0
            self.results = self.engine.search_ids(effect[1], MAX_RESULTS)
        elif effect[0] == "buy":
            reward, info = self._buy()
            info["steps"] = self.steps
        else:
            self._click(effect)
        if self.page != "done":
            self._observation = self._render_page()
        self._ended = (self.page == "done", self.page != "done" and self.steps >= self.max_steps)
        info |= {"success": self._success, "action_valid": True, "action_effective": True}
        return self._observation, reward, *self._ended, info | {"state_key": self.state_key()}

    def state_key(self) -> str:
        """The page: its kind, the query, the results page, the open item, the chosen options and the sub-page."""
        asin = "" if self.item is None else self.products[self.item].asin
        chosen = ";".join(f"{name}={value}" for name, value in sorted(self.chosen.items()))
        return f"{self.page}|{self.query}|{self.page_no}|{asin}|{chosen}|{self.sub_page}"

    def render(self) -> str:
        return self._observation
