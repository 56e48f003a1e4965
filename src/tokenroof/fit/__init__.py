"""From measurements: the fit (`core`), its structures and priors (`structures`), calibrated intervals
(`intervals`), `predict` (`predict`) and fitted models that travel between commands (`travel`)."""
