"""Templates of the synthetic DeepCoder problems: a task, typed parameters, an input generator and a reference.

Each reference function is a self-contained definition whose source (``inspect.getsource``) is the problem's
reference solution, and which the parent calls (it is mirl's own code, not model output) to compute the expected
output of every generated test input. Tiers: ``easy`` (arithmetic, strings), ``medium`` (list and string
manipulation), ``hard`` (simple algorithms).

Parameter types, and how a stdin/stdout problem writes them: ``int`` (one line), ``str`` (one line of lower-case
letters or brackets, never empty), ``list`` (a line with the length, then a line of space-separated integers).
Return types: ``int``, ``str``, ``bool`` (printed ``YES``/``NO``), ``list`` (space-separated integers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def sum_of_digits(n):
    return sum(int(d) for d in str(abs(n)))


def reverse_string(s):
    return s[::-1]


def count_vowels(s):
    return sum(c in "aeiou" for c in s)


def largest(xs):
    return max(xs)


def is_palindrome(s):
    return s == s[::-1]


def sum_of_multiples(n, k):
    return sum(i for i in range(1, n + 1) if i % k == 0)


def count_greater(xs, k):
    return sum(x > k for x in xs)


def running_sum(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out


def rotate_left(xs, k):
    if not xs:
        return []
    k %= len(xs)
    return xs[k:] + xs[:k]


def remove_duplicates(xs):
    seen, out = set(), []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def run_length(s):
    out, i = [], 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(f"{s[i]}{j - i}")
        i = j
    return "".join(out)


def caesar_shift(s, k):
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) for c in s)


def second_largest(xs):
    distinct = sorted(set(xs))
    return distinct[-2] if len(distinct) >= 2 else -1


def longest_increasing(xs):
    tails = []
    for x in xs:
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if tails[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        tails[lo : lo + 1] = [x]
    return len(tails)


def count_primes(n):
    sieve = [True] * max(n, 2)
    sieve[0] = sieve[1] = False
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = [False] * len(sieve[i * i :: i])
    return sum(sieve[:n])


def max_subarray(xs):
    best = current = xs[0]
    for x in xs[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best


def balanced(s):
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for c in s:
        if c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
        else:
            stack.append(c)
    return not stack


def gcd_of_list(xs):
    g = 0
    for x in xs:
        a, b = g, abs(x)
        while b:
            a, b = b, a % b
        g = a
    return g


def count_pairs(xs, k):
    seen, pairs = {}, 0
    for x in xs:
        pairs += seen.get(k - x, 0)
        seen[x] = seen.get(x, 0) + 1
    return pairs


Rng = np.random.Generator


def _int(rng: Rng, low: int, high: int) -> int:
    return int(rng.integers(low, high + 1))


def _ints(rng: Rng, min_len: int, max_len: int, low: int, high: int) -> list[int]:
    return [int(v) for v in rng.integers(low, high + 1, size=_int(rng, min_len, max_len))]


def _word(rng: Rng, max_len: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=_int(rng, 1, max_len)))


def _palindrome_or_not(rng: Rng) -> tuple:
    half = _word(rng, 5, "abc")
    return (half + half[::-1][int(rng.integers(2)) :],) if rng.random() < 0.5 else (_word(rng, 8, "abc"),)


def _brackets(rng: Rng) -> tuple:
    if rng.random() < 0.5:
        return (_word(rng, 12, "()[]{}"),)
    text = ""
    for _ in range(_int(rng, 1, 5)):
        opener, closer = ("()", "[]", "{}")[_int(rng, 0, 2)]
        text = opener + text + closer if rng.random() < 0.5 else text + opener + closer
    return (text,)


def _common_factor(rng: Rng) -> tuple:
    factor = _int(rng, 1, 6)
    return ([factor * v for v in _ints(rng, 1, 6, -12, 12)],)


@dataclass(frozen=True)
class Template:
    tier: str  # "easy" / "medium" / "hard"
    reference: Callable  # its __name__ is the function name the problem asks for
    params: tuple[tuple[str, str], ...]  # (name, type) with type in int / str / list
    returns: str  # int / str / bool / list
    task: str  # what to compute, naming the parameters
    draw: Callable[[Rng], tuple]  # one test's arguments

    @property
    def name(self) -> str:
        return self.reference.__name__


TEMPLATES: tuple[Template, ...] = (
    Template(
        "easy",
        sum_of_digits,
        (("n", "int"),),
        "int",
        "the sum of the decimal digits of n (n may be negative)",
        lambda r: (_int(r, -(10**6), 10**6),),
    ),
    Template("easy", reverse_string, (("s", "str"),), "str", "the string s reversed", lambda r: (_word(r, 12),)),
    Template(
        "easy",
        count_vowels,
        (("s", "str"),),
        "int",
        "how many characters of s are vowels (a, e, i, o, u)",
        lambda r: (_word(r, 15),),
    ),
    Template(
        "easy",
        largest,
        (("xs", "list"),),
        "int",
        "the largest element of the non-empty list xs",
        lambda r: (_ints(r, 1, 10, -100, 100),),
    ),
    Template(
        "easy",
        is_palindrome,
        (("s", "str"),),
        "bool",
        "whether s reads the same forwards and backwards",
        _palindrome_or_not,
    ),
    Template(
        "easy",
        sum_of_multiples,
        (("n", "int"), ("k", "int")),
        "int",
        "the sum of the integers from 1 to n that are divisible by k",
        lambda r: (_int(r, 1, 500), _int(r, 1, 12)),
    ),
    Template(
        "easy",
        count_greater,
        (("xs", "list"), ("k", "int")),
        "int",
        "how many elements of xs are greater than k",
        lambda r: (_ints(r, 0, 10, -20, 20), _int(r, -20, 20)),
    ),
    Template(
        "medium",
        running_sum,
        (("xs", "list"),),
        "list",
        "the list whose i-th element is the sum of the first i+1 elements of xs",
        lambda r: (_ints(r, 0, 10, -50, 50),),
    ),
    Template(
        "medium",
        rotate_left,
        (("xs", "list"), ("k", "int")),
        "list",
        "xs rotated left by k positions (k may exceed the length; an empty list stays empty)",
        lambda r: (_ints(r, 0, 8, 0, 9), _int(r, 0, 20)),
    ),
    Template(
        "medium",
        remove_duplicates,
        (("xs", "list"),),
        "list",
        "xs without repeated elements, keeping the first occurrence of each in order",
        lambda r: (_ints(r, 0, 12, 0, 6),),
    ),
    Template(
        "medium",
        run_length,
        (("s", "str"),),
        "str",
        "the run-length encoding of s: each maximal run of one letter written as the letter and the run length, "
        "e.g. aaab -> a3b1",
        lambda r: (_word(r, 12, "ab"),),
    ),
    Template(
        "medium",
        caesar_shift,
        (("s", "str"), ("k", "int")),
        "str",
        "s with every letter shifted k places forward in the alphabet, wrapping from z to a",
        lambda r: (_word(r, 10), _int(r, 0, 60)),
    ),
    Template(
        "medium",
        second_largest,
        (("xs", "list"),),
        "int",
        "the second largest distinct value in the non-empty list xs, or -1 if it has fewer than two distinct values",
        lambda r: (_ints(r, 1, 8, 0, 9),),
    ),
    Template(
        "hard",
        longest_increasing,
        (("xs", "list"),),
        "int",
        "the length of the longest strictly increasing subsequence of xs",
        lambda r: (_ints(r, 0, 15, 0, 20),),
    ),
    Template(
        "hard",
        count_primes,
        (("n", "int"),),
        "int",
        "how many prime numbers are smaller than n",
        lambda r: (_int(r, 0, 5000),),
    ),
    Template(
        "hard",
        max_subarray,
        (("xs", "list"),),
        "int",
        "the largest sum of a non-empty contiguous part of the non-empty list xs",
        lambda r: (_ints(r, 1, 12, -30, 30),),
    ),
    Template(
        "hard",
        balanced,
        (("s", "str"),),
        "bool",
        "whether the brackets ()[]{} in s are balanced and properly nested",
        _brackets,
    ),
    Template(
        "hard",
        gcd_of_list,
        (("xs", "list"),),
        "int",
        "the greatest common divisor of the absolute values of the non-empty list xs (0 if all are 0)",
        _common_factor,
    ),
    Template(
        "hard",
        count_pairs,
        (("xs", "list"), ("k", "int")),
        "int",
        "how many index pairs i < j have xs[i] + xs[j] == k",
        lambda r: (_ints(r, 0, 12, 0, 10), _int(r, 0, 20)),
    ),
)
TIERS = ("easy", "medium", "hard")
