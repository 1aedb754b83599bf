#!/usr/bin/env python3
# Copyright (c) Megvii Inc. All rights reserved.

from .allreduce_norm import *
from .boxes import *
from .checkpoint import load_ckpt, save_checkpoint
from .compat import meshgrid
from .demo_utils import *
from .dist import *
from .ema import *
from .logger import WandbLogger, setup_logger
from .lr_scheduler import LRScheduler
from .metric import *
from .mlflow_logger import MlflowLogger
from .model_utils import *
from .setup_env import *
from .visualize import *
