"""DeepSpeed: what ddpdoctor knows of it: its engine calls torch's collectives for the user
(ZeRO's gathers and reduce-scatters), so its frames are framework sites, and its engine's
checkpointing, backward and step are collectives of every rank (lint)."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Framework, FrameworkMethod


def _method(name: str, collective: str) -> FrameworkMethod:
    return FrameworkMethod("deepspeed", "deepspeed.runtime.engine", "DeepSpeedEngine", name,
                           "0.19.0", collective, True)


HIDDEN = (_method("save_checkpoint", "barrier (and ZeRO's state gathers)"),
          _method("load_checkpoint", "barrier"),
          _method("backward", "the gradient all-reduce"),
          _method("step", "the optimizer step's all-reduce (overflow check)"))

FRAMEWORK = Framework("deepspeed", ("deepspeed",), hidden=HIDDEN, hidden_kinds=("engine",),
                      objects={"DeepSpeedEngine": "engine", "PipelineEngine": "engine"},
                      name_words={"engine": "engine"},
                      tuple_builders={"deepspeed.initialize": "engine"})
