"""The agents' options as dataclasses, importable without torch: the one source of their
defaults. ``rlplace-train`` composes ``agent=<name>`` from these (registered in Hydra's
ConfigStore by ``rlplace.apps.schema``); the policies and algorithms build from them.

``agent=hierarchical``: the Hierarchical Planner (Mirhoseini et al., ICLR 2018, §2–3) trained with
REINFORCE; ``agent=mars``: Mars (ICPP 2021, §3–4.2) trained with PPO. Ablations: Mars
``policy.pretrain=false`` (Table 2), ``policy.placer=seq2seq`` (Table 1), ``policy.encoder=sage
policy.placer=transformer policy.pretrain=false`` (the encoder-placer baseline, §4.1); HP
``policy.grouping=random|none`` (Table 2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from rlplace.errors import ConfigError
from rlplace.options import COUNT, FLAG, SECONDS, SEED, Allowed, allowed, check_fields

GROUPINGS = ("learned", "random", "none")
ENCODERS = ("gcn", "sage")
ORDERS = ("cycle", "sample")   # how a family's updates go over its graphs
PLACERS = ("segment_seq2seq", "seq2seq", "transformer")
DEVICES = re.compile(r"auto|cpu|cuda(:[0-9]+)?")   # the torch devices a learned placer trains on


def check_device_name(name: str) -> None:
    """A ConfigError unless ``name`` is auto, cpu, cuda or cuda:N (``rlplace.learn.device``
    resolves it)."""
    if not isinstance(name, str) or not DEVICES.fullmatch(name):
        raise ConfigError(f"torch_device must be auto, cpu, cuda or cuda:N, got {name!r}")


@dataclass
class HierarchicalConfig:
    grouping: str = "learned"       # "learned" (HP), "random" or "none" (Simple Planner): §3 Table 2
    num_groups: int = allowed(256, COUNT)           # Grouper softmax size, §3 "Architecture of the Policy Network"
    num_types: int = allowed(200, COUNT)            # vocabulary of the most common op types, §2
    type_embedding: int = allowed(20, COUNT)        # op-type embedding size, §2
    max_outputs: int = allowed(6, COUNT)            # output-shape vector: outputs kept, §2
    shape_dims: int = allowed(4, COUNT)             # output-shape vector: dims per output, §2
    max_neighbours: int = allowed(6, COUNT)         # adjacency vector: predecessors and successors each, §2
    grouper_hidden: int = allowed(64, COUNT)        # §3
    placer_hidden: int = allowed(256, COUNT)        # LSTM hidden size, §3
    temperature: float = allowed(10.0, SECONDS)       # T of Eq. 1, §3 "Training Details"
    tanh_constant: float = allowed(5.0, SECONDS)      # C of Eq. 1, §3 "Training Details"
    noise_amplitude: float = allowed(0.1, Allowed(float, low=0))    # logit noise, §3 "Training Details"
    noise_steps: int = allowed(500, Allowed(int, low=0))          # ... for the first 500 policy training steps
    grouping_seed: int = allowed(0, Allowed(int, low=0))          # the fixed grouping of grouping="random"
    unit_embedding: int = allowed(0, Allowed(int, low=0))         # not in the paper: > 0 adds a trainable vector per unit, so the
                                    # Grouper can tell apart units whose §2 features are alike
                                    # (behaviour cloning of an arbitrary placement needs it)

    def __post_init__(self):
        check_fields(self, "agent.policy.")
        if self.grouping not in GROUPINGS:
            raise ConfigError(f"agent.policy.grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if self.num_groups < 1 or self.placer_hidden % 2:
            raise ConfigError("agent.policy: num_groups must be >= 1 and placer_hidden even")


@dataclass
class DGIConfig:
    iterations: int = allowed(1000, Allowed(int, low=0))   # Mars §4.2
    lr: float = allowed(1e-3, SECONDS)         # Adam; Mars gives none, DGI (Veličković et al. §4.2) uses 0.001
    cache_dir: Optional[str] = "~/.cache/rlplace/dgi"   # None: do not cache
    seed: int = allowed(0, Allowed(int, low=0))            # corruption permutations

    def __post_init__(self):
        check_fields(self, "agent.policy.dgi.")


@dataclass
class MarsConfig:
    encoder: str = "gcn"                 # "gcn" (Mars §3.1) or "sage" (encoder-placer baseline, §4.1)
    encoder_hidden: int = allowed(256, COUNT)            # Mars §4.2
    encoder_layers: int = allowed(3, COUNT)              # Mars §4.2
    placer: str = "segment_seq2seq"      # Mars §3.3; "seq2seq" (Table 1), "transformer" (§4.1)
    segment_size: int = allowed(128, COUNT)              # Mars §3.3, §4.2
    placer_hidden: int = allowed(512, COUNT)             # Mars §4.2 (LSTM size; the Transformer's width)
    transformer_layers: int = allowed(2, COUNT)          # not given by Mars or GDP for this scale
    transformer_heads: int = allowed(4, COUNT)           # not given by Mars or GDP for this scale
    pretrain: bool = True                # Mars §3.2; false: Table 2's "Mars (no pre-training)"
    type_buckets: int = allowed(0, Allowed(int, low=0))                # 0: one-hot over this graph's op types; N > 0: op types
                                         # hashed into N buckets, a vocabulary all graphs share, so
                                         # every weight transfers to another graph (Table 3)
    dgi: DGIConfig = field(default_factory=DGIConfig)
    seed: int = allowed(0, Allowed(int, low=0))                        # weight initialisation

    def __post_init__(self):
        check_fields(self, "agent.policy.")
        if not isinstance(self.dgi, DGIConfig):
            raise ConfigError(f"agent.policy.dgi must be a DGIConfig, got {self.dgi!r:.60}")
        if self.encoder not in ENCODERS:
            raise ConfigError(f"agent.encoder must be one of {sorted(ENCODERS)}, got {self.encoder!r}")
        if self.placer not in PLACERS:
            raise ConfigError(f"agent.placer must be one of {list(PLACERS)}, got {self.placer!r}")
        if self.type_buckets < 0:
            raise ConfigError(f"agent.type_buckets must be >= 0, got {self.type_buckets}")
        if self.segment_size < 1:
            raise ConfigError(f"agent.segment_size must be positive, got {self.segment_size}")
        if self.placer_hidden % 2:
            raise ConfigError(f"agent.placer_hidden must be even (two LSTM directions), got {self.placer_hidden}")
        if self.placer == "transformer" and self.placer_hidden % self.transformer_heads:
            raise ConfigError(f"agent.transformer_heads must divide placer_hidden ({self.placer_hidden}), "
                              f"got {self.transformer_heads}")


@dataclass
class LearnedConfig:
    weights: Optional[str] = None        # an .npz of the learned placer's network; None: the shipped one

    def __post_init__(self):
        if self.weights is not None and not isinstance(self.weights, str):
            raise ConfigError(f"agent.policy.weights must be null or a path, got {self.weights!r:.60}")


@dataclass
class ReinforceConfig:
    lr: float = allowed(0.1, SECONDS)                      # Adam, initial learning rate: HP §3 "Training Details"
    lr_decay: float = allowed(0.95, Allowed(float, low=0, high=1))               # the paper is silent; the authors' code (lr_dec, start_decay_step,
    lr_decay_start: int = allowed(400, Allowed(int, low=0))            # decay_steps) multiplies the lr by 0.95 every 50 updates after
    lr_decay_every: int = allowed(50, COUNT)             # update 400 (staircase); lr_decay = 1 keeps it fixed
    max_grad_norm: float = allowed(1.0, SECONDS)           # gradient clipping: HP §3
    baseline_decay: float = allowed(0.9, Allowed(float, low=0, high=1))          # EMA baseline (HP §2); 0.9 is bl_dec of the authors' code
    valid_only_after: Optional[int] = allowed(500, Allowed(int, low=0, null="always learn from every sample"))  # HP §3
    entropy_coef: float = allowed(0.0, Allowed(float, low=0))            # HP uses none

    def __post_init__(self):
        check_fields(self, "agent.algorithm.options.")


@dataclass
class PPOConfig:
    clip: float = allowed(0.2, SECONDS)              # Mars §4.2, ε
    entropy_coef: float = allowed(0.001, Allowed(float, low=0))    # Mars §4.2
    lr: float = allowed(3e-4, SECONDS)               # Mars §4.2, Adam
    max_grad_norm: float = allowed(1.0, SECONDS)     # Mars §4.2
    baseline_decay: float = allowed(0.99, Allowed(float, low=0, high=1))   # Mars §3.4, μ of Eq. 7
    buffer_size: int = allowed(20, COUNT)          # Mars §4.2
    num_minibatches: int = allowed(4, COUNT)       # Mars §4.2
    epochs: int = allowed(3, COUNT)                # Mars §4.2
    normalize_advantages: bool = allowed(True, FLAG)  # over the buffer; Mars is silent, CleanRL's default
    seed: int = allowed(0, Allowed(int, low=0))                  # mini-batch shuffling

    def __post_init__(self):
        check_fields(self, "agent.algorithm.options.")


@dataclass
class WarmStartConfig:
    """A warm start from an algorithmic placer (rlplace.learn.warmstart): (a) behaviour
    cloning, (b) the heuristic's placement as the first sample."""

    placer: Optional[str] = None        # None: cold start; a placer name, or best
    placer_options: dict = field(default_factory=dict)
    behaviour_cloning: bool = allowed(False, FLAG)    # (a)
    first_sample: bool = allowed(False, FLAG)         # (b)
    bc_steps: int = allowed(300, Allowed(int, low=0))   # most gradient steps of behaviour cloning (ours)
    bc_lr: float = allowed(0.01, SECONDS)    # Adam (ours: the RL rate 0.1 overshoots supervised targets)
    bc_target_accuracy: float = allowed(1.0, Allowed(float, low=0, high=1))  # stop once the greedy
                                        # placement agrees on this share of units
    bc_check_every: int = allowed(10, COUNT)

    def __post_init__(self):
        check_fields(self, "warm_start.")
        if self.placer is not None and not isinstance(self.placer, str):
            raise ConfigError(f"warm_start.placer must be null or a placer's name, got {self.placer!r:.60}")
        if not isinstance(self.placer_options, dict):
            raise ConfigError(f"warm_start.placer_options must be a dict, got {self.placer_options!r:.60}")


