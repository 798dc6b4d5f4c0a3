"""Knowledge Weaver (a curator of knowledge entries trained with execution feedback and token MI
credit, frozen executor). Built so far: the credit and advantage equations (``credit.py``)."""
