"""The shared training loop every algorithm runs in (``trainer``) and its collaborators: the update
(``update``: the step, optimisers, scaler, CUDA graphs), the checkpoints (``checkpointing``), what happens when a
step goes wrong (``recovery``), the log window read once per log line (``step_stats``), the LR schedule and the
phases (``schedule``), the curriculum, the moving average of the weights, the batch size, resume."""
