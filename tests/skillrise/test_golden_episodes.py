"""Golden episodes: SkillRise and its Table 1 baselines played end to end with a scripted policy.

A scripted policy (tests/golden.py ``ScriptedPolicy``: it answers by request id, never decides) plays a
short, fixed sequence of turns through verl's agent-loop worker with the recipe's REAL loop entry
(``skillrise_<env>``, ``step_<env>``) on the real env (ALFWorld games made offline, the WebShop stand-in,
ScienceWorld's JVM); the recipe's REGISTERED estimator then runs as the trainer's advantage step does
(tests/loop_helpers.py ``advantage_step``, with the recipe config's ``algorithm`` section). Every number
the tests expect is derived by hand in the comments and with plain arithmetic, never with our estimators.

The released rules these episodes encode:

* one training sample per policy turn and one per curation; reward 10 * won;
* the loop's turn cap counts policy turns (ALFWorld 10, WebShop 12, ScienceWorld 30); an unparseable reply
  uses a turn, is penalised 0.5 on its own row, and its last 30 (WebShop 20) characters go to the env as the
  action;
* row score s = R - 0.5 * [row unparseable] (solve rows, R = 10 * won of the trial's task; the loop reports R
  as skl_score and the penalty as skl_step_penalty) and, for the
  curation after task k, s = sum_{j>k} 0.6^(j-k) R_j - 0.5 * [no valid <skill> block];
* ``skillrise`` (norm mean): A = s - mean over the group's trials of each trial's FIRST row score;
* ``skl_grpo``: A = (s - mean) / (std + 1e-6) over EVERY step row of the task group (unbiased std);
* ``gigpo`` (mean norm): A = (s - mean over every row of the task group)
  + (G - mean of G over the task group's rows that acted from the same state), G the row's 0.95-discounted
  return of env-step rewards (10 at the winning step), a state reached once giving 0;
* ``skl_rloo``: A = s - mean of the group's OTHER step rows (``count: trials``: the other trials' first rows);
* ``skillrise`` with norm std, and ``skl_grpo`` with ``count: trials``: mean and unbiased std over the trials'
  first-row scores, A = (s - mean) / (std + 1e-6);
* ``skl_gae`` (PPO): verl's GAE over each row with s on its last token;
* evaluation (evaluate.py) counts tasks, never step rows;
* baseline mini-batches: 128 step samples.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil

import pytest
from golden import (
    PICK,
    PICK_CLOSED,
    WALK_CLOSED,
    WALK_PICK,
    BAD,
    BAD_SKILL,
    BAD_TAIL,
    GOOD_SKILL,
    Checks,
    ShopperPolicy,
    act,
    play,
    recipe_config,
    rows_of,
    unbiased_std,
)
from loop_helpers import advantage_step

from skl_verl.skillrise import evaluate
from skl_verl.skillrise.build_dataset import sequence_rows
from skl_verl.skillrise.prompts import EMPTY_DOCUMENT
from skl_verl.skillrise.sequences import TaskSequence

WEBSHOP_TAIL = BAD[-20:]  # the released WebShop projection sends 20 characters
SKILL_TEXT = GOOD_SKILL.removeprefix("<skill>").removesuffix("</skill>")


def evaluation_counts(data):
    """What evaluate.py reports for these solve rows: tasks (never step rows) played and won."""
    records = evaluate.solve_records(data)
    return records, evaluate.task_records(records), evaluate.success_rate(records), evaluate.pass_at_k(records, 2)


# What the released prompts carry (the authors' prompt.py of each env), checked on every prompt of a scenario:
# one user message and no system message; a solve prompt opens with the role and the skill document (use a
# skill only when sure it fits) and closes by asking for step-by-step reasoning, then one admissible action in
# <action> tags; a curation prompt states the rules of a good revision and a layout, and shows no task and no
# length cap; WebShop's adds a shopping checklist.
SOLVE_CARRIES = ("You are an expert agent", "Skill document (", "apply one only when you are confident it fits",
                 "First reason step by step", "exactly one admissible action inside <action>...</action>")
CURATE_CARRIES = ("You keep a skill document for a family of related tasks", "Old skill document:",
                  "Most recent attempt", "Outcome of this attempt:", "Abstract:", "Stay grounded:",
                  "name the point where it went wrong as a concrete pitfall", "Be concise:",
                  "Do not copy the attempt step by step", "## When to use, ## Workflow, ## Pitfalls",
                  "Reason about the attempt first", "<skill>...</skill>")
CURATE_SPECIFICS = {"alfworld": "object names, receptacle ids and numbers",
                    "webshop": "product names, brands, attribute values and price limits",
                    "sciworld": "substances, container colours, rooms and thresholds"}
WEBSHOP_CHECKLIST = ("how to word the search query", "not simply the first", "set the options before buying",
                     "the price limit before click[buy now]", "next page")


def check_released_instructions(c, prompts, env, task):
    for (trial, phase), texts in sorted(prompts.items()):
        for turn, text in enumerate(texts):
            where = f"{env} {phase} of trial {trial}, turn {turn}"
            c.equal(text.count("<|im_start|>"), 2, f"{where}: one user message, then the assistant's turn")
            c.true("<|im_start|>system" not in text, f"{where}: no system message")
            if phase.startswith("solve"):
                c.in_order(text, list(SOLVE_CARRIES), f"{where}: the solve instructions, in order")
            else:
                c.in_order(text, list(CURATE_CARRIES), f"{where}: the curation instructions, in order")
                c.true(CURATE_SPECIFICS[env] in text, f"{where}: the env's instance details to abstract")
                c.true(task not in text, f"{where}: no task ({task!r})")
                c.true(" words" not in text, f"{where}: no length cap")
                for point in WEBSHOP_CHECKLIST:
                    c.equal(point in text, env == "webshop", f"{where}: WebShop's checklist point {point!r}")


# Every SkillRise scenario below has the same shape: one sequence of two tasks of one family, two trials.
#   trial 0: solve0 wins, its SECOND reply unparseable; curate0 writes a valid <skill> document; solve1 wins.
#   trial 1: solve0 loses, its FIRST reply unparseable; curate0 has no <skill> block; solve1 loses.
def skillrise_expected(rows_t0_solve0, rows_t0_solve1, rows_t1_solve0, rows_t1_solve1):
    """(scores, advantages) per slot for that shape, given each solve's number of rows."""
    # Row scores s: solve rows 10 * won - 0.5 on an unparseable row; a curation after task 0 gets 0.6 * R_1,
    # minus 0.5 without a valid <skill> block: trial 0 0.6 * 10 = 6.0, trial 1 0.6 * 0 - 0.5 = -0.5.
    scores = {
        (0, 0, "solve"): [10.0, 9.5] + [10.0] * (rows_t0_solve0 - 2),
        (0, 0, "curate"): [6.0],
        (0, 1, "solve"): [10.0] * rows_t0_solve1,
        (1, 0, "solve"): [-0.5] + [0.0] * (rows_t1_solve0 - 1),
        (1, 0, "curate"): [-0.5],
        (1, 1, "solve"): [0.0] * rows_t1_solve1,
    }
    # skillrise, norm mean: A = s - mean of the trials' FIRST-row scores of the group.
    #   (seq, 0, solve): first rows 10 and -0.5 -> mean 4.75 (every-row statistics would differ)
    #   (seq, 0, curate): 6.0 and -0.5 -> mean 2.75
    #   (seq, 1, solve): 10 and 0 -> mean 5.0
    baseline = {(0, "solve"): 4.75, (0, "curate"): 2.75, (1, "solve"): 5.0}
    advantages = {slot: [s - baseline[slot[1:]] for s in values] for slot, values in scores.items()}
    assert advantages[(0, 0, "solve")][:2] == [5.25, 4.75] and advantages[(1, 0, "solve")][:2] == [-5.25, -4.75]
    assert advantages[(0, 0, "curate")] == [3.25] and advantages[(1, 0, "curate")] == [-3.25]
    return scores, advantages


