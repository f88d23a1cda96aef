"""A seeded knowledge base of fictional people, cities and organisations, its passages and HotpotQA-like questions.

Entities (all names invented from syllables, so a model cannot know any fact without searching):

- person: name, birth year, birth city, occupation, employer (an organisation);
- city: name, country (one of :data:`COUNTRIES`), founding year;
- organisation: name, industry, founding year, founder (a person), headquarters (a city).

Each entity is one passage whose first line is its name (the title) and whose text states its facts, naming the
linked entities. A corpus of ``size`` passages has ``size // 10`` cities, ``size // 5`` organisations and the rest
people. Names are unique across the whole base.

Questions (:func:`draw_question`) come in three kinds, as in HotpotQA:

- single-hop: one fact of one named entity ("In which city was X born?"): one search for X finds it;
- bridge: a fact of an entity reached through another ("In which country was X born?": X's passage names the
  city, the city's passage names the country): two searches;
- comparison: which of two named entities comes first by a year ("Who was born earlier, X or Y?"; the years
  differ): one search per entity.

Every question carries its ``hops``: ``(query, text the results must contain)`` pairs an oracle follows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SYLLABLES = (
    "ka", "lor", "ven", "dri", "mab", "tes", "quo", "rin", "sul", "bex", "tor", "nim", "var", "zel", "pho", "gan",
    "lis", "dro", "mek", "sav", "yon", "fir", "hal", "cus", "bre", "ost", "wen", "jar", "ulm", "tiv", "rak", "sei",
    "mon", "dax", "pel", "vor", "ith", "cam", "lun", "gre",
)  # fmt: skip
CITY_SUFFIXES = ("ford", "holm", "vale", "bury", "stad", "mouth", "wick", "haven")
COUNTRIES = (
    "Arvenia", "Belmora", "Cassolan", "Dunmark", "Elvaria", "Fennick", "Galdora", "Hestria", "Iskovar", "Jorvane",
    "Kelvoria", "Lumeria", "Marvosk", "Nortessa", "Orlavia", "Pellandor", "Quenmoor", "Rastavia", "Sorvenna",
    "Tavrosk", "Umbrelle", "Valdonia", "Westmarch", "Zerathia",
)  # fmt: skip
OCCUPATIONS = (
    "painter", "engineer", "botanist", "architect", "novelist", "chemist", "violinist", "cartographer", "surgeon",
    "historian", "sculptor", "astronomer", "economist", "photographer", "geologist", "playwright",
)  # fmt: skip
INDUSTRIES = {  # name suffix -> industry
    "Mills": "textile", "Labs": "research", "Works": "engineering", "Press": "publishing", "Motors": "automotive",
    "Studios": "film", "Shipping": "shipping", "Bank": "banking", "Foods": "food", "Pharma": "pharmaceutical",
}  # fmt: skip
KINDS = ("single", "bridge", "comparison")
_MAX_DRAWS = 1000


@dataclass(frozen=True)
class Person:
    name: str
    born: int
    city: int  # index into KnowledgeBase.cities
    occupation: str
    employer: int  # index into KnowledgeBase.organisations


@dataclass(frozen=True)
class City:
    name: str
    country: str
    founded: int


@dataclass(frozen=True)
class Organisation:
    name: str
    industry: str
    founded: int
    founder: int  # index into KnowledgeBase.people
    headquarters: int  # index into KnowledgeBase.cities


@dataclass(frozen=True)
class KnowledgeBase:
    people: tuple[Person, ...]
    cities: tuple[City, ...]
    organisations: tuple[Organisation, ...]

    @property
    def passages(self) -> tuple[str, ...]:
        """One passage per entity: people, then cities, then organisations."""
        return (
            tuple(person_passage(self, p) for p in self.people)
            + tuple(city_passage(c) for c in self.cities)
            + tuple(organisation_passage(self, o) for o in self.organisations)
        )


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    kind: str  # one of KINDS
    hops: tuple[tuple[str, str], ...]  # (search query, text the results must contain), in order


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def person_passage(kb: KnowledgeBase, p: Person) -> str:
    surname = p.name.split()[-1]
    return (
        f"{p.name}\n{p.name} is {_article(p.occupation)} {p.occupation} born in {p.born} in {kb.cities[p.city].name}. "
        f"{surname} works for {kb.organisations[p.employer].name}."
    )


def city_passage(c: City) -> str:
    return f"{c.name}\n{c.name} is a city in {c.country}. It was founded in {c.founded}."


def organisation_passage(kb: KnowledgeBase, o: Organisation) -> str:
    founder, city = kb.people[o.founder].name, kb.cities[o.headquarters].name
    return (
        f"{o.name}\n{o.name} is {_article(o.industry)} {o.industry} organisation founded in {o.founded} by "
        f"{founder}. Its headquarters are in {city}."
    )


def _unique_names(rng: np.random.Generator, count: int, make: Callable[[np.ndarray], str], taken: set[str]) -> list:
    """``count`` new names ``make(row)`` from rows of random syllable indices, skipping names already taken."""
    names: list[str] = []
    for _ in range(_MAX_DRAWS):
        for row in rng.integers(len(SYLLABLES), size=(2 * (count - len(names)) + 8, 4)):
            name = make(row)
            if name not in taken:
                taken.add(name)
                names.append(name)
                if len(names) == count:
                    return names
    raise RuntimeError(f"could not draw {count} distinct names; use a smaller corpus_size")


def _word(row: np.ndarray, syllables: int) -> str:
    return "".join(SYLLABLES[i] for i in row[:syllables]).capitalize()


def generate_kb(size: int, seed: int) -> KnowledgeBase:
    """The knowledge base with ``size`` passages, a pure function of ``(size, seed)``."""
    if isinstance(size, bool) or not isinstance(size, int) or not 50 <= size <= 1_000_000:
        raise ValueError(f"corpus_size must be an int in [50, 1000000] (default 20000), got {size!r}")
    rng = np.random.default_rng([seed, size])
    n_city, n_org = size // 10, size // 5
    n_person = size - n_city - n_org
    taken: set[str] = set()
    suffixes = list(INDUSTRIES)
    city_names = _unique_names(rng, n_city, lambda r: _word(r, 2) + CITY_SUFFIXES[r[2] % len(CITY_SUFFIXES)], taken)
    org_names = _unique_names(rng, n_org, lambda r: f"{_word(r, 2)} {suffixes[r[2] % len(suffixes)]}", taken)
    person_names = _unique_names(rng, n_person, lambda r: f"{_word(r, 2)} {_word(r[1:], 3)}", taken)
    cities = tuple(
        City(name, COUNTRIES[int(country)], int(year))
        for name, country, year in zip(
            city_names, rng.integers(len(COUNTRIES), size=n_city), rng.integers(1100, 1900, size=n_city), strict=True
        )
    )
    born = rng.integers(1890, 2000, size=n_person)
    people = tuple(
        Person(name, int(year), int(city), OCCUPATIONS[int(job)], int(employer))
        for name, year, city, job, employer in zip(
            person_names,
            born,
            rng.integers(n_city, size=n_person),
            rng.integers(len(OCCUPATIONS), size=n_person),
            rng.integers(n_org, size=n_person),
            strict=True,
        )
    )
    founders = rng.integers(n_person, size=n_org)
    founded = np.minimum(born[founders] + rng.integers(25, 60, size=n_org), 2024)  # 25..59 years after the birth
    organisations = tuple(
        Organisation(name, INDUSTRIES[name.split()[-1]], int(year), int(founder), int(hq))
        for name, year, founder, hq in zip(org_names, founded, founders, rng.integers(n_city, size=n_org), strict=True)
    )
    return KnowledgeBase(people, cities, organisations)


def _pick(rng: np.random.Generator, items: tuple) -> object:
    return items[int(rng.integers(len(items)))]


def _single(kb: KnowledgeBase, rng: np.random.Generator) -> Question:
    choice = int(rng.integers(7))
    if choice < 4:
        p: Person = _pick(rng, kb.people)
        text, answer = (
            (f"In which city was {p.name} born?", kb.cities[p.city].name),
            (f"In what year was {p.name} born?", str(p.born)),
            (f"What is the occupation of {p.name}?", p.occupation),
            (f"Which organisation does {p.name} work for?", kb.organisations[p.employer].name),
        )[choice]
        return Question(text, answer, "single", ((p.name, answer),))
    if choice == 4:
        c: City = _pick(rng, kb.cities)
        return Question(f"In which country is the city of {c.name}?", c.country, "single", ((c.name, c.country),))
    o: Organisation = _pick(rng, kb.organisations)
    text, answer = (
        (f"Who founded {o.name}?", kb.people[o.founder].name),
        (f"In what year was {o.name} founded?", str(o.founded)),
    )[choice - 5]
    return Question(text, answer, "single", ((o.name, answer),))


def _bridge(kb: KnowledgeBase, rng: np.random.Generator) -> Question:
    choice = int(rng.integers(5))
    if choice < 3:
        p: Person = _pick(rng, kb.people)
        city, org = kb.cities[p.city], kb.organisations[p.employer]
        text, middle, answer = (
            (f"In which country was {p.name} born?", city.name, city.country),
            (f"In what year was the organisation that {p.name} works for founded?", org.name, str(org.founded)),
            (f"In which city is the employer of {p.name} headquartered?", org.name, kb.cities[org.headquarters].name),
        )[choice]
        return Question(text, answer, "bridge", ((p.name, middle), (middle, answer)))
    o: Organisation = _pick(rng, kb.organisations)
    founder = kb.people[o.founder]
    text, answer = (
        (f"In what year was the founder of {o.name} born?", str(founder.born)),
        (f"In which city was the founder of {o.name} born?", kb.cities[founder.city].name),
    )[choice - 3]
    return Question(text, answer, "bridge", ((o.name, founder.name), (founder.name, answer)))


def _comparison(kb: KnowledgeBase, rng: np.random.Generator) -> Question | None:
    choice = int(rng.integers(3))
    pool, year, verb = (
        (kb.people, lambda e: e.born, ("Who was born earlier", "born")),
        (kb.organisations, lambda e: e.founded, ("Which organisation was founded earlier", "founded")),
        (kb.cities, lambda e: e.founded, ("Which city was founded earlier", "founded")),
    )[choice]
    i, j = (int(x) for x in rng.choice(len(pool), size=2, replace=False))
    a, b = pool[i], pool[j]
    if year(a) == year(b):
        return None
    answer = a.name if year(a) < year(b) else b.name
    text = f"{verb[0]}, {a.name} or {b.name}?"
    return Question(text, answer, "comparison", ((a.name, str(year(a))), (b.name, str(year(b)))))


def draw_question(kb: KnowledgeBase, rng: np.random.Generator, accept: Callable[[Question], bool]) -> Question:
    """A question of a uniformly drawn kind, redrawn until ``accept`` (the split check) holds."""
    for _ in range(_MAX_DRAWS):
        kind = KINDS[int(rng.integers(len(KINDS)))]
        question = {"single": _single, "bridge": _bridge, "comparison": _comparison}[kind](kb, rng)
        if question is not None and accept(question):
            return question
    raise RuntimeError(f"no accepted question in {_MAX_DRAWS} draws")
