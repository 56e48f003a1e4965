"""Serving: the continuous-batching scheduler (`engine`), the emulated server (`emulate`), load simulation
(`simulate`), the batch cap (`advise`, `saturation`) and capacity planning (`plan`, `capacity`)."""
