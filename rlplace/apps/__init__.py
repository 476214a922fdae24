"""Hydra entry points: rlplace-compare (and train, profile, reproduce as they land)."""
