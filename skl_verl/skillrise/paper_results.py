"""Numbers reported in the SkillRise paper (Tables 1–2, Qwen3-4B), printed beside ours."""

ALFWORLD_FAMILIES = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")

# Table 1: success rate (%) per ALFWorld family, ALFWorld average, WebShop SR, ScienceWorld SR.
TABLE1 = {
    "Zero-shot": (1.5, 6.1, 3.6, 4.2, 2.8, 8.6, 4.4, 1.4, 0.8),
    "ReAct": (45.5, 30.3, 21.4, 12.5, 18.1, 23.5, 25.0, 2.1, 7.8),
    "Reflexion": (74.2, 39.4, 19.0, 25.0, 13.9, 13.6, 28.9, 2.7, 7.8),
    "PPO": (82.1, 70.0, 57.9, 52.9, 50.0, 72.0, 67.2, 74.2, 39.1),
    "RLOO": (88.2, 37.5, 96.1, 61.9, 80.0, 42.1, 74.2, 76.6, 43.0),
    "GRPO": (94.1, 75.0, 96.2, 66.7, 75.0, 52.6, 79.7, 75.8, 42.2),
    "GiGPO": (90.3, 88.2, 96.4, 83.3, 75.0, 60.0, 83.6, 77.3, 46.1),
    "LaMer": (88.2, 62.5, 96.2, 71.4, 75.0, 42.1, 76.7, 74.2, 41.4),
    "SkillRise": (100.0, 87.5, 88.5, 81.0, 80.8, 68.4, 85.9, 84.4, 54.6),
}
TABLE1_COLUMNS = (*ALFWORLD_FAMILIES, "Avg.", "WebShop", "SciWorld")

# Table 2: Pass@1/2/3 (%) per environment (ALFWorld, WebShop, ScienceWorld).
TABLE2 = {
    "Zero-shot": {"alfworld": (4.4, 9.4, 12.5), "webshop": (1.4, 2.1, 2.3), "sciworld": (0.8, 1.6, 2.3)},
    "ReAct": {"alfworld": (25.0, 45.3, 57.0), "webshop": (2.1, 4.5, 4.5), "sciworld": (7.8, 10.2, 12.5)},
    "Reflexion": {"alfworld": (28.9, 36.7, 42.2), "webshop": (2.7, 3.3, 3.5), "sciworld": (7.8, 12.5, 17.2)},
    "PPO": {"alfworld": (67.2, 69.5, 73.4), "webshop": (74.2, 75.8, 75.8), "sciworld": (39.1, 45.3, 47.7)},
    "RLOO": {"alfworld": (74.2, 80.5, 82.8), "webshop": (76.6, 78.1, 78.9), "sciworld": (43.0, 48.4, 52.3)},
    "GRPO": {"alfworld": (79.7, 81.3, 82.8), "webshop": (75.8, 76.6, 78.1), "sciworld": (42.2, 50.0, 50.0)},
    "GiGPO": {"alfworld": (83.6, 86.7, 89.1), "webshop": (77.3, 79.7, 80.5), "sciworld": (46.1, 50.8, 55.5)},
    "LaMer": {"alfworld": (76.7, 86.7, 91.4), "webshop": (74.2, 87.5, 94.5), "sciworld": (41.4, 46.1, 46.8)},
    "SkillRise": {"alfworld": (85.9, 91.4, 92.2), "webshop": (84.4, 93.8, 96.1), "sciworld": (54.6, 58.5, 61.0)},
}
