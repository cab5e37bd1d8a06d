import os

from hypothesis import settings

settings.register_profile("ci", max_examples=150, deadline=None)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    from tests.interp.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    from interp.runtime import Runtime

    return Runtime.from_folder(tiny_folder, name="tiny")
