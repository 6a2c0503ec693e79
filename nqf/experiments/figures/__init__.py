"""Figure code of the experiment kinds: ``figures/<kind>.py`` holds the figure stage of kind
``<kind>``, ``figure(theory, fit, runs, cfg, paths, *, font_size, dpi)``, with its plotting-only
helpers; ``figures/powerlaw.py`` the panel the power-law kinds share.

A figure module may import its own kind module, nqf.experiments.common, nqf.plotting and the
library; no kind module imports a figure module (the figure job looks the stage up by name,
nqf.experiments.figure_of), so fitting code never loads plotting code. matplotlib itself is
imported inside the figure functions (nqf.plotting), as before.
"""
