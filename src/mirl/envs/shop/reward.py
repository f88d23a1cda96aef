"""The WebShop reward: how well a bought product (with the chosen options) fits the goal.

    raw = r_type * (attribute matches + option matches + price ok) / (goal attributes + goal options + 1)

- ``r_type`` (the reference's type reward): with ``title_score`` = the share of the goal name's content words
  found among the bought title's content words, ``query_match`` = same product type query and
  ``category_match`` = at least two shared parts of the ``›`` category paths: 1, lowered to 0.5 when none of
  query_match, category_match, title_score > 0.2 holds, to 0.1 when title_score < 0.1, and to 0 when
  title_score = 0.
- an attribute matches when some product attribute has ``token_set_ratio > 85`` with it (``rapidfuzz``, a
  dependency of mirl) or it appears verbatim in the title, features or description (lower case);
- a wanted option value matches when some chosen option value has ``token_set_ratio > 85`` with it;
- price ok = the product's price is at most ``price_upper``.

The binarised success is ``raw == 1``. Deliberate deviation: the reference finds the title's nouns with spaCy;
mirl takes content words (lower-cased ``[a-z0-9]+`` runs minus stop words), so no language model is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirl.envs.search.retrieval import tokenize
from mirl.envs.shop.catalogue import Goal, Product

FUZZY_THRESHOLD = 85


@dataclass(frozen=True)
class ShopScore:
    raw: float
    r_type: float
    attributes_matched: int
    attributes_total: int
    options_matched: int
    options_total: int
    price_ok: bool

    def as_info(self) -> dict:
        return {
            "raw_score": self.raw,
            "r_type": self.r_type,
            "attributes_matched": self.attributes_matched,
            "attributes_total": self.attributes_total,
            "options_matched": self.options_matched,
            "options_total": self.options_total,
            "price_ok": self.price_ok,
        }


def _fuzz():
    try:
        from rapidfuzz import fuzz
    except ImportError as err:
        raise ImportError(
            "the WebShop reward needs `rapidfuzz`, which is not installed: pip install rapidfuzz (a dependency of mirl)"
        ) from err
    return fuzz


def type_reward(product: Product, goal: Goal) -> float:
    """The reference's type reward (see the module docstring).

    >>> from mirl.envs.shop.catalogue import Goal, Product
    >>> bought = Product("B1", "Acme Classic Dress", "c", "A › B › Dresses", "dress", 9.0, (), (), "", (), ())
    >>> type_reward(bought, Goal("B2", "Zed Classic Dress", "dress", "A › B › Dresses", (), (), 10.0, ""))
    1.0
    """
    wanted = set(tokenize(goal.name))
    title_score = len(wanted & set(tokenize(product.title))) / len(wanted) if wanted else 0.2
    query_match = product.query == goal.query
    shared = {part.strip() for part in product.product_category.split("›")}
    category_match = len(shared & {part.strip() for part in goal.product_category.split("›")}) >= 2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def attribute_matches(product: Product, wanted: Sequence[str]) -> int:
    fuzz = _fuzz()
    text = " ".join((product.title, " ".join(product.features), product.description)).lower()
    matched = 0
    for attribute in wanted:
        close = any(fuzz.token_set_ratio(have, attribute) > FUZZY_THRESHOLD for have in product.attributes)
        matched += close or attribute.lower() in text
    return matched


def option_matches(chosen: Sequence[str], wanted: Sequence[str]) -> int:
    fuzz = _fuzz()
    return sum(any(fuzz.token_set_ratio(have, value) > FUZZY_THRESHOLD for have in chosen) for value in wanted)


def score(product: Product, chosen: Sequence[str], goal: Goal) -> ShopScore:
    """The raw score and its parts for buying ``product`` with option values ``chosen``."""
    r_type = type_reward(product, goal)
    attributes = attribute_matches(product, goal.attributes)
    options = option_matches(chosen, goal.options)
    price_ok = product.price <= goal.price_upper
    total = len(goal.attributes) + len(goal.options) + 1
    raw = r_type * (attributes + options + int(price_ok)) / total
    return ShopScore(raw, r_type, attributes, len(goal.attributes), options, len(goal.options), price_ok)
