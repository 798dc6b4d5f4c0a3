"""ChessPuzzlesEnv: loading, rewards, snapshots, rating filter, splits and behaviour policies."""

from __future__ import annotations

import copy
import csv
import importlib.util
import pickle
from pathlib import Path

import pytest

chess = pytest.importorskip("chess")

from envs import make_env  # noqa: E402
from envs.base import DependencyMissingError, EnvNotResetError, UnknownTaskError  # noqa: E402
from envs.chess.board import state_key_of  # noqa: E402
from envs.chess.data import SAMPLE_CSV, head_split, load_puzzles, parse_puzzles, train_test_split  # noqa: E402
from envs.chess.engines import StockfishPolicy, find_stockfish  # noqa: E402
from envs.chess.env import ChessPuzzlesEnv  # noqa: E402
from envs.chess.policies import MixedBehaviourPolicy  # noqa: E402
from skl_verl.skl.simulation import BoardPolicy, simulate_branches  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HEADER = "PuzzleId,Rating,PGN,Solution,FEN,Moves\n"

# Lichess puzzle 00008 (Lichess puzzle database, CC0): FEN + Moves form, three solver moves, no mate.
LICHESS_00008 = (
    "PuzzleId,FEN,Moves,Rating,Themes\n"
    "00008,r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24,f2g3 e6e7 b2b1 b3c1 b1c1 h6c1,1913,crushing\n"
)
SCHOLAR_PGN = "1. e4 e5 2. Bc4 Nc6 3. Qh5"  # Black's setup move Nf6?? allows Qxf7#
BACK_RANK_FEN = "6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1"  # Ra8# and Re8# both mate


def write_csv(tmp_path: Path, text: str, name: str = "puzzles.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def san_line(fen: str, ucis: list[str] | tuple[str, ...]) -> list[str]:
    board = chess.Board(fen)
    out = []
    for uci in ucis:
        move = chess.Move.from_uci(uci)
        out.append(board.san(move))
        board.push(move)
    return out


def solve(env: ChessPuzzlesEnv, task_id: str) -> list:
    """Play the puzzle's own solution in SAN; return the StepResults."""
    env.reset(task_id)
    puzzle = env.puzzle(task_id)
    results = []
    sans = san_line(puzzle.start_fen, puzzle.solution)
    for san in sans[::2]:
        results.append(env.step(san))
    return results


@pytest.fixture(scope="module")
def env() -> ChessPuzzlesEnv:
    return ChessPuzzlesEnv()


@pytest.fixture(scope="module")
def sample_rows() -> list[dict[str, str]]:
    with SAMPLE_CSV.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def mate_in_2_id(env: ChessPuzzlesEnv) -> str:
    return next(t.task_id for t in env.tasks() if t.metadata["n_solver_moves"] == 2)


# --------------------------------------------------------------------------- episodes


def test_every_sample_puzzle_replays_to_plus_one(env: ChessPuzzlesEnv) -> None:
    assert len(env.tasks()) == 40
    for spec in env.tasks():
        results = solve(env, spec.task_id)
        assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0], spec.task_id
        assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
        assert results[-1].won and results[-1].info["won"] is True
        assert not any(r.invalid_action for r in results)
        assert len(results) == spec.metadata["n_solver_moves"]
        with pytest.raises(EnvNotResetError):
            env.step("e4")


def test_known_lichess_puzzle_fen_moves_form(tmp_path: Path) -> None:
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, LICHESS_00008))
    (spec,) = env.tasks()
    assert spec.task_id == "00008" and spec.difficulty == 1913.0
    assert spec.metadata["n_solver_moves"] == 3 and spec.metadata["themes"] == ["crushing"]
    obs, info = env.reset("00008")
    assert "You play White" in obs and "Opponent's last move: Bxg3" in obs
    assert info["task"] == spec
    r1 = env.step("Rxe7")
    assert (r1.reward, r1.done, r1.info["opponent_reply"]) == (0.0, False, "Qb1+")
    r2 = env.step("Nc1")
    assert (r2.reward, r2.done, r2.info["opponent_reply"]) == (0.0, False, "Qxc1+")
    r3 = env.step("Qxc1")
    assert (r3.reward, r3.done, r3.won) == (1.0, True, True)


def test_opponent_replies_come_from_the_puzzle_line(env: ChessPuzzlesEnv) -> None:
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    sans = san_line(puzzle.start_fen, puzzle.solution)
    env.reset(task_id)
    result = env.step(sans[0])
    assert result.info["opponent_reply"] == sans[1]
    assert result.info["expected_move"] == sans[0] and result.info["move"] == sans[0]
    replay = chess.Board(puzzle.start_fen)
    for uci in puzzle.solution[:2]:
        replay.push(chess.Move.from_uci(uci))
    assert replay.fen() == result.info["fen"] and env.state_key() == state_key_of(replay)
    assert f"Opponent replied {sans[1]}" in result.observation


