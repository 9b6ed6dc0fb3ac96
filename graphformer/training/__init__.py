"""Training: loss, Noam schedule, checkpoints, the training loop and evaluation."""
