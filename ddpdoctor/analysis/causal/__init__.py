"""The causal model of a job: rank states, the wait-for graph, root causes and consequences."""
