"""forethought: study and exploit what a language model's states know about the future."""

__version__ = "0.1.0"
