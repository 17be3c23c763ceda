# Package for case 327 (see main.py for the source thread).
