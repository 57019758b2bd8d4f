"""The TensorFlow CIFAR-10 tutorial, reproduced in PyTorch as a DVC pipeline.

The package's folders follow the pipeline; each ``__init__.py`` lists its modules (this
list is the one home of each; tests/test_layout.py checks it against the files):

- ``data``: the archive fetched and checked, its records turned into tensors;
- ``training``: the train stage;
- ``evaluation``: the eval stage and predictions;
- ``exercises``: the tutorial's exercises as variants of the train stage;
- ``report``: the exercises' report.

Beside the package, scripts of the checkout that measure, check or publish the project
(`cifar10 NAME` runs them too): benchmarks/ (the throughput benchmark, the exercise
trial's timing, exercise 5's timing, the GPU run), tools/ (the dev split, published
weights, the check that edited code still trains alike), .ci/ (CI's configured runs) and
devtools/.

Below them, the ground every folder may import:

- ``params``, ``param_types``: params.yaml typed and checked;
- ``model``: the network (TF-equivalent LRN, the exercises' variants);
- ``model_files``: model.pt read and checked, a network rebuilt from stored weights;
- ``checkpoint_files``: a checkpoint read and checked, and the params a run records (the
  train stage writes checkpoints, the eval stage's ``--watch`` reads them);
- ``scoring``: the evaluation input and the project's one evaluation, precision @ 1 (named
  apart from ``train.precision``, the arithmetic: fp32 or bf16);
- ``devices``: the device a stage computes on;
- ``provenance``: what made a result (commit, data, machine);
- ``curves``: a run's logged curves read back (the report, the model card, the GPU run);
- ``cli``, ``files``, ``errors``: command lines, safe writes and md5s, errors;
- ``ownership``: what a run may touch: its folders checked before anything is replaced,
  and one run per output folder;
- ``eval_files``: an evaluation's files checked against each other (its figures, its
  predictions, its per-class table), wherever they are read;
- ``regression``: the regression gate (the regression stage, and CI's runs);
- ``commands``: the `cifar10` console command, which runs the stages, the scripts beside
  the package and the modules' commands by name (it imports them only when asked);
- ``repro``: `cifar10 repro`, `dvc repro` with one deadline for all its stages and a
  paused stage's exit status (75) for a batch scheduler to requeue on (no stage imports
  it, so no stage's hash covers it);
- ``guard``: a command's child processes stopped with it (`cifar10 repro`'s `dvc repro`,
  CI's pipeline runs), even when it is killed outright.
"""

__version__ = "0.1.0"
