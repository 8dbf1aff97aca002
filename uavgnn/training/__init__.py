"""The shared training loop (``Trainer``) and what it needs: batches, checkpoints, resume, recovery, schedule."""