def check_skillrise_batch(c, data, policy, config_name, counts):
    """Samples, scores, advantages (the recipe config's registered estimator) and evaluation counts."""
    c.equal(dict(sorted((k, len(v)) for k, v in policy.prompts.items())), dict(sorted(counts.items())),
            "policy calls per (trial, phase): one per turn, one per curation")
    c.equal(len(data), sum(counts.values()), "samples in the batch")
    metrics = advantage_step(data, recipe_config(config_name))
    rows = rows_of(data)
    scores, advantages = skillrise_expected(counts[(0, "solve0")], counts[(0, "solve1")], counts[(1, "solve0")],
                                            counts[(1, "solve1")])
    c.rows(rows, scores, "score", "score (skl_score)")
    c.rows(rows, advantages, "advantage")
    # evaluate.py counts tasks: 2 trials x 2 tasks = 4 played, 2 won -> 0.5 whatever the rows per task;
    # Pass@1 = Pass@2 = 1/2 (trial 0 solved its first task at once, trial 1 never).
    records, tasks, rate, pass_k = evaluation_counts(data)
    c.equal(len(records), sum(v for k, v in counts.items() if k[1].startswith("solve")), "solve rows")
    c.equal(len(tasks), 4, "tasks played (evaluate.task_records)")
    c.approx(rate, 0.5, "success rate over tasks (evaluate.success_rate)")
    c.approx(pass_k, {1: 0.5, 2: 0.5}, "Pass@k over trials (evaluate.pass_at_k)")
    for key, want in (("env/solve_success_rate@0", 0.5), ("env/solve_success_rate@1", 0.5), ("curate/error_rate", 0.5)):
        c.approx(metrics.get(key), want, f"metric {key}")


