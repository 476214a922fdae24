"""Hydra entry points: rlplace-compare, -train, -profile, -reproduce and -calibrate. Importing
this package registers the apps' schemas in Hydra's ConfigStore, so ``pkg://rlplace.conf``
composes onto them (the configs themselves are data only)."""

from rlplace.apps.schema import register

register()
