"""The step-time model and its first principles: the terms (`stepmodel`), their costs from model ×
hardware × precision (`roofline`) and the `roofline` command's answer (`analysis`). Specs as data live in
`tokenroof.specs`."""
