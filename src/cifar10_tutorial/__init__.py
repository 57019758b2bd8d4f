"""The TensorFlow CIFAR-10 tutorial, reproduced in PyTorch as a DVC pipeline."""

__version__ = "0.1.0"
