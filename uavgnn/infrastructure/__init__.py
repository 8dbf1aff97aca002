"""Infrastructure every layer may use: the device and its precision, CPU threads, processes and signals, memory
estimates, named random streams, atomic storage, console output, the error types, timing and op counts, the
user's own code named by a dotted path. It knows no scene, model, algorithm, loop or mode; nothing here imports
torch at package import (the entry point catches ``errors`` before loading it)."""
