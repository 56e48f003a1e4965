"""The continuous-batching engine: one scheduler (`core`), driven by a clock (`realtime` for `emulate`)."""
