# Package of case 123 (see main.py): generative inpainting with local/global WGAN-GP critics.
