"""Measuring: a load client for any OpenAI-compatible server (`http`) and a PyTorch decode engine that
times this machine (`local`)."""