# ==================================================================================== ALFWorld

# SkillRise on ALFWorld: one sequence (PICK, then PICK_CLOSED), two trials.
#   trial 0: solve0 = desk, BAD, take, bed, move        -> 5 rows, won
#            curate0 = a valid <skill> document         -> 1 row
#            solve1 = the 6-step walkthrough            -> 6 rows, won
#   trial 1: solve0 = BAD, then "look" ...              -> 10 rows (the turn cap counts the BAD turn), lost
#            curate0 = no <skill> block (malformed)     -> 1 row, the document stays empty
#            solve1 = "look" ...                        -> 10 rows (turn cap), lost
ALFWORLD_SKILLRISE_SCRIPT = {
    # the first reply names two actions: the released projection takes the FIRST <action> block (go to desk 1)
    (0, "solve0"): [f"{act(WALK_PICK[0])} or else {act('look')}", BAD, *map(act, WALK_PICK[1:])],
    (0, "curate0"): [GOOD_SKILL],
    (0, "solve1"): [act(a) for a in WALK_CLOSED],
    (1, "solve0"): [BAD, act("look")],
    (1, "curate0"): [BAD_SKILL],
    (1, "solve1"): [act("look")],
}


@pytest.fixture(scope="module")
def alfworld_skillrise_batch(tmp_path_factory, model_dir, alfworld_kwargs):
    sequence = TaskSequence("pick-golden", "Pick", (PICK, PICK_CLOSED), (4.0, 6.0))
    rows = sequence_rows("alfworld", alfworld_kwargs, [sequence])
    return play(tmp_path_factory.mktemp("skillrise_alfworld"), model_dir, rows, "skillrise_alfworld", n=2,
                script=ALFWORLD_SKILLRISE_SCRIPT)