def test_legal_wrong_move_scores_minus_one_and_ends(env: ChessPuzzlesEnv) -> None:
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    env.reset(task_id)
    board = env.board
    expected = chess.Move.from_uci(puzzle.solution[0])
    wrong = next(m for m in sorted(board.legal_moves, key=lambda m: m.uci()) if m != expected)
    board.push(wrong)
    assert not board.is_checkmate()
    board.pop()
    result = env.step(board.san(wrong))
    assert (result.reward, result.done, result.won, result.invalid_action) == (-1.0, True, False, False)
    assert result.info["wrong_move"] is True
    assert result.info["expected_move"] == board.san(expected)
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()


def test_wrong_move_can_be_retried_when_configured() -> None:
    env = ChessPuzzlesEnv(wrong_move_ends=False)
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    env.reset(task_id)
    before = env.state_key()
    board = env.board
    expected = chess.Move.from_uci(puzzle.solution[0])
    wrong = next(m for m in sorted(board.legal_moves, key=lambda m: m.uci()) if m != expected)
    result = env.step(board.san(wrong))
    assert (result.reward, result.done, result.info["wrong_move"]) == (0.0, False, True)
    assert env.state_key() == before
    assert env.step(board.san(expected)).reward == 0.0


@pytest.mark.parametrize("action", ["banana", "", "   ", "Ke9", "Qxz9", "--", "0000", "e2e4 e7e5", "Nf3 please"])
def test_invalid_action_is_flagged_and_board_unchanged(env: ChessPuzzlesEnv, action: str) -> None:
    task_id = env.tasks()[0].task_id
    env.reset(task_id)
    before = env.state_key()
    result = env.step(action)
    assert result.invalid_action and result.info["invalid_action"] is True
    assert (result.reward, result.done, result.won) == (0.0, False, False)
    assert env.state_key() == before
    assert "Legal moves (SAN" in result.observation
    # the episode goes on: the solution still solves it
    puzzle = env.puzzle(task_id)
    assert env.step(san_line(puzzle.start_fen, puzzle.solution)[0]).reward in (0.0, 1.0)


def test_illegal_but_well_formed_move_is_invalid(env: ChessPuzzlesEnv) -> None:
    env.reset(env.tasks()[0].task_id)
    board = env.board
    # a pseudo-move for the side to move that is not legal: a king two squares away
    king = board.king(board.turn)
    target = next(sq for sq in chess.SQUARES if chess.square_distance(king, sq) == 2)
    uci = chess.Move(king, target).uci()
    before = env.state_key()
    result = env.step(uci)
    assert result.invalid_action and env.state_key() == before


@pytest.mark.parametrize("action", ["Qxf7#", "Qxf7", " Qxf7+!! ", "h5f7", "4. Qxf7#", "qxf7"])
def test_san_variants_and_uci_are_accepted(tmp_path: Path, action: str) -> None:
    text = HEADER + f"s1,700,{SCHOLAR_PGN},,,g8f6 h5f7\n"
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, text))
    env.reset("s1")
    if action == "qxf7":  # lowercase piece letters are not SAN; python-chess rejects them
        assert env.step(action).invalid_action
        return
    result = env.step(action)
    assert (result.reward, result.done, result.won) == (1.0, True, True)


def test_any_checkmate_is_accepted(tmp_path: Path) -> None:
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, HEADER + f"b1,650,,a1a8,{BACK_RANK_FEN},\n"))
    env.reset("b1")
    result = env.step("Re8#")
    assert (result.reward, result.done, result.won) == (1.0, True, True)
    assert result.info["expected_move"] == "Ra8#"
    env.reset("b1")
    assert env.step("Kf1").reward == -1.0


def test_all_csv_forms_give_the_same_puzzle(tmp_path: Path) -> None:
    fen_before = chess.Board()
    for san in ["e4", "e5", "Bc4", "Nc6", "Qh5"]:
        fen_before.push_san(san)
    start = fen_before.copy()
    start.push_san("Nf6")
    text = (
        HEADER
        + f"pgn_moves,700,{SCHOLAR_PGN},,,g8f6 h5f7\n"
        + f"fen_moves,700,,,{fen_before.fen()},g8f6 h5f7\n"
        + f"pgn_solution,700,{SCHOLAR_PGN} Nf6,h5f7,,\n"
        + f"fen_solution,700,,h5f7,{start.fen()},\n"
        + f"all,700,{SCHOLAR_PGN},h5f7,{fen_before.fen()},g8f6 h5f7\n"
        + f"headers,700,\"[Event \"\"x\"\"]\n\n{SCHOLAR_PGN} {{comment}} *\",,,g8f6 h5f7\n"
    )
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, text))
    assert len(env.tasks()) == 6
    for spec in env.tasks():
        assert spec.metadata["fen"] == start.fen(), spec.task_id
        obs, _ = env.reset(spec.task_id)
        if spec.task_id != "fen_solution":  # no setup move and no PGN: no last move to show
            assert "Opponent's last move: Nf6" in obs, spec.task_id
        assert env.step("Qxf7#").won


