"""Tables in and out: measurement tables and other tools' result files (`measurements`), one CSV writer
(`csvio`). The JSON contract is `schemas/` at the repository root."""