def test_skillrise_alfworld_golden_episode(alfworld_skillrise_batch):
    data, policy = alfworld_skillrise_batch
    data = copy.deepcopy(data)
    c = Checks()
    prompts = policy.prompts

    # (1) a solve step's prompt: task 2, step 3 of trial 0 (after the curated document): the document,
    # the task as first observed, the last steps, the current observation, then its admissible actions.
    if c.true(len(prompts[(0, "solve1")]) >= 3, "trial 0 played task 2 for 3 turns"):
        step3 = prompts[(0, "solve1")][2]
        c.in_order(step3, ["Skill document (", SKILL_TEXT, "Task", "Your task is to: put", "Your last 2 of 2 steps",
                           "1. go to drawer 2 ->", "2. open drawer 2 ->", "Current observation (step 3)",
                           "Admissible actions:"], "solve prompt, task 2 step 3")
        c.equal(step3.count("Admissible actions:"), 1, "admissible-action lists in a step prompt")
        c.true(EMPTY_DOCUMENT not in step3 and "put a cellphone in bed" not in step3,
               "only the curated document crosses tasks")
    # The unparseable reply was a turn: its last 30 characters went to the env, which answered as for any
    # inadmissible action ("Nothing happens."), and the next prompt shows exactly that step.
    if c.true(len(prompts[(0, "solve0")]) >= 3, "trial 0 played task 1 for 3 turns"):
        c.in_order(prompts[(0, "solve0")][2], [EMPTY_DOCUMENT, "Your last 2 of 2 steps", "1. go to desk 1 ->",
                                               f"2. {BAD_TAIL} -> Nothing happens.", "Current observation (step 3)",
                                               "Admissible actions:"], "solve prompt after an unparseable reply")
    # step_history 15 > the 10-turn cap: trial 1's last turn of task 2 shows all 9 earlier steps.
    c.in_order(prompts[(1, "solve1")][-1], ["Your last 9 of 9 steps", "1. look ->", "9. look ->",
                                            "Current observation (step 10)"], "solve prompt at the turn cap")
    c.true(EMPTY_DOCUMENT in prompts[(1, "solve1")][0], "a malformed curation keeps the previous (empty) document")

    # (1) a curation's prompt: document, task, outcome, the attempt's steps (action -> result), instruction.
    c.in_order(prompts[(0, "curate0")][0], ["Old skill document:", EMPTY_DOCUMENT, "Most recent attempt, 5 of 5 steps",
                                            "1. go to desk 1 ->", f"2. {BAD_TAIL} -> Nothing happens.",
                                            "5. move cellphone 1 to bed 1 ->", "Outcome of this attempt: success",
                                            "<skill>...</skill>"], "curation prompt (won)")
    c.in_order(prompts[(1, "curate0")][0], ["Most recent attempt, 10 of 10 steps", "10. look ->",
                                            "Outcome of this attempt: failure (the task was not completed)"],
               "curation prompt (lost at the turn cap)")
    check_released_instructions(c, prompts, "alfworld", "put a cellphone in bed")

    # (2)-(4): 5 + 1 + 6 + 10 + 1 + 10 = 33 samples; scores, advantages and evaluation counts.
    counts = {(0, "solve0"): 5, (0, "curate0"): 1, (0, "solve1"): 6, (1, "solve0"): 10, (1, "curate0"): 1, (1, "solve1"): 10}
    check_skillrise_batch(c, data, policy, "skillrise_alfworld", counts)
    c.verify()


def test_skillrise_std_norm_alfworld_golden_episode(alfworld_skillrise_batch):
    data = copy.deepcopy(alfworld_skillrise_batch[0])
    advantage_step(data, recipe_config("skillrise_alfworld", ["algorithm.skillrise.norm=std"]))
    scores, _ = skillrise_expected(5, 6, 10, 10)
    # norm std: (s - mean) / (std + 1e-6), mean and unbiased std over the trials' FIRST-row scores. Two trials:
    # std = |a - b| / sqrt(2): (seq, 0, solve) 10 and -0.5 -> 7.424621; (seq, 0, curate) 6 and -0.5 -> 4.596194;
    # (seq, 1, solve) 10 and 0 -> 7.071068.
    stats = {(0, "solve"): (4.75, 7.424621), (0, "curate"): (2.75, 4.596194), (1, "solve"): (5.0, 7.071068)}
    assert unbiased_std([10, -0.5]) == pytest.approx(7.424621, abs=1e-6)
    expected = {slot: [(s - stats[slot[1:]][0]) / (stats[slot[1:]][1] + 1e-6) for s in values]
                for slot, values in scores.items()}
    c = Checks()
    c.rows(rows_of(data), expected, "advantage")
    c.verify()


# ==================================================================================== WebShop

