"""Registers Knowledge Weaver: estimator ``knowledge_weaver`` (Eqs. 4/7, 15, 16) for the curator loop, the
end-of-step bank admission, and the loop of ``agent_loops.yaml``."""

from pathlib import Path

from skl_verl.knowledge_weaver.credit import KnowledgeWeaverCreditOptions, knowledge_weaver_estimator
from skl_verl.knowledge_weaver.hook import finalize_kw_step
from skl_verl.knowledge_weaver.loop import KnowledgeWeaverCuratorLoop
from skl_verl.knowledge_weaver.settings import check_kw_run
from skl_verl.rollout import sample_fields as sf
from skl_verl.trainer import registry


def register() -> None:
    registry.register_estimator("knowledge_weaver", knowledge_weaver_estimator, options=KnowledgeWeaverCreditOptions,
                                required_fields=(sf.SEQUENCE_ID, sf.SCORE, sf.TOKEN_CREDIT),
                                loop=KnowledgeWeaverCuratorLoop, run_check=lambda config, options, entry: check_kw_run(config))
    registry.register_step_hook("knowledge_weaver", finalize_kw_step)
    registry.register_env_vars("KW_EXECUTOR_URL", "KW_EMBEDDING_MODEL")
    registry.register_agent_loops(Path(__file__).with_name("agent_loops.yaml"))
