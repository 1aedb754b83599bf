# Copyright (c) OpenMMLab. All rights reserved.
from .base_data_element import BaseDataElement
from .instance_data import InstanceData
from .label_data import LabelData
from .pixel_data import PixelData

__all__ = ['BaseDataElement', 'InstanceData', 'LabelData', 'PixelData']
