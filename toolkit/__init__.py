"""gpunode: take a bare GPU server to a node that is proven ready to train."""

__version__ = "0.1.0"
