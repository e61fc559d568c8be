"""latlab: a latency lab for real-time media."""

__version__ = "0.1.0"
