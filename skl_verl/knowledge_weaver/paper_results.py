"""Numbers reported in the Knowledge Weaver paper (frozen executor, 3 banks per method), printed beside ours."""

ALFWORLD_TYPES = ("Pick", "Clean", "Heat", "Cool", "Look", "Pick2")
"""Table 1's column order; the names are our ALFWorld env's families (the paper writes "Pick Two")."""

# Table 1 (k = 10, frozen Qwen3.5-4B): ALFWorld SR % per type, overall SR (mean, std); WebShop score (mean, std)
# and SR % (mean, std).
TABLE1 = {
    "Zero-shot": ((30.6, 10.8, 31.9, 30.2, 24.1, 25.5), (24.6, 1.5), (53.5, 1.9), (27.3, 1.5)),
    "Qwen3.5-4B": ((40.3, 43.0, 24.6, 41.3, 48.1, 15.7), (36.3, 3.0), (40.6, 2.2), (14.7, 2.1)),
    "GPT-5": ((40.3, 39.8, 27.5, 61.9, 50.0, 21.6), (40.3, 7.9), (45.2, 6.8), (18.7, 7.4)),
    "Claude Opus 4.8": ((40.3, 30.1, 40.6, 36.5, 72.2, 3.9), (37.1, 6.2), (55.2, 2.5), (24.7, 0.6)),
    "Gemini 3.7 Flash": ((25.0, 11.8, 18.8, 25.4, 64.8, 11.8), (24.6, 6.4), (61.3, 5.4), (35.7, 5.9)),
    "SkillRL": ((34.7, 50.5, 50.7, 68.3, 66.7, 39.2), (51.2, 2.4), (36.6, 3.0), (15.7, 0.6)),
    "Human-written": ((47.2, 48.4, 63.8, 52.4, 55.6, 25.5), (49.5, 1.1), (63.1, 1.5), (32.0, 1.0)),
    "GRPO (SR only)": ((30.6, 26.9, 34.8, 44.4, 55.6, 39.2), (37.1, 3.7), (49.0, 4.8), (23.3, 2.1)),
    "SkillRise": ((43.8, 22.6, 32.6, 28.6, 47.2, 29.4), (33.2, 1.6), (40.0, 5.6), (18.7, 3.5)),
    "Skill1": ((37.5, 25.8, 14.5, 34.9, 44.4, 25.5), (29.9, 8.2), (38.5, 0.9), (17.0, 1.0)),
    "ExpeL": ((38.9, 18.3, 23.2, 27.0, 37.0, 31.4), (28.4, 2.7), (58.4, 1.2), (24.7, 2.1)),
    "Mem0": ((36.8, 37.1, 52.2, 47.6, 47.2, 25.5), (41.2, 0.9), (50.1, 1.3), (19.0, 2.0)),
    "Knowledge Weaver": ((45.8, 48.4, 63.8, 54.0, 87.0, 27.5), (54.0, 0.4), (66.4, 2.6), (42.0, 2.0)),
}

# Table 2 (reward ablation, k = 10): ALFWorld SR %, WebShop score, WebShop SR %.
TABLE2 = {
    "SR": (37.1, 49.0, 23.3),
    "SR + MI": (46.0, 65.8, 40.7),
    "SR + MI + MSR": (54.0, 66.4, 42.0),
}
TABLE2_ROW = {"GRPO (SR only)": "SR", "SR + MI": "SR + MI", "Knowledge Weaver": "SR + MI + MSR"}
"""Which Table 2 row a method of ours is."""

# Table 3 (transfer across frozen executors, k = 8): (None, GRPO, Ours) for ALFWorld SR %, WebShop score,
# WebShop SR %. None = the executor alone (k = 0).
TABLE3 = {
    "Qwen3.5-4B": ((24.6, 38.1, 49.3), (53.5, 49.0, 67.5), (27.3, 20.7, 41.0)),
    "Qwen3.5-27B": ((48.5, 61.9, 61.2), (54.9, 55.6, 66.9), (25.0, 23.0, 41.7)),
    "Llama-3-8B-Instruct": ((6.7, 7.2, 12.7), (2.7, 10.3, 10.5), (0.0, 4.7, 4.0)),
    "Llama-3.1-8B-Instruct": ((9.7, 14.9, 21.1), (16.0, 6.7, 19.7), (6.0, 2.3, 11.7)),
    "Phi-4-mini-instruct": ((7.5, 9.5, 13.9), (2.3, 8.9, 5.4), (1.0, 3.3, 3.3)),
    "Phi-4": ((19.4, 32.6, 38.1), (57.0, 51.3, 65.2), (13.0, 16.7, 33.3)),
    "DeepSeek-V4-Flash": ((56.0, 64.2, 64.9), (57.0, 56.2, 69.2), (30.0, 26.0, 46.3)),
    "MiniMax-M2.5": ((35.1, 53.7, 56.5), (62.8, 64.8, 73.6), (30.0, 33.0, 48.0)),
    "MiniMax-M2.1": ((70.9, 73.9, 74.4), (73.2, 68.7, 75.8), (43.0, 37.0, 49.7)),
}
TABLE3_COLUMN = {"GRPO (SR only)": 1, "Knowledge Weaver": 2}
"""Which Table 3 column (after None) a method of ours fills."""

# §4.3 and App. E.4 (text, not tables).
JACCARD_K10 = {"alfworld": {"Knowledge Weaver": 12.92, "GRPO (SR only)": 13.58},
               "webshop": {"Knowledge Weaver": 15.35, "GRPO (SR only)": 24.48}}
GUIDANCE_TOKENS_K10 = {"alfworld": 660, "webshop": 594}
"""Knowledge Weaver's mean guidance block at k = 10, in executor (Qwen3.5-4B) tokens ("approximately")."""
KW_SR_K15 = {"alfworld": 54.2, "webshop": 43.7}