# Goals 500 and 503 of the stand-in (run_webshop.sh's train split, verl-agent's convention): "coffee table that
# is solid wood", for its Travel (B000000CC1) and Deluxe (B000000CC2) editions; family "furniture".
WEBSHOP_TASKS = ("webshop-500", "webshop-503")
#   trial 0: solve0 = search, BAD, click CC1, buy      -> 4 rows, won (reward 1.0)
#            curate0 = valid; solve1 = search, click CC2, buy -> 3 rows, won
#   trial 1: solve0 = BAD, search shampoo, click AAA, buy -> 4 rows, lost (wrong category: reward 0.05)
#            curate0 = malformed; solve1 = search x 12 -> 12 rows, lost at the turn cap
WEBSHOP_SCRIPT = {
    (0, "solve0"): [act("search[coffee table]"), BAD, act("click[b000000cc1]"), act("click[buy now]")],
    (0, "curate0"): [GOOD_SKILL],
    (0, "solve1"): [act("search[coffee table]"), act("click[b000000cc2]"), act("click[buy now]")],
    (1, "solve0"): [BAD, act("search[shampoo]"), act("click[b000000aaa]"), act("click[buy now]")],
    (1, "curate0"): [BAD_SKILL],
    (1, "solve1"): [act("search[coffee table]")],
}


@pytest.fixture(scope="module")
def webshop_url():
    from webshop_standin import MiniWebShopStandIn

    server = MiniWebShopStandIn()
    yield server.url
    server.close()


def test_skillrise_webshop_golden_episode(tmp_path, model_dir, webshop_url):
    # run_webshop.sh's env kwargs (verl-agent's train split, the released turn cap of 12 steps).
    kwargs = {"server_url": webshop_url, "split": "train", "split_convention": "verl_agent", "max_steps": 12,
              "history_items": 15}
    rows = sequence_rows("webshop", kwargs, [TaskSequence("furniture-golden", "furniture", WEBSHOP_TASKS, (1.0, 1.0))])
    data, policy = play(tmp_path, model_dir, rows, "skillrise_webshop", n=2, script=WEBSHOP_SCRIPT)
    c = Checks()
    prompts = policy.prompts
    goal = "i need coffee table that is solid wood"
    if c.true(len(prompts[(0, "solve0")]) >= 3, "trial 0 played task 1 for 3 turns"):
        step3 = prompts[(0, "solve0")][2]
        c.in_order(step3, ["Skill document (", EMPTY_DOCUMENT, "Task", goal, "Your last 2 of 2 steps",
                           "1. search[coffee table] ->", f"2. {WEBSHOP_TAIL} -> Invalid action",
                           "Current observation (step 3)", "Admissible actions:"], "solve prompt after an unparseable reply")
        c.equal(step3.count("Admissible actions:"), 1, "admissible-action lists in a step prompt")
    if c.true(len(prompts[(0, "solve1")]) >= 2, "trial 0 played task 2 for 2 turns"):
        c.in_order(prompts[(0, "solve1")][1], ["Skill document (", SKILL_TEXT, "Task", goal, "Your last 1 of 1 steps",
                                               "1. search[coffee table] ->", "Current observation (step 2)",
                                               "Admissible actions:"], "solve prompt of task 2 (curated document)")
    # step_history 5: at the 12th (capped) turn only steps 7-11 are shown.
    last = prompts[(1, "solve1")][-1]
    c.in_order(last, ["Your last 5 of 11 steps", "7. search[coffee table] ->", "11. search[coffee table] ->",
                      "Current observation (step 12)"], "solve prompt at the turn cap")
    c.true("6. search[coffee table] ->" not in last, "steps older than step_history are not shown")
    c.in_order(prompts[(0, "curate0")][0], ["Old skill document:", EMPTY_DOCUMENT, "Most recent attempt, 4 of 4 steps",
                                            "1. search[coffee table] ->", f"2. {WEBSHOP_TAIL} -> Invalid action",
                                            "4. click[buy now] ->", "Outcome of this attempt: success",
                                            "<skill>...</skill>"], "curation prompt (won)")
    c.in_order(prompts[(1, "curate0")][0], ["Most recent attempt, 4 of 4 steps", f"1. {WEBSHOP_TAIL} ->",
                                            "Outcome of this attempt: failure"], "curation prompt (lost)")
    check_released_instructions(c, prompts, "webshop", goal)
    # history_items 15 (run_webshop.sh): a past page in a history line drops the goal's instruction, as the
    # released memory does; the current observation is the page as served.
    c.in_order(prompts[(0, "solve0")][2], ["Your last 2 of 2 steps", "1. search[coffee table] -> Back to Search [SEP]",
                                           "Current observation (step 3)", "Instruction: [SEP] " + goal],
               "history pages without the instruction, the current page whole")
    c.true(EMPTY_DOCUMENT in prompts[(1, "solve1")][0], "a malformed curation keeps the previous (empty) document")
    counts = {(0, "solve0"): 4, (0, "curate0"): 1, (0, "solve1"): 3, (1, "solve0"): 4, (1, "curate0"): 1, (1, "solve1"): 12}
    check_skillrise_batch(c, data, policy, "skillrise_webshop", counts)
    c.verify()


