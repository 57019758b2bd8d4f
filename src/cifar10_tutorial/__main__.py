"""``python -m cifar10_tutorial``: the ``cifar10`` command, for an environment whose scripts
folder is not on PATH."""
from .commands import entry

entry()
