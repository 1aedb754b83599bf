"""replica_divergence: the replica checks' facts, their comparison and the drift's likely causes."""
