"""The workflow, defined once: the stage table (stages) and the values it
computes per job (values), the layered run configuration (config), what a
configuration asks for (plan), the code each stage runs (codedeps), and what
is made from them: Snakemake's rules (workflow/rules/*.smk, through render),
dvc.yaml (dvc) and docs/pipeline.md (docs)."""
