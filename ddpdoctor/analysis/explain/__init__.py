"""Explanation: the mechanism behind a call, the decision that parted the ranks, and the fix that follows."""
