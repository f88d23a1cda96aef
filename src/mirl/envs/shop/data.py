"""Reading the real WebShop data files (``source="local"``) into :class:`~mirl.envs.shop.catalogue.Product` and goals.

The directory holds the files the WebShop project distributes (the 1000-product subset or the full set):

- ``items_shuffle_1000.json`` or ``items_shuffle.json``: a JSON list of products with ``asin``, ``name``,
  ``category``, ``query``, ``product_category``, ``pricing`` (``"$12.99"``, a range ``"$10.99 - $20.99"`` or
  empty), ``small_description`` (feature bullets, a list or a string), ``full_description``,
  ``customization_options`` (``{option name: [{"value": ...}, ...] | null}``) and optionally ``Reviews``;
- ``items_ins_v2_1000.json`` or ``items_ins_v2.json`` (optional): ``{asin: {"attributes": [...], ...}}``, the
  product attributes the reward matches against;
- ``items_human_ins.json``: ``{asin: [{"instruction", "instruction_attributes", "instruction_options"}, ...]}``,
  the human-written goals.

As the reference: option values are lower-cased with ``/`` written `` | ``; a product without a price costs 100
dollars; a goal's price cap is the larger of two distinct multiples of 10 among the four above the product's
price, appended to the instruction as ``, and price lower than X dollars`` (no cap when fewer than two exist).
Deviations: a price range takes its lower end (the reference samples a price inside it per session); the cap is
drawn from ``np.random.default_rng([asin hash, goal number])``, so goals do not depend on file order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re

import numpy as np

from mirl.envs.shop.catalogue import Goal, Product, price_cap

ITEM_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_FILE = "items_human_ins.json"
DEFAULT_PRICE = 100.0


def _first(directory: str, names: tuple[str, ...], required: bool) -> str | None:
    for name in names:
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    if required:
        raise FileNotFoundError(f"{directory} holds none of {', '.join(names)}; download the WebShop data files there")
    return None


def _read_json(path: str, kind: type) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg} at line {err.lineno})") from err
    if not isinstance(data, kind):
        raise ValueError(f"{path} must hold a JSON {kind.__name__}, got {type(data).__name__}")
    return data


def parse_price(pricing: object) -> float:
    """The first dollar amount in ``pricing`` (the lower end of a range), else 100.

    >>> parse_price("$10.99 - $20.99"), parse_price(""), parse_price("$1,299.00")
    (10.99, 100.0, 1299.0)
    """
    amounts = re.findall(r"\$\s*([\d,]+(?:\.\d+)?)", str(pricing or ""))
    return float(amounts[0].replace(",", "")) if amounts else DEFAULT_PRICE


def _options(raw: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    options = []
    for name, contents in (raw or {}).items() if isinstance(raw, dict) else ():
        values = tuple(
            str(entry["value"]).strip().replace("/", " | ").lower()
            for entry in contents or ()
            if isinstance(entry, dict) and entry.get("value")
        )
        if values:
            options.append((str(name).lower(), values))
    return tuple(options)


def _reviews(raw: object) -> tuple[str, ...]:
    texts = []
    for review in raw if isinstance(raw, list) else ():
        if isinstance(review, dict):
            review = review.get("body") or review.get("text") or review.get("title") or ""
        if str(review).strip():
            texts.append(str(review).strip())
    return tuple(texts)


def product_from_row(row: dict, attributes: tuple[str, ...]) -> Product:
    """One item of ``items_shuffle*.json`` as a :class:`Product`."""
    bullets = row.get("small_description") or []
    features = tuple(str(b).strip() for b in (bullets if isinstance(bullets, list) else [bullets]) if str(b).strip())
    return Product(
        asin=str(row["asin"]).upper(),
        title=str(row.get("name") or row.get("Title") or ""),
        category=str(row.get("category", "")),
        product_category=str(row.get("product_category", "")),
        query=str(row.get("query", "")).lower().strip(),
        price=parse_price(row.get("pricing")),
        attributes=attributes,
        options=_options(row.get("customization_options")),
        description=str(row.get("full_description") or ""),
        features=features,
        reviews=_reviews(row.get("Reviews") or row.get("reviews")),
    )


def _goal(product: Product, entry: dict, number: int) -> Goal:
    seed = int.from_bytes(hashlib.blake2b(product.asin.encode(), digest_size=4).digest(), "big")
    cap = price_cap(product.price, np.random.default_rng([seed, number]))
    text = str(entry["instruction"]).strip()
    if cap is not None:
        text += f", and price lower than {cap:.2f} dollars"
    return Goal(
        asin=product.asin,
        name=product.title,
        query=product.query,
        product_category=product.product_category,
        attributes=tuple(str(a) for a in entry.get("instruction_attributes") or ()),
        options=tuple(str(o) for o in entry.get("instruction_options") or ()),
        price_upper=cap if cap is not None else 1e6,
        instruction=text,
    )


@functools.lru_cache(maxsize=2)
def _load(directory: str, stamps: tuple[float, ...]) -> tuple[tuple[Product, ...], tuple[Goal, ...]]:
    items = _read_json(_first(directory, ITEM_FILES, True), list)
    attribute_path = _first(directory, ATTRIBUTE_FILES, False)
    attribute_rows = _read_json(attribute_path, dict) if attribute_path else {}
    human = _read_json(_first(directory, (HUMAN_FILE,), True), dict)
    products: dict[str, Product] = {}
    for i, row in enumerate(items):
        if not isinstance(row, dict) or not row.get("asin") or str(row["asin"]) == "nan":
            raise ValueError(f"item {i} of the WebShop items file has no 'asin'")
        extra = attribute_rows.get(row["asin"], {})
        attributes = tuple(str(a) for a in (extra.get("attributes") or ()) if isinstance(extra, dict))
        products.setdefault(str(row["asin"]).upper(), product_from_row(row, attributes))
    goals = []
    for asin, entries in human.items():
        product = products.get(str(asin).upper())
        for number, entry in enumerate(entries if product is not None else ()):
            if isinstance(entry, dict) and entry.get("instruction"):
                goals.append(_goal(product, entry, number))
    if not goals:
        raise ValueError(f"{directory}: no human instruction names a product of the items file")
    return tuple(products.values()), tuple(goals)


def load_webshop(directory: str) -> tuple[tuple[Product, ...], tuple[Goal, ...]]:
    """Products and goals from the WebShop files in ``directory`` (cached per directory and file times)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"source='local' expects a directory with the WebShop JSON files, got {directory!r}")
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    return _load(directory, tuple(os.path.getmtime(os.path.join(directory, n)) for n in names))
