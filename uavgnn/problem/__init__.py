"""The problem (DESIGN §1): scenes and their generator, scene files and folders, graphs of scenes (with the k
rule), observations, the reward and metrics. It knows no solver, model, environment or learner."""
