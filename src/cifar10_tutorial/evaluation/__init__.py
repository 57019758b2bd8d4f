"""Evaluation of a trained model:

- ``evaluate``: the eval stage (per class, confusion, watch mode);
- ``predict``: predictions on image files.

The evaluation they share with training is in :mod:`cifar10_tutorial.scoring`.
"""
