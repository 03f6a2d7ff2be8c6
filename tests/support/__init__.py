"""Helpers shared by the test modules: no test module imports another (issue 25, item 4).

A test module imports what it shares from here (`from support.cli import run_cli`); fixtures
shared by several modules live in tests/conftest.py. Every module here is marked for pytest's
assertion rewriting before it is imported, so that an `assert` in a helper fails with the values
it compared, as it did when the helpers sat in conftest.py and the test modules.
"""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))
