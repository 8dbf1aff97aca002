"""The modes, one module each (``uavgnn.config.modes`` lists them: what runs each, its ``--help`` line): each reads
the checked config, calls the library and writes its results into the run directory."""
