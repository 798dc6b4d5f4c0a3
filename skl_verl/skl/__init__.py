"""Stateful Knowledge Learning (SKL): per-state knowledge ``z_s``, the experience buffer SKL-SD samples
partial rollouts from (``knowledge``), and SKL-RL's localized parallel simulation (``simulation``)."""
