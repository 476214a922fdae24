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
from rlplace.options import COUNT, FLAG, SECONDS, Allowed, allowed

GROUPINGS = ("learned", "random", "none")
CLONE_GROUPINGS = ("device", "runs")
ENCODERS = ("gcn", "sage")
PLACERS = ("segment_seq2seq", "seq2seq", "transformer")
DEVICES = re.compile(r"auto|cpu|cuda(:[0-9]+)?")   # the torch devices a learned placer trains on


def check_device_name(name: str) -> None:
    """A ConfigError unless ``name`` is auto, cpu, cuda or cuda:N (``rlplace.agents.device``
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
    sampling_temperature: float = allowed(1.0, SECONDS)   # not in the paper: τ of every softmax (softmax(C·tanh(l/T) / τ):
                                    # the cap C becomes C/τ); the trainer may steer it
                                    # (warm_start.self_imitation_changed_units)
    grouper_temperature: float = allowed(1.0, SECONDS)    # not in the paper: the Grouper's softmax is over τ times this
    clone_grouping: str = "device"  # not in the paper: the grouping behaviour cloning targets. "device":
                                    # group g belongs to device g mod D; "runs": the groups are runs of
                                    # units (topological order) on one device in the first placement
                                    # cloned (the warm start), so a Placer decision moves a whole run

    def __post_init__(self):
        if self.grouping not in GROUPINGS:
            raise ConfigError(f"agent.policy.grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if self.num_groups < 1 or self.placer_hidden % 2:
            raise ConfigError("agent.policy: num_groups must be >= 1 and placer_hidden even")
        if self.clone_grouping not in CLONE_GROUPINGS:
            raise ConfigError(f"agent.policy.clone_grouping must be one of {CLONE_GROUPINGS}, "
                              f"got {self.clone_grouping!r}")
        if not (self.sampling_temperature > 0 and self.grouper_temperature > 0):
            raise ConfigError("agent.policy.sampling_temperature and grouper_temperature must be > 0")


@dataclass
class DGIConfig:
    iterations: int = allowed(1000, Allowed(int, low=0))   # Mars §4.2
    lr: float = allowed(1e-3, SECONDS)         # Adam; Mars gives none, DGI (Veličković et al. §4.2) uses 0.001
    cache_dir: Optional[str] = "~/.cache/rlplace/dgi"   # None: do not cache
    seed: int = allowed(0, Allowed(int, low=0))            # corruption permutations


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
    temperature: float = allowed(1.0, SECONDS)             # not in Mars: the decisions' softmax is over logits / temperature;
                                         # < 1 keeps samples closer to the greedy placement
    type_buckets: int = allowed(0, Allowed(int, low=0))                # 0: one-hot over this graph's op types; N > 0: op types
                                         # hashed into N buckets, a vocabulary all graphs share, so
                                         # every weight transfers to another graph (Table 3)
    dgi: DGIConfig = field(default_factory=DGIConfig)
    seed: int = allowed(0, Allowed(int, low=0))                        # weight initialisation

    def __post_init__(self):
        if self.encoder not in ENCODERS:
            raise ConfigError(f"agent.encoder must be one of {sorted(ENCODERS)}, got {self.encoder!r}")
        if self.placer not in PLACERS:
            raise ConfigError(f"agent.placer must be one of {list(PLACERS)}, got {self.placer!r}")
        if self.type_buckets < 0:
            raise ConfigError(f"agent.type_buckets must be >= 0, got {self.type_buckets}")
        if not self.temperature > 0:
            raise ConfigError(f"agent.temperature must be > 0, got {self.temperature}")
        if self.segment_size < 1:
            raise ConfigError(f"agent.segment_size must be positive, got {self.segment_size}")
        if self.placer_hidden % 2:
            raise ConfigError(f"agent.placer_hidden must be even (two LSTM directions), got {self.placer_hidden}")
        if self.placer == "transformer" and self.placer_hidden % self.transformer_heads:
            raise ConfigError(f"agent.transformer_heads must divide placer_hidden ({self.placer_hidden}), "
                              f"got {self.transformer_heads}")


@dataclass
class ReinforceConfig:
    lr: float = allowed(0.1, SECONDS)                      # Adam, initial learning rate: HP §3 "Training Details"
    lr_decay: float = allowed(0.95, Allowed(float, low=0, high=1))               # the paper is silent; the authors' code (lr_dec, start_decay_step,
    lr_decay_start: int = allowed(400, Allowed(int, low=0))            # decay_steps) multiplies the lr by 0.95 every 50 updates after
    lr_decay_every: int = allowed(50, COUNT)             # update 400 (staircase); lr_decay = 1 keeps it fixed
    max_grad_norm: float = allowed(1.0, SECONDS)           # gradient clipping: HP §3
    baseline_decay: float = allowed(0.9, Allowed(float, low=0, high=1))          # EMA baseline (HP §2); 0.9 is bl_dec of the authors' code
    valid_only_after: Optional[int] = 500   # HP §3; None: always learn from every sample
    entropy_coef: float = allowed(0.0, Allowed(float, low=0))            # HP uses none


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
    normalize_advantages: bool = True  # over the buffer; Mars is silent, CleanRL's default
    seed: int = allowed(0, Allowed(int, low=0))                  # mini-batch shuffling


@dataclass
class WarmStartConfig:
    """A warm start from an algorithmic placer (rlplace.agents.warmstart): (a) behaviour
    cloning, (b) the heuristic's placement as the first sample; and (c) self-imitation during
    training, cloning the best placement found so far with (a)'s options."""

    placer: Optional[str] = None        # None: cold start; a placer name, or best
    placer_options: dict = field(default_factory=dict)
    behaviour_cloning: bool = allowed(False, FLAG)    # (a)
    first_sample: bool = allowed(False, FLAG)         # (b)
    bc_steps: int = allowed(300, Allowed(int, low=0))   # most gradient steps of behaviour cloning (ours)
    bc_lr: float = allowed(0.01, SECONDS)    # Adam (ours: the RL rate 0.1 overshoots supervised targets)
    bc_target_accuracy: float = allowed(1.0, Allowed(float, low=0, high=1))  # stop once the greedy
                                        # placement agrees on this share of units
    bc_check_every: int = allowed(10, COUNT)
    self_imitation_every: int = allowed(0, Allowed(int, low=0))   # (c) every this many updates, clone
                                        # the best placement so far if it improved (0: off)
    self_imitation_steps: int = allowed(20, COUNT)   # (c) most gradient steps of each such clone
    self_imitation_lr: float = allowed(1e-3, SECONDS)   # (c) Adam; bc_lr's 0.01 tears a trained policy apart
    self_imitation_changed_units: float = allowed(0.0, Allowed(float, low=0))   # (c) > 0: after every
                                        # update, steer the policy's sampling temperature so that samples
                                        # move about this many units off the best placement (0: fixed)
    self_imitation_anchor: bool = allowed(False, FLAG)   # (c) clone the best placement whenever due and
                                        # the policy's greedy placement has drifted off it, not only
                                        # when it improved (ours)
    self_imitation_trust_region: bool = allowed(False, FLAG)   # (c) Mars: sample each unit from the
                                        # policy with a probability (the trust rate), else keep the best
                                        # placement's device; the rate, not the temperature, is set for
                                        # self_imitation_changed_units moves per sample (ours)
    self_imitation_trust_temperature: bool = allowed(False, FLAG)   # (c) with the trust region: once the
                                        # rate is 1 and samples would still move fewer units than wanted
                                        # (a sharp policy), raise the sampling temperature instead (ours)
    self_imitation_trust_factorised: bool = allowed(False, FLAG)   # (c) with the trust region: draw each
                                        # unit given the best placement's earlier units, not the sample's,
                                        # so that a moved unit does not move the ones after it (ours)


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


