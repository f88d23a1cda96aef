"""No doctest in the package expects a float printed at full precision.

The last digits of a reduction (a sum, a std) depend on the order the hardware adds in, which differs between
machines (vector widths, thread counts); a doctest that prints 17 significant digits then fails on a machine that
rounds once differently. Examples round, or show values that are exact by construction (0.5, 2.0).
"""

import doctest
import importlib
import pkgutil
import re

import mirl

FULL_PRECISION = re.compile(r"\d\.\d{10,}")  # ten or more decimals: a float printed as repr()


def _modules():
    for info in pkgutil.walk_packages(mirl.__path__, prefix="mirl."):
        if info.name.endswith("__main__"):  # importing it runs the command line
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed: its doctests do not run here either
            continue


def test_no_doctest_expects_a_full_precision_float():
    offenders = []
    finder = doctest.DocTestFinder()
    for module in _modules():
        for test in finder.find(module):
            offenders += [f"{test.name}: {ex.want.strip()}" for ex in test.examples if FULL_PRECISION.search(ex.want)]
    assert offenders == [], "round these doctest outputs:\n" + "\n".join(offenders)
