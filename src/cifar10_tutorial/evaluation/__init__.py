"""Evaluation of a trained model: the eval stage (evaluate) and predictions on image files
(predict). The evaluation they share with training is in :mod:`cifar10_tutorial.inference`."""
