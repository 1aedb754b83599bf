from .evaluation_tracker import EvaluationTracker
from .trackio_logger import TrackioLogger
from .wandb_logger import WandbLogger
