"""Per-sample fields that every agent loop of ours attaches and estimators, losses and metrics read.

verl carries an agent loop's ``extra_fields`` into the batch's ``non_tensor_batch`` one array per key;
these names are the contract between the two sides, declared here once. A recipe's own fields are
declared in its package (``fields.py``), with the ``skl_`` prefix the trainer forwards.
"""

from __future__ import annotations

FIELD_PREFIX = "skl_"
"""Every per-sample field of ours starts with it; the trainer forwards exactly those extra fields."""

TRAJECTORY_ID = "skl_trajectory_id"
"""One id per played episode (or per SkillRise trial); samples of one trial share it."""
SEQUENCE_ID = "skl_sequence_id"
"""SkillRise: which ordered task sequence the sample belongs to (the task id elsewhere)."""
POSITION = "skl_position"
"""SkillRise: 0-based index k of the task inside its sequence (0 elsewhere)."""
PHASE = "skl_phase"
"""What the policy was doing: 'act' (plain env play), 'solve', 'curate', 'knowledge', ..."""
TOKEN_CREDIT = "skl_token_credit"
"""Optional per-response-token extra credit (list of floats, len = response length), or None."""
SCORE = "skl_score"
"""The sample's own scalar score (env return minus penalties). verl's v1 worker overwrites every
output's reward with the last output's when a loop returns several, so estimators read this."""
EPISODE_REWARD = "skl_episode_reward"
"""The env's return for the episode before format penalties."""
STEP_INDEX = "skl_step_index"
"""Step mode (``sample_granularity: step``): 0-based index of the env step a sample acted on; None
for an episode-mode sample. Every step sample of one trial phase carries that phase's score, so
estimators count trials, never steps."""
STEP_PENALTY = "skl_step_penalty"
"""Step mode: the format penalty of this step's own reply (0 when it parsed), applied to this
sample's advantage only, never to another step's or another phase's return."""
ANCHOR_STATE = "skl_anchor_state"
"""Step mode: the env's ``state_key()`` where this step acted (before its action), GiGPO's anchor
state; a unique ``unkeyed:`` key when the env could not give one, so that step joins no group."""
STEP_REWARD = "skl_step_reward"
"""Step mode: what this step added to the trial's reward before format penalties (``reward_fn``
of the return and success after the step minus before it): the env's own reward under
``env_return``, ``reward_scale`` on the winning step under ``scaled_success``. A trial's step
rewards sum to its score; all 0 when the trial failed."""

WON = "skl_won"
"""Whether the episode reached the env's goal."""
TURNS = "skl_turns"
INVALID_FORMAT_TURNS = "skl_invalid_format_turns"
INVALID_ACTION_TURNS = "skl_invalid_action_turns"
TRUNCATED = "skl_truncated"
"""The episode hit the turn cap or the context length before the env ended it."""
FAILED = "skl_failed"
"""Why the sample's env failed ("" when it did not): the sample is kept, flagged, and trains nothing."""