AGENTS = {"hierarchical": HierarchicalAgent, "mars": MarsAgent}


@dataclass
class TrainConfig:
    """What ``rlplace.agents.trainer.train`` does; ``rlplace-train``'s schema takes its defaults."""

    agent: str = HierarchicalAgent.name
    policy: dict[str, Any] = field(default_factory=dict)          # the agent's policy options
    algorithm: str = Reinforce.name
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    samples: int = HierarchicalAgent.samples   # k placements per update (HP §3: m = 1 grouping, k = 4)
    env: dict[str, Any] = field(default_factory=dict)             # PlacementEnv options (reward, oom_penalty, ...)
    budget_placements: Optional[int] = 2000
    budget_seconds: Optional[float] = None
    checkpoint_every: int = 50          # updates
    resume: bool = False
    resume_across_devices: bool = False   # a run written on another kind of device: its generator reseeded
    stop_after_updates: Optional[int] = None   # stop (as if killed) after this many updates of this run
    init_checkpoint: Optional[str] = None  # fine-tuning: start from another run's policy weights
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    seed: int = 0
    torch_device: str = "auto"              # auto: the first GPU if torch sees one, else the CPU
    progress: bool = True
    plots: bool = True

    def __post_init__(self):
        check_device_name(self.torch_device)
        if self.budget_placements is None and self.budget_seconds is None:
            raise ConfigError("set a budget: budget.placements and/or budget.seconds")
        if self.samples < 1 or self.checkpoint_every < 1:
            raise ConfigError("samples and checkpoint_every must be >= 1")
        ws = self.warm_start
        if ws.self_imitation_trust_region and (self.agent != MarsAgent.name or not ws.self_imitation_changed_units):
            raise ConfigError("warm_start.self_imitation_trust_region needs agent=mars and "
                              "warm_start.self_imitation_changed_units > 0")
        for name in ("self_imitation_trust_temperature", "self_imitation_trust_factorised"):
            if getattr(ws, name) and not ws.self_imitation_trust_region:
                raise ConfigError(f"warm_start.{name} needs warm_start.self_imitation_trust_region=true")
