"""Bank generation with a scripted curator: the seeded type and context draw, each env's retry rule (ALFWorld's
repair turn, WebShop's one reply), truncation to the word cap, an entry that never parses (an error naming it, or
skipped on request), and the bank file evaluation reads."""

import random

import pytest
from verl.workers.rollout.replica import TokenOutput

from skl_verl import checked_jsonl
from skl_verl.knowledge_weaver.state import BANK_KIND
from skl_verl.knowledge_weaver import generate_bank as gb
from skl_verl.knowledge_weaver.executor import ExecutorEpisode, ExecutorStep
from skl_verl.knowledge_weaver.pool import PoolEpisode, write_pool
from skl_verl.knowledge_weaver.retrieval import BankEntry


def _episode(task_id, won=True, invalid=False):
    step = ExecutorStep("You see a sinkbasin 1.", "go to sinkbasin 1", "You arrive.", float(won), True, won, invalid)
    return ExecutorEpisode(task_id, "No additional guidance.", f"task {task_id}", [step], won, "won" if won else "done")


POOL = [PoolEpisode("Pick", _episode(f"pick-{i}", won=i % 2 == 0)) for i in range(5)]
POOL += [PoolEpisode("Clean", _episode(f"clean-{i}")) for i in range(3)]
POOL += [PoolEpisode("Heat", _episode("heat-0", invalid=True))]  # unusable: no valid move, so no Heat entries


class ScriptedCurator:
    """Replies by (entry, attempt) from the request id; keeps every prompt it was sent."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply, self.prompts = tokenizer, reply, {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        assert sampling_params["temperature"] == 1.0 and sampling_params["max_tokens"] == 256
        _, entry, attempt = request_id.split(":")
        index, attempt = int(entry.removeprefix("entry")), int(attempt.removeprefix("attempt"))
        self.prompts[index, attempt] = self.tokenizer.decode(prompt_ids)
        ids = self.tokenizer(self.reply(index, attempt), add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=ids)


def invalid_then_valid(index, attempt):
    return f"Here it is: <skill>Entry {index}.</skill>" if attempt == 1 else f"<skill>Check the sink first, entry {index}.</skill>"


def test_an_invalid_reply_is_repaired_and_the_seeded_bank_is_reproducible(tiny_tokenizer_dir, tmp_path, monkeypatch, capsys):
    pool_path = write_pool(tmp_path / "pool.jsonl", POOL)
    curators = []

    def scripted(args, tokenizer):
        curators.append(ScriptedCurator(tokenizer, invalid_then_valid))
        return curators[-1]

    monkeypatch.setattr(gb, "make_curator_client", scripted)
    argv = ["--env", "alfworld", "--pool", str(pool_path), "--curator", tiny_tokenizer_dir, "--n", "6", "--seed", "7"]
    entries = gb.main([*argv, "--out", str(tmp_path / "a.jsonl")])
    assert "6 of 6 entries (6 after more than one reply, 0 truncated, 0 skipped)" in capsys.readouterr().out

    # Entry i's type is Random(seed * 100000 + i * 100).choice over the usable types in the authors' ALFWorld
    # order (issue 39 item 8: Pick before Clean).
    assert [e.task_type for e in entries] == [random.Random(7 * 100000 + i * 100).choice(["Pick", "Clean"]) for i in range(6)]
    assert {e.task_type for e in entries} == {"Clean", "Pick"}  # this seed draws both
    assert [(e.entry_id, e.text, e.attempts, e.truncated) for e in entries] == [
        (f"entry_{i:06d}", f"Check the sink first, entry {i}.", 2, False) for i in range(6)]
    for e in entries:  # four trajectories of the entry's own type
        assert len(e.context_task_ids) == 4 and all(t.startswith(e.task_type.lower()) for t in e.context_task_ids)
    # The repair turn shows the failed reply and names what was wrong with it.
    repair = curators[0].prompts[0, 2]
    assert "Here it is: <skill>Entry 0.</skill>" in repair and "not exactly one <skill>...</skill> block" in repair
    assert "not exactly one" not in curators[0].prompts[0, 1]

    gb.main([*argv, "--out", str(tmp_path / "b.jsonl")])
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert gb.read_bank(tmp_path / "a.jsonl") == [BankEntry(e.entry_id, e.text) for e in entries]


SENTENCE = "Open the fridge before you look inside it for the apple."  # 11 words
LONG_BODY = " ".join([SENTENCE] * 11)  # 121 words; the 9th sentence ends at word 99


def overlong_then_unusable(index, attempt):
    return f"<skill>{LONG_BODY}</skill>" if index == 0 else "I cannot write one."


def test_alfworld_cuts_an_overlong_reply_at_once_and_an_entry_that_never_parses_is_an_error(tiny_tokenizer_dir):
    """The authors' ALFWorld generator: an over-long entry is cut at a sentence end on its first reply (no repair);
    10 replies with repair turns, then an error naming the entry (issue 39 item 8: it was skipped)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    curator = ScriptedCurator(tokenizer, overlong_then_unusable)
    with pytest.raises(gb.BankIncomplete, match=r"1 of 2 entries never parsed: entry_000001 \((Pick|Clean)\): no valid "
                       r"reply in 10 attempts \(last: .*\)\. No bank was written"):
        gb.asyncio.run(gb.generate_bank(curator, tokenizer, "alfworld", POOL, n=2, seed=1))
    assert sorted(curator.prompts) == [(0, 1)] + [(1, a) for a in range(1, 11)]
    assert "not exactly one <skill>...</skill> block" in curator.prompts[1, 2]  # a repair turn

    curator = ScriptedCurator(tokenizer, overlong_then_unusable)
    with pytest.warns(UserWarning, match=r"left out of the bank: entry_000001 .*no valid reply in 3 attempts"):
        entries = gb.asyncio.run(gb.generate_bank(curator, tokenizer, "alfworld", POOL, n=2, seed=1, attempts=3,
                                                  missing="skip"))
    assert [(e.entry_id, e.attempts, e.truncated, e.text) for e in entries] == [
        ("entry_000000", 1, True, " ".join([SENTENCE] * 9))]


