"""SQuAD v1.1: the official evaluation (``evaluate``) and the text processing
shared by the prepare stage, the trainer and the predictor (``text``)."""
