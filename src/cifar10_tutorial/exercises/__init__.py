"""The tutorial's exercises, as variants of the train stage (reports/dvc.yaml):

- ``ablation``: one variant: its params, its training run and its evaluation;
- ``dataset``: the data of a data-set variant (exercise 6), fetched and prepared;
- ``devices_timing``: exercise 5's speed question, one process against two;
- ``code_check``: whether edited code still trains as the code of the committed results.
"""
