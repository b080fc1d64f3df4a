"""pytest-sme2's version, in a module of its own so any layer can name it without importing the package's
public face (``__init__`` imports the fixtures' world). Keep equal to pyproject.toml (tests/test_public_api.py)."""

__version__ = "0.1.0"
