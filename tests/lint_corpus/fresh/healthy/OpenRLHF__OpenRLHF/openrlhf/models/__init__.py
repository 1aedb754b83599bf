from .actor import Actor
from .loss import (
    DPOLoss,
    GPTLMLoss,
    LogExpLoss,
    PairWiseLoss,
    PolicyLoss,
    SFTLoss,
    ValueLoss,
    aggregate_loss,
)
from .model import get_llm_for_sequence_regression

__all__ = [
    "Actor",
    "SFTLoss",
    "DPOLoss",
    "GPTLMLoss",
    "LogExpLoss",
    "PairWiseLoss",
    "PolicyLoss",
    "ValueLoss",
    "aggregate_loss",
    "get_llm_for_sequence_regression",
]
