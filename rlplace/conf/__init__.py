"""The Hydra configs of the rlplace apps (``pkg://rlplace.conf``): YAML presets and app configs,
data only. The schemas they compose onto are registered by ``rlplace.apps``
(``rlplace.apps.schema.register``) when an app is imported."""