def test_observation_and_admissible_actions(env: ChessPuzzlesEnv) -> None:
    spec = env.tasks()[0]
    obs, info = env.reset(spec.task_id)
    board = env.board
    legal = sorted(board.san(m).rstrip("+#") for m in board.legal_moves)
    assert env.admissible_actions() == legal
    assert board.fen() == spec.metadata["fen"] == info["fen"] and env.state_key() == state_key_of(board)
    assert f"FEN: {board.fen()}" in obs
    assert "Side to move: " + ("White" if board.turn else "Black") in obs
    assert "a b c d e f g h" in obs
    assert spec.family == "chess_puzzles" and spec.difficulty == float(spec.metadata["rating"])


def test_observation_shows_at_most_30_moves_without_check_or_mate_marks(tmp_path: Path) -> None:
    """Issue 22 item 1. After 1.e4 e5 2.Bc4 Nc6 3.Qh5 Nf6 White has 43 legal moves, among them Qxf7#
    (mate), Qxe5+ and Bxf7+. python-chess generates them piece by piece from the highest square down
    (Qh5, Bc4, Ng1, Ke1, Nb1; pawn moves last), so the authors' rule shows the queen's 13 moves, the
    bishop's 9, Ng1's 3, Ke1's 3 and Nb1's 2 (30), then "...". None carries a mark."""
    text = HEADER + f"s1,700,{SCHOLAR_PGN},,,g8f6 h5f7\n"
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, text), mode="game")
    obs, _ = env.reset("s1", seed=0)
    first_30 = ("Qxh7, Qxf7, Qh6, Qg6, Qg5, Qf5, Qxe5, Qh4, Qg4, Qh3, Qf3, Qe2, Qd1, "
                "Bxf7, Be6, Ba6, Bd5, Bb5, Bd3, Bb3, Be2, Bf1, Nh3, Nf3, Ne2, Ke2, Kf1, Kd1, Nc3, Na3")
    assert f"Legal moves (SAN, 30 of 43 shown; any legal move is accepted): {first_30}, ...\n" in obs
    # "+" remains only in the board's frame and the rewards line ("+1 if you checkmate ...")
    assert "#" not in obs and not any("+" in line for line in obs.splitlines() if not line.startswith(("  +---", "Chess game")))
    assert len(env.admissible_actions()) == 43 and "Qxf7" in env.admissible_actions()
    assert not any(mark in a for a in env.admissible_actions() for mark in "+#")
    prompt = env.action_prompt()
    assert "+" not in prompt.replace("a check", "") and "Qxf7" not in prompt  # points at the list, repeats none
    assert env.step("h3").info["invalid_action"] is False  # not shown (31st), still playable


def test_sample_first_positions_show_no_marks() -> None:
    """The shipped sample: 38 of its 40 first positions have a checking or mating move (the issue's count),
    and no observation lists one with its mark, nor more than 30 moves."""
    env = ChessPuzzlesEnv(mode="game")
    marked = 0
    for spec in env.tasks():
        obs, _ = env.reset(spec.task_id, seed=0)
        board = env.board
        marked += any(board.san(m)[-1] in "+#" for m in board.legal_moves)
        [line] = [l for l in obs.splitlines() if l.startswith("Legal moves")]
        shown = [m for m in line.split(": ", 1)[1].split(", ") if m != "..."]
        assert not any(ch in line for ch in "+#") and len(shown) == min(30, board.legal_moves.count())
    assert (marked, len(env.tasks())) == (38, 40)


def test_not_reset_errors() -> None:
    env = ChessPuzzlesEnv()
    with pytest.raises(EnvNotResetError):
        env.step("e4")
    with pytest.raises(EnvNotResetError):
        env.admissible_actions()
    with pytest.raises(EnvNotResetError):
        env.get_state()


# --------------------------------------------------------------------------- tasks, filters, splits


def test_unknown_task(env: ChessPuzzlesEnv) -> None:
    with pytest.raises(UnknownTaskError):
        env.reset("no-such-puzzle")
    with pytest.raises(UnknownTaskError):
        env.task("no-such-puzzle")
    with pytest.raises(UnknownTaskError):
        ChessPuzzlesEnv(puzzle_ids=["syn001", "no-such-puzzle"])


