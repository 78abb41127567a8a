"""``python -m rollout.ctl``: see rollout/ctl/cli.py."""

from rollout.ctl.cli import main

raise SystemExit(main())
