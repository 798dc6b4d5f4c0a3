from skl_verl.skl.frozenlake_study.cli import main

raise SystemExit(main())
