"""What people read: plain-text tables, 95% intervals, pictures of scenes, episodes and results, and the
comparison of runs (its rows, page, Markdown, LaTeX and the MARL aggregate). It draws and formats what it is
given; which figures an algorithm reports is the registry's to say (``uavgnn.algorithms``)."""
