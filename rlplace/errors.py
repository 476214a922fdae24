"""The one exception family of rlplace.

Every message names the offending op, file or key. The apps turn these into one line on stderr
and exit status 2 (see ``rlplace.apps.common``).
"""


class RlplaceError(Exception):
    """Base of every error rlplace raises on bad input."""


class GraphError(RlplaceError):
    """An OpGraph (or a graph file) is malformed: cycle, bad cost, unknown op, ..."""


class ConfigError(RlplaceError):
    """A configuration value or name is invalid: unknown placer, bad cluster, ..."""


class PlacementError(RlplaceError):
    """A placement does not fit its graph and cluster: wrong length, bad device, split group."""


class BackendError(RlplaceError):
    """A backend could not evaluate a placement."""


class CheckpointError(RlplaceError):
    """A checkpoint file cannot be read (missing, empty, truncated, not a torch file, pickled
    code refused) or does not belong to the run (another agent, graph or cluster)."""
