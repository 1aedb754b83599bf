"""Backward-compatible re-exports. Import from here or from submodules directly."""

from kempnerforge.config.checkpoint import AsyncCheckpointMode, CheckpointConfig  # noqa: F401
from kempnerforge.config.data import DataConfig, DatasetSource, TrainingPhase  # noqa: F401
from kempnerforge.config.distributed import DistributedConfig, PipelineSchedule  # noqa: F401
from kempnerforge.config.eval import EvalConfig  # noqa: F401
from kempnerforge.config.job import JobConfig  # noqa: F401
from kempnerforge.config.metrics import MetricsConfig  # noqa: F401
from kempnerforge.config.model import Activation, ModelConfig, NormType  # noqa: F401
from kempnerforge.config.optimizer import OptimizerConfig  # noqa: F401
from kempnerforge.config.profiling import ProfilingConfig  # noqa: F401
from kempnerforge.config.scheduler import SchedulerConfig, SchedulerType  # noqa: F401
from kempnerforge.config.training import ActivationCheckpointing, TrainConfig  # noqa: F401
