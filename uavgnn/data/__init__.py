"""Graph datasets of the assignment problem: MILP labels, the on-disk cache, the in-memory store, loaders, the
batches of every step (curriculum stages, fresh scenes). Typed settings only, no checkpoint, no network."""
