"""The TOML reader for every Python that pyproject.toml's ``requires-python`` admits.

The standard library reads TOML from Python 3.11 (``tomllib``); on 3.10 the same parser is the ``tomli``
package, which pyproject.toml requires only there. Device files are read when pytest loads the plugin, so
a bare ``import tomllib`` would stop every pytest run on 3.10, whatever it tests. This module is the one
place that chooses; everything else imports ``tomllib`` from here.

It imports nothing of pytest-sme2, so ``install_state.py``, which the Makefile runs by path before the
package is installed, can import it as a sibling.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

__all__ = ["tomllib"]
