"""The paper tables that ``rlplace-reproduce`` runs: one module per paper (``baechi``,
``celeritas``, ``hp``, ``mars``), each function taking a table config (``rlplace/conf/table/``) and a
``common.Context`` and returning a ``common.TableOutput`` (ours beside the paper's numbers, with
the claims' verdicts). They belong to the apps (the core never imports them): learned columns
train through ``rlplace.apps.train``."""
