from collections.abc import Callable
from enum import Enum
from numbers import Number
from typing import (
    Any,
    ClassVar,
    NamedTuple,
    Protocol,
    TypedDict,
    TypeVar,
)

import gymnasium as gym
import numpy as np
import torch
from accelerate.optimizer import AcceleratedOptimizer
from gymnasium import spaces
from pettingzoo import ParallelEnv
from tensordict import TensorDict
from torch._dynamo import OptimizedModule
from torch.nn import Module
from torch.optim import Optimizer

from agilerl.protocols import (
    EvolvableAlgorithmProtocol,
    EvolvableModuleProtocol,
    EvolvableNetworkProtocol,
    ModuleDictProtocol,
)

# Type variable for module types - bound to Module to ensure all types inherit from it
T = TypeVar("T", bound=Module | OptimizedModule)


class IsDataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


class ReasoningPrompts(TypedDict):
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    question: str | list[str] | None
    answer: str | list[str] | None
    trajectory_input_ids: torch.Tensor | None
    trajectory_attention_mask: torch.Tensor | None
    initial_prompt_len: int | list[int] | torch.Tensor | None
    stitch_prefix_ids: torch.Tensor | None


class PreferencePrompts(TypedDict):
    prompt: list[str]
    prompt_lengths: list[int]
    chosen: list[str]
    rejected: list[str]
    chosen_input_ids: torch.Tensor
    chosen_attention_mask: torch.Tensor
    rejected_input_ids: torch.Tensor
    rejected_attention_mask: torch.Tensor


class SFTPrompts(TypedDict):
    prompt: list[str]
    prompt_lengths: list[int]
    response: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor


class CheckpointInfo(TypedDict):
    modules: dict[str, Module]
    optimizers: dict[str, Optimizer]
    network_names: list[str]
    optimizer_names: list[str]


class MultiAgentSetup(Enum):
    """Enum to specify the type of multi-agent setup."""

    HOMOGENEOUS = "homogeneous"  # all agents have the same network architecture
    MIXED = "mixed"  # contains a mix of different network architectures
    HETEROGENEOUS = "heterogeneous"  # all agents have different network architectures


class ModuleType(Enum):
    """Enum to specify the type of module."""

    MLP = "mlp"
    CNN = "cnn"
    RNN = "rnn"
    MULTI_INPUT = "multi_input"


SupportedObservationSpace = (
    spaces.Box
    | spaces.Discrete
    | spaces.MultiDiscrete
    | spaces.Dict
    | spaces.Tuple
    | spaces.MultiBinary
)
SupportedActionSpace = (
    spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary | spaces.Box
)

ArrayOrTensor = np.ndarray | torch.Tensor
StandardTensorDict = dict[str, torch.Tensor]
TensorTuple = tuple[torch.Tensor, ...]
ArrayDict = dict[str, np.ndarray]
ArrayTuple = tuple[np.ndarray, ...]
NetConfigType = dict[str, dict[str, Any] | Any]
KernelSizeType = int | tuple[int, ...]
GymSpaceType = SupportedObservationSpace | list[SupportedObservationSpace]
GymEnvType = str | gym.Env | gym.vector.VectorEnv | gym.vector.AsyncVectorEnv
PzEnvType = str | ParallelEnv
LLMObsType = list[ReasoningPrompts] | ReasoningPrompts

NumpyObsType = np.ndarray | ArrayDict | ArrayTuple
TorchObsType = torch.Tensor | TensorDict | TensorTuple | StandardTensorDict
ObservationType = NumpyObsType | TorchObsType | Number | LLMObsType
MultiAgentObservationType = dict[str, ObservationType]
ActionType = int | float | np.ndarray | torch.Tensor
InfosDict = dict[str, dict[str, Any]]
MaybeObsList = list[ObservationType] | ObservationType
ExperiencesType = dict[str, ObservationType] | tuple[ObservationType, ...]
ActionReturnType = tuple[ActionType | Any, ...] | ActionType | Any
GymStepReturn = tuple[NumpyObsType, ActionType, float, MaybeObsList, InfosDict]
PzStepReturn = tuple[
    dict[str, NumpyObsType],
    ArrayDict,
    ArrayDict,
    ArrayDict,
    dict[str, Any],
]

SingleAgentModule = (
    T | EvolvableModuleProtocol | OptimizedModule | EvolvableNetworkProtocol
)
MultiAgentModule = ModuleDictProtocol[SingleAgentModule[T]]
NetworkType = SingleAgentModule[T] | MultiAgentModule[T]
EvolvableNetworkType = (
    EvolvableModuleProtocol | ModuleDictProtocol[EvolvableModuleProtocol]
)
DeviceType = str | torch.device
OptimizerType = Optimizer | AcceleratedOptimizer

SingleAgentMutReturnType = dict[str, Any]
MultiAgentMutReturnType = dict[str, dict[str, Any]]
MutationReturnType = SingleAgentMutReturnType | MultiAgentMutReturnType
PopulationType = list[EvolvableAlgorithmProtocol]
MutationMethod = Callable[[EvolvableAlgorithmProtocol], EvolvableAlgorithmProtocol]
ConfigType = IsDataclass | NetConfigType
StateDict = dict[str, Any] | dict[str, dict[str, Any]] | list[dict[str, Any]]
LrNameType = str | tuple[str, str]


class BatchDimension:
    def __repr__(self) -> str:
        return "BatchDimension"


class BPTTSequenceType(Enum):
    """Enum for BPTT sequence generation methods. It specifies the strategy used when generating sequences for BPTT training.

    CHUNKED is the default method which uses the least amount of memory while keeping all sampled trajectories available in the buffer for sequencing.
        The number of sequences generated is then:  (num_steps / max_seq_len) * num_envs
    MAXIMUM generates all possible overlapping sequences, which is the most memory-intensive option.
        The number of sequences generated is then:  (num_steps - max_seq_len + 1) * num_envs
    FIFTY_PERCENT_OVERLAP generates sequences with 50% overlap, which is a compromise between the two.
        The number of sequences generated is then:  (num_steps / max_seq_len * 2) * num_envs
    """

    CHUNKED = "chunked"  # Generate sequences by non-overlapping chunks
    MAXIMUM = "maximum"  # Generate all possible overlapping sequences
    FIFTY_PERCENT_OVERLAP = (
        "fifty_percent_overlap"  # Generate sequences with 50% overlap
    )


class ActionResult(NamedTuple):
    """Structured return of an LLM algorithm's :meth:`get_action`.

    A tuple subclass, so callers may unpack positionally *or* (preferred, and
    forward-compatible if fields are added) read by attribute. ``sampling_logps``
    holds the per-completion vLLM sampling logprobs captured for the
    sampling-mismatch correction, or ``None`` when not captured (HF generation,
    evaluation, or correction disabled).
    """

    completion_ids: list[torch.Tensor]
    action_masks: list[torch.Tensor]
    sampling_logps: list[torch.Tensor | None] | None = None
