"""``python -m rollout.release``: see rollout/release/cli.py."""

from rollout.release.cli import main

raise SystemExit(main())
