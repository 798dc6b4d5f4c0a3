"""SKL paper §2.1–2.2: the slippery-FrozenLake prompting study (Fig. 2a, Fig. 3), no training.

Four agents (:mod:`.agents`), each with its own memory and the same interaction budget (one episode
per map per iteration), play ``--iterations`` rounds on the training maps and are then evaluated
once on held-out maps with what they learnt carried over (:mod:`.runner`, which also computes the
metrics). :mod:`.prompts` holds every prompt, :mod:`.board` the exact good-move measure and the
transfer key, :mod:`.episodes` what is recorded, :mod:`.chat` the model client wrapper,
:mod:`.plot` the figure and :mod:`.cli` the command line (``python -m skl_verl.skl.frozenlake_study``).
"""
