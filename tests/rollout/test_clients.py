"""generation_client, the one client builder of the CLIs: the endpoint's key, given or named."""

import pytest

from skl_verl.rollout.clients import generation_client
from skl_verl.rollout.openai_client import OpenAICompletionsClient


@pytest.fixture(autouse=True)
def _no_probe(monkeypatch):
    monkeypatch.setattr(OpenAICompletionsClient, "check", lambda self: None)


def test_endpoint_key_given_on_the_command_line_or_named_in_a_config(monkeypatch):
    url = "http://127.0.0.1:9/v1"
    assert generation_client(None, 8, endpoint=url, served_model="m", api_key="secret").api_key == "secret"
    monkeypatch.setenv("STUDY_KEY", "from-env")
    assert generation_client(None, 8, endpoint=url, served_model="m", api_key_env="STUDY_KEY").api_key == "from-env"
    with pytest.raises(ValueError, match="not both"):
        generation_client(None, 8, endpoint=url, served_model="m", api_key="secret", api_key_env="STUDY_KEY")


def test_neither_endpoint_nor_checkpoint_is_refused():
    with pytest.raises(ValueError, match="endpoint URL or a local checkpoint"):
        generation_client(None, 8)