WEBSHOP_POOL = [PoolEpisode("webshop", _episode(f"webshop-{i}", won=i % 2 == 0)) for i in range(4)]


def test_webshop_asks_once_and_an_entry_that_never_parses_is_an_error_naming_it(tiny_tokenizer_dir, tmp_path,
                                                                               monkeypatch):
    """The authors' WebShop bank builder: one request per entry (skill_generation_max_retries 0), no repair turn, an
    over-long description cut at its 100th word, and an error when an entry is missing (issue 39 item 8)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    curator = ScriptedCurator(tokenizer, overlong_then_unusable)
    monkeypatch.setattr(gb, "make_curator_client", lambda args, tokenizer: curator)
    pool = write_pool(tmp_path / "pool.jsonl", WEBSHOP_POOL)
    argv = ["--env", "webshop", "--pool", str(pool), "--curator", tiny_tokenizer_dir, "--n", "2", "--seed", "42",
            "--prompt-budget", "100000", "--out", str(tmp_path / "bank.jsonl")]
    with pytest.raises(gb.BankIncomplete, match=r"entry_000001 \(webshop\): no valid reply in 1 attempts"):
        gb.main(argv)
    assert sorted(curator.prompts) == [(0, 1), (1, 1)] and not (tmp_path / "bank.jsonl").exists()

    curator.prompts.clear()
    entries = gb.main([*argv, "--attempts", "3", "--missing", "skip"])
    assert [(e.attempts, e.truncated, e.text) for e in entries] == [(1, True, " ".join(LONG_BODY.split()[:100]))]
    assert curator.prompts[1, 1] == curator.prompts[1, 2] == curator.prompts[1, 3]  # the same prompt, no repair turn
    assert gb.read_bank(tmp_path / "bank.jsonl") == [BankEntry("entry_000000", entries[0].text)]


def test_cut_to_word_cap_and_bank_snapshots_read_like_generated_banks(tmp_path):
    assert gb.cut_to_word_cap("a b. c d e", 4) == "a b."
    assert gb.cut_to_word_cap("a b c d e", 4) == "a b c d"  # no sentence end: the cap alone
    assert gb.cut_to_word_cap('a "b." c', 3) == 'a "b."'
    snapshot = tmp_path / "bank_000002.jsonl"  # state.BankStore's format
    record = {"entry_id": "s0-c1", "msr": 0.25, "sr": 0.5, "step_added": 0, "task_type": "Pick", "text": "x"}
    checked_jsonl.write(snapshot, BANK_KIND, [record])
    assert gb.read_bank(snapshot) == [BankEntry("s0-c1", "x")]
    checked_jsonl.write(snapshot, BANK_KIND, [{"text": "x"}])
    with pytest.raises(ValueError, match="bank_000002.jsonl:2: not a bank entry"):
        gb.read_bank(snapshot)


def test_a_damaged_bank_or_pool_is_an_error_naming_file_and_line(tmp_path):
    """#24 item 6: a flipped byte, a duplicate line, an empty file, a line cut mid-way (not the last)."""
    from skl_verl.knowledge_weaver.pool import read_pool, write_pool
    from skl_verl.knowledge_weaver.state import BankStore

    store = BankStore(tmp_path / "state")
    entries = [{"entry_id": f"s0-c{i}", "msr": 0.25, "sr": 0.5, "step_added": 0, "task_type": "Pick", "text": f"t{i}"}
               for i in range(3)]
    path = store.folder / "bank_000001.jsonl"
    checked_jsonl.write(path, BANK_KIND, entries)
    assert [e.entry_id for e in store.bank(1)] == ["s0-c0", "s0-c1", "s0-c2"]
    whole = path.read_bytes()
    path.write_bytes(whole.replace(b'"msr": 0.25', b'"msr": 0.75', 1))  # an entry's MSR edited on disk
    with pytest.raises(ValueError, match=r"bank_000001.jsonl:2: damaged knowledge_bank line: .*checksum"):
        store.bank(1)
    lines = whole.split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[1], lines[1], lines[2], b""]))  # a line twice
    with pytest.raises(ValueError, match=r"bank_000001.jsonl:3: entry 's0-c0' appears twice"):
        store.bank(1)
    with pytest.raises(ValueError, match=r"bank_000001.jsonl:3: entry 's0-c0' appears twice \(first on line 2\)"):
        gb.read_bank(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"bank_000001.jsonl:1: the file is empty"):
        store.bank(1)
    pool = write_pool(tmp_path / "pool.jsonl", POOL)
    data = pool.read_bytes().split(b"\n")
    pool.write_bytes(b"\n".join([data[0], data[1][:30], *data[2:]]))  # cut mid-way, then more lines
    with pytest.raises(ValueError, match=r"pool.jsonl:2: damaged trajectory_pool line"):
        read_pool(pool)
