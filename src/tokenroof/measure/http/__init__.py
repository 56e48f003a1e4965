"""`tokenroof bench`: an async streaming load client for OpenAI-compatible servers."""
