from .trainer import UnsupervisedTrainer

__all__ = ["UnsupervisedTrainer"]
