from __future__ import annotations

import pytest

import hipep


@pytest.fixture(scope="session", autouse=True)
def registered():
    return hipep.register()
