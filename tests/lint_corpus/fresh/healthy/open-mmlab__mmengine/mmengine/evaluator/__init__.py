# Copyright (c) OpenMMLab. All rights reserved.
from .evaluator import Evaluator
from .metric import BaseMetric, DumpResults
from .utils import get_metric_value

__all__ = ['BaseMetric', 'Evaluator', 'get_metric_value', 'DumpResults']
