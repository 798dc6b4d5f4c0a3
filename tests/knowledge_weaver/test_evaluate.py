"""Bank evaluation: Jaccard overlap and guidance tokens by hand, and a k-sweep end to end on FrozenLake
with a scripted executor whose wins are known from the guidance it is shown."""

import json

import pytest
from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from skl_verl.knowledge_weaver import evaluate as ev

LAKE = {"maps": [["SFF", "FHF", "FFG"], ["SFF", "FFF", "HFG"]], "slip": [0.0, 0.0], "max_steps": 20}
EAST = "Head east then south on fhf maps."  # retrieved first for the map with row FHF
WAIT = "Wait on hfg maps."  # retrieved first for the map with row HFG
PATH = ["right", "right", "down", "down"]  # wins on both maps


class ScriptedExecutor:
    """Walks PATH when its guidance mentions 'east', names no valid command under WAIT alone, else keeps
    bumping into the left wall."""

    def __init__(self, tokenizer, control_wins_on_odd_seeds=False):
        self.tokenizer, self.guidance_seen, self.seeds = tokenizer, [], []
        self.control_wins_on_odd_seeds = control_wins_on_odd_seeds

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        assert sampling_params["temperature"] == 0.0
        prompt = self.tokenizer.decode(prompt_ids)
        guidance = prompt.split("Guidance skill:\n", 1)[1].split("<|im_end|>", 1)[0]
        step = prompt.count("Memory step")  # all earlier steps are in memory (4 < memory_steps = 5)
        if step == 0:
            self.guidance_seen.append(guidance)
            self.seeds.append(sampling_params["seed"])
        lucky = self.control_wins_on_odd_seeds and guidance == "No additional guidance." and sampling_params["seed"] % 2
        action = PATH[step] if "east" in guidance or lucky else "left"
        if guidance == WAIT:
            action = "wait"  # no FrozenLake command: an invalid reply
        ids = self.tokenizer(f"Thought: ok.\nAction: {action}", add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=ids)


def _bank(path, texts):
    from skl_verl import checked_jsonl
    from skl_verl.knowledge_weaver.state import BANK_KIND

    checked_jsonl.write(path, BANK_KIND, ({"entry_id": f"entry_{i:06d}", "text": t, "task_type": "frozenlake"}
                                         for i, t in enumerate(texts)))
    return str(path)


def test_jaccard_overlap_by_hand():
    # tasks' top-2: entry 0 -> {0, 1, 2}, entry 1 -> {0}, entry 2 -> {1, 2}; entry 3 never retrieved.
    ranked = [[0, 1, 3], [2, 0, 3], [0, 2, 1]]
    pairs = [1 / 3, 2 / 3, 0 / 3]  # (0,1): {0}/{0,1,2}; (0,2): {1,2}/{0,1,2}; (1,2): {}/{0,1,2}
    assert ev.jaccard_overlap(ranked, 2) == pytest.approx(sum(pairs) / 3)
    assert ev.jaccard_overlap(ranked, 1) == pytest.approx(0.0)  # entry 0 -> {0, 2}, entry 2 -> {1}
    assert ev.jaccard_overlap([[0], [0]], 1) is None  # a single retrieved entry has no pair


