"""WebShop (Yao et al., 2022): a text env that is an HTTP client of a running WebShop site.

* ``envs.webshop.env``: ``WebShopEnv``, registered as ``webshop`` (protocol, tasks, goal data, snapshots);
* ``envs.webshop.pages``: WebShop's pages read as text observations and clickables;
* ``envs.webshop.server``: the launcher that starts WebShop's own Flask site in the paper's setting.
  It runs in WebShop's environment, not this one: ``python -m envs.webshop --write-launcher PATH``
  copies it into a WebShop checkout (``docs/webshop_setup.md``).
"""
