"""Knowledge Weaver: a curator of knowledge entries trained with execution feedback and token MI credit,
the executor frozen. The curator loop (``loop.py``, agent loop ``kw_curator``), the estimator
(``credit.py``), bank admission after each step (``hook.py``, ``state.py``), the frozen executor
(``executor.py``), the curator prompt and trajectory renderer (``prompts.py``), retrieval, the pool and
dataset builder (``build.py``), and the bank-generation and k-sweep evaluation CLIs (``generate_bank.py``,
``evaluate.py``); registered by ``recipe.py``, run by recipes/knowledge_weaver/."""
