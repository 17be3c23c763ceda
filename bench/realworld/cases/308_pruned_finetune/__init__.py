# Package for case 308 (see main.py for the source thread).
