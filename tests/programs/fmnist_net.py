"""The test program's network (tests/programs/fmnist_program.py), in a module of its own so that a
program entry can name it as the factory of its weights (program.model.factory: fmnist_net:Net).
It takes items normalised as the program's own evaluation does: x / 255 - 0.5."""

import torch


class Net(torch.nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x):
        return self.body(x)
