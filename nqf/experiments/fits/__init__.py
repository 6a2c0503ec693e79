"""Fit stages of the experiment kinds too long for one module: ``fits/<kind>.py`` holds the body
of kind ``<kind>``'s fit stage (its measurements, claims and their error budgets), which the
kind's ``fit`` calls. A fit module imports no kind module (the kind imports it), only the
library, nqf.experiments.common and nqf.experiments.powerlaw.
"""
