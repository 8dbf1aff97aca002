"""Training: the trainer loop, checkpoints and evaluation."""
