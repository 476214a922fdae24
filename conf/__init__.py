"""Hydra configs of the rlplace apps, installed as the package rlplace.conf: the presets (YAML)
here, the schemas of the apps and of the groups agent/, backend/ and logger/ in Hydra's
ConfigStore (``rlplace.apps.schema``), registered when Hydra reads this package."""

from rlplace.apps.schema import register

register()