def test_k_sweep_end_to_end(tiny_tokenizer_dir, tmp_path, monkeypatch, capsys):
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    executor = ScriptedExecutor(tokenizer)
    monkeypatch.setattr(ev, "make_executor_client", lambda args, tokenizer: executor)
    banks = [_bank(tmp_path / "one.jsonl", [EAST, WAIT]), _bank(tmp_path / "two.jsonl", ["Wait on fhf maps.", WAIT])]
    results = ev.main(["--env", "frozenlake", "--env-kwargs", json.dumps(LAKE), "--bank", banks[0], "--bank", banks[1],
                       "--k", "0..3", "--executor-checkpoint", tiny_tokenizer_dir, "--retriever", "bm25", "--max-steps", "6",
                       "--jaccard-k", "1", "--out", str(tmp_path / "out")])

    # Bank one: k=1 gives EAST on the FHF map only, k>=2 gives both maps EAST; bank two never says east.
    per_k = results["per_k"]
    assert [per_k[str(k)]["per_bank"][0]["sr"] for k in range(4)] == [0.0, 50.0, 100.0, 100.0]
    assert [per_k[str(k)]["per_bank"][1]["sr"] for k in range(4)] == [0.0] * 4
    assert [per_k[str(k)]["sr"] for k in range(4)] == [0.0, 25.0, 50.0, 50.0]
    assert per_k["0"]["sr_std"] == 0.0 and per_k["1"]["sr_std"] == pytest.approx(50 / 2**0.5)
    assert per_k["2"]["sr_by_type"] == {"frozenlake": 50.0} and per_k["2"]["score"] == 50.0
    # Bank r is run r with seed 1001 + r, its k = 0 control included: each distinct (task, guidance) of a run
    # is played once, 2 tasks x k in {0, 1, 2} per bank (k = 3 is k = 2: the banks hold 2 entries).
    assert results["executor_episodes"] == 12 and len(executor.guidance_seen) == 12 and results["run_seeds"] == [1001, 1002]
    assert executor.guidance_seen.count("No additional guidance.") == 4 and executor.guidance_seen.count(WAIT) == 2
    assert sorted(executor.seeds) == [1001] * 6 + [1002] * 6
    # each episode counts its replies that named no admissible command: all 6 under WAIT alone, none elsewhere
    invalid = {(e["guidance"], e["steps"], e["invalid_replies"]) for e in results["episodes"]}
    assert {entry for entry in invalid if entry[0] == WAIT} == {(WAIT, 6, 6)}
    assert all(count == 0 for text, _, count in invalid if text != WAIT)
    assert f"Retrieved guidance skills:\n1. {EAST}\n\n2. {WAIT}" in executor.guidance_seen
    assert f"Retrieved guidance skills:\n1. {WAIT}\n\n2. {EAST}" in executor.guidance_seen
    # Guidance tokens by hand: the mean over tasks, per bank, then over banks. At k = 0 they are the tokens of what the
    # executor is shown, "No additional guidance." (issue 39 item 8: the authors count it; ours counted 0).
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    one_k1 = (count(EAST) + count(WAIT)) / 2
    two_k1 = (count("Wait on fhf maps.") + count(WAIT)) / 2
    assert count("No additional guidance.") > 0
    assert per_k["0"]["guidance_tokens_per_bank"] == [count("No additional guidance.")] * 2
    assert per_k["1"]["guidance_tokens_per_bank"] == [one_k1, two_k1]
    one_k2 = (count(f"Retrieved guidance skills:\n1. {EAST}\n\n2. {WAIT}")
              + count(f"Retrieved guidance skills:\n1. {WAIT}\n\n2. {EAST}")) / 2
    assert per_k["2"]["guidance_tokens_per_bank"][0] == one_k2
    # At k = 1 each bank's entries go to disjoint tasks.
    assert results["jaccard"] == {"k": 1, "per_bank": [0.0, 0.0], "mean": 0.0}

    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text())["per_k"]["1"]["sr"] == 25.0
    table = (out / "table.txt").read_text()
    assert "k=1" in table and "25.0±35.4" in table and "Jaccard overlap of retrieved task sets at k = 1: ours 0.00%" in table
    assert table in capsys.readouterr().out
    assert (out / "sr_vs_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_retrieval_only_runs_no_executor(tiny_tokenizer_dir, tmp_path, monkeypatch):
    def no_executor(args, tokenizer):
        raise AssertionError("retrieval-only must not build an executor")

    monkeypatch.setattr(ev, "make_executor_client", no_executor)
    bank = _bank(tmp_path / "one.jsonl", [EAST, WAIT])
    results = ev.main(["--env", "frozenlake", "--env-kwargs", json.dumps(LAKE), "--bank", bank, "--k", "2",
                       "--executor-checkpoint", tiny_tokenizer_dir, "--retriever", "bm25", "--retrieval-only",
                       "--out", str(tmp_path / "out")])
    assert results["executor_episodes"] == 0 and results["jaccard"]["mean"] == 1.0  # both entries for both tasks
    assert "sr" not in results["per_k"]["2"] and not (tmp_path / "out" / "sr_vs_k.png").exists()


def test_paper_tables_put_our_rows_beside_the_papers():
    summary = {"sr": 50.0, "sr_std": 2.0, "score": 60.0, "score_std": None, "guidance_tokens": 5.0,
               "sr_by_type": {"Pick": 40.0, "Clean": 60.0}}
    per_k = {0: {**summary, "sr": 20.0, "sr_std": 0.0}, 8: {**summary, "sr": 45.0}, 10: summary}
    table1, table2, table3 = ev.paper_tables("alfworld", per_k, "Knowledge Weaver", "KW (ours)", "tiny")
    assert "Knowledge Weaver" in table1 and "54.0±0.4" in table1
    kw_row = next(line for line in table1.splitlines() if line.startswith("KW (ours)"))
    assert kw_row.split()[2:] == ["40.0", "60.0", "-", "-", "-", "-", "50.0±2.0"]
    assert next(line for line in table2.splitlines() if line.startswith("SR + MI + MSR (ours)")).split()[-1] == "50.0±2.0"
    assert next(line for line in table3.splitlines() if line.startswith("tiny (ours)")).split()[2:] == ["20.0±0.0", "-", "45.0±2.0"]
    ws1, _, ws3 = ev.paper_tables("webshop", per_k, "GRPO (SR only)", "GRPO (ours)", "tiny")
    assert next(line for line in ws1.splitlines() if line.startswith("GRPO (ours)")).split()[2:] == ["60.0", "50.0±2.0"]
    assert next(line for line in ws3.splitlines() if line.startswith("tiny (ours)")).split()[2:] == [
        "60.0", "60.0", "-", "20.0±0.0", "45.0±2.0", "-"]
    assert ev.paper_tables("frozenlake", per_k, "Knowledge Weaver", "KW", "tiny") == []
    assert ev.parse_ks("0..3") == [0, 1, 2, 3] and ev.parse_ks("10,0,10") == [0, 10]


def test_the_k0_control_is_one_run_per_bank_with_its_seed(tiny_tokenizer_dir, tmp_path, monkeypatch):
    """Issue 23 item 8: the no-guidance control is played in every bank's run with that run's seed, so its std
    is over runs (here the control wins only on odd seeds: runs 1001 and 1003 win, 1002 loses)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    executor = ScriptedExecutor(tokenizer, control_wins_on_odd_seeds=True)
    monkeypatch.setattr(ev, "make_executor_client", lambda args, tokenizer: executor)
    banks = [_bank(tmp_path / f"{n}.jsonl", [WAIT]) for n in range(3)]
    results = ev.main(["--env", "frozenlake", "--env-kwargs", json.dumps(LAKE), *[a for b in banks for a in ("--bank", b)],
                       "--k", "0", "--executor-checkpoint", tiny_tokenizer_dir, "--retriever", "bm25", "--max-steps", "6",
                       "--out", str(tmp_path / "out")])
    control = results["per_k"]["0"]
    assert [m["sr"] for m in control["per_bank"]] == [100.0, 0.0, 100.0] and sorted(set(executor.seeds)) == [1001, 1002, 1003]
    assert control["sr"] == pytest.approx(200 / 3) and control["sr_std"] == pytest.approx(57.735, abs=1e-3)