# The document crosses tasks as written (the released curator keeps the reply's text, stripped, cut at 4,000
# characters, unpenalised): trial 0 writes a Markdown document, trial 1 one of 4,750 characters.
MARKDOWN_DOCUMENT = ("# Furniture shopping\n\n## When to use\n- the goal names a product and a price limit\n\n"
                     "## Workflow\n1. Search with the goal's key words.\n2. Open the first matching product.\n"
                     "   - choose every option the goal names\n3. Check the price, then Buy Now.\n\n"
                     "## Pitfalls\n* a search box left empty finds nothing")
LONG_DOCUMENT = "Check the price before you click buy.\n" * 125
"""About 3,000 tokens of the tiny test tokenizer (about 1,000 of Qwen's): the test plays 4,096-token replies."""
DOCUMENT_SCRIPT = {
    (0, "solve0"): [act("search[coffee table]"), act("click[b000000cc1]"), act("click[buy now]")],
    (0, "curate0"): [f"<skill>\n{MARKDOWN_DOCUMENT}\n\n</skill>"],
    (0, "solve1"): [act("search[coffee table]"), act("click[b000000cc2]"), act("click[buy now]")],
    (1, "solve0"): [act("search[coffee table]"), act("click[b000000cc1]"), act("click[buy now]")],
    (1, "curate0"): [f"<skill>{LONG_DOCUMENT}</skill>"],
    (1, "solve1"): [act("search[coffee table]"), act("click[b000000cc2]"), act("click[buy now]")],
}


def test_a_curated_document_crosses_to_the_next_task_as_written_and_is_cut_not_rejected(tmp_path, model_dir,
                                                                                        webshop_url):
    kwargs = {"server_url": webshop_url, "split": "train", "split_convention": "verl_agent", "max_steps": 12,
              "history_items": 15}
    rows = sequence_rows("webshop", kwargs, [TaskSequence("furniture-golden", "furniture", WEBSHOP_TASKS, (1.0, 1.0))])
    data, policy = play(tmp_path, model_dir, rows, "skillrise_webshop", n=2, script=DOCUMENT_SCRIPT, response_length=4096)
    c = Checks()
    prompts = policy.prompts
    c.true(f"ignore the rest):\n{MARKDOWN_DOCUMENT}\n\n" in prompts[(0, "solve1")][0],
           "the Markdown document reaches the next task byte for byte (headings, lists, numbered steps)")
    long_kept = LONG_DOCUMENT.strip()[:4000]
    c.equal(len(LONG_DOCUMENT.strip()), 4749, "the long document's length (stripped)")
    c.true(f"ignore the rest):\n{long_kept}\n\n" in prompts[(1, "solve1")][0],
           "a 4,749-character document is cut to its first 4,000 characters, not rejected")
    fields = data.non_tensor_batch
    curate = [i for i in range(len(data)) if fields["skl_phase"][i] == "curate"]
    c.equal([fields["skl_curate_error"][i] for i in curate], ["", ""], "neither curation is an error")
    c.equal(sorted(bool(fields["skl_document_cut"][i]) for i in curate), [False, True], "one document was cut")
    # Both trials won both tasks (reward 10 each), neither curation is penalised: each curation returns
    # 0.6 * 10 = 6, the same in its group, so both curations' advantages are 0.
    advantage_step(data, recipe_config("skillrise_webshop"))
    curate_rows = [r for r in rows_of(data) if r.phase == "curate"]
    c.approx([r.score for r in curate_rows], [6.0, 6.0], "curation returns (no penalty for a long document)")
    c.approx([r.advantage for r in curate_rows], [0.0, 0.0], "curation advantages")
    c.verify()


