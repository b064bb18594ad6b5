"""Program entries: somebody's own training program as a benchmark entry
(docs/programs.md, program contracts 1 and 2).

dawnpipe runs the program, times it with its own clock, scores the models it
hands over and ranks what its own scoring found, never what the program
printed. This package holds the contract's parts that several stages share
and that need no framework:

- ``contract``: the placeholders of a program's command and how they are filled;
- ``mllog_reader``: the program's MLLOG lines, read one at a time, bounded and checked;
- ``clock``: the clock rule (what is off a program's clock, counted once; start-up);
- ``freezer``: freezing every process of the program while dawnpipe scores;
- ``heldback``: the test items kept back from it, and the test of whether it learnt the given ones;
- ``models``: the model files a program writes (ONNX, or a TensorFlow
  SavedModel), checked, scored, and archived as the run's ``model.pt``;
- ``weights``, ``export_worker``: weights handed over with a factory, made a model file in a process of their own;
- ``data_layouts``: which data layouts each task has (written by dawnpipe.data.layouts);
- ``graph_flops``: the FLOPs of a model, counted from its graph.

The harness itself (process, clock, verification, stopping, resuming) is
``dawnpipe.train.program``; the inference backends of a program's model are
``dawnpipe.infer.program_onnx``, ``dawnpipe.infer.program_onnx_int8`` and
``dawnpipe.infer.program_savedmodel``.
"""
