"""The apps' config schema: one dataclass per app and per config group whose options are code
defaults, registered in Hydra's ConfigStore (``register``, run when ``rlplace.conf`` is
imported). Hydra composes an app's YAML (a defaults list naming its schema and presets) onto
its schema, so an unknown key or a value of the wrong type fails at composition, naming the key;
``rlplace.options.check_ranges`` then checks the allowed values kept as field metadata.

Each default lives once: the agents' options in ``rlplace.learn.configs``, the trainer's in its
``TrainConfig``, a backend's or logger's in its constructor's signature, the environment's and
Ray's in theirs. What is a preset (graph/, cluster/, model/, table/: a ``_target_`` with
arguments, or a paper's table) stays YAML under ``rlplace/conf/``.

    ConfigStore            what it holds
    <app>_schema           CompareApp, TrainApp, ProfileApp, ReproduceApp: an app's own keys
    agent/<name>           rlplace.learn.configs.AGENTS, the run's seed in the seeds
    backend/<name>         name, options (the backend's signature), workers
    logger/<name>          name, options (the logger's signature)
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from rlplace.learn.configs import AGENTS, TrainConfig, WarmStartConfig
from rlplace.learn.loggers import LOGGER_ARGUMENTS, LOGGERS
from rlplace.apps.beside import MAX_SECONDS
from rlplace.backends import backend_class, backend_names
from rlplace.calibration.design import CUTS, HEURISTICS as CALIBRATION_HEURISTICS, MIXING_RATES, design
from rlplace.calibration.protocol import measure
from rlplace.calibration.study import study
from rlplace.distributed import RayBackend
from rlplace.learn.env import PlacementEnv
from rlplace.options import COUNT, FLAG, SEED, Allowed, allowed, default_of, signature_schema

SEED_KEYS = {  # keys that take the run's seed (``seed``), in the groups that have them
    "agent/hierarchical": ["policy.grouping_seed"],
    "agent/mars": ["policy.seed", "policy.dgi.seed", "algorithm.options.seed"],
    "agent/learned": ["algorithm.options.seed"],
    "backend/tf": ["options.seed"],
}
# the model of graph=tf_model / graph=torch_model
BACKEND_PRESETS = {name: {"options.model": "${oc.select:graph.model,null}"} for name in ("tf", "torch")}
BESIDE_SECONDS = Allowed(float, low=0, open_low=True, null="no cap")  # equal wall time of a search beside
COMPARE_PLACERS = ["single", "round_robin", "random", "expert", "metis", "heft", "critical_path", "m_topo", "m_etf",
                   "m_sct", "order_place", "celeritas", "learned", "local_search"]


@dataclass
class Verify:
    """Real measurement in the loop (rlplace.verify), for rlplace-train and the search placers
    of rlplace-compare: with a measuring backend (backend=tf) and ``verify_top_k=K``, every
    placement is evaluated on the simulator and only the K best are measured."""

    verify_top_k: Optional[int] = allowed(None, Allowed(int, low=1, null="measure every placement"))
    verify_every: Optional[int] = allowed(None, Allowed(int, low=1, null="at the end only"))
    verify_recalibrate: bool = allowed(True, FLAG)  # refit the simulator from the measurements (rlplace.calibration)


@dataclass
class CompareApp(Verify):
    """rlplace-compare: placers on one graph and cluster, evaluated with one backend."""

    graph: Any = MISSING
    cluster: Any = MISSING
    backend: Any = MISSING
    placers: Any = field(default_factory=lambda: list(COMPARE_PLACERS))  # a list, or one name
    placer_options: Dict[str, Any] = field(default_factory=dict)  # per placer: +placer_options.single.device=1
    seed: int = allowed(0, SEED)       # graph generators and stochastic placers
    beside_seconds: Optional[float] = allowed(MAX_SECONDS, BESIDE_SECONDS)  # a trained policy's search beside it
    plots: bool = allowed(True, FLAG)  # schedule.png, memory.png; curves.png with a search placer


_T = TrainConfig


@dataclass
class Env:
    """PlacementEnv options (one_shot mode); the OOM penalty comes from the agent."""

    reward: str = default_of(PlacementEnv, "reward")
    step_time_limit: Optional[float] = allowed(default_of(PlacementEnv, "step_time_limit"),
                                               Allowed(float, low=0, open_low=True, null="no limit"))


@dataclass
class Budget:
    placements: Optional[int] = allowed(_T.budget_placements, Allowed(int, low=1, null="no limit"))
    seconds: Optional[float] = allowed(_T.budget_seconds, Allowed(float, low=0, open_low=True, null="no limit"))


def _ray(name: str) -> Any:
    return default_of(RayBackend, name)


@dataclass
class Ray:
    """Used when backend.workers > 1 or ``address`` is set: pip install 'rlplace[ray]'
    (docs/distributed.md)."""

    address: Optional[str] = _ray("address")  # null: this machine's Ray cluster if any, else a new local one
    timeout: Optional[float] = allowed(_ray("timeout"), Allowed(float, low=0, open_low=True, null="no limit"))
    max_retries: int = allowed(_ray("max_retries"), Allowed(int, low=0))
    num_cpus: Optional[float] = allowed(_ray("num_cpus"), Allowed(float, low=0, null="Ray's default"))
    num_gpus: Optional[float] = allowed(_ray("num_gpus"), Allowed(float, low=0, null="the cluster's GPUs shared out"))


@dataclass
class TrainApp(Verify):
    """rlplace-train: a learned placer trained on one graph and cluster."""

    graph: Any = MISSING
    cluster: Any = MISSING
    backend: Any = MISSING
    agent: Any = MISSING
    logger: Any = MISSING
    seed: int = allowed(_T.seed, SEED)  # weights, sampling, graph generators, stochastic heuristics
    env: Env = field(default_factory=Env)
    budget: Budget = field(default_factory=Budget)
    ray: Ray = field(default_factory=Ray)
    checkpoint_every: int = allowed(_T.checkpoint_every, COUNT)  # updates
    resume: bool = allowed(_T.resume, FLAG)
    # resume a run written on another kind of device (GPU <-> CPU): its sampling generator cannot
    # move, so it is seeded with seed + placements evaluated (results.json: generator_reseeded_at)
    resume_across_devices: bool = allowed(_T.resume_across_devices, FLAG)
    stop_after_updates: Optional[int] = allowed(_T.stop_after_updates, Allowed(int, low=1, null="never"))
    init_checkpoint: Optional[str] = _T.init_checkpoint  # fine-tuning: weights from another run's checkpoint.pt
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    torch_threads: Optional[int] = allowed(None, Allowed(int, low=1, null="all cores"))  # 1 per job in parallel sweeps
    torch_device: str = _T.torch_device  # auto (a GPU if torch sees one, else the CPU), cpu, cuda or cuda:N
    progress: bool = allowed(_T.progress, FLAG)
    plots: bool = allowed(_T.plots, FLAG)


@dataclass
class StandardEval:
    """Celeritas §4.2.1: predict model.batch_size from small batches."""

    batch_sizes: List[int] = field(default_factory=list)  # e.g. [1, 2, 4]; empty: off
    measure: bool = allowed(True, FLAG)  # also profile model.batch_size and report the deviations


@dataclass
class ProfileApp:
    """rlplace-profile: a zoo model built in TensorFlow, profiled on one device."""

    model: Any = MISSING
    warmup: int = allowed(5, Allowed(int, low=0))  # untraced steps first (Baechi §5)
    steps: int = allowed(5, COUNT)                 # traced steps whose per-op times are averaged
    inter_op_threads: int = allowed(1, Allowed(int, low=0))  # one op at a time, as the simulator's devices
    intra_op_threads: int = allowed(0, Allowed(int, low=0))  # 0: TensorFlow's default (all cores)
    seed: int = allowed(0, SEED)      # synthetic input data
    output: Optional[str] = None      # file name in the run directory; default <model>_b<batch>.json.gz
    standard_eval: StandardEval = field(default_factory=StandardEval)


@dataclass
class ReproduceApp:
    """rlplace-reproduce: one paper table beside the paper's numbers."""

    table: Any = MISSING
    mode: str = "full"   # full: the paper's sizes; smoke: the table's tiny `smoke` section (CI)
    budget: Optional[int] = allowed(None, Allowed(int, low=1, null="the table's"))  # placements per training run
    budget_seconds: Optional[float] = allowed(None, Allowed(float, low=0, open_low=True, null="no limit"))
    beside_seconds: Optional[float] = allowed(MAX_SECONDS, BESIDE_SECONDS)  # the search beside each learned run
    seed: int = allowed(0, SEED)
    plots: bool = allowed(True, FLAG)
    record: bool = allowed(False, FLAG)     # also copy the outputs to experiments/results/tables/<table>/
    why_only: bool = allowed(False, FLAG)   # rewrite the recorded run's claim lines with its why.yaml notes


