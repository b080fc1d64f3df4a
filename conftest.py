"""Repository-level conftest: fail fast with the fix when the plugin is not installed.

The plugin itself is loaded through its ``pytest11`` entry point once the
package is installed (``make install`` or ``pip install -e .``); running from
a checkout without installing would otherwise end in confusing
"fixture 'exported_pte' not found" errors.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("sme2") and not config.pluginmanager.has_plugin("pytest_sme2.plugin"):
        raise pytest.UsageError(
            "pytest-sme2 is not installed in this Python environment (or was disabled with -p no:sme2); "
            "run `make install` or `pip install -e .` in the repository first"
        )
