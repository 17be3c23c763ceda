# Package for case 347 (see main.py for the source thread).
