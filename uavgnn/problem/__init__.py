"""The problem (DESIGN §1): scenes and their generator, scene files, graphs of scenes, the reward and metrics."""