@dataclass
class Reinforce:
    name: str = "reinforce"
    options: ReinforceConfig = field(default_factory=ReinforceConfig)


@dataclass
class PPO:
    name: str = "ppo"
    options: PPOConfig = field(default_factory=PPOConfig)


@dataclass
class HierarchicalAgent:
    """``agent=hierarchical``: the HP policy, REINFORCE, k = 4 placements per update (m = 1
    grouping, §3), reward -10 for an invalid placement (§3)."""

    name: str = "hierarchical"
    samples: int = allowed(4, COUNT)
    oom_penalty: str = "hierarchical_planner"
    policy: HierarchicalConfig = field(default_factory=HierarchicalConfig)
    algorithm: Reinforce = field(default_factory=Reinforce)


@dataclass
class MarsAgent:
    """``agent=mars``: the Mars policy, PPO, 10 placements sampled per update (§4.2), a 100 s
    step time for an out-of-memory placement (§3.4)."""

    name: str = "mars"
    samples: int = allowed(10, COUNT)
    oom_penalty: str = "mars"
    policy: MarsConfig = field(default_factory=MarsConfig)
    algorithm: PPO = field(default_factory=PPO)


@dataclass
class LearnedAgent:
    """``agent=learned``: the pretrained ``learned`` placer's network fine-tuned with PPO (issue
    41 item 2: imitation first, then RL in the simulator), Mars' sampling and OOM penalty."""

    name: str = "learned"
    samples: int = allowed(10, COUNT)
    oom_penalty: str = "mars"
    policy: LearnedConfig = field(default_factory=LearnedConfig)
    algorithm: PPO = field(default_factory=PPO)