@dataclass
class CalibrateApp:
    """rlplace-calibrate: a design of placements measured on a real backend, the simulator fitted
    to them (rlplace.calibration)."""

    graph: Any = MISSING
    model: Any = MISSING
    cluster: Any = MISSING
    backend: Any = MISSING
    rounds: int = allowed(default_of(measure, "rounds"), COUNT)  # interleaved; a placement's time: their median
    warmup: int = allowed(default_of(measure, "warmup"), Allowed(int, low=0))  # measurements thrown away first
    cuts: List[float] = field(default_factory=lambda: list(CUTS))  # the first fraction of the ops on device 0
    mixing_rates: List[float] = field(default_factory=lambda: list(MIXING_RATES))  # ops moved off device 0 at random
    mixing_seeds: int = allowed(default_of(design, "mixing_seeds"), Allowed(int, low=0))  # per mixing rate
    heuristics: List[str] = field(default_factory=lambda: list(CALIBRATION_HEURISTICS))
    held_out: float = allowed(default_of(study, "held_out"), Allowed(float, low=0, high=1, open_low=True))
    cv_folds: int = allowed(5, Allowed(int, low=0))  # cross-validation folds over the non-single placements (0: none)
    op_type_groups: int = allowed(default_of(study, "op_type_groups"), Allowed(int, low=0))  # own compute factors
    fit_speeds: bool = allowed(default_of(study, "fit_speeds"), FLAG)  # a speed per device (the first: reference)
    max_evaluations: int = allowed(default_of(study, "max_evaluations"), COUNT)  # per fit and transfer mode
    from_run: Optional[str] = None   # an earlier run directory: refit its measurements.json, measure nothing
    seed: int = allowed(0, SEED)
    plots: bool = allowed(True, FLAG)  # scatter.png


