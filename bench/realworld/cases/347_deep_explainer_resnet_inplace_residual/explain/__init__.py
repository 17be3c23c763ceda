from .deep import DeepExplainer

__all__ = ["DeepExplainer"]
