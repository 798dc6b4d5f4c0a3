"""A toy recipe, the worked example of docs/adding_a_recipe.md: GRPO's sibling ``toy_mean_baseline``
(advantage = score minus the mean score of the task's other trials, scaled) trained on FrozenLake with an
agent loop that adds a bonus to won episodes."""
