"""The step-time model and its first principles: the terms (`stepmodel`), their costs from model ×
hardware × precision (`roofline`), the `roofline` command's answer (`analysis`) and the deployment every
scheduler command builds (`deployment`). Specs as data live in `tokenroof.specs`."""