AGENTS = {"hierarchical": HierarchicalAgent, "mars": MarsAgent, "learned": LearnedAgent}
ALGORITHMS = (Reinforce.name, PPO.name)


@dataclass
class TrainConfig:
    """What ``rlplace.learn.train.train`` does; ``rlplace-train``'s schema takes its defaults."""

    agent: str = HierarchicalAgent.name
    policy: dict[str, Any] = field(default_factory=dict)          # the agent's policy options
    algorithm: str = Reinforce.name
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    samples: int = allowed(HierarchicalAgent.samples, COUNT)   # k placements per update (HP §3: m = 1, k = 4)
    env: dict[str, Any] = field(default_factory=dict)             # PlacementEnv options (reward, oom_penalty, ...)
    budget_placements: Optional[int] = allowed(2000, Allowed(int, low=1, null="no limit"))
    budget_seconds: Optional[float] = allowed(None, Allowed(float, low=0, open_low=True, null="no limit"))
    checkpoint_every: int = allowed(50, COUNT)          # updates
    resume: bool = allowed(False, FLAG)
    resume_across_devices: bool = allowed(False, FLAG)   # a run written on another kind of device: reseeded
    stop_after_updates: Optional[int] = allowed(None, Allowed(int, low=1, null="never"))  # as if killed after
    #                                     this many updates of this run
    init_checkpoint: Optional[str] = None  # fine-tuning: start from another run's policy weights
    order: str = "cycle"                  # a family's updates: round the graphs, or "sample" one each
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    seed: int = allowed(0, SEED)
    torch_device: str = "auto"              # auto: the first GPU if torch sees one, else the CPU
    progress: bool = allowed(True, FLAG)
    plots: bool = allowed(True, FLAG)

    def __post_init__(self):
        check_fields(self)
        if not isinstance(self.agent, str) or self.agent not in AGENTS:
            raise ConfigError(f"agent must be one of {sorted(AGENTS)}, got {self.agent!r:.60}")
        if not isinstance(self.algorithm, str) or self.algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {list(ALGORITHMS)}, got {self.algorithm!r:.60}")
        for name in ("policy", "algorithm_options", "env"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name} must be a dict of options, got {getattr(self, name)!r:.60}")
        if self.init_checkpoint is not None and not isinstance(self.init_checkpoint, str):
            raise ConfigError(f"init_checkpoint must be null or a path, got {self.init_checkpoint!r:.60}")
        if not isinstance(self.warm_start, WarmStartConfig):
            raise ConfigError(f"warm_start must be a WarmStartConfig, got {self.warm_start!r:.60}")
        check_device_name(self.torch_device)
        if self.budget_placements is None and self.budget_seconds is None:
            raise ConfigError("set a budget: budget.placements and/or budget.seconds")
        if not isinstance(self.order, str) or self.order not in ORDERS:
            raise ConfigError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.agent == LearnedAgent.name and self.warm_start.behaviour_cloning:
            raise ConfigError("agent=learned starts from the pretrained weights: warm_start.behaviour_cloning "
                              "is for hierarchical and mars")
