import torch


class ParamMod:
    """Temporarily replaces module parameters; restores the originals on remove()."""

    def __init__(self):
        self.stored = []

    def set_param(self, module, name, value):
        self.stored.append((module, name, getattr(module, name)))
        setattr(module, name, torch.nn.Parameter(value))

    def remove(self):
        for module, name, original in reversed(self.stored):
            setattr(module, name, original)
        self.stored = []


class ParamModFixed(ParamMod):
    def set_param(self, module, name, value):
        self.stored.append((module, name, module._parameters[name]))
        object.__setattr__(module, name, value)

    def remove(self):
        for module, name, original in reversed(self.stored):
            object.__delattr__(module, name)
            module._parameters[name] = original
        self.stored = []
