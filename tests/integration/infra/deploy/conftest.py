from __future__ import annotations

import pytest

from tests.fixtures.kubernetes import Validators, prepare


@pytest.fixture(scope="session")
def validators() -> Validators:
    """helm, kubeconform and the standalone schemas (built once, then reused)."""
    return prepare()