def test_rating_filter_is_strict_below_max(env: ChessPuzzlesEnv) -> None:
    ratings = sorted(t.metadata["rating"] for t in env.tasks())
    assert any(r < 1000 for r in ratings) and any(r >= 1000 for r in ratings)
    below = ChessPuzzlesEnv(max_rating=1000)
    assert {t.task_id for t in below.tasks()} == {t.task_id for t in env.tasks() if t.metadata["rating"] < 1000}
    edge = ratings[len(ratings) // 2]
    strict = ChessPuzzlesEnv(max_rating=edge)
    assert all(t.metadata["rating"] < edge for t in strict.tasks())
    assert len(strict.tasks()) == sum(r < edge for r in ratings)
    floor = ChessPuzzlesEnv(min_rating=edge)  # min is inclusive
    assert len(floor.tasks()) == sum(r >= edge for r in ratings)
    assert len(strict.tasks()) + len(floor.tasks()) == len(ratings)


def test_puzzle_ids_restrict_and_order() -> None:
    env = ChessPuzzlesEnv(puzzle_ids=["syn003", "syn001"])
    assert [t.task_id for t in env.tasks()] == ["syn003", "syn001"]


def test_train_test_split_is_deterministic_and_stable() -> None:
    ids = [f"p{i}" for i in range(2000)]
    train, test = train_test_split(ids, test_fraction=0.25, seed=7)
    assert sorted(train + test) == sorted(ids) and not set(train) & set(test)
    assert abs(len(test) / len(ids) - 0.25) < 0.04
    assert (train, test) == train_test_split(ids, test_fraction=0.25, seed=7)
    _, test_more = train_test_split(ids + [f"q{i}" for i in range(500)], test_fraction=0.25, seed=7)
    assert [pid for pid in test_more if pid.startswith("p")] == test  # other ids never move an id
    assert train_test_split(ids, test_fraction=0.25, seed=8)[1] != test
    with pytest.raises(ValueError):
        train_test_split(ids, test_fraction=1.5)
    env_train = ChessPuzzlesEnv(split="train", test_fraction=0.3, split_seed=1)
    env_test = ChessPuzzlesEnv(split="test", test_fraction=0.3, split_seed=1)
    train_ids = {t.task_id for t in env_train.tasks()}
    test_ids = {t.task_id for t in env_test.tasks()}
    assert train_ids and test_ids and not train_ids & test_ids and len(train_ids | test_ids) == 40


def test_head_split_tests_the_first_fraction_in_file_order() -> None:
    """The authors' split: test = the first int(0.2 * N) puzzles of the rating-filtered file, train = the rest."""
    ids = [p.puzzle_id for p in load_puzzles(max_rating=1000)]
    assert head_split(ids) == (ids[int(0.2 * len(ids)):], ids[: int(0.2 * len(ids))])
    test = [t.task_id for t in ChessPuzzlesEnv(max_rating=1000, split="test", split_mode="head").tasks()]
    train = [t.task_id for t in ChessPuzzlesEnv(max_rating=1000, split="train", split_mode="head").tasks()]
    assert test == ids[: len(test)] and train == ids[len(test):] and len(test) == int(0.2 * len(ids))
    with pytest.raises(ValueError, match="split_mode"):
        ChessPuzzlesEnv(split="test", split_mode="random")


def test_make_env_builds_it() -> None:
    env = make_env("chess_puzzles", max_rating=1000)
    assert isinstance(env, ChessPuzzlesEnv) and env.supports_snapshot and env.name == "chess_puzzles"
    assert env.tasks() and all(t.difficulty < 1000 for t in env.tasks())


# --------------------------------------------------------------------------- snapshots


def test_snapshot_restore_gives_identical_futures(env: ChessPuzzlesEnv) -> None:
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    sans = san_line(puzzle.start_fen, puzzle.solution)
    env.reset(task_id)
    snap = env.get_state()
    key = env.state_key()
    wrong = next(a for a in env.admissible_actions() if a != sans[0])

    first = [env.step(sans[0]), env.step(sans[2])]
    env.set_state(snap)
    assert env.state_key() == key
    second = [env.step(sans[0]), env.step(sans[2])]
    assert first == second and second[-1].won

    env.set_state(snap)
    failed = env.step(wrong)
    env.set_state(snap)
    assert env.step(wrong) == failed

    # mid-puzzle snapshot, copied, pickled and restored into a fresh instance
    env.reset(task_id)
    env.step(sans[0])
    mid = pickle.loads(pickle.dumps(copy.deepcopy(env.get_state())))
    expected_future = env.step(sans[2])
    other = ChessPuzzlesEnv()
    other.set_state(mid)
    assert other.state_key() == mid_key(mid)
    assert other.board.move_stack == env.board.move_stack[:-1]
    assert other.step(sans[2]) == expected_future


def mid_key(state: dict) -> str:
    board = chess.Board(state["root_fen"])
    for uci in state["moves"]:
        board.push(chess.Move.from_uci(uci))
    return " ".join(board.fen().split()[:4])


def test_set_state_rejects_foreign_snapshots(env: ChessPuzzlesEnv) -> None:
    with pytest.raises(UnknownTaskError):
        env.set_state({"puzzle_id": "zzz", "root_fen": chess.STARTING_FEN, "moves": [], "index": 0, "done": False, "won": False})
    with pytest.raises(ValueError):
        env.set_state({"puzzle_id": "syn001"})


def test_simulation_from_a_snapshot_restores_env(env: ChessPuzzlesEnv) -> None:
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    env.reset(task_id)
    snap = env.get_state()
    solution = {}
    board = chess.Board(puzzle.start_fen)
    for uci in puzzle.solution:
        solution[board.fen()] = board.san(chess.Move.from_uci(uci))
        board.push(chess.Move.from_uci(uci))
    (branch,) = simulate_branches(env, BoardPolicy(lambda b: solution[b.fen()]), n=1, horizon=5)
    assert [s.reward for s in branch.steps] == [0.0, 1.0] and branch.won
    assert env.get_state() == snap  # restored
    last_move = BoardPolicy(lambda b: sorted(b.san(m) for m in b.legal_moves)[-1])
    (wrong,) = simulate_branches(env, last_move, n=1, horizon=5)
    assert len(wrong.steps) >= 1 and env.get_state() == snap


# --------------------------------------------------------------------------- CSV validation

GOOD = "m1,700,,a1a8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,"


@pytest.mark.parametrize(
    ("bad_row", "fragment"),
    [
        ("bad1,seven hundred,,a1a8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "Rating"),
        ("bad1,700,,a1a9,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "not a UCI move"),
        ("bad1,700,,a1b3,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "illegal"),
        ("bad1,700,,a1a8,not a fen,", "bad FEN"),
        ("bad1,700,,,,", "neither FEN nor PGN"),
        ("bad1,700,,,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "neither Moves nor Solution"),
        ("bad1,700,,a1a7 g8h8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "must end on a solver move"),
        ("bad1,700,,,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,a1a8", "setup move and at least one"),
        ("bad1,700,1. e4 e5 2. Kz9,,,e7e5 d2d4", "bad PGN"),
        ("bad1,700,1. e4,,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,g8h8 a1a8", "does not match"),
        ("bad1,700,,e1e8,6k1/5ppp/8/8/8/8/8/R3R1K1 b - - 0 1,g8h8 a1a8", "is not Moves"),
        ("bad1,700,,a1a8 g8h8 e1e8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "game is over"),
        ("m1,700,,a1a8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "duplicate PuzzleId"),
        (",700,,a1a8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,", "empty PuzzleId"),
        ("bad1,700,,a1a8,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,,extra", "more cells"),
    ],
)
def test_a_malformed_row_is_skipped_and_named_or_with_bad_rows_error_stops(tmp_path: Path, bad_row: str, fragment: str,
                                                                           caplog) -> None:
    path = write_csv(tmp_path, HEADER + GOOD + "\n" + bad_row + "\n")

    def names_the_row(message: str) -> None:
        assert "row 2" in message and str(path) in message and fragment in message, message
        if bad_row.split(",")[0]:
            assert repr(bad_row.split(",")[0]) in message, message

    with caplog.at_level("WARNING"):  # one bad row does not cost the other puzzles of the file
        assert [t.task_id for t in ChessPuzzlesEnv(csv_path=path).tasks()] == ["m1"]
    assert "skipped 1 of 2 rows" in caplog.text
    names_the_row(caplog.text)
    with pytest.raises(ValueError) as excinfo:
        ChessPuzzlesEnv(csv_path=path, bad_rows="error")
    names_the_row(str(excinfo.value))


def test_a_file_without_one_good_row_is_an_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path, HEADER + "bad1,700,,a1a8,not a fen,\n")
    with pytest.raises(ValueError, match="none of its 1 rows is a valid puzzle; the first: .*row 1.*bad FEN"):
        ChessPuzzlesEnv(csv_path=path)


def test_missing_columns_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing column"):
        parse_puzzles("PuzzleId,Rating,FEN\nx,1,8/8/8/8/8/8/8/K6k w - - 0 1\n")
    with pytest.raises(DependencyMissingError, match="download_chess_puzzles"):
        ChessPuzzlesEnv(csv_path=tmp_path / "absent.csv")


# --------------------------------------------------------------------------- the shipped sample


def _generator():
    spec = importlib.util.spec_from_file_location("make_sample_chess_puzzles", ROOT / "scripts" / "make_sample_chess_puzzles.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_sample_file_is_reproducible_from_the_script(sample_rows: list[dict[str, str]]) -> None:
    regenerated = _generator().generate(seed=0, limit=5)
    assert regenerated == sample_rows[:5]


def test_sample_solutions_are_checked_mates(sample_rows: list[dict[str, str]]) -> None:
    assert len(sample_rows) == 40
    for row in sample_rows:
        board = chess.Board(row["FEN"])
        moves = row["Moves"].split()
        assert moves[1:] == row["Solution"].split()
        pgn_board = chess.Board()  # the PGN replays to FEN
        for token in row["PGN"].split():
            if not token.endswith("."):
                pgn_board.push_san(token)
        assert pgn_board.fen() == board.fen(), row["PuzzleId"]
        board.push_uci(moves[0])
        solver_positions = []
        for index, uci in enumerate(moves[1:]):
            if index % 2 == 0:
                solver_positions.append(board.copy())
            board.push_uci(uci)
        assert board.is_checkmate(), row["PuzzleId"]
        mates_in_1 = [
            m for m in solver_positions[0].legal_moves if _mates(solver_positions[0], m)
        ]
        if "mateIn1" in row["Themes"]:
            assert len(moves) == 2 and len(mates_in_1) == 1, row["PuzzleId"]
        else:
            assert len(moves) == 4 and not mates_in_1, row["PuzzleId"]


def _mates(board, move) -> bool:
    board.push(move)
    try:
        return board.is_checkmate()
    finally:
        board.pop()


def test_loader_cache_returns_independent_lists() -> None:
    first = load_puzzles()
    first.clear()
    assert len(load_puzzles()) == 40


# --------------------------------------------------------------------------- behaviour policies


class FirstLegalMoveStandInEngine:
    """TEST STAND-IN for Stockfish: deterministically 'prefers' the first legal move in UCI order."""

    def __init__(self) -> None:
        self.calls = 0

    def best_move(self, board):
        self.calls += 1
        return min(board.legal_moves, key=lambda m: m.uci())


@pytest.mark.parametrize("rate", [1 / 2, 1 / 3, 1 / 6])
def test_mixed_policy_picks_expert_at_rate(env: ChessPuzzlesEnv, rate: float) -> None:
    engine = FirstLegalMoveStandInEngine()
    policy = MixedBehaviourPolicy(rate, seed=123, engine=engine)
    board = chess.Board(env.tasks()[0].metadata["fen"])
    expert = board.san(engine.best_move(board))
    legal = {board.san(m) for m in board.legal_moves}
    assert len(legal) > 5
    picks = [policy(board) for _ in range(3000)]
    assert set(picks) <= legal
    share = sum(p == expert for p in picks) / len(picks)
    assert abs(share - rate) <= 0.03, share
    assert len(set(picks)) > 3  # the non-expert moves are spread over the others
    again = MixedBehaviourPolicy(rate, seed=123, engine=FirstLegalMoveStandInEngine())
    assert [again(board) for _ in range(3000)] == picks


def test_mixed_policy_extremes_and_validation() -> None:
    board = chess.Board()
    engine = FirstLegalMoveStandInEngine()
    expert = engine.best_move(board)
    always = MixedBehaviourPolicy(1.0, seed=0, engine=engine)
    assert all(always.choose_move(board) == expert for _ in range(50)) and always.last_was_expert
    never = MixedBehaviourPolicy(0.0, seed=0, engine=engine)
    assert all(never.choose_move(board) != expert for _ in range(200)) and never.last_was_expert is False
    for bad in (-0.1, 1.1, float("nan"), "half"):
        with pytest.raises(ValueError):
            MixedBehaviourPolicy(bad, seed=0, engine=engine)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        MixedBehaviourPolicy(0.5, seed=0, engine=object())  # type: ignore[arg-type]


def test_missing_stockfish_raises_dependency_missing(tmp_path: Path) -> None:
    with pytest.raises(DependencyMissingError) as excinfo:
        StockfishPolicy(path=tmp_path / "no" / "stockfish")
    message = str(excinfo.value)
    assert "apt-get install stockfish" in message and "path" in message


def _stockfish_or_skip() -> str:
    try:
        return find_stockfish()
    except DependencyMissingError as exc:
        pytest.skip(f"stockfish binary not installed ({exc})")


def test_real_stockfish_finds_the_sample_mates(env: ChessPuzzlesEnv) -> None:
    path = _stockfish_or_skip()
    mate_in_1 = [t for t in env.tasks() if t.metadata["n_solver_moves"] == 1][:5]
    with StockfishPolicy(path, depth=6) as engine:
        for spec in mate_in_1:
            board = chess.Board(spec.metadata["fen"])
            move = engine.best_move(board)
            board.push(move)
            assert board.is_checkmate(), spec.task_id
        policy = MixedBehaviourPolicy(1.0, seed=0, engine=engine)
        spec = next(t for t in env.tasks() if t.metadata["n_solver_moves"] == 2)
        env.reset(spec.task_id)
        (branch,) = simulate_branches(env, BoardPolicy(policy), n=1, horizon=4)
        assert branch.won and [s.reward for s in branch.steps] == [0.0, 1.0]


def test_stockfish_discovery_reports_missing_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    import envs.chess.engines as module

    monkeypatch.delenv("STOCKFISH_PATH", raising=False)
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    monkeypatch.setattr(module, "_STOCKFISH_PATHS", ("/nonexistent/stockfish",))
    with pytest.raises(DependencyMissingError, match="apt-get install stockfish"):
        StockfishPolicy()
    with pytest.raises(DependencyMissingError):
        MixedBehaviourPolicy(0.5, seed=0)  # the default engine is Stockfish


# --------------------------------------------------------------------------- game mode (SKL-RL)

GAME_ROWS = (
    "PuzzleId,Rating,FEN,Solution\n"
    "backrank,600,6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1,a1a8\n"  # Ra8#; Black's first legal reply to Kf1 is Kh8
    "mated,700,7r/8/k7/8/8/8/P4P1P/5RKR w - - 0 1,a2a3\n"  # after a3, Black's first legal move is Rg8#
    "stalemate,800,k7/8/1K6/2Q5/8/8/8/8 w - - 0 1,c5a5\n"  # Qc7 stalemates
)


def game_env(tmp_path: Path, **kwargs) -> ChessPuzzlesEnv:
    return ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS), mode="game", **kwargs)


def mating_move(env: ChessPuzzlesEnv) -> str:
    board = env.board
    for move in board.legal_moves:
        board.push(move)
        mate = board.is_checkmate()
        board.pop()
        if mate:
            return board.san(move)
    raise AssertionError("no mate in one here")


def test_game_goes_on_after_a_move_off_the_line_and_ends_by_mate(tmp_path: Path) -> None:
    env = game_env(tmp_path, opponent="first_legal")
    env.reset("backrank")
    off = env.step("Kf1")  # not the puzzle's Ra8#: the game goes on
    assert (off.reward, off.done, off.won) == (0.0, False, False)
    assert off.info["wrong_move"] and not off.info["on_line"] and off.info["expected_move"] == "Ra8#"
    assert off.info["opponent_reply"] == "Kh8" and off.info["result"] is None
    # The reply is shown in UCI, never with a check or mate mark (the authors' simulator results: str(chess.Move)).
    assert off.info["opponent_uci"] == "g8h8" and "Opponent replied g8h8." in off.observation
    assert "not the puzzle" not in off.observation and "Correct" not in off.observation  # no answer oracle
    assert "Your moves left: 9" in off.observation
    mate = env.step(mating_move(env))
    assert (mate.reward, mate.done, mate.won, mate.info["result"]) == (1.0, True, True, "win")
    assert mate.info["opponent_reply"] is None and mate.info["expected_move"] is None


def test_game_lost_by_checkmate_scores_minus_one(tmp_path: Path) -> None:
    env = game_env(tmp_path, opponent="first_legal")
    env.reset("mated")
    result = env.step("a3")  # the line's move, yet the opponent mates: a game, not a puzzle check
    assert result.info["opponent_reply"] == "Rg8#" and result.info["on_line"]
    assert (result.reward, result.done, result.won, result.info["result"]) == (-1.0, True, False, "loss")
    with pytest.raises(EnvNotResetError):
        env.step("h3")


def test_game_step_limit_and_draw_score_zero(tmp_path: Path) -> None:
    env = game_env(tmp_path, opponent="random", max_steps=2)
    env.reset("backrank", seed=0)
    first = env.step("Kf1")
    assert not first.done and "Your moves left: 1" in first.observation
    quiet = next(a for a in env.admissible_actions() if a.startswith("K"))
    second = env.step(quiet)
    assert (second.reward, second.done, second.won) == (0.0, True, False)
    assert second.info["step_limit"] and second.info["result"] is None
    assert "limit of 2 moves" in second.observation

    env = game_env(tmp_path)
    env.reset("stalemate")
    draw = env.step("Qc7")
    assert (draw.reward, draw.done, draw.info["result"]) == (0.0, True, "draw")
    assert "stalemate" in draw.observation


def test_game_prompt_states_the_rewards_the_env_gives(tmp_path: Path) -> None:
    """Issue 22 item 2: the first observation said "a loss scores -1, anything else 0" (a win scored +1)."""
    obs, _ = game_env(tmp_path).reset("backrank", seed=1)
    assert ("Rewards: +1 if you checkmate the opponent, -1 if you are checkmated, 0 for a draw or when your "
            "moves run out; an illegal or unreadable move loses the game at -1.01.") in obs
    obs, _ = game_env(tmp_path, invalid_move_ends=False).reset("backrank", seed=1)
    assert "an illegal or unreadable move is refused and you move again." in obs


@pytest.mark.parametrize("action", ["Qh9", "banana", ""])
def test_game_invalid_move_loses_at_minus_1_01(tmp_path: Path, action: str) -> None:
    """The authors' SKL-RL loop ends a game with no valid move: -1 (loss) - 0.01 (their scripts' format
    penalty) = -1.01. The board is the one before the move; a snapshot of the lost game restores as lost."""
    env = game_env(tmp_path)
    env.reset("backrank", seed=1)
    board_before = env.board.fen()
    result = env.step(action)
    assert (result.reward, result.done, result.won) == (-1.01, True, False)
    assert result.info["invalid_action"] and result.info["result"] == "loss" and env.board.fen() == board_before
    assert "You lose the game" in result.observation
    with pytest.raises(EnvNotResetError):
        env.step("Kf1")
    lost = env.get_state()
    assert lost["forfeited"] and lost["done"]
    fresh = game_env(tmp_path)
    fresh.set_state(lost)
    assert fresh.done and fresh.get_state() == lost
    from envs.base import InvalidSnapshotError

    with pytest.raises(InvalidSnapshotError, match="done"):
        fresh.set_state({**lost, "forfeited": False})  # the same board, not lost: the game would go on


def test_invalid_move_ends_belongs_to_game_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid_move_ends belongs to mode='game'"):
        ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS), invalid_move_ends=True)
    with pytest.raises(ValueError, match="invalid_move_ends must be true, false or null"):
        game_env(tmp_path, invalid_move_ends="yes")
    assert not ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS)).invalid_move_ends  # a puzzle waits


def test_game_invalid_action_changes_nothing_when_it_does_not_end_the_game(tmp_path: Path) -> None:
    env = game_env(tmp_path, invalid_move_ends=False)
    env.reset("backrank", seed=1)
    before = env.get_state()
    result = env.step("Qh9")
    assert result.info["invalid_action"] and not result.done and env.get_state() == before


def test_puzzle_line_opponent_then_off_line_opponent() -> None:
    env = ChessPuzzlesEnv(mode="game", opponent="puzzle_line", off_line_opponent="first_legal")
    task_id = mate_in_2_id(env)
    puzzle = env.puzzle(task_id)
    sans = san_line(puzzle.start_fen, puzzle.solution)
    env.reset(task_id)
    on = env.step(sans[0])
    assert on.info["opponent_reply"] == sans[1] and on.info["on_line"] and not on.done
    env.reset(task_id)
    wrong = next(a for a in env.admissible_actions() if a != sans[0])
    off = env.step(wrong)
    board = chess.Board(puzzle.start_fen)
    board.push_san(wrong)
    if not board.is_game_over(claim_draw=True):
        assert off.info["opponent_reply"] == board.san(next(iter(board.legal_moves)))  # first_legal took over


def test_game_snapshots_replay_the_random_opponent_exactly(tmp_path: Path) -> None:
    env = game_env(tmp_path, opponent="random")
    env.reset("backrank", seed=7)
    snap = copy.deepcopy(env.get_state())
    assert snap["mode"] == "game" and snap["rng_state"]["bit_generator"] == "PCG64"
    moves = ["Kf1", "Ke2", "Kd3"]
    first = [env.step(m) for m in moves]
    env.set_state(snap)
    again = [env.step(m) for m in moves]
    assert first == again
    other = game_env(tmp_path, opponent="random")
    other.set_state(pickle.loads(pickle.dumps(snap)))
    assert [other.step(m) for m in moves] == first
    # different seeds give different opponents (3 replies from ~4 legal ones each)
    replies = set()
    for seed in range(8):
        env.reset("backrank", seed=seed)
        replies.add(tuple(env.step(m).info["opponent_reply"] for m in moves))
    assert len(replies) > 1


def test_game_snapshot_is_checked_before_it_is_applied(tmp_path: Path) -> None:
    from envs.base import InvalidSnapshotError

    env = game_env(tmp_path, opponent="first_legal")
    env.reset("backrank")
    env.step("Kf1")
    good = env.get_state()
    for field, value in [("steps", 5), ("on_line", True), ("index", 1), ("won", True), ("mode", "puzzle")]:
        with pytest.raises(InvalidSnapshotError, match=field if field != "mode" else "mode"):
            env.set_state({**good, field: value})
        assert env.get_state() == good
    with pytest.raises(InvalidSnapshotError, match="rng_state"):
        env.set_state({**good, "rng_state": {"bit_generator": "PCG64", "state": "x"}})
    with pytest.raises(InvalidSnapshotError, match="solver move"):
        env.set_state({**good, "moves": good["moves"] + ["f1e2"]})
    puzzle_env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS, "p.csv"))
    puzzle_env.reset("backrank")
    with pytest.raises(InvalidSnapshotError):
        env.set_state(puzzle_env.get_state())  # a puzzle-mode snapshot has no game fields


