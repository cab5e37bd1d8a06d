import pytest

from tests.interp.tiny import build_tiny


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    from interp.runtime import Runtime

    return Runtime.from_folder(tiny_folder, name="tiny")
