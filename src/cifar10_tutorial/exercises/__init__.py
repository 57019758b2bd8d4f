"""The tutorial's exercises, as variants of the train stage (reports/dvc.yaml):

- ``ablation``: one variant: its params, its training run and its evaluation;
- ``dataset``: the data of a data-set variant (exercise 6), fetched and prepared.
"""
