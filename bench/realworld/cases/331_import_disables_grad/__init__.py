# Package for case 331 (see main.py for the source thread).
