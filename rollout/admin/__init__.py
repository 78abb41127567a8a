"""The operators' console for releases and rollouts. Every action calls a service.

Releases are registered through a form that verifies the signatures. Rollouts
are planned (a dry run, then a confirmation) and operated (pause, resume,
abort, abort with rollback, each confirmed on an intermediate page) through
rollout/services; their rows, waves, node upgrades and events are never edited
by hand. Superusers see every tenant; staff users with a Membership see only
their tenant's rollouts (the fleet admin's ``TenantScopedAdmin``). In the pages
a wave is numbered from 1 ("wave 2 of 4"); the API and the event data count
wave indexes from 0.

Registered on import (Django's admin autodiscovery imports this package): releases.py,
rollouts.py (with actions.py, display.py and plan.py, its "Add" page), node_upgrades.py (node upgrades
and events), roots.py (the root chain of release keys, read-only).
"""

from rollout.admin import node_upgrades, releases, rollouts, roots
from rollout.admin.display import duration_text

__all__ = ["duration_text", "node_upgrades", "releases", "rollouts", "roots"]
