"""The JSON contract: one JSON Schema per command (+ common.schema.json); read by `tokenroof.io.contract`."""
