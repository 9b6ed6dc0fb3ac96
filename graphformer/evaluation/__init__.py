"""Evaluation: how a model's outputs are scored, by the trainer each epoch and by ``graphformer
evaluate``: the loss (`loss`: label-smoothed NLL, the training objective; unsmoothed, the
validation loss), accuracies and exact match (`scores`), and BLEU (`bleu`)."""