def test_skillrise_webshop_evaluation_counts_tasks(tmp_path, model_dir, webshop_url, monkeypatch):
    """evaluate.py's Pass@k and test-time scaling on the stand-in's first 6 goals (shampoo, headphones and
    coffee table, two editions each; families of 2), played by ShopperPolicy with skillrise_webshop: the 2
    coffee-table goals are won in 3 steps, the other 4 lost after 12 (the turn cap)."""
    import json

    rows = {}
    real_rollouts = evaluate.run_rollouts

    def rollouts(args, env_kwargs, sequences, tokenizer, client, workdir, name):
        rows[name] = real_rollouts(args, env_kwargs, sequences, tokenizer, client, workdir, name)
        return rows[name]

    monkeypatch.setattr(evaluate, "run_rollouts", rollouts)
    monkeypatch.setattr(evaluate, "generation_client", lambda tokenizer, *a, **k: ShopperPolicy(tokenizer))
    kwargs = {"server_url": webshop_url, "split": "all", "max_goals": 6, "max_steps": 12}
    out = tmp_path / "results.json"
    evaluate.main(["--env", "webshop", "--env-kwargs", json.dumps(kwargs), "--model", model_dir, "--max-tasks", "6",
                   "--attempts", "2", "--scaling-k", "1,2", "--max-prompt-length", "32768", "--out", str(out)])
    results = json.loads(out.read_text())
    c = Checks()
    # Pass@k: 2 of 6 tasks solved on the first try, none on the second -> 1/3, 1/3 over 6 tasks played.
    c.approx(results["pass_at_k"], {"1": 1 / 3, "2": 1 / 3}, "Pass@1, Pass@2")
    c.equal(results["pass_at_k_tasks_played"], 6, "Pass@k tasks played")
    # Scaling: every K plays the same 6 tasks once: 2 won -> 1/3. The rows would say 6 won of 6 + 4 * 12 = 54.
    for k in ("1", "2"):
        c.approx(results["scaling"][k], {"success_rate": 1 / 3, "tasks_played": 6}, f"scaling K={k}")
    scaled = rows.get("scaling_k1", [])
    c.equal((len(scaled), sum(r["won"] for r in scaled)), (54, 6), "solve rows of scaling K=1 (rows, won rows)")
    # Pass@k rows: the 2 coffee goals stop after their first (won, 3-row) attempt; the other 4 play 2 x 12.
    c.equal(len(rows.get("pass_at_k", [])), 2 * 3 + 4 * 2 * 12, "solve rows of Pass@k")
    c.verify()


# ==================================================================================== ScienceWorld

# find-living-thing, variations 0 and 1 of the train split; the package's gold action sequences.
SCIWORLD_TASKS = ("sciworld-find-living-thing-v0", "sciworld-find-living-thing-v1")
GOLD_V0 = ["open door to kitchen", "go to kitchen", "open door to outside", "go to outside", "look around",
           "focus on blue jay", "pick up blue jay", "open door to kitchen", "go to kitchen",
           "move egg blue jay egg in inventory to red box"]
GOLD_V1 = ["open door to hallway", "go to hallway", "open door to greenhouse", "go to greenhouse", "open door to outside",
           "go to outside", "look around", "focus on blue jay", "pick up blue jay", "open door to kitchen",
           "go to kitchen", "move egg blue jay egg in inventory to green box"]
#   trial 0: solve0 = open, BAD, the other 9 gold steps -> 11 rows, won; curate0 valid; solve1 = 12 gold steps, won
#   trial 1: solve0 = BAD, "focus on air" (not a living thing: the task fails, score -100) -> 2 rows, lost
#            curate0 malformed; solve1 = "look around" x 30 -> 30 rows, lost at the turn cap
SCIWORLD_SCRIPT = {
    (0, "solve0"): [act(GOLD_V0[0]), BAD, *map(act, GOLD_V0[1:])],
    (0, "curate0"): [GOOD_SKILL],
    (0, "solve1"): [act(a) for a in GOLD_V1],
    (1, "solve0"): [BAD, act("focus on air")],
    (1, "curate0"): [BAD_SKILL],
    (1, "solve1"): [act("look around")],
}