APPS = {"compare": CompareApp, "train": TrainApp, "profile": ProfileApp, "reproduce": ReproduceApp,
        "calibrate": CalibrateApp}


def backend_schema(name: str) -> type:
    """``backend=<name>``: the backend's constructor keywords as ``options``, and ``workers``
    (> 1: that many Ray workers evaluate the k samples of a step, rlplace-train)."""
    options = signature_schema(backend_class(name))
    return make_dataclass(f"{name.capitalize()}BackendGroup", [
        ("name", str, field(default=name)), ("options", options, field(default_factory=options)),
        ("workers", int, allowed(1, COUNT))])


def logger_schema(name: str) -> type:
    """``logger=<name>``: the logger's constructor keywords (less what the trainer gives) as
    ``options``. Every run writes metrics.csv whatever the logger."""
    options = signature_schema(LOGGERS[name], skip=LOGGER_ARGUMENTS)
    return make_dataclass(f"{name.capitalize()}LoggerGroup", [
        ("name", str, field(default=name)), ("options", options, field(default_factory=options))])


def group_nodes() -> dict[str, DictConfig]:
    """``<group>/<name>`` -> the node registered for it (schema defaults plus the run's seed)."""
    nodes = {f"agent/{name}": OmegaConf.structured(cls) for name, cls in AGENTS.items()}
    nodes |= {f"backend/{name}": OmegaConf.structured(backend_schema(name)) for name in backend_names()}
    nodes |= {f"logger/{name}": OmegaConf.structured(logger_schema(name)) for name in LOGGERS}
    for path, keys in SEED_KEYS.items():
        for key in keys:
            OmegaConf.update(nodes[path], key, "${seed}")
    for name, values in BACKEND_PRESETS.items():
        for key, value in values.items():
            OmegaConf.update(nodes[f"backend/{name}"], key, value)
    return nodes


def register() -> None:
    """Store the apps' schemas (``<app>_schema``) and the groups' nodes in Hydra's ConfigStore."""
    store = ConfigStore.instance()
    for app, cls in APPS.items():
        store.store(name=f"{app}_schema", node=cls)
    for path, node in group_nodes().items():
        group, _, name = path.partition("/")
        store.store(group=group, name=name, node=node)
