#!/usr/bin/env bash
# Download the ChessPuzzles file used in the paper (App. G.2): the 10k Lichess puzzles
# published by Google DeepMind's searchless_chess project (columns include PuzzleId, Rating,
# PGN, Moves; read by envs/chess/data.py in its "PGN + Moves" form).
#
# Usage: scripts/download_chess_puzzles.sh [OUTPUT_PATH]   (default: data/chess_puzzles/puzzles.csv)
# Then:  make_env("chess_puzzles", csv_path="data/chess_puzzles/puzzles.csv", max_rating=1000)
set -euo pipefail

URL="https://storage.googleapis.com/searchless_chess/data/puzzles.csv"
OUT="${1:-data/chess_puzzles/puzzles.csv}"

mkdir -p "$(dirname "$OUT")"
TMP="$OUT.part"
if command -v curl >/dev/null 2>&1; then
  curl -fL --retry 3 -o "$TMP" "$URL"
elif command -v wget >/dev/null 2>&1; then
  wget -O "$TMP" "$URL"
else
  echo "error: need curl or wget to download $URL" >&2
  exit 1
fi
if ! head -n 1 "$TMP" | grep -q "PuzzleId"; then
  echo "error: $URL did not return a puzzle CSV (no PuzzleId header); left it at $TMP" >&2
  exit 1
fi
mv "$TMP" "$OUT"
echo "saved $URL to $OUT ($(wc -l < "$OUT") lines)"
