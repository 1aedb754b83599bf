"""The causal model of a job: rank states, the wait-for graph, root causes and consequences."""

from ddpdoctor.analysis.causal.diagnose import Diagnosis, diagnose
from ddpdoctor.analysis.causal.verdict import HangVerdict, hang_verdict

__all__ = ["Diagnosis", "HangVerdict", "diagnose", "hang_verdict"]
