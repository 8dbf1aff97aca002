"""One run directory: its layout (every file name, ``layout``), acceptance and sweep-job names (``directory``),
the lock of its live process (``lock``), its metric history (``history``), its checkpoints, its manifest, the
record read back by reports (``record``), requeueing under a scheduler and a sweep worker's watch; and the one
list of the keys that do not define a run (``identity``)."""
