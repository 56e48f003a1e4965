"""tokenroof: decode throughput and latency against batch size, from first principles and from measurements."""

from tokenroof.errors import TokenroofError

__version__ = "0.1.0"
__all__ = ["TokenroofError", "__version__"]
