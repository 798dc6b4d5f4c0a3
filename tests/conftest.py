import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="session")
def registered_recipes():
    """Every recipe registered in the test process, as ``python -m skl_verl.main`` and Ray's setup hook do."""
    import skl_verl

    skl_verl.register(with_trainer=False)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from skl_verl.rollout.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model")))
