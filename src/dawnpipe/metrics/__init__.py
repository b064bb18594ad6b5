"""The numbers of a run and of an entry, read off what the train and infer
stages wrote (docs/rules.md#analysis-metrics). One module per stage of the
stage table (src/dawnpipe/pipeline/stages.py), named after it:

- ``extract``: time to accuracy, epochs and cost of a run, by the rule of
  ``tta`` (which the audit and the inference stage apply too);
- ``flops``: model FLOPs and operand bytes per item of a training step (per
  entry); ``program_flops``: a program run's, estimated from its model's graph;
- ``utilization``: achieved FLOP/s, fraction of peak and energy to accuracy of
  a run (the samples are dawnpipe.telemetry's);
- ``sensitivity``: time to accuracy of a run at a ladder of thresholds;
- ``stability``: time to accuracy over an entry's seeds.
"""
