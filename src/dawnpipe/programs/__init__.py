"""Program entries: somebody's own training program as a benchmark entry
(docs/programs.md, ``program_contract: 1``).

dawnpipe runs the program, times it with its own clock, scores the models it
hands over and ranks what its own scoring found, never what the program
printed. This package holds the contract's parts that several stages share
and that need no framework:

- ``contract``: the placeholders of a program's command and how they are filled;
- ``mllog``: the program's MLLOG lines, read one at a time, bounded and checked;
- ``models``: the model files a program writes (ONNX, or a TensorFlow
  SavedModel), checked, scored, and archived as the run's ``model.pt``.

The harness itself (process, clock, verification, stopping) is
``dawnpipe.train.program``; the inference backends of a program's model are
``dawnpipe.infer.program_backends``.
"""
