"""Progressive delivery without a mesh: the split and shadow inside the server, and the rollout that
moves them step by step on the model's own signals (docs/delivery.md)."""
