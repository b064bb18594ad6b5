"""The workflow, defined once: the stage table (stages), the layered run
configuration (config), what a configuration asks for (plan), the code each
stage runs (codedeps), and the two front ends made from them: Snakemake's
rules (workflow/rules/*.smk, through render) and dvc.yaml (dvc)."""
