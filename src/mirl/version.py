"""mirl's version, in a module of its own so that code inside the package never imports the package itself."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's [project] version (tests/test_purity.py checks)
