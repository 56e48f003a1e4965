"""`tokenroof bench-local` and `calibrate`: a PyTorch decode engine built from a config with random
weights, timed on this machine, and the microbenchmarks that calibrate a hardware file."""
