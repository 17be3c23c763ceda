import torch


class Variable:
    """Torch-backed framework variable: holds a tensor, `assign` writes into it in place."""

    def __init__(self, initializer, trainable=False):
        self._value = initializer

    @property
    def value(self):
        return self._value

    def assign(self, value):
        with torch.no_grad():
            self._value.copy_(value)
        return self._value
