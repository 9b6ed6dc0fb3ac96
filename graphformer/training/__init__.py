"""Training: the Noam schedule, checkpoints, a run's start and its directory, the training loop."""
