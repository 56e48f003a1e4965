"""`tokenroof emulate`: an OpenAI-compatible server whose steps take a StepModel's time."""
