"""SkillRise (cross-task skill documents): sequences, prompts, evaluation. The agent loop is
``skl_verl.agent_loops.skillrise_loop`` and the estimator ``skillrise`` (skl_verl.verl_glue)."""
