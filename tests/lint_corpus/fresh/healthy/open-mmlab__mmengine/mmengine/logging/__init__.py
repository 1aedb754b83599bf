# Copyright (c) OpenMMLab. All rights reserved.
from .history_buffer import HistoryBuffer
from .logger import MMLogger, print_log
from .message_hub import MessageHub

__all__ = ['HistoryBuffer', 'MessageHub', 'MMLogger', 'print_log']
