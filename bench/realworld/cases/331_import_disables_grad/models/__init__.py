from .vae import VAE

__all__ = ["VAE"]
