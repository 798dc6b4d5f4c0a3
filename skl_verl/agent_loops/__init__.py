"""Agent loops registered into verl's agent-loop registry (``verl.experimental.agent_loop.register``)."""

from skl_verl.agent_loops.env_loop import EnvAgentLoop, EpisodeResult
from skl_verl.agent_loops.skillrise_loop import SkillRiseAgentLoop
from skl_verl.agent_loops.skl_rl_loop import SklRlAgentLoop
from skl_verl.agent_loops.skl_sd_loop import SklSdAgentLoop
from skl_verl.agent_loops.stateful_loop import StatefulAgentLoop

__all__ = ["EnvAgentLoop", "EpisodeResult", "SkillRiseAgentLoop", "SklRlAgentLoop", "SklSdAgentLoop", "StatefulAgentLoop"]
