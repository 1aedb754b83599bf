"""Logging helpers for experiment tracking."""

from .wandb import (
    create_notebook_logger,
    create_wandb_logger,
    log_metrics,
    maybe_watch_model,
)

__all__ = [
    "create_notebook_logger",
    "create_wandb_logger",
    "log_metrics",
    "maybe_watch_model",
]
