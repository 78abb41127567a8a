"""System checks of settings.ROLLOUT (filled in with the signing module)."""
