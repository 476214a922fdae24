"""The execution model shared by the simulator and the list-scheduling placers.

One model of a training step (docs/design.md): per-device compute queues,
transfer channels, tensors sent once per destination and cached, memory live ranges and idle
slots. ``model.Model`` is its state, a struct of arrays built once per graph and cluster
(``new_model``); ``ops`` are the compiled operations on it; ``trace`` turns a finished model
into a ``Schedule`` and computes its step time and peak memory. The simulator (``rlplace.sim``)
is the event loop over this model; m-ETF, m-SCT, Celeritas and HEFT are policy loops over it,
so a placer's own estimate is what the simulator will say (see each placer for where they may
differ).
"""

from rlplace.schedule.model import Model, new_model
from rlplace.schedule.trace import CriticalPath, Schedule, critical_path, memory_peaks, schedule_of

__all__ = ["CriticalPath", "Model", "Schedule", "critical_path", "memory_peaks", "new_model", "schedule_of"]
