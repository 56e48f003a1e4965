"""Serving: the deployment every scheduler command builds (`deployment`), the continuous-batching scheduler
(`engine`), the emulated server (`emulate`), load simulation (`simulate`), the batch cap (`advise`, `saturation`)
and capacity planning (`plan`; the commands' sweeps and searches: `capacity`)."""
