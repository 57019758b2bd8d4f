"""The data:

- ``download``: the download stage: the archive fetched, resumed and checked;
- ``transfer``: the bytes' transport (HTTP, fsspec mirrors), the download stage's alone;
- ``preprocess``: the preprocess stage: binary records into cached tensors;
- ``prepared``: those tensors read back with their checks, as training and evaluation load them;
- ``datasets``: CIFAR-10, CIFAR-100 and SVHN, what differs between them;
- ``synthetic``: synthetic archives in the official layout (tests, the synthetic CI gate,
  the dev split's writer in tools/dev_split.py).
"""
