"""``python -m skl_verl.main``: the command every recipe and the quickstart run (see skl_verl.trainer.entry)."""

import skl_verl
from skl_verl.trainer.entry import main

if __name__ == "__main__":
    skl_verl.register(with_trainer=False)
    main()
