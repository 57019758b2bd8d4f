"""The tutorial's exercises, as variants of the train stage (reports/dvc.yaml):

- ``ablation``: one variant: its params, its training run and its evaluation;
- ``devices_timing``: exercise 5's speed question, one process against two.
"""
