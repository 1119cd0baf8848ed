"""ssrkit: Self-play SWE-RL toolkit."""

__version__ = "0.1.0"
