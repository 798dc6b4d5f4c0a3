"""Knowledge Weaver: a curator of knowledge entries trained with execution feedback and token MI
credit, the executor frozen. Built so far: the credit and advantage equations and MI rescoring
(``credit.py``), bank retrieval (``retrieval.py``), the step plan, admission rule and bank versions
(``state.py``), entry validity, body tokens and guidance text (``entries.py``), the frozen executor
(``executor.py``) and the curator prompt (``prompts.py``). No curator loop or recipe yet."""
