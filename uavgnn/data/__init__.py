"""Graph datasets: labels, the on-disk cache, the in-memory store and loaders."""
