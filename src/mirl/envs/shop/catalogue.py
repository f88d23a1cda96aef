"""WebShop products and goals: the records, a seeded synthetic catalogue, and goal instructions drawn from it.

A :class:`Product` holds what the reference's item pages show (title, price, options such as colour and size,
description, feature bullets, reviews) plus the fields its reward reads (``query``: the product type;
``product_category``: a ``›``-separated path; ``attributes``: phrases like ``machine washable``). A :class:`Goal`
is the reference's goal: the target product's ``asin``, ``name`` (its title), ``query`` and ``product_category``,
the wanted ``attributes`` and ``options`` (values), the ``price_upper`` cap and the instruction text.

Synthetic catalogue (:func:`generate_catalogue`): ``size`` products over the types of :data:`CATEGORIES`, each
titled ``<invented brand> <Type>`` (the reference's type reward counts the nouns a title shares with the goal's
title, so no adjective another type could share goes into a title; the style word is in the description), with
2-4 attributes from its type's pool, 2-5 values per option of its category and a price from its category's
range, all drawn from ``np.random.default_rng([seed, size])``. No two values of one option fuzzy-match each other
(``token_set_ratio <= 85``, a test checks), so a wrong choice never scores as the right one. Goals
(:func:`draw_goal`): a product, 1-3 of its attributes, one value per option, and a price cap drawn as the
reference does: the larger of two distinct multiples of 10 among the four just above the price.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))  # the reference's price caps: 10, 20, ..., 990 dollars
COLORS = ("black", "white", "blue", "red", "green", "navy", "grey", "pink", "beige", "brown")
_APPAREL = ("xs", "small", "medium", "large", "x-large")

# category -> (category path, option name -> values, price range, {type: attribute pool})
CATEGORIES: dict[str, tuple[str, dict[str, tuple[str, ...]], tuple[float, float], dict[str, tuple[str, ...]]]] = {
    "clothing": (
        "Clothing, Shoes & Jewelry › Clothing",
        {"color": COLORS, "size": _APPAREL},
        (12.0, 90.0),
        {
            "dress": ("machine washable", "short sleeve", "long sleeve", "elastic waist", "polyester spandex"),
            "hoodie": ("machine washable", "fleece lined", "long sleeve", "drawstring closure", "cotton blend"),
            "jeans": ("machine washable", "slim fit", "high waist", "button closure", "stretch denim"),
            "jacket": ("water resistant", "zipper closure", "quick drying", "hand wash only", "lightweight"),
        },
    ),
    "shoes": (
        "Clothing, Shoes & Jewelry › Shoes",
        {"color": COLORS, "shoe size": ("6", "7", "8", "9", "10", "11")},
        (25.0, 140.0),
        {
            "sneakers": ("non slip", "rubber sole", "lace up", "arch support", "breathable mesh"),
            "boots": ("water resistant", "rubber sole", "faux fur lining", "ankle high", "slip resistant"),
            "sandals": ("open toe", "arch support", "quick drying", "adjustable strap", "memory foam"),
        },
    ),
    "beauty": (
        "Beauty & Personal Care › Skin & Hair Care",
        {
            "scent": ("lavender", "coconut", "unscented", "rose", "citrus"),
            "size": ("travel size", "regular size", "family size"),
        },
        (6.0, 60.0),
        {
            "shampoo": ("sulfate free", "paraben free", "cruelty free", "for dry hair", "natural ingredients"),
            "moisturizer": ("paraben free", "for sensitive skin", "cruelty free", "long lasting", "fragrance free"),
            "serum": ("hyaluronic acid", "cruelty free", "for dry skin", "vitamin c", "oil free"),
        },
    ),
    "grocery": (
        "Grocery & Gourmet Food › Pantry",
        {
            "flavor": ("vanilla", "hazelnut", "original", "caramel", "cinnamon"),
            "pack": ("single pack", "pack of two", "pack of six"),
        },
        (4.0, 45.0),
        {
            "coffee": ("organic", "fair trade", "dark roast", "whole bean", "non gmo"),
            "granola": ("gluten free", "low sugar", "high protein", "non gmo", "keto friendly"),
            "tea": ("organic", "caffeine free", "sugar free", "individually wrapped", "non gmo"),
        },
    ),
    "electronics": (
        "Electronics › Accessories",
        {"color": ("black", "white", "silver", "blue", "red")},
        (15.0, 200.0),
        {
            "headphones": ("wireless", "noise cancelling", "bluetooth", "long battery life", "over ear"),
            "speaker": ("wireless", "bluetooth", "waterproof", "long battery life", "high fidelity"),
            "charger": ("fast charging", "usb c", "compact design", "dual port", "overheat protection"),
        },
    ),
    "home": (
        "Home & Kitchen › Bedding & Decor",
        {"color": COLORS, "size": ("twin", "full", "queen", "king")},
        (18.0, 160.0),
        {
            "blanket": ("machine washable", "super soft", "lightweight", "fleece", "easy care"),
            "pillow": ("memory foam", "machine washable", "hypoallergenic", "cooling gel", "easy care"),
            "curtains": ("blackout", "thermal insulated", "machine washable", "living room", "easy install"),
        },
    ),
}
NO_ARTICLE = frozenset({"jeans", "sneakers", "boots", "sandals", "headphones", "curtains", "coffee", "tea", "granola"})
STYLES = ("Classic", "Everyday", "Premium", "Essential", "Modern", "Signature", "Comfort", "Urban")
BRAND_SYLLABLES = ("va", "lor", "ken", "dri", "mo", "tes", "qui", "ran", "sul", "bex", "tor", "nim", "zel", "pho")


@dataclass(frozen=True)
class Product:
    asin: str  # upper case, as the reference (the agent clicks it in any case)
    title: str
    category: str
    product_category: str  # "A › B › C"
    query: str  # the product type, e.g. "dress"
    price: float
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # ((option name, (value, ...)), ...)
    description: str
    features: tuple[str, ...]
    reviews: tuple[str, ...]

    @property
    def search_text(self) -> str:
        """What the search engine indexes: title, attributes, option values, features and description."""
        values = " ".join(v for _, vs in self.options for v in vs)
        return " ".join((self.title, " ".join(self.attributes), values, " ".join(self.features), self.description))


@dataclass(frozen=True)
class Goal:
    asin: str
    name: str  # the target product's title
    query: str
    product_category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # wanted option values
    price_upper: float
    instruction: str


def price_cap(price: float, rng: np.random.Generator) -> float | None:
    """The larger of two distinct draws from the (up to) four caps above ``price``; None when fewer than two."""
    above = [cap for cap in PRICE_STEPS if cap > price][:4]
    if len(above) < 2:
        return None
    i, j = rng.choice(len(above), size=2, replace=False)
    return max(above[int(i)], above[int(j)])


def _brand(rng: np.random.Generator) -> str:
    parts = rng.integers(len(BRAND_SYLLABLES), size=int(rng.integers(2, 4)))
    return "".join(BRAND_SYLLABLES[int(i)] for i in parts).capitalize()


def _product(rng: np.random.Generator, asin: str) -> Product:
    category = sorted(CATEGORIES)[int(rng.integers(len(CATEGORIES)))]
    path, option_values, (low, high), types = CATEGORIES[category]
    kind = sorted(types)[int(rng.integers(len(types)))]
    pool = types[kind]
    attributes = tuple(pool[int(i)] for i in sorted(rng.choice(len(pool), size=int(rng.integers(2, 5)), replace=False)))
    options = []
    for name, values in option_values.items():
        count = int(rng.integers(2, min(5, len(values)) + 1))
        options.append((name, tuple(values[int(i)] for i in sorted(rng.choice(len(values), count, replace=False)))))
    brand, style = _brand(rng), STYLES[int(rng.integers(len(STYLES)))]
    title = f"{brand} {kind.capitalize()}"  # style words stay out: the type reward counts shared title words
    price = round(float(rng.uniform(low, high)), 2)
    description = f"The {brand} {style.lower()} {kind} is {', '.join(attributes[:-1])} and {attributes[-1]}."
    features = tuple(f"{attribute.capitalize()} {kind}" for attribute in attributes)
    stars = int(rng.integers(3, 6))
    reviews = (f"{stars} stars: a good {kind}, as described.",)
    return Product(
        asin, title, category, f"{path} › {kind.capitalize()}", kind, price, attributes, tuple(options),
        description, features, reviews,
    )  # fmt: skip


def generate_catalogue(size: int, seed: int) -> tuple[Product, ...]:
    """``size`` synthetic products, a pure function of ``(size, seed)``; ASINs are unique."""
    if isinstance(size, bool) or not isinstance(size, int) or not 20 <= size <= 200_000:
        raise ValueError(f"num_products must be an int in [20, 200000] (default 2000), got {size!r}")
    rng = np.random.default_rng([seed, size])
    letters = np.array(list("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"))
    asins: dict[str, None] = {}
    while len(asins) < size:
        for row in rng.integers(len(letters), size=(size - len(asins), 8)):
            asins.setdefault("B0" + "".join(letters[row]), None)
    return tuple(_product(rng, asin) for asin in list(asins)[:size])


def goal_instruction(kind: str, attributes: tuple[str, ...], options: dict[str, str], cap: float | None) -> str:
    """The instruction text, lower case as the reference's (plural and mass nouns take no article).

    >>> goal_instruction("jeans", ("slim fit", "high waist"), {"color": "blue"}, 40.0)
    'i need jeans that are slim fit and high waist, with color: blue, and price lower than 40.00 dollars'
    """
    subject = f"{kind} that are" if kind in NO_ARTICLE else f"a {kind} that is"
    text = f"i need {subject} {' and '.join(attributes)}"
    if options:
        text += ", with " + " and ".join(f"{name}: {value}" for name, value in options.items())
    if cap is not None:
        text += f", and price lower than {cap:.2f} dollars"
    return text


def draw_goal(products: tuple[Product, ...], rng: np.random.Generator, accept: Callable[[Goal], bool]) -> Goal:
    """A goal on a uniformly drawn product, redrawn until ``accept`` (the split check) holds."""
    for _ in range(1000):
        product = products[int(rng.integers(len(products)))]
        count = int(rng.integers(1, min(3, len(product.attributes)) + 1))
        picked = sorted(rng.choice(len(product.attributes), size=count, replace=False))
        attributes = tuple(product.attributes[int(i)] for i in picked)
        options = {name: values[int(rng.integers(len(values)))] for name, values in product.options}
        cap = price_cap(product.price, rng)
        goal = Goal(
            product.asin, product.title, product.query, product.product_category, attributes,
            tuple(options.values()), cap if cap is not None else 1e6,
            goal_instruction(product.query, attributes, options, cap),
        )  # fmt: skip
        if accept(goal):
            return goal
    raise RuntimeError("no accepted WebShop goal in 1000 draws")