def test_state_key_ignores_move_counters(tmp_path: Path) -> None:
    env = game_env(tmp_path, opponent="first_legal")
    env.reset("backrank")
    start = env.state_key()
    assert start == "6k1/5ppp/8/8/8/8/8/R3R1K1 w - -"
    env.step("Kf1")  # Kh8
    env.step("Kg1")  # first legal reply of Black: Kg8 -> the start position, counters differ
    assert env.board.fen() != "6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1"
    assert env.state_key() == start


def test_game_options_are_checked(tmp_path: Path) -> None:
    csv_path = write_csv(tmp_path, GAME_ROWS)
    for kwargs, fragment in [
        ({"mode": "blitz"}, "mode"),
        ({"mode": "game", "opponent": "oracle"}, "opponent"),
        ({"mode": "game", "off_line_opponent": "puzzle_line"}, "off_line_opponent"),
        ({"mode": "game", "max_steps": 0}, "max_steps"),
        ({"mode": "game", "wrong_move_ends": False}, "wrong_move_ends"),
        ({"mode": "game", "opponent": "stockfish", "stockfish_skill_level": 25}, "skill_level"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            ChessPuzzlesEnv(csv_path=csv_path, **kwargs)


def test_authors_rating_range_keeps_0_to_800(tmp_path: Path) -> None:
    from envs.chess.data import AUTHORS_RATING_RANGE

    low, high = AUTHORS_RATING_RANGE
    env = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS), min_rating=low, max_rating=high)
    assert sorted(t.task_id for t in env.tasks()) == ["backrank", "mated", "stalemate"]  # 600, 700, 800
    below_800 = ChessPuzzlesEnv(csv_path=write_csv(tmp_path, GAME_ROWS, "b.csv"), max_rating=800)
    assert "stalemate" not in {t.task_id for t in below_800.tasks()}  # the filter is rating < max_rating


def test_stockfish_opponent_punishes_a_blunder(tmp_path: Path) -> None:
    try:
        find_stockfish()
    except DependencyMissingError:
        pytest.skip("stockfish binary not installed")
    env = game_env(tmp_path, opponent="stockfish", stockfish_depth=6, stockfish_skill_level=20)
    try:
        env.reset("mated")
        result = env.step("a3")
        assert result.info["opponent_reply"] == "Rg8#" and result.reward == -1.0
    finally:
        env.close()