@pytest.mark.skipif(importlib.util.find_spec("scienceworld") is None or shutil.which("java") is None,
                    reason="scienceworld package or java missing")
def test_skillrise_sciworld_golden_episode(tmp_path, model_dir):
    # run_sciworld.sh's env kwargs (turn cap 30, action templates), two variations of one task.
    kwargs = {"task_names": ["find-living-thing"], "split": "train", "max_variations_per_task": 2, "max_steps": 30,
              "action_format": "templates", "gold_cache_dir": str(tmp_path / "gold")}
    sequence = TaskSequence("find-living-thing-golden", "find-living-thing", SCIWORLD_TASKS, (10.0, 12.0))
    data, policy = play(tmp_path, model_dir, sequence_rows("sciworld", kwargs, [sequence]), "skillrise_sciworld", n=2,
                        script=SCIWORLD_SCRIPT)
    c = Checks()
    prompts = policy.prompts
    task = "Your task is to find a(n) living thing"
    first_look = next(line for line in prompts[(0, "solve0")][0].splitlines() if line.startswith("This room is called"))
    if c.true(len(prompts[(0, "solve0")]) >= 5, "trial 0 played task 1 for 5 turns"):
        # As released (current_observation: initial): the "current observation" is the task's first all episode,
        # shown once with the task; the newest result is only the last history line.
        step3 = prompts[(0, "solve0")][2]
        c.in_order(step3, ["Skill document (", EMPTY_DOCUMENT, "Task and current observation (as first observed)", task,
                           first_look, "Your last 2 of 2 steps", "1. open door to kitchen ->",
                           f"2. {BAD_TAIL} -> No known action matches that input.", "Step 3:", "Action templates"],
                   "solve prompt after an unparseable reply (step 3)")
        c.equal((step3.count(first_look), step3.count("No known action matches that input."),
                 "Current observation (step" in step3), (1, 1, False),
                "step 3 shows the first observation once and the newest only as its history line")
        # step_history 2: step 5 shows steps 3 and 4 only.
        step5 = prompts[(0, "solve0")][4]
        c.in_order(step5, ["Skill document (", task, first_look, "Your last 2 of 4 steps", "3. go to kitchen ->",
                           "4. open door to outside ->", "Step 5:", "Action templates"], "solve prompt, step 5")
        c.true("1. open door to kitchen ->" not in step5 and f"2. {BAD_TAIL}" not in step5,
               "steps older than step_history are not shown")
    if c.true(len(prompts[(0, "solve1")]) >= 1, "trial 0 played task 2"):
        c.in_order(prompts[(0, "solve1")][0], ["Skill document (", SKILL_TEXT, task, "Action templates"],
                   "first solve prompt of task 2 (curated document)")
    last = prompts[(1, "solve1")][-1]
    c.in_order(last, ["Your last 2 of 29 steps", "28. look around ->", "29. look around ->",
                      "Step 30:", "Action templates"], "solve prompt at the turn cap")
    c.true("27. look around ->" not in last, "steps older than step_history are not shown at the cap")
    # history_window 30: the curator sees the whole attempt.
    c.in_order(prompts[(0, "curate0")][0], ["Old skill document:", EMPTY_DOCUMENT, "Most recent attempt, 11 of 11 steps",
                                            "1. open door to kitchen ->",
                                            f"2. {BAD_TAIL} -> No known action matches that input.",
                                            "11. move egg blue jay egg in inventory to red box ->",
                                            "Outcome of this attempt: success", "<skill>...</skill>"],
               "curation prompt (won)")
    c.in_order(prompts[(1, "curate0")][0], ["Most recent attempt, 2 of 2 steps", "2. focus on air ->",
                                            "Outcome of this attempt: failure"], "curation prompt (lost)")
    check_released_instructions(c, prompts, "sciworld", task)
    counts = {(0, "solve0"): 11, (0, "curate0"): 1, (0, "solve1"): 12, (1, "solve0"): 2, (1, "curate0"): 1, (1, "solve1"): 30}
    check_skillrise_batch(c, data, policy, "skillrise_sciworld", counts)
    c.verify()
