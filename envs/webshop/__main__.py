"""``python -m envs.webshop --write-launcher PATH``: copy the server launcher into a WebShop checkout."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "server.py"


def write_launcher(path: str | os.PathLike[str]) -> Path:
    """Copy ``envs/webshop/server.py`` to ``path``: it has to run in WebShop's environment and checkout."""
    out = Path(path)
    shutil.copyfile(SERVER, out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.webshop", description="WebShop helpers for skl-verl")
    parser.add_argument("--write-launcher", metavar="PATH", required=True,
                        help="write the WebShop server launcher script to PATH (put it in the WebShop checkout)")
    args = parser.parse_args(argv)
    print(write_launcher(args.write_launcher))
    return 0


if __name__ == "__main__":
    sys.exit(main())
