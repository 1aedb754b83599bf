"""DeepSpeed: what ddpdoctor knows of it: its engine calls torch's collectives for the user
(ZeRO's gathers and reduce-scatters), so its frames are framework sites."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Framework

FRAMEWORK = Framework("deepspeed", ("deepspeed",))
